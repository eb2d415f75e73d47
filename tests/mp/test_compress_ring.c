/* Compressed collectives over real ranks (2 to 4): the codec ring
 * all-reduce is within its error bound of the exact sum and the same bits
 * on every rank, and sends the bytes the codec promises; top-k keeps what
 * it does not send as error, so over repeated calls nothing is lost;
 * PowerSGD recovers a low-rank gradient exactly, sends
 * m n / ((m + n) r) times fewer bytes than fp32 and is the same bits
 * everywhere. */
#include "mp.h"
#include "coll/compress.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

TEST_TIMEOUT(120);

static float input(int r, size_t i)
{
    uint32_t h = (uint32_t)((i + 1) * 2654435761u) ^ (uint32_t)(r * 40503u);
    h ^= h >> 15;
    h *= 2246822519u;
    return ((float)(h % 20001) / 10000.0f - 1.0f) * (1 + (float)(i % 7));
}

/* The same bits on every rank: rank 0's result, broadcast, compared. */
static int same_everywhere(weft_comm *c, const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    int ok = !weft_broadcast(c, y, n, WEFT_F32, 0) && !memcmp(x, y, n * sizeof *y);
    int everywhere = 0;
    weft_allreduce(c, &ok, &everywhere, 1, WEFT_I32, WEFT_MIN);
    free(y);
    return everywhere;
}

typedef struct {
    weft_codec k;
    size_t n;
    weft_op op;
} ring_case;

static void ring_rank(weft_comm *c, void *arg)
{
    const ring_case *rc = arg;
    int p = weft_comm_size(c), r = weft_comm_rank(c);
    size_t n = rc->n;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *exact = calloc(n, sizeof *exact), *amax = calloc(n, sizeof *amax);
    for (size_t i = 0; i < n; i++) {
        x[i] = input(r, i);
        for (int q = 0; q < p; q++) {
            exact[i] += input(q, i);
        }
    }
    uint64_t bytes = 0;
    CHECK(!weft_allreduce_codec(c, x, y, n, rc->op, rc->k, &bytes));
    CHECK(same_everywhere(c, y, n));
    /* Every hop re-quantises a partial sum of at most p terms, each term
     * bounded by max |input| = 7 here: int8 loses at most half a scale of
     * that per hop, p hops in all (p - 1 partial sums and the result). */
    double m = 7.0 * p, bound;
    switch (rc->k) {
    case WEFT_CODEC_FP32: bound = 1e-5 * m; break;
    case WEFT_CODEC_FP16: bound = m * 0x1p-11 * p; break;
    case WEFT_CODEC_BF16: bound = m * 0x1p-8 * p; break;
    case WEFT_CODEC_INT8: bound = m / 127 / 2 * p; break;
    default: bound = m / 7 / 2 * p; break;
    }
    double worst = 0, div = rc->op == WEFT_AVG ? p : 1;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(y[i] - exact[i] / div));
    CHECKF(worst <= bound / div, "%s p=%d: error %g > %g", weft_codec_name(rc->k), p, worst,
           bound / div);
    /* bytes: every chunk but one each way, each in the codec */
    uint64_t want = 0;
    for (int j = 0; j < p; j++) {
        size_t len = compress_chunk_start(n, p, j + 1) - compress_chunk_start(n, p, j);
        want += (uint64_t)weft_codec_bytes(rc->k, len) * ((j != (r + 1) % p) + (j != (r + 2) % p));
    }
    CHECKF(bytes == want, "bytes %llu, want %llu", (unsigned long long)bytes,
           (unsigned long long)want);
    if (r == 0 && rc->n > 1000)
        printf("p=%d %s: worst error %.3g (bound %.3g), %llu bytes sent (fp32: %llu)\n", p,
               weft_codec_name(rc->k), worst, bound / div, (unsigned long long)bytes,
               (unsigned long long)compress_ring_bytes(p, r, n, 4));
    /* in place */
    memcpy(y, x, n * sizeof *y);
    float *z = malloc(n * sizeof *z);
    CHECK(!weft_allreduce_codec(c, x, z, n, rc->op, rc->k, NULL));
    CHECK(!weft_allreduce_codec(c, y, y, n, rc->op, rc->k, NULL));
    CHECK(!memcmp(y, z, n * sizeof *y));
    CHECK(weft_allreduce_codec(c, x, y, n, WEFT_MAX, rc->k, NULL) == WEFT_EINVAL);
    free(z);
    free(x);
    free(y);
    free(exact);
    free(amax);
}

/* Every codec and size in one job per ring size (jobs cost more than calls). */
static void ring_all_rank(weft_comm *c, void *arg)
{
    size_t sizes[] = { 1, 3, 1000, 20011 };
    int thin = getenv("TEST_SCALE") && atoi(getenv("TEST_SCALE")) > 1;
    for (int k = 0; k < WEFT_CODEC_COUNT; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            if (thin && sizes[s] > 1000 && weft_comm_size(c) != 3)
                continue; /* under sanitizers the largest size at one ring size */
            ring_case rc = { (weft_codec)k, sizes[s], s % 2 ? WEFT_AVG : WEFT_SUM };
            ring_rank(c, &rc);
        }
}

TEST(ring_codecs)
{
    for (int p = 2; p <= 4; p++)
        CHECK(mp_run(p, 30, ring_all_rank, NULL) == 0);
}

/* Top-k: one rank's gradient is sent whole over enough calls. With the
 * same gradient g every call and k = n / 4, the sum of the results over
 * calls plus every rank's remaining error is exactly calls * sum(g). */
static void topk_rank(weft_comm *c, void *arg)
{
    int p = weft_comm_size(c), r = weft_comm_rank(c);
    size_t n = 4000;
    weft_compress_spec s;
    weft_compressor *z;
    CHECK(!weft_compress_parse("topk:0.25", &s));
    CHECK(!weft_compressor_create(&z, c, &s, n));
    float *g = malloc(n * sizeof *g), *total = calloc(n, sizeof *total);
    int calls = 6;
    for (int t = 0; t < calls; t++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)(((int)(i * 7 + (size_t)r * 13) % 97) - 48) / 8.0f; /* exact in f32 */
        CHECK(!weft_compressor_allreduce(z, g, WEFT_SUM));
        CHECK(same_everywhere(c, g, n));
        for (size_t i = 0; i < n; i++)
            total[i] += g[i];
    }
    /* sum of the errors over ranks */
    float *err = malloc(n * sizeof *err);
    CHECK(!weft_allreduce(c, z->err, err, n, WEFT_F32, WEFT_SUM));
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < p; q++)
            want += calls * (double)(((int)(i * 7 + (size_t)q * 13) % 97) - 48) / 8.0;
        worst = fmax(worst, fabs(total[i] + err[i] - want));
    }
    CHECKF(worst == 0, "top-k lost %g", worst);
    uint64_t sent, raw;
    weft_compressor_bytes(z, &sent, &raw);
    CHECK(sent == (uint64_t)calls * (uint64_t)(p - 1) * (n / 4) * 8);
    CHECK(raw == (uint64_t)calls * compress_ring_bytes(p, r, n, 4));
    if (r == 0)
        printf("p=%d topk:0.25: %llu bytes sent, fp32 %llu (%.2fx)\n", p,
               (unsigned long long)sent, (unsigned long long)raw, (double)raw / (double)sent);
    weft_compressor_destroy(z);
    free(g);
    free(total);
    free(err);
}

TEST(topk_error_feedback)
{
    for (int p = 2; p <= 4; p++)
        CHECK(mp_run(p, 30, topk_rank, NULL) == 0);
}

/* PowerSGD on a gradient of rank 1 per rank, the same direction on every
 * rank (u v^T scaled by the rank): rank 2 recovers it exactly on the
 * second call (warm start). A small bias vector rides uncompressed. */
enum { PM = 64, PN = 32, PR = 2, BIAS = 5 };

static void powersgd_rank(weft_comm *c, void *arg)
{
    int p = weft_comm_size(c), r = weft_comm_rank(c);
    size_t n = PM * PN + BIAS;
    weft_compress_spec s;
    weft_compressor *z;
    CHECK(!weft_compress_parse("powersgd:2", &s));
    CHECK(!weft_compressor_create(&z, c, &s, n));
    CHECK(!weft_compressor_add_matrix(z, 0, PM, PN));
    CHECK(weft_compressor_add_matrix(z, 10, 2, 2) == WEFT_EINVAL); /* overlaps */
    float *g = malloc(n * sizeof *g);
    double worst = 0, scale = 0;
    for (int t = 0; t < 3; t++) {
        for (int a = 0; a < PM; a++)
            for (int b = 0; b < PN; b++)
                g[a * PN + b] = (float)(r + 1) * sinf((float)a * 0.3f + 0.1f) *
                                cosf((float)b * 0.7f);
        for (int i = 0; i < BIAS; i++)
            g[PM * PN + i] = (float)(r * 10 + i);
        CHECK(!weft_compressor_allreduce(z, g, WEFT_AVG));
        CHECK(same_everywhere(c, g, n));
        worst = 0;
        for (int a = 0; a < PM; a++)
            for (int b = 0; b < PN; b++) {
                double want = (p + 1) / 2.0 * sin(a * 0.3 + 0.1) * cos(b * 0.7);
                worst = fmax(worst, fabs(g[a * PN + b] - want));
                scale = fmax(scale, fabs(want));
            }
        for (int i = 0; i < BIAS; i++)
            CHECK(fabs(g[PM * PN + i] - ((p - 1) * 5.0 + i)) < 1e-5);
    }
    CHECKF(worst <= 1e-4 * scale, "powersgd error %g of %g", worst, scale);
    /* bytes: P (m r) and Q (n r) plus the bias, against the whole buffer */
    uint64_t sent, raw;
    weft_compressor_bytes(z, &sent, &raw);
    uint64_t want_sent = 3 * (compress_ring_bytes(p, r, PM * PR + BIAS, 4) +
                              compress_ring_bytes(p, r, PN * PR, 4));
    CHECK(sent == want_sent);
    CHECK(raw == 3 * compress_ring_bytes(p, r, n, 4));
    weft_compressor_destroy(z);
    /* the ratio alone: one matrix, sizes the ring cuts evenly */
    CHECK(!weft_compressor_create(&z, c, &s, PM * PN));
    CHECK(!weft_compressor_add_matrix(z, 0, PM, PN));
    CHECK(!weft_compressor_allreduce(z, g, WEFT_SUM));
    weft_compressor_bytes(z, &sent, &raw);
    double ratio = (double)raw / (double)sent, want = (double)PM * PN / ((PM + PN) * PR);
    CHECKF(fabs(ratio - want) < 1e-9, "ratio %g, want %g", ratio, want);
    if (r == 0)
        printf("p=%d powersgd:%d %dx%d: %llu bytes sent, fp32 %llu: %.4fx (mn/((m+n)r) = "
               "%.4f)\n", p, PR, PM, PN, (unsigned long long)sent, (unsigned long long)raw,
               ratio, want);
    weft_compressor_destroy(z);
    /* too small to be worth it: sent whole, exactly */
    CHECK(!weft_compressor_create(&z, c, &s, 16));
    CHECK(!weft_compressor_add_matrix(z, 0, 4, 4));
    for (int i = 0; i < 16; i++)
        g[i] = (float)(i + r);
    CHECK(!weft_compressor_allreduce(z, g, WEFT_SUM));
    for (int i = 0; i < 16; i++)
        CHECK(g[i] == (float)(p * i + p * (p - 1) / 2));
    weft_compressor_destroy(z);
    free(g);
}

TEST(powersgd)
{
    for (int p = 2; p <= 4; p += 2)
        CHECK(mp_run(p, 30, powersgd_rank, NULL) == 0);
}
