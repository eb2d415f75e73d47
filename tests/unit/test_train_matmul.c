/* The matmul backends against a double-precision triple loop, for every
 * transpose combination, odd shapes (edges of every block), leading
 * dimensions wider than the matrix, beta 0 and 1, 1..3 threads, and each
 * micro-kernel (AVX-512, AVX2, C) the CPU can run. The portable kernel
 * must also give bit-identical results for any thread count, and the bf16
 * entry must equal the fp32 product of the rounded operands. Tolerance
 * per element: 1e-6 * (K + 1) * (sum |a||b| + |beta c| + 1e-3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "test.h"
#include "train/mm_auto.h"
#include "weft.h"

static float frand(weft_rng *r)
{
    return 2.0f * weft_rng_uniform(r) - 1.0f;
}

static int check_one(mm_ctx *c, weft_rng *r, int ta, int tb, int M, int N, int K, float beta,
                     float *out_copy)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *C0 = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = frand(r);
    for (size_t i = 0; i < nb; i++) B[i] = frand(r);
    for (size_t i = 0; i < nc; i++) C0[i] = C[i] = frand(r);
    train_mm_gemm(c, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    int ok = 1;
    for (int i = 0; i < M && ok; i++)
        for (int j = 0; j < ldc && ok; j++) {
            size_t at = (size_t)i * ldc + j;
            if (j >= N) {   /* padding untouched */
                ok = C[at] == C0[at];
                continue;
            }
            double s = beta * (double)C0[at], mag = fabs(s);
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            ok = fabs(C[at] - s) <= 1e-6 * (K + 1) * (mag + 1e-3);
            if (!ok)
                fprintf(stderr, "  %s ta=%d tb=%d %dx%dx%d beta=%g at (%d,%d): %g vs %g\n",
                        train_mm_name(c), ta, tb, M, N, K, beta, i, j, C[at], s);
        }
    if (out_copy)
        memcpy(out_copy, C, nc * 4);
    free(A); free(B); free(C); free(C0);
    return ok;
}

/* bf16 operands: the result must equal the fp32 product of the rounded
 * values (widening is exact), to fp32 summation rounding. */
static int check_bf16(mm_ctx *c, weft_rng *r, int ta, int tb, int M, int N, int K)
{
    int lda = ta ? M : K, ldb = tb ? K : N;
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
    float *C = malloc((size_t)M * N * 4);
    for (size_t i = 0; i < na; i++) A[i] = f32_to_bf16(frand(r));
    for (size_t i = 0; i < nb; i++) B[i] = f32_to_bf16(frand(r));
    train_mm_gemm_bf16(c, ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C, N);
    int ok = 1;
    for (int i = 0; i < M && ok; i++)
        for (int j = 0; j < N && ok; j++) {
            double s = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double a = bf16_to_f32(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                double b = bf16_to_f32(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                s += a * b;
                mag += fabs(a * b);
            }
            ok = fabs(C[(size_t)i * N + j] - s) <= 1e-6 * (K + 1) * (mag + 1e-3);
        }
    free(A); free(B); free(C);
    return ok;
}

static const int shapes[][3] = { { 1, 1, 1 }, { 7, 5, 3 }, { 6, 16, 256 }, { 13, 33, 257 },
                                 { 127, 45, 300 }, { 64, 1030, 20 }, { 250, 17, 513 },
                                 { 3, 2000, 9 }, { 5, 7, 0 } };
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Every shape, transpose and beta on 1..3 threads of one backend; isa caps
 * the portable kernel's instruction set (NULL: leave the choice alone). */
static void gemm(int backend, const char *isa)
{
    for (int th = 1; th <= 3; th++) {
        if (isa)
            setenv("WEFT_MATMUL_ISA", isa, 1);
        else
            unsetenv("WEFT_MATMUL_ISA");
        mm_ctx *c;
        int rc = train_mm_create(&c, th, backend);
        if (rc == WEFT_ENOTSUP)
            continue;
        CHECK(rc == 0);
        if (rc)
            continue;
        weft_rng r;
        weft_rng_seed(&r, 7);
        for (int s = 0; s < NSHAPES; s++)
            for (int t = 0; t < 4; t++)
                for (int b = 0; b < 2; b++)
                    CHECK(check_one(c, &r, t & 1, t >> 1, shapes[s][0], shapes[s][1],
                                    shapes[s][2], (float)b, NULL));
        train_mm_destroy(c);
    }
    unsetenv("WEFT_MATMUL_ISA");
}

/* the portable kernel once per instruction set this CPU has (the variable
 * caps the choice), then OpenBLAS */
TEST(portable_avx512) { gemm(MM_PORTABLE, "avx512"); }
TEST(portable_avx2) { gemm(MM_PORTABLE, "avx2"); }
TEST(portable_c) { gemm(MM_PORTABLE, "c"); }
TEST(openblas) { gemm(MM_OPENBLAS, NULL); }

TEST(bf16)
{
    static const int backends[] = { MM_PORTABLE, MM_OPENBLAS };
    unsetenv("WEFT_MATMUL_ISA");
    for (int bi = 0; bi < 2; bi++) {
        mm_ctx *c;
        if (train_mm_create(&c, 2, backends[bi]) != 0)
            continue;
        weft_rng r;
        weft_rng_seed(&r, 13);
        for (int s = 0; s < NSHAPES; s++)
            for (int t = 0; t < 4; t++)
                CHECKF(check_bf16(c, &r, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2]),
                       "bf16 gemm %s ta=%d tb=%d shape %d", train_mm_name(c), t & 1, t >> 1, s);
        train_mm_destroy(c);
    }
}

/* thread count does not change a bit of the portable kernel's output,
 * whether the threads split C's rows (tall) or its columns (wide), for
 * every transpose (each packs its operands differently) */
TEST(threads_bitwise)
{
    static const int dims[2][3] = { { 131, 77, 600 }, { 40, 900, 300 } };
    unsetenv("WEFT_MATMUL_ISA");
    for (int sh = 0; sh < 2; sh++)
        for (int t = 0; t < 4; t++) {
            int M = dims[sh][0], N = dims[sh][1], K = dims[sh][2];
            size_t sz = (size_t)M * (N + 2) * 4;
            float *ref = malloc(sz), *got = malloc(sz);
            for (int th = 1; th <= 4; th++) {
                mm_ctx *c;
                CHECK(train_mm_create(&c, th, MM_PORTABLE) == 0);
                weft_rng r;
                weft_rng_seed(&r, 11);
                CHECK(check_one(c, &r, t >> 1, t & 1, M, N, K, 0.0f, th == 1 ? ref : got));
                if (th > 1)
                    CHECKF(memcmp(ref, got, sz) == 0,
                           "%dx%dx%d ta=%d tb=%d: portable gemm differs between 1 and %d threads",
                           M, N, K, t >> 1, t & 1, th);
                train_mm_destroy(c);
            }
            free(ref);
            free(got);
        }
}

/* the default thread count follows WEFT_THREADS, else cores / local ranks */
TEST(default_threads)
{
    setenv("WEFT_THREADS", "3", 1);
    CHECK(train_mm_default_threads() == 3);
    unsetenv("WEFT_THREADS");
    setenv("WEFT_LOCAL_SIZE", "100000", 1);
    CHECK(train_mm_default_threads() == 1);
    unsetenv("WEFT_LOCAL_SIZE");
    setenv("LOCAL_WORLD_SIZE", "100000", 1);   /* torchrun's name */
    CHECK(train_mm_default_threads() == 1);
    unsetenv("LOCAL_WORLD_SIZE");
    CHECK(train_mm_default_threads() >= 1);
}

/* Attention's time for --phases: summed on the model's matmul context by
 * the GPT's forward and backward, none for an MLP, which has none. */
TEST(attention_seconds)
{
    setenv("WEFT_MATMUL", "portable", 1);
    weft_model_config cfg;
    weft_model *m = NULL, *mlp = NULL;
    double s0 = -1, s1 = -1, s2 = -1, s3 = -1;
    CHECK(weft_model_config_parse("gpt:vocab=64,ctx=32,layers=1,heads=2,dim=32", &cfg) == 0);
    CHECK(weft_model_create(&m, &cfg, 1) == 0);
    CHECK(weft_model_attention_seconds(NULL, &s0) == WEFT_EINVAL);
    int32_t x[2 * 32], y[2 * 32];
    for (int i = 0; i < 2 * 32; i++) {
        x[i] = i % 64;
        y[i] = (i * 3 + 1) % 64;
    }
    float loss;
    CHECK(m && weft_model_attention_seconds(m, &s0) == 0 && s0 == 0.0);
    CHECK(m && weft_model_forward(m, x, y, 2, 32, &loss) == 0);
    CHECK(m && weft_model_attention_seconds(m, &s1) == 0 && s1 > s0);
    CHECK(m && weft_model_backward(m) == 0);
    CHECK(m && weft_model_attention_seconds(m, &s2) == 0 && s2 > s1);
    CHECK(weft_model_config_parse("mlp:8-16-4", &cfg) == 0);
    CHECK(weft_model_create(&mlp, &cfg, 1) == 0);
    float in[2 * 8] = { 0 };
    int32_t lab[2] = { 1, 2 };
    CHECK(mlp && weft_model_forward(mlp, in, lab, 2, 1, &loss) == 0 &&
          weft_model_backward(mlp) == 0);
    CHECK(mlp && weft_model_attention_seconds(mlp, &s3) == 0 && s3 == 0.0);
    weft_model_destroy(m);
    weft_model_destroy(mlp);
    unsetenv("WEFT_MATMUL");
}
