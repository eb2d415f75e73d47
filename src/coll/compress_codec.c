/* The codecs of compressed collectives: f32 to and from fp16, bf16 and
 * block-scaled int8/int4. A message of n elements is its own unit: int8 and
 * int4 keep one scale per COMPRESS_BLOCK elements counted from its start,
 * the scales first, then the values. */
#include "coll/compress.h"
#include "core/half.h"

#include <math.h>
#include <string.h>
#include <strings.h>

static const char *const codec_names[WEFT_CODEC_COUNT] = { "fp32", "fp16", "bf16", "int8",
                                                          "int4" };

const char *weft_codec_name(weft_codec k)
{
    return (unsigned)k < WEFT_CODEC_COUNT ? codec_names[k] : NULL;
}

int weft_codec_parse(const char *s, weft_codec *out)
{
    for (int k = 0; s && out && k < WEFT_CODEC_COUNT; k++)
        if (!strcasecmp(s, codec_names[k])) {
            *out = (weft_codec)k;
            return 0;
        }
    return WEFT_EINVAL;
}

static size_t nblocks(size_t n)
{
    return (n + COMPRESS_BLOCK - 1) / COMPRESS_BLOCK;
}

size_t weft_codec_bytes(weft_codec k, size_t n)
{
    switch (k) {
    case WEFT_CODEC_FP32: return 4 * n;
    case WEFT_CODEC_FP16:
    case WEFT_CODEC_BF16: return 2 * n;
    case WEFT_CODEC_INT8: return n + 4 * nblocks(n);
    case WEFT_CODEC_INT4: return (n + 1) / 2 + 4 * nblocks(n);
    default: return 0;
    }
}

/* Scale of one block: the largest magnitude maps to +-levels. A block of
 * zeros has scale 0 and decodes to zeros; a NaN or infinity makes the scale
 * non-finite, so the whole block decodes to NaN rather than to a
 * plausible-looking wrong number. */
static float block_scale(const float *x, size_t n, float levels)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m || a != a ? a : m;
    }
    return m / levels;
}

static int quantise(float x, float scale, int levels)
{
    if (!(scale > 0) || !isfinite(scale))
        return 0;
    float q = rintf(x / scale);
    q = q > (float)levels ? (float)levels : q < (float)-levels ? (float)-levels : q;
    return (int)q;
}

static void encode_int(const float *x, size_t n, uint8_t *out, int bits)
{
    int levels = bits == 8 ? 127 : 7;
    size_t nb = nblocks(n);
    uint8_t *v = out + 4 * nb;
    if (bits == 4)
        memset(v, 0, (n + 1) / 2);
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * COMPRESS_BLOCK, len = n - lo < COMPRESS_BLOCK ? n - lo : COMPRESS_BLOCK;
        float s = block_scale(x + lo, len, (float)levels);
        memcpy(out + 4 * b, &s, 4);
        for (size_t i = lo; i < lo + len; i++) {
            int q = quantise(x[i], s, levels);
            if (bits == 8)
                v[i] = (uint8_t)(int8_t)q;
            else
                v[i / 2] |= (uint8_t)(((unsigned)q & 0xfu) << (4 * (i & 1)));
        }
    }
}

static void decode_int(const uint8_t *in, size_t n, float *x, int bits)
{
    size_t nb = nblocks(n);
    const uint8_t *v = in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * COMPRESS_BLOCK, len = n - lo < COMPRESS_BLOCK ? n - lo : COMPRESS_BLOCK;
        float s;
        memcpy(&s, in + 4 * b, 4);
        for (size_t i = lo; i < lo + len; i++) {
            int q;
            if (bits == 8)
                q = (int8_t)v[i];
            else {
                int nib = (v[i / 2] >> (4 * (i & 1))) & 0xf;
                q = nib >= 8 ? nib - 16 : nib;
            }
            /* a non-finite scale stands for a non-finite block */
            x[i] = isfinite(s) ? (float)q * s : NAN;
        }
    }
}

int weft_codec_encode(weft_codec k, const float *x, size_t n, void *out)
{
    if ((n && (!x || !out)) || (unsigned)k >= WEFT_CODEC_COUNT)
        return WEFT_EINVAL;
    switch (k) {
    case WEFT_CODEC_FP32: memcpy(out, x, 4 * n); break;
    case WEFT_CODEC_FP16: half_f32_to_f16(out, x, n); break;
    case WEFT_CODEC_BF16: half_f32_to_bf16(out, x, n); break;
    case WEFT_CODEC_INT8: encode_int(x, n, out, 8); break;
    default: encode_int(x, n, out, 4); break;
    }
    return 0;
}

int weft_codec_decode(weft_codec k, const void *in, size_t n, float *x)
{
    if ((n && (!x || !in)) || (unsigned)k >= WEFT_CODEC_COUNT)
        return WEFT_EINVAL;
    switch (k) {
    case WEFT_CODEC_FP32: memcpy(x, in, 4 * n); break;
    case WEFT_CODEC_FP16: half_f16_to_f32(x, in, n); break;
    case WEFT_CODEC_BF16: half_bf16_to_f32(x, in, n); break;
    case WEFT_CODEC_INT8: decode_int(in, n, x, 8); break;
    default: decode_int(in, n, x, 4); break;
    }
    return 0;
}
