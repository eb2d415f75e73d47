/* The codecs of compressed collectives alone: bytes per message, error
 * bounds (fp16/bf16 half an ulp, int8/int4 half a block's scale), exact
 * round trips of what they can represent, zeros, NaN, odd lengths, and the
 * parsing of compressor specs. Prints each codec's measured worst error
 * relative to its block's largest magnitude. */
#include "test.h"
#include "coll/compress.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static float value(size_t i)
{
    /* magnitudes over six decades, both signs */
    uint32_t h = (uint32_t)(i * 2654435761u);
    float m = (float)(h % 10007) / 10007.0f;
    return (h & 1 ? -1.0f : 1.0f) * m * powf(10.0f, (float)((h >> 8) % 6) - 3.0f);
}

TEST(bytes)
{
    CHECK(weft_codec_bytes(WEFT_CODEC_FP32, 1000) == 4000);
    CHECK(weft_codec_bytes(WEFT_CODEC_FP16, 1000) == 2000);
    CHECK(weft_codec_bytes(WEFT_CODEC_BF16, 1000) == 2000);
    CHECK(weft_codec_bytes(WEFT_CODEC_INT8, 1000) == 1000 + 4 * 4);
    CHECK(weft_codec_bytes(WEFT_CODEC_INT4, 1001) == 501 + 4 * 4);
    CHECK(weft_codec_bytes(WEFT_CODEC_INT4, 0) == 0);
    CHECK(weft_codec_bytes(WEFT_CODEC_COUNT, 10) == 0);
    size_t n = 1 << 20;
    printf("bytes vs fp32 at 2^20 floats:");
    for (int k = 1; k < WEFT_CODEC_COUNT; k++)
        printf(" %s %.3fx", weft_codec_name((weft_codec)k),
               4.0 * (double)n / (double)weft_codec_bytes((weft_codec)k, n));
    printf("\n");
}

TEST(names)
{
    weft_codec k;
    for (int i = 0; i < WEFT_CODEC_COUNT; i++) {
        CHECK(!weft_codec_parse(weft_codec_name((weft_codec)i), &k) && k == (weft_codec)i);
    }
    CHECK(weft_codec_parse("int3", &k) == WEFT_EINVAL);
    CHECK(weft_codec_name(WEFT_CODEC_COUNT) == NULL);
}

/* Worst |x - decode(encode(x))| over blocks, relative to what the codec
 * promises: fp16/bf16 half an ulp of the value (as a fraction of it), int8
 * and int4 half the block's scale. Returns the worst ratio (<= 1 passes). */
static double worst(weft_codec k, const float *x, size_t n, double *rel_to_max)
{
    uint8_t *e = malloc(weft_codec_bytes(k, n) + 1);
    float *y = malloc(n * sizeof *y);
    double w = 0, rm = 0;
    CHECK(!weft_codec_encode(k, x, n, e));
    CHECK(!weft_codec_decode(k, e, n, y));
    for (size_t b = 0; b < n; b += COMPRESS_BLOCK) {
        size_t len = n - b < COMPRESS_BLOCK ? n - b : COMPRESS_BLOCK;
        double amax = 0;
        for (size_t i = b; i < b + len; i++)
            amax = fmax(amax, fabs(x[i]));
        for (size_t i = b; i < b + len; i++) {
            double d = fabs((double)x[i] - y[i]), bound;
            switch (k) {
            case WEFT_CODEC_FP32: bound = 0; break;
            /* half an ulp: 2^-11 (fp16 normal range), 2^-8 (bf16), relative */
            case WEFT_CODEC_FP16: bound = fmax(fabs(x[i]) * 0x1p-11, 0x1p-25); break;
            case WEFT_CODEC_BF16: bound = fabs(x[i]) * 0x1p-8; break;
            case WEFT_CODEC_INT8: bound = amax / 127 / 2 * (1 + 1e-4); break;
            default: bound = amax / 7 / 2 * (1 + 1e-4); break;
            }
            w = fmax(w, bound > 0 ? d / bound : d > 0 ? INFINITY : 0);
            if (amax > 0)
                rm = fmax(rm, d / amax);
        }
    }
    free(e);
    free(y);
    *rel_to_max = rm;
    return w;
}

TEST(error_bounds)
{
    size_t n = 100003; /* not a multiple of a block, odd for int4 */
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = value(i);
    for (int k = 0; k < WEFT_CODEC_COUNT; k++) {
        double rm, w = worst((weft_codec)k, x, n, &rm);
        printf("%s: worst error %.3g of the bound, %.3g of the block's largest magnitude\n",
               weft_codec_name((weft_codec)k), w, rm);
        CHECKF(w <= 1, "%s: %g", weft_codec_name((weft_codec)k), w);
    }
    free(x);
}

TEST(exact_values)
{
    /* integers -7..7 times one scale survive int4, -127..127 int8 */
    float x[COMPRESS_BLOCK + 3], y[COMPRESS_BLOCK + 3];
    uint8_t e[2 * sizeof x];
    for (int i = 0; i < COMPRESS_BLOCK + 3; i++)
        x[i] = (float)((i % 15) - 7) * 0.5f;
    x[COMPRESS_BLOCK + 2] = 3.5f; /* the short last block's scale is 0.5 too */
    CHECK(!weft_codec_encode(WEFT_CODEC_INT4, x, COMPRESS_BLOCK + 3, e));
    CHECK(!weft_codec_decode(WEFT_CODEC_INT4, e, COMPRESS_BLOCK + 3, y));
    CHECK(!memcmp(x, y, sizeof x));
    for (int i = 0; i < COMPRESS_BLOCK + 3; i++)
        x[i] = (float)((i % 255) - 127) * 0.25f;
    x[COMPRESS_BLOCK + 2] = 127 * 0.25f;
    CHECK(!weft_codec_encode(WEFT_CODEC_INT8, x, COMPRESS_BLOCK + 3, e));
    CHECK(!weft_codec_decode(WEFT_CODEC_INT8, e, COMPRESS_BLOCK + 3, y));
    CHECK(!memcmp(x, y, sizeof x));
    /* zeros stay zeros */
    memset(x, 0, sizeof x);
    for (int k = 0; k < WEFT_CODEC_COUNT; k++) {
        CHECK(!weft_codec_encode((weft_codec)k, x, COMPRESS_BLOCK + 3, e));
        CHECK(!weft_codec_decode((weft_codec)k, e, COMPRESS_BLOCK + 3, y));
        CHECK(!memcmp(x, y, sizeof x));
    }
}

TEST(nan_spoils_its_block_only)
{
    float x[2 * COMPRESS_BLOCK], y[2 * COMPRESS_BLOCK];
    uint8_t e[sizeof x];
    for (int i = 0; i < 2 * COMPRESS_BLOCK; i++)
        x[i] = 1.0f;
    x[3] = NAN;
    CHECK(!weft_codec_encode(WEFT_CODEC_INT8, x, 2 * COMPRESS_BLOCK, e));
    CHECK(!weft_codec_decode(WEFT_CODEC_INT8, e, 2 * COMPRESS_BLOCK, y));
    CHECK(isnan(y[0]) && isnan(y[COMPRESS_BLOCK - 1]));
    CHECK(y[COMPRESS_BLOCK] == 1.0f);
    CHECK(!weft_codec_encode(WEFT_CODEC_FP16, x, 8, e));
    CHECK(!weft_codec_decode(WEFT_CODEC_FP16, e, 8, y));
    CHECK(isnan(y[3]) && y[2] == 1.0f);
}

TEST(bad_arguments)
{
    float x[4] = { 0 };
    uint8_t e[16];
    CHECK(weft_codec_encode(WEFT_CODEC_COUNT, x, 4, e) == WEFT_EINVAL);
    CHECK(weft_codec_encode(WEFT_CODEC_INT8, NULL, 4, e) == WEFT_EINVAL);
    CHECK(weft_codec_decode(WEFT_CODEC_INT8, e, 4, NULL) == WEFT_EINVAL);
    CHECK(weft_codec_encode(WEFT_CODEC_INT8, NULL, 0, NULL) == 0);
}

TEST(spec_parse)
{
    weft_compress_spec s;
    char buf[64];
    CHECK(!weft_compress_parse("int4", &s) && s.kind == WEFT_COMPRESS_CODEC &&
          s.codec == WEFT_CODEC_INT4);
    CHECK(!weft_compress_parse("topk:1000", &s) && s.kind == WEFT_COMPRESS_TOPK && s.k == 1000);
    CHECK(!weft_compress_parse("topk:0.01", &s) && s.k == 0 && s.ratio == 0.01);
    CHECK(!weft_compress_parse("powersgd:4", &s) && s.kind == WEFT_COMPRESS_POWERSGD &&
          s.rank == 4);
    weft_compress_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "powersgd:4"));
    CHECK(!weft_compress_parse("topk:0.5", &s));
    weft_compress_format(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "topk:0.5"));
    CHECK(weft_compress_parse("topk:", &s) == WEFT_EINVAL);
    CHECK(weft_compress_parse("topk:1.5", &s) == WEFT_EINVAL);
    CHECK(weft_compress_parse("topk:-3", &s) == WEFT_EINVAL);
    CHECK(weft_compress_parse("powersgd:0", &s) == WEFT_EINVAL);
    CHECK(weft_compress_parse("powersgd:2x", &s) == WEFT_EINVAL);
    CHECK(weft_compress_parse("gzip", &s) == WEFT_EINVAL);
}
