/* The training engine against PyTorch: tests/ref/{mlp,gpt}.wref come from
 * tools/ref/make_ref.py. For each model, from the same initial weights:
 * logits, loss and every parameter gradient, then 10 steps of SGD
 * (momentum, weight decay) and of AdamW: the loss before each step and the
 * final parameters. Each comparison passes when every element satisfies
 * |weft - torch| <= atol + rtol * |torch|, with the tolerances named at
 * each call; both matmul backends are checked. bf16 mode is held to looser
 * bounds against the same fp32 reference. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref/wref.h"
#include "test.h"
#include "weft.h"

static int close_enough(const char *what, const float *a, const float *r, size_t n,
                        float atol, float rtol)
{
    double worst = 0.0;
    size_t at = 0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - r[i]);
        double lim = atol + rtol * fabs(r[i]);
        if (!(d <= lim))
            ok = 0;
        if (d / lim > worst || d != d) {
            worst = d / lim;
            at = i;
        }
    }
    if (!ok)
        fprintf(stderr, "  %s: element %zu weft %.8g torch %.8g (%.2f x tolerance)\n", what, at,
                a[at], r[at], worst);
    return ok;
}

static int build(weft_model **m, const wref_file *w, const char *prefix)
{
    char key[160];
    size_t n;
    snprintf(key, sizeof key, "%s.config", prefix);
    const int32_t *c = wref_i32(w, key, &n);
    if (!c)
        return -1;
    weft_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (strcmp(prefix, "mlp") == 0) {
        cfg.type = WEFT_MODEL_MLP;
        cfg.n_widths = c[0];
        for (int i = 0; i < c[0]; i++)
            cfg.widths[i] = c[1 + i];
        cfg.activation = c[1 + c[0]];
    } else {
        cfg.type = WEFT_MODEL_GPT;
        cfg.vocab = c[0];
        cfg.ctx = c[1];
        cfg.n_layer = c[2];
        cfg.n_head = c[3];
        cfg.d_model = c[4];
    }
    return weft_model_create(m, &cfg, 99);
}

/* Copies P.<what>.NAME into the model's parameters (or compares with dst). */
static int load_named(weft_model *m, const wref_file *w, const char *prefix, const char *what)
{
    float *p = weft_model_params(m, NULL);
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        char key[160];
        size_t n;
        weft_model_tensor_info(m, i, &ti);
        snprintf(key, sizeof key, "%s.%s.%s", prefix, what, ti.name);
        const float *src = wref_f32(w, key, &n);
        if (!src || n != ti.numel) {
            fprintf(stderr, "  missing or mis-sized %s\n", key);
            return -1;
        }
        memcpy(p + ti.offset, src, n * sizeof(float));
    }
    return 0;
}

/* Per tensor: elementwise with atol = atol_frac * the tensor's largest
 * |element| (a gradient's smallest entries carry the rounding of its
 * largest), or, when by_norm, ||weft - torch|| <= rtol ||torch||. */
static int compare_named(weft_model *m, const float *buf, const wref_file *w,
                         const char *prefix, const char *what, float atol_frac, float rtol,
                         int by_norm)
{
    int ok = 1;
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        char key[160];
        size_t n;
        weft_model_tensor_info(m, i, &ti);
        snprintf(key, sizeof key, "%s.%s.%s", prefix, what, ti.name);
        const float *r = wref_f32(w, key, &n);
        if (!r || n != ti.numel) {
            fprintf(stderr, "  missing %s\n", key);
            ok = 0;
            continue;
        }
        if (by_norm) {
            double dd = 0.0, rr = 0.0;
            for (size_t k = 0; k < n; k++) {
                double d = (double)buf[ti.offset + k] - r[k];
                dd += d * d;
                rr += (double)r[k] * r[k];
            }
            if (!(sqrt(dd) <= rtol * sqrt(rr) + 1e-6)) {
                fprintf(stderr, "  %s: relative L2 error %.3g\n", key, sqrt(dd / (rr + 1e-30)));
                ok = 0;
            }
            continue;
        }
        float mx = 0.0f;
        for (size_t k = 0; k < n; k++)
            mx = fabsf(r[k]) > mx ? fabsf(r[k]) : mx;
        if (!close_enough(key, buf + ti.offset, r, n, atol_frac * (mx > 1e-30f ? mx : 1.0f), rtol))
            ok = 0;
    }
    return ok;
}

typedef struct {
    float logit_atol, logit_rtol, loss_rtol, grad_atol, grad_rtol;
    float step_loss_rtol, final_atol, final_rtol;
    int final_by_norm;
} tols;

static void check_model(const char *prefix, const char *matmul, weft_precision prec,
                        const tols *t)
{
    char path[256];
    const char *dir = getenv("WEFT_REF_DIR");
    snprintf(path, sizeof path, "%s/%s.wref", dir ? dir : "tests/ref", prefix);
    wref_file w;
    int rc = wref_load(&w, path);
    CHECKF(rc == 0, "cannot read %s (run from the repository root)", path);
    if (rc)
        return;
    weft_model *m = NULL;
    CHECK(build(&m, &w, prefix) == 0);
    if (!m) {
        wref_free(&w);
        return;
    }
    int mm_rc = weft_model_set_matmul(m, matmul);
    if (mm_rc == WEFT_ENOTSUP) {
        printf("%s: %s matmul not built in, skipped\n", prefix, matmul);
        weft_model_destroy(m);
        wref_free(&w);
        return;
    }
    CHECK(mm_rc == 0);
    CHECK(weft_model_set_precision(m, prec) == 0);
    printf("%s, %s matmul, %s\n", prefix, weft_model_matmul_name(m),
           prec == WEFT_PREC_BF16 ? "bf16" : "fp32");

    char key[160];
    size_t n;
    snprintf(key, sizeof key, "%s.shape", prefix);
    const int32_t *shape = wref_i32(&w, key, NULL);
    snprintf(key, sizeof key, "%s.x", prefix);
    const void *x = wref_get(&w, key) ? wref_get(&w, key)->data : NULL;
    snprintf(key, sizeof key, "%s.y", prefix);
    const int32_t *y = wref_i32(&w, key, NULL);
    CHECK(shape && x && y);
    if (!shape || !x || !y)
        goto out;
    int B = shape[0], T = shape[1];

    CHECK(load_named(m, &w, prefix, "init") == 0);
    weft_model_zero_grad(m);
    float loss;
    CHECK(weft_model_forward(m, x, y, B, T, &loss) == 0);
    snprintf(key, sizeof key, "%s.loss", prefix);
    const float *rloss = wref_f32(&w, key, NULL);
    CHECKF(close_enough("loss", &loss, rloss, 1, 0.0f, t->loss_rtol), "%s loss %g vs %g",
           prefix, loss, rloss[0]);
    int rows, cols;
    const float *lg = weft_model_logits(m, &rows, &cols);
    snprintf(key, sizeof key, "%s.logits", prefix);
    const float *rl = wref_f32(&w, key, &n);
    CHECK(lg && rl && n == (size_t)rows * cols);
    if (lg && rl && n == (size_t)rows * cols)
        CHECKF(close_enough("logits", lg, rl, n, t->logit_atol, t->logit_rtol), "%s logits", prefix);
    CHECK(weft_model_backward(m) == 0);
    CHECKF(compare_named(m, weft_model_grads(m, NULL), &w, prefix, "grad", t->grad_atol,
                         t->grad_rtol, 0), "%s gradients", prefix);

    static const char *const opts[] = { "sgd", "adamw" };
    for (int o = 0; o < 2; o++) {
        snprintf(key, sizeof key, "%s.%s.hparams", prefix, opts[o]);
        const float *h = wref_f32(&w, key, NULL);
        snprintf(key, sizeof key, "%s.%s.losses", prefix, opts[o]);
        const float *rlosses = wref_f32(&w, key, NULL);
        CHECK(h && rlosses);
        if (!h || !rlosses)
            continue;
        weft_optim_config oc;
        float lr = h[0];
        if (o == 0) {
            weft_optim_config_default(&oc, WEFT_OPTIM_SGD);
            oc.momentum = h[1];
            oc.nesterov = h[2] != 0.0f;
            oc.weight_decay = h[3];
        } else {
            weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
            oc.beta1 = h[1];
            oc.beta2 = h[2];
            oc.eps = h[3];
            oc.weight_decay = h[4];
        }
        CHECK(load_named(m, &w, prefix, "init") == 0);
        size_t np;
        float *p = weft_model_params(m, &np), *g = weft_model_grads(m, NULL);
        weft_optim *opt = NULL;
        CHECK(weft_optim_create(&opt, &oc, 0, np) == 0);
        if (!opt)
            continue;
        float losses[10];
        for (int s = 0; s < 10; s++) {
            weft_model_zero_grad(m);
            weft_model_forward(m, x, y, B, T, &losses[s]);
            weft_model_backward(m);
            weft_optim_step(opt, p, g, lr);
        }
        CHECKF(close_enough("step losses", losses, rlosses, 10, 0.0f, t->step_loss_rtol),
               "%s %s losses", prefix, opts[o]);
        snprintf(key, sizeof key, "%s.final", opts[o]);
        CHECKF(compare_named(m, p, &w, prefix, key, t->final_atol, t->final_rtol, t->final_by_norm),
               "%s %s final parameters", prefix, opts[o]);
        printf("  %s: losses %.6f .. %.6f (torch %.6f .. %.6f)\n", opts[o], losses[0],
               losses[9], rlosses[0], rlosses[9]);
        weft_optim_destroy(opt);
    }
out:
    weft_model_destroy(m);
    wref_free(&w);
}

/* fp32: float rounding differences only (summation order, expf/tanhf).
 * Final parameters get atol 1e-3 of the tensor's largest element: AdamW
 * divides by sqrt(v), so gradients that are zero in exact arithmetic
 * (the key bias) move by rounding noise / eps. */
static const tols fp32 = { .logit_atol = 1e-6f, .logit_rtol = 1e-5f, .loss_rtol = 1e-6f,
                           .grad_atol = 1e-5f, .grad_rtol = 1e-4f,
                           .step_loss_rtol = 1e-5f, .final_atol = 1e-3f, .final_rtol = 1e-4f };
/* bf16 matmul operands carry 8 significant bits (~0.4% each); after
 * 10 AdamW steps single elements may go either way, so the final
 * parameters are held to a 5% relative L2 error per tensor. */
static const tols bf16 = { .logit_atol = 3e-2f, .logit_rtol = 3e-2f, .loss_rtol = 1e-2f,
                           .grad_atol = 5e-2f, .grad_rtol = 5e-2f,
                           .step_loss_rtol = 3e-2f, .final_rtol = 5e-2f,
                           .final_by_norm = 1 };

TEST(mlp_portable) { check_model("mlp", "portable", WEFT_PREC_FP32, &fp32); }
TEST(gpt_portable) { check_model("gpt", "portable", WEFT_PREC_FP32, &fp32); }
TEST(mlp_openblas) { check_model("mlp", "openblas", WEFT_PREC_FP32, &fp32); }
TEST(gpt_openblas) { check_model("gpt", "openblas", WEFT_PREC_FP32, &fp32); }
TEST(mlp_bf16) { check_model("mlp", "portable", WEFT_PREC_BF16, &bf16); }
TEST(gpt_bf16) { check_model("gpt", "portable", WEFT_PREC_BF16, &bf16); }
