/* Outer steps across clusters (sync_outer.c) with the models moved by
 * hand as a training loop would move them:
 *   streaming:H:1:0 is diloco:H, bit for bit
 *   streaming:H:F:T takes each fragment's outer step at its own phase,
 *     lands it T steps later mixed half and half with the local values,
 *     and leaves one model on every rank at the end, with no more syncs
 *     than it needs
 *   hier:full/diloco:H (fp32, int8, PowerSGD): every rank the same bits
 *     after each outer step; each rank sends across clusters its slice
 *     only (PowerSGD: rank 0 of a cluster all of it), the wan bytes
 *     counted by WEFT_WAN agree
 *   compressed diloco sends int8's bytes, about a quarter of fp32's
 *   full sync with every compressor (weft-train --compress): rank-own
 *     gradients through a weft_compressor and a local AdamW step leave the
 *     same bits on every rank after every step. */
#include "mp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST_TIMEOUT(120);

static weft_model *make_model(const char *spec, size_t *n)
{
    weft_model_config cfg;
    weft_model *m;
    if (weft_model_config_parse(spec, &cfg) || weft_model_create(&m, &cfg, 3))
        return NULL;
    weft_model_params(m, n);
    return m;
}

/* An inner step: who's model moves by a step-dependent amount (who: the
 * rank, or the cluster when the cluster's ranks stay in full sync). */
static void inner_step(weft_model *m, int who, long step)
{
    size_t n;
    float *x = weft_model_params(m, &n);
    for (size_t i = 0; i < n; i++)
        x[i] -= 0.01f * (float)((who + 1) * (int)((i + (size_t)step) % 5) - 2);
}

/* 1 when every rank of c holds the same bits in x. */
static int same_everywhere(weft_comm *c, const float *x, size_t n)
{
    int p = weft_comm_size(c), same = 1;
    float *all = malloc((size_t)p * n * sizeof *all);
    if (!all || weft_allgather(c, x, all, n, WEFT_F32))
        same = 0;
    for (int q = 1; same && q < p; q++)
        same = memcmp(all, all + (size_t)q * n, n * sizeof *x) == 0;
    free(all);
    return same;
}

static void f1_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    size_t n;
    weft_model *a = make_model("mlp:6-4-3", &n), *b = make_model("mlp:6-4-3", &n);
    weft_sync *sa = NULL, *sb = NULL;
    weft_sync_config ca, cb;
    (void)arg;
    CHECK(a && b);
    CHECK(weft_sync_parse("diloco:3", &ca) == 0 && weft_sync_parse("streaming:3:1:0", &cb) == 0);
    CHECK(cb.mode == WEFT_SYNC_STREAMING && cb.fragments == 1 && cb.overlap == 0);
    CHECK(weft_sync_create(&sa, c, a, &ca) == 0 && weft_sync_create(&sb, c, b, &cb) == 0);
    if (!sa || !sb)
        return;
    float *xa = weft_model_params(a, &n), *xb = weft_model_params(b, &n);
    CHECK(memcmp(xa, xb, n * sizeof *xa) == 0);
    int diff = 0;
    for (long t = 0; t < 8; t++) {
        inner_step(a, r, t);
        inner_step(b, r, t);
        CHECK(weft_sync_after_step(sa) == 0 && weft_sync_after_step(sb) == 0);
        diff += memcmp(xa, xb, n * sizeof *xa) != 0;
    }
    CHECK(weft_sync_finish(sa) == 0 && weft_sync_finish(sb) == 0);
    diff += memcmp(xa, xb, n * sizeof *xa) != 0;
    CHECKF(diff == 0, "rank %d: streaming:3:1:0 left diloco:3 at %d points", r, diff);
    CHECK(same_everywhere(c, xb, n));
    CHECK(weft_sync_bytes(sa) == weft_sync_bytes(sb));
    weft_sync_destroy(sa);
    weft_sync_destroy(sb);
    weft_model_destroy(a);
    weft_model_destroy(b);
}

TEST(streaming_f1_is_diloco)
{
    CHECK(mp_run(3, 30, f1_body, NULL) == 0);
}

/* streaming:4:2:1 over 2 ranks: fragment 0 (the first half) takes its
 * pseudo-gradient at steps 2, 6, ...; fragment 1 at 4, 8, ...; each lands
 * one step later as 0.5 local + 0.5 the outer step's result. */
static void fragments_body(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    size_t n;
    weft_model *m = make_model("mlp:6-4-3", &n);
    weft_sync *s = NULL;
    weft_sync_config sc;
    (void)arg;
    CHECK(weft_sync_parse("streaming:4:2:1", &sc) == 0 && sc.fragments == 2 && sc.overlap == 1);
    CHECK(weft_sync_parse("streaming:4:2:5", &sc) == WEFT_EINVAL); /* T > H */
    CHECK(weft_sync_parse("streaming:4:2:4", &sc) == 0 && sc.overlap == 4);
    CHECK(weft_sync_parse("streaming:4:2:1", &sc) == 0);
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    if (!s)
        return;
    float *x = weft_model_params(m, &n), *a = malloc(n * sizeof *x), *d = malloc(n * sizeof *x),
          *xl = malloc(n * sizeof *x);
    size_t half = n / 2;
    memcpy(a, x, n * sizeof *x);
    uint64_t want = 0;
    int bad = 0;
    for (long t = 1; t <= 4; t++) {
        inner_step(m, r, t);
        if (t == 2) { /* the average pseudo-gradient, by hand (on c: the sync has its own) */
            for (size_t i = 0; i < n; i++)
                d[i] = a[i] - x[i];
            CHECK(weft_allreduce(c, d, d, n, WEFT_F32, WEFT_AVG) == 0);
            want += half * sizeof(float);
        }
        if (t == 4)
            want += (n - half) * sizeof(float);
        memcpy(xl, x, n * sizeof *x);
        CHECK(weft_sync_after_step(s) == 0);
        CHECKF(weft_sync_bytes(s) == want, "step %ld: %llu bytes, want %llu", t,
               (unsigned long long)weft_sync_bytes(s), (unsigned long long)want);
        for (size_t i = 0; t == 3 && i < n; i++) {
            float v = 0.9f * 0.0f + d[i], g = a[i] - 0.7f * (d[i] + 0.9f * v);
            float w = i < half ? 0.5f * xl[i] + (1 - 0.5f) * g : xl[i];
            bad += fabsf(x[i] - w) > 1e-6f * (1 + fabsf(w));
        }
        if (t < 3)
            bad += memcmp(x, xl, n * sizeof *x) != 0; /* nothing lands before step 3 */
    }
    CHECKF(bad == 0, "rank %d: %d elements off the fragment schedule or the mixing", r, bad);
    CHECK(weft_sync_finish(s) == 0);
    CHECK(same_everywhere(c, x, n));
    free(a);
    free(d);
    free(xl);
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

TEST(streaming_fragments)
{
    CHECK(mp_run(2, 30, fragments_body, NULL) == 0);
}

/* hier:full/diloco:2 over 2 clusters of 2: the cluster's ranks move alike
 * (their full sync); every rank ends each outer step with the same bits. */
static void hier_body(weft_comm *c, void *arg)
{
    const char *compress = arg;
    int r = weft_comm_rank(c), L = 2;
    size_t n;
    weft_model *m = make_model("mlp:64-32-2", &n);
    weft_sync *s = NULL;
    weft_sync_config sc;
    CHECK(weft_sync_parse("hier:full/diloco:2", &sc) == 0 && sc.hier == 1 &&
          sc.mode == WEFT_SYNC_DILOCO);
    if (*compress) {
        CHECK(weft_compress_parse(compress, &sc.compress) == 0);
        sc.compressed = 1;
    }
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    if (!s)
        return;
    weft_comm *in = weft_sync_inner_comm(s);
    CHECK(in && weft_comm_size(in) == L && weft_comm_cluster_count(in) == 1);
    float *x = weft_model_params(m, &n);
    uint64_t wan0 = 0, wan1 = 0, across = 0, inside = 0;
    float *snap = malloc(3 * n * sizeof *x); /* after each outer step, compared at the end */
    weft_comm_wan_bytes(c, &wan0);
    for (long t = 1; snap && t <= 6; t++) {
        inner_step(m, r / L, t);
        CHECK(weft_sync_after_step(s) == 0);
        if (t % 2 == 0)
            memcpy(snap + (t / 2 - 1) * n, x, n * sizeof *x);
    }
    weft_comm_wan_bytes(c, &wan1);
    int differ = !snap || !same_everywhere(c, snap, 3 * n);
    free(snap);
    CHECKF(differ == 0, "%s: the ranks' models differ after an outer step", compress);
    weft_sync_bytes_split(s, &across, &inside);
    size_t slice = (n + L - 1) / L;
    if (!*compress) /* 3 outer steps, a slice each, an fp32 all-reduce of 2 */
        CHECK(across == 3 * slice * sizeof(float) && inside == 3 * slice * sizeof(float));
    if (strncmp(compress, "powersgd", 8) == 0) /* rank 0 of the cluster carries it all */
        CHECKF(r % L ? across == 0 : across > 0 && across < 3 * n * sizeof(float) / 4,
               "rank %d: powersgd sent %llu across", r, (unsigned long long)across);
    if (strcmp(compress, "int8") == 0) {
        /* two clusters: each all-reduce sends its slice once, as int8 */
        uint64_t want = 3 * weft_codec_bytes(WEFT_CODEC_INT8, r % L ? n - slice : slice);
        CHECKF(across >= want && across <= want + 64, "int8: %llu across, want %llu",
               (unsigned long long)across, (unsigned long long)want);
    }
    /* what crossed the emulated WAN is the sync's outer traffic, give or
     * take message headers and the set-up's bytes that WEFT_WAN's pump
     * counts a little late */
    double off = fabs((double)(wan1 - wan0) - (double)across);
    CHECKF(off <= 0.05 * (double)across + 1536, "rank %d %s: %llu wan bytes, sync says %llu", r, compress,
           (unsigned long long)(wan1 - wan0), (unsigned long long)across);
    CHECK(weft_sync_finish(s) == 0);
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

TEST(hier_outer_step)
{
    const char *cases[] = { "", "int8", "powersgd:2" };
    setenv("WEFT_WAN", "delay=1ms", 1);
    mp_ranks_per_cluster = 2;
    for (int i = 0; i < 3; i++)
        CHECK(mp_run(4, 60, hier_body, (void *)cases[i]) == 0);
    mp_ranks_per_cluster = 0;
    unsetenv("WEFT_WAN");
}

/* diloco:1 with int8 on 2 ranks sends about a quarter of fp32's bytes. */
static void ratio_body(weft_comm *c, void *arg)
{
    size_t n;
    uint64_t b[2];
    (void)arg;
    for (int k = 0; k < 2; k++) {
        weft_model *m = make_model("mlp:64-32-2", &n);
        weft_sync *s = NULL;
        weft_sync_config sc;
        CHECK(weft_sync_parse("diloco:1", &sc) == 0);
        sc.compressed = 1;
        CHECK(weft_compress_parse(k ? "int8" : "fp32", &sc.compress) == 0);
        CHECK(weft_sync_create(&s, c, m, &sc) == 0);
        for (long t = 1; s && t <= 3; t++) {
            inner_step(m, weft_comm_rank(c), t);
            CHECK(weft_sync_after_step(s) == 0);
        }
        b[k] = weft_sync_bytes(s);
        weft_sync_destroy(s);
        weft_model_destroy(m);
    }
    double q = (double)b[1] / (double)b[0];
    CHECKF(b[0] > 0 && q > 0.25 && q < 0.26, "int8 / fp32 bytes %.4f", q);
}

TEST(compressed_outer_bytes)
{
    CHECK(mp_run(2, 30, ratio_body, NULL) == 0);
}

static void full_body(weft_comm *c, void *arg)
{
    const char *spec = arg;
    int r = weft_comm_rank(c), differ = 0;
    size_t n;
    weft_model *m = make_model("mlp:64-32-2", &n);
    weft_compress_spec cs;
    weft_compressor *z = NULL;
    weft_optim *opt = NULL;
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    float *x = weft_model_params(m, &n), *g = weft_model_grads(m, &n);
    CHECK(weft_broadcast(c, x, n, WEFT_F32, 0) == 0);
    CHECK(weft_compress_parse(spec, &cs) == 0 && weft_compressor_create(&z, c, &cs, n) == 0);
    CHECK(weft_compressor_add_matrix(z, 0, 32, 64) == 0);
    CHECK(weft_optim_create(&opt, &oc, 0, n) == 0);
    for (int t = 0; z && opt && t < 4; t++) {
        for (size_t i = 0; i < n; i++) /* each rank its own gradient */
            g[i] = sinf((float)(i * (size_t)(r + 2) + (size_t)t)) / (float)(r + 1);
        CHECK(weft_compressor_allreduce(z, g, WEFT_AVG) == 0);
        CHECK(weft_optim_step(opt, x, g, 1e-2f) == 0);
        differ += !same_everywhere(c, x, n);
    }
    CHECKF(differ == 0, "%s: the ranks' parameters differ after %d of 4 steps", spec, differ);
    weft_optim_destroy(opt);
    weft_compressor_destroy(z);
    weft_model_destroy(m);
}

TEST(full_sync_compressed_same_bits)
{
    const char *specs[] = { "fp16", "bf16", "int8", "int4", "topk:0.05", "powersgd:2" };
    for (int i = 0; i < 6; i++)
        CHECK(mp_run(3, 30, full_body, (void *)specs[i]) == 0);
}

/* The end of a streaming run (outer_finish): streaming:6:3:T has its
 * fragments' outer steps at 2, 4 and 0 mod 6, so after 8 steps fragment
 * 0's reduction taken at step 8 is still in flight and fragments 1 and 2
 * have moved since theirs. The fragment taken at the last step lands as
 * the blocking step (no second reduction of it), the other two take their
 * last outer step in one reduction: one sync of each fragment per start
 * (fp32, exactly), and one model on every rank; the same over 2 clusters
 * of 2 (hier) in fp32, int4 and PowerSGD (one reduction a fragment there,
 * its warm start kept). */
typedef struct {
    const char *sync, *compress;
    int L; /* ranks a cluster; 1: flat */
} finish_case;

static void finish_body(weft_comm *c, void *arg)
{
    const finish_case *k = arg;
    int r = weft_comm_rank(c);
    size_t n;
    weft_model *m = make_model("mlp:64-32-2", &n);
    weft_sync *s = NULL;
    weft_sync_config sc;
    CHECK(weft_sync_parse(k->sync, &sc) == 0 && sc.fragments == 3);
    if (k->compress[0]) {
        CHECK(weft_compress_parse(k->compress, &sc.compress) == 0);
        sc.compressed = 1;
    }
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    if (!s)
        return;
    for (long t = 1; t <= 8; t++) {
        inner_step(m, r / k->L, t);
        CHECK(weft_sync_after_step(s) == 0);
    }
    CHECK(weft_sync_finish(s) == 0);
    float *x = weft_model_params(m, &n);
    CHECKF(same_everywhere(c, x, n), "%s %s: the ranks end with different models", k->sync,
           k->compress);
    uint64_t across = 0, inside = 0;
    weft_sync_bytes_split(s, &across, &inside);
    if (!k->compress[0]) {
        /* fragment 0 at 2 and 8, fragments 1 and 2 at 4 and 6 and at the
         * end: two syncs each, this rank's part of every fragment */
        size_t want = 0;
        for (int f = 0; f < 3; f++) {
            size_t len = n * (size_t)(f + 1) / 3 - n * (size_t)f / 3;
            size_t slice = (len + (size_t)k->L - 1) / (size_t)k->L, lo = slice * (size_t)(r % k->L);
            want += 2 * (lo >= len ? 0 : len - lo < slice ? len - lo : slice);
        }
        CHECKF(across == want * sizeof(float), "%s: rank %d sent %llu across, want %zu", k->sync,
               r, (unsigned long long)across, want * sizeof(float));
    } else {
        /* PowerSGD: rank 0 of the cluster carries the whole fragment */
        int leader_only = strncmp(k->compress, "powersgd", 8) == 0 && r % k->L;
        CHECKF(leader_only ? across == 0 : across > 0, "%s %s: rank %d sent %llu", k->sync,
               k->compress, r, (unsigned long long)across);
    }
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

TEST(streaming_finish_flat)
{
    /* T = 5 > H/F: fragments 0, 1 and 2 in flight together at step 6,
     * and the same syncs */
    static const finish_case ks[] = { { "streaming:6:3:2", "", 1 }, { "streaming:6:3:5", "", 1 } };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        CHECK(mp_run(2, 30, finish_body, (void *)&ks[i]) == 0);
}

TEST(streaming_finish_hier)
{
    static const finish_case ks[] = {
        { "hier:full/streaming:6:3:1", "", 2 },
        { "hier:full/streaming:6:3:2", "int4", 2 },
        { "hier:full/streaming:6:3:2", "powersgd:2", 2 },
        { "hier:full/streaming:6:3:5", "int4", 2 }, /* T > H/F: fragments overlap */
    };
    mp_ranks_per_cluster = 2;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        CHECK(mp_run(4, 60, finish_body, (void *)&ks[i]) == 0);
    mp_ranks_per_cluster = 0;
}
