/* Resuming from a checkpoint continues bit-identically: N steps, save,
 * tear everything down, load, M more steps equals N + M steps in one go —
 * for an MLP with SGD momentum and a GPT with AdamW, cosine schedule and
 * clipping. */
#include "test.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *spec;
    weft_optim_kind optim;
    float lr, clip;
    int batch, steps_a, steps_b;
    int gpt;
} recipe;

typedef struct {
    weft_model *m;
    weft_optim *o;
    weft_loader *l;
} state;

static const weft_lr_schedule *schedule(const recipe *r)
{
    static weft_lr_schedule s;
    s.kind = WEFT_LR_COSINE;
    s.lr = r->lr;
    s.min_lr = r->lr / 10;
    s.warmup = 2;
    s.total = r->steps_a + r->steps_b;
    return &s;
}

static int fresh(state *st, const recipe *r, const weft_dataset *ds)
{
    weft_model_config cfg;
    weft_optim_config oc;
    weft_loader_config lc;
    size_t n;
    int rc = weft_model_config_parse(r->spec, &cfg);
    if (rc == 0)
        rc = weft_model_create(&st->m, &cfg, 5);
    if (rc != 0)
        return rc;
    weft_model_params(st->m, &n);
    weft_optim_config_default(&oc, r->optim);
    rc = weft_optim_create(&st->o, &oc, 0, n);
    weft_loader_config_default(&lc);
    lc.global_batch = r->batch;
    lc.seed = 11;
    if (rc == 0)
        rc = weft_loader_create(&st->l, ds, &lc);
    return rc;
}

static int train(state *st, const recipe *r, int steps)
{
    size_t n;
    float *p = weft_model_params(st->m, &n), *g = weft_model_grads(st->m, &n);
    for (int s = 0; s < steps; s++) {
        weft_batch b;
        float loss, norm;
        int rc = weft_loader_next(st->l, &b);
        if (rc == 0)
            rc = weft_model_zero_grad(st->m);
        if (rc == 0)
            rc = weft_model_forward(st->m, r->gpt ? (const void *)b.tokens : (const void *)b.x,
                                    b.y, b.n, b.x_dim, &loss);
        if (rc == 0)
            rc = weft_model_backward(st->m);
        if (rc == 0 && r->clip > 0)
            rc = weft_clip_grad_norm(g, n, r->clip, &norm);
        if (rc == 0)
            rc = weft_optim_step(st->o, p, g, weft_lr_at(schedule(r), weft_optim_steps(st->o)));
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void release(state *st)
{
    weft_loader_free(st->l);
    weft_optim_destroy(st->o);
    weft_model_destroy(st->m);
    memset(st, 0, sizeof *st);
}

static void check_resume(const recipe *r, const weft_dataset *ds, const char *path)
{
    state one = { 0 }, two = { 0 };
    size_t n1 = 0, n2 = 0;
    CHECK(fresh(&one, r, ds) == 0);
    CHECK(train(&one, r, r->steps_a + r->steps_b) == 0);
    float *want = weft_model_params(one.m, &n1);

    /* first half, then save */
    CHECK(fresh(&two, r, ds) == 0);
    CHECK(train(&two, r, r->steps_a) == 0);
    weft_ckpt *c;
    weft_rng rng;
    weft_rng_seed(&rng, 3);
    weft_rng_next(&rng);
    CHECK(weft_ckpt_new(&c) == 0);
    CHECK(weft_ckpt_put_model(c, two.m) == 0);
    CHECK(weft_ckpt_put_optim(c, two.o) == 0);
    CHECK(weft_ckpt_put_rng(c, "rng", &rng) == 0);
    CHECK(weft_ckpt_put_u64(c, "data/position", weft_loader_position(two.l)) == 0);
    CHECK(weft_ckpt_save(c, path) == 0);
    weft_ckpt_free(c);
    release(&two);

    /* second half from the file alone */
    CHECK(weft_ckpt_load(&c, path) == 0);
    uint64_t pos = 0;
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = r->batch;
    lc.seed = 11;
    CHECK(weft_ckpt_get_model(c, &two.m) == 0);
    weft_model_params(two.m, &n2);
    CHECK(n2 == n1);
    CHECK(weft_ckpt_get_optim(c, 0, n2, &two.o) == 0);
    CHECK(weft_optim_steps(two.o) == r->steps_a);
    CHECK(weft_ckpt_get_u64(c, "data/position", &pos) == 0 && pos == (uint64_t)r->steps_a * r->batch);
    weft_rng back;
    CHECK(weft_ckpt_get_rng(c, "rng", &back) == 0 && memcmp(&back, &rng, sizeof rng) == 0);
    CHECK(weft_loader_create(&two.l, ds, &lc) == 0 && weft_loader_seek(two.l, pos) == 0);
    CHECK(train(&two, r, r->steps_b) == 0);
    float *got = weft_model_params(two.m, &n2);
    CHECKF(n1 == n2 && memcmp(want, got, n1 * sizeof *want) == 0,
           "%s: resumed parameters differ from an uninterrupted run", r->spec);
    /* the optimiser state too */
    int same_state = weft_optim_state_count(one.o) == weft_optim_state_count(two.o);
    for (int i = 0; same_state && i < weft_optim_state_count(one.o); i++) {
        const char *name;
        same_state = memcmp(weft_optim_state(one.o, i, &name), weft_optim_state(two.o, i, &name),
                            n1 * sizeof(float)) == 0;
    }
    CHECK(same_state);

    /* a model of another shape refuses these parameters */
    weft_model_config other;
    weft_model *wrong = NULL;
    if (r->gpt)
        weft_model_config_parse("gpt:vocab=256,ctx=16,layers=1,heads=2,dim=32", &other);
    else
        weft_model_config_parse("mlp:784-24-10", &other);
    CHECK(weft_model_create(&wrong, &other, 1) == 0);
    CHECK(weft_ckpt_get_params(c, wrong) == WEFT_EIO);
    weft_model_destroy(wrong);
    /* a sub-range of the optimiser state, as a ZeRO shard would load it */
    weft_optim *shard = NULL;
    CHECK(weft_ckpt_get_optim(c, n1 / 2, n1 - n1 / 2, &shard) == 0);
    weft_optim_destroy(shard);
    CHECK(weft_ckpt_get_optim(c, n1 / 2, n1, &shard) == WEFT_EIO);
    weft_ckpt_free(c);
    release(&one);
    release(&two);
}

static void check_one(const recipe *r, int gpt)
{
    char path[256];
    weft_dataset *ds;
    snprintf(path, sizeof path, "/tmp/weft-test-resume-%ld.ckpt", (long)getpid());
    if (gpt)
        CHECK(weft_dataset_addition(&ds, 1, 0, 2, 0, 16, 300) == 0);
    else
        CHECK(weft_dataset_synth_images(&ds, 1, 0, 200) == 0);
    check_resume(r, ds, path);
    weft_dataset_free(ds);
    remove(path);
}

TEST(mlp)
{
    recipe mlp = { "mlp:784-32-10", WEFT_OPTIM_SGD, 0.1f, 0, 16, 7, 6, 0 };
    check_one(&mlp, 0);
}

TEST(gpt)
{
    recipe gpt = { "gpt:vocab=256,ctx=16,layers=1,heads=2,dim=16", WEFT_OPTIM_ADAMW, 3e-3f,
                   1.0f, 8, 5, 4, 1 };
    check_one(&gpt, 1);
}
