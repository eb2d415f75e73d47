/* Reduction kernels, f16/bf16 conversion and the name tables, each checked
 * against a plain reference written independently of the code under test. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "coll/reduce.h"
#include "core/half.h"
#include "test.h"
#include "weft.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* ---- conversion oracle ----------------------------------------------------
 * Positive binary16/bfloat16 bit patterns order like their values, so the
 * nearest representable value is found by binary search in double. The
 * infinity pattern stands for the power of two just past the largest finite
 * value: rounding to nearest-even sends exactly the values from the midpoint
 * up there, which is where IEEE overflow to infinity begins. */
typedef struct {
    int ebits, mbits;   /* 5,10 for f16; 8,7 for bf16 */
    uint32_t inf;       /* the infinity pattern */
} fmt16;

static const fmt16 F16 = { 5, 10, 0x7c00 };
static const fmt16 BF16 = { 8, 7, 0x7f80 };

static double val16(const fmt16 *f, uint32_t bits)
{
    int bias = (1 << (f->ebits - 1)) - 1;
    uint32_t e = bits >> f->mbits, m = bits & ((1u << f->mbits) - 1);
    if (e == 0)
        return ldexp((double)m, 1 - bias - f->mbits);
    return ldexp((double)((1u << f->mbits) | m), (int)e - bias - f->mbits);
}

static uint16_t ref_narrow(const fmt16 *f, float x)
{
    uint32_t sign = signbit(x) ? 0x8000u : 0;
    double a = fabs((double)x);
    if (isnan(x))
        return 0;
    if (isinf(x))
        return (uint16_t)(sign | f->inf);
    uint32_t lo = 0, hi = f->inf; /* val16(lo) <= a < val16(hi), or a >= top */
    if (a >= val16(f, hi))
        return (uint16_t)(sign | f->inf);
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (val16(f, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - val16(f, lo), dh = val16(f, hi) - a;
    uint32_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

static int is_nan16(const fmt16 *f, uint16_t h)
{
    return (h & 0x7fffu) > f->inf;
}

static float widen(const fmt16 *f, uint16_t h)
{
    return f == &F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static uint16_t narrow(const fmt16 *f, float x)
{
    return f == &F16 ? f32_to_f16(x) : f32_to_bf16(x);
}

static void test_widen_all(const fmt16 *f)
{
    int bad_val = 0, bad_trip = 0, bad_nan = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = widen(f, (uint16_t)h);
        uint32_t mag = h & 0x7fffu;
        if (mag > f->inf) {
            uint16_t back = narrow(f, x);
            /* NaN stays NaN, keeps its sign, comes back quiet */
            if (!isnan(x) || !is_nan16(f, back) || (back & 0x8000) != (h & 0x8000))
                bad_nan++;
            continue;
        }
        double want = mag == f->inf ? INFINITY : val16(f, mag);
        if (h & 0x8000)
            want = -want;
        if ((double)x != want || !!signbit(x) != !!(h & 0x8000))
            bad_val++;
        if (narrow(f, x) != h)
            bad_trip++;
    }
    CHECKF(bad_val == 0, "%d patterns widen wrongly (%s)", bad_val, f == &F16 ? "f16" : "bf16");
    CHECKF(bad_trip == 0, "%d patterns fail the round trip", bad_trip);
    CHECKF(bad_nan == 0, "%d NaN patterns mishandled", bad_nan);
}

/* Values that probe the rounding: every representable value, the midpoints
 * between neighbours (exact ties) and the f32 values one ulp either side,
 * then random bit patterns. */

static size_t probes(const fmt16 *f, float *out)
{
    size_t k = 0;
    for (uint32_t h = 0; h < f->inf; h++) {
        double lo = val16(f, h), hi = h + 1 == f->inf ? 2 * val16(f, h) - val16(f, h - 1)
                                                      : val16(f, h + 1);
        float mid = (float)((lo + hi) / 2); /* exact: a binary32 holds it */
        float v[] = { (float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY) };
        for (size_t j = 0; j < 4; j++) {
            out[k++] = v[j];
            out[k++] = -v[j];
        }
    }
    for (int i = 0; i < 400000; i++) {
        uint32_t u = (uint32_t)rnd();
        out[k++] = half_bits_f32(u);
    }
    return k;
}

static void test_narrow(const fmt16 *f)
{
    static float in[2 * 4 * 65536 + 400000];
    static uint16_t bulk[sizeof in / sizeof in[0]];
    size_t n = probes(f, in);
    int bad = 0, bad_bulk = 0;
    if (f == &F16)
        half_f32_to_f16(bulk, in, n);
    else
        half_f32_to_bf16(bulk, in, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t got = narrow(f, in[i]);
        if (isnan(in[i])) {
            if (!is_nan16(f, got) || !!(got & 0x8000) != !!signbit(in[i]))
                bad++;
        } else if (got != ref_narrow(f, in[i])) {
            if (bad < 5)
                fprintf(stderr, "  %a -> %04x, want %04x\n", (double)in[i], got,
                        ref_narrow(f, in[i]));
            bad++;
        }
        if (bulk[i] != got)
            bad_bulk++;
    }
    CHECKF(bad == 0, "%d of %zu values narrow wrongly (%s)", bad, n, f == &F16 ? "f16" : "bf16");
    CHECKF(bad_bulk == 0, "%d bulk conversions differ from scalar", bad_bulk);

    /* bulk widening equals scalar widening */
    static uint16_t hs[65536];
    static float ws[65536];
    for (uint32_t h = 0; h < 65536; h++)
        hs[h] = (uint16_t)h;
    if (f == &F16)
        half_f16_to_f32(ws, hs, 65536);
    else
        half_bf16_to_f32(ws, hs, 65536);
    int bad_w = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float s = widen(f, (uint16_t)h);
        if (half_f32_bits(s) != half_f32_bits(ws[h]) && !(isnan(s) && isnan(ws[h])))
            bad_w++;
    }
    CHECKF(bad_w == 0, "%d bulk widenings differ", bad_w);
}

TEST(conversion_cases)
{
    CHECK(f32_to_f16(1.0f) == 0x3c00);
    CHECK(f32_to_f16(-2.0f) == 0xc000);
    CHECK(f32_to_f16(65504.0f) == 0x7bff);
    CHECK(f32_to_f16(65519.996f) == 0x7bff);
    CHECK(f32_to_f16(65520.0f) == 0x7c00);   /* tie, odd mantissa: up to inf */
    CHECK(f32_to_f16(1e9f) == 0x7c00);
    CHECK(f32_to_f16(-1e9f) == 0xfc00);
    CHECK(f32_to_f16(INFINITY) == 0x7c00);
    CHECK(f32_to_f16(-0.0f) == 0x8000);
    CHECK(f32_to_f16(0x1p-24f) == 0x0001);   /* smallest subnormal */
    CHECK(f32_to_f16(0x1p-25f) == 0x0000);   /* tie between 0 and it: even */
    CHECK(f32_to_f16(0x1.000002p-25f) == 0x0001);
    CHECK(f32_to_f16(0x1.8p-24f) == 0x0002); /* 1.5 ulp: tie, to even 2 */
    CHECK(f32_to_f16(0x1.4p-23f) == 0x0002); /* 2.5 ulp: tie, to even 2 */
    CHECK(f32_to_f16(0x1p-14f) == 0x0400);   /* smallest normal */
    CHECK(f32_to_f16(0x1.ff8p-15f) == 0x03ff); /* largest subnormal */
    CHECK(f32_to_f16(0x1.ffcp-15f) == 0x0400); /* tie: up into the normals */
    CHECK(f32_to_f16(0x1.ffbfep-15f) == 0x03ff);
    CHECK(f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);          /* tie, even */
    CHECK(f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);      /* tie, even */
    CHECK(f32_to_f16(1e-10f) == 0);
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
    CHECK(f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(f16_to_f32(0x8400) == -0x1p-14f);
    CHECK(isinf(f16_to_f32(0xfc00)) && f16_to_f32(0xfc00) < 0);
    CHECK(isnan(f16_to_f32(0x7e00)));
    CHECK(f32_to_f16(NAN) == 0x7e00);
    CHECK((f32_to_f16(half_bits_f32(0x7f800001u)) & 0x7e00) == 0x7e00); /* sNaN made quiet */

    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(f32_to_bf16(half_bits_f32(0x3f808000u)) == 0x3f80); /* tie, even */
    CHECK(f32_to_bf16(half_bits_f32(0x3f818000u)) == 0x3f82); /* tie, even */
    CHECK(f32_to_bf16(half_bits_f32(0x3f808001u)) == 0x3f81);
    CHECK(f32_to_bf16(half_bits_f32(0x7f7fffffu)) == 0x7f80); /* max f32 -> inf */
    CHECK(f32_to_bf16(half_bits_f32(0x7f7f7fffu)) == 0x7f7f);
    CHECK(f32_to_bf16(half_bits_f32(0x00008000u)) == 0x0000); /* subnormal tie */
    CHECK(f32_to_bf16(half_bits_f32(0x00018000u)) == 0x0002);
    CHECK(f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(f32_to_bf16(half_bits_f32(0x7f800001u)) == 0x7fc0); /* sNaN made quiet */
    CHECK(f32_to_bf16(half_bits_f32(0xffffffffu)) == 0xffff);
    CHECK(bf16_to_f32(0x4049) == 3.140625f);
#ifdef __FLT16_MAX__
    /* The compiler's own conversion, where it has one, must agree. */
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x = half_bits_f32((uint32_t)rnd());
        if (isnan(x))
            continue;
        _Float16 h = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        bad += hb != f32_to_f16(x);
    }
    CHECKF(bad == 0, "%d values differ from _Float16", bad);
#endif
}

/* ---- reduction reference ---------------------------------------------------
 * One element at a time, through the widest type of its class. */
typedef union {
    double f;
    int64_t i;
    uint64_t u;
} scalar;

static scalar get(const void *p, size_t i, weft_dtype t)
{
    scalar s = { 0 };
    switch (t) {
    case WEFT_F32: s.f = ((const float *)p)[i]; break;
    case WEFT_F64: s.f = ((const double *)p)[i]; break;
    case WEFT_F16: s.f = f16_to_f32(((const uint16_t *)p)[i]); break;
    case WEFT_BF16: s.f = bf16_to_f32(((const uint16_t *)p)[i]); break;
    case WEFT_I8: s.i = ((const int8_t *)p)[i]; break;
    case WEFT_U8: s.i = ((const uint8_t *)p)[i]; break;
    case WEFT_I32: s.i = ((const int32_t *)p)[i]; break;
    case WEFT_I64: s.i = ((const int64_t *)p)[i]; break;
    default: break;
    }
    return s;
}

static int is_float(weft_dtype t)
{
    return t == WEFT_F32 || t == WEFT_F64 || t == WEFT_F16 || t == WEFT_BF16;
}

/* The expected stored result, as raw bits in the low bytes of a uint64. */
static uint64_t store_bits(scalar v, weft_dtype t)
{
    uint64_t r = 0;
    switch (t) {
    case WEFT_F32: { float f = (float)v.f; memcpy(&r, &f, 4); break; }
    case WEFT_F64: memcpy(&r, &v.f, 8); break;
    case WEFT_F16: r = f32_to_f16((float)v.f); break;
    case WEFT_BF16: r = f32_to_bf16((float)v.f); break;
    case WEFT_I8: case WEFT_U8: r = v.u & 0xff; break;
    case WEFT_I32: r = v.u & 0xffffffffu; break;
    case WEFT_I64: r = v.u; break;
    default: break;
    }
    return r;
}

static uint64_t raw(const void *p, size_t i, size_t es)
{
    uint64_t r = 0;
    memcpy(&r, (const char *)p + i * es, es);
    return r;
}

static scalar ref_op(scalar a, scalar b, weft_dtype t, weft_op op)
{
    scalar r = { 0 };
    if (is_float(t)) {
        /* f32 and the 16-bit types compute in f32, f64 in f64 */
        int single = t != WEFT_F64;
        double x = a.f, y = b.f;
        switch (op) {
        case WEFT_SUM: case WEFT_AVG:
            r.f = single ? (double)((float)x + (float)y) : x + y; break;
        case WEFT_PROD:
            r.f = single ? (double)((float)x * (float)y) : x * y; break;
        case WEFT_MIN: r.f = isnan(x) || isnan(y) ? NAN : x < y ? x : y; break;
        case WEFT_MAX: r.f = isnan(x) || isnan(y) ? NAN : x > y ? x : y; break;
        default: break;
        }
        return r;
    }
    switch (op) {
    case WEFT_SUM: case WEFT_AVG: r.u = a.u + b.u; break;
    case WEFT_PROD: r.u = a.u * b.u; break;
    case WEFT_MIN: r.i = a.i < b.i ? a.i : b.i; break;
    case WEFT_MAX: r.i = a.i > b.i ? a.i : b.i; break;
    default: break;
    }
    return r;
}

/* Does got match the expected value? NaN matches any NaN; for min/max a
 * zero matches either zero. */
static int same(uint64_t got, scalar want, weft_dtype t, weft_op op)
{
    uint64_t w = store_bits(want, t);
    if (got == w)
        return 1;
    if (!is_float(t))
        return 0;
    size_t es = weft_dtype_size(t);
    char buf[8];
    memcpy(buf, &got, es);
    double g = get(buf, 0, t).f;
    if (isnan(want.f))
        return isnan(g);
    if ((op == WEFT_MIN || op == WEFT_MAX) && want.f == 0 && g == 0)
        return 1;
    return 0;
}

static void fill(void *p, size_t n, weft_dtype t)
{
    static const float specials[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f,
                                      65504.0f, 0x1p-24f, 3e38f, -3e38f, 0x1p-140f };
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        float f = (float)((int64_t)(r % 2001) - 1000) / 8.0f;
        if (r >> 60 == 0)
            f = specials[(r >> 20) % (sizeof specials / sizeof specials[0])];
        switch (t) {
        case WEFT_F32: ((float *)p)[i] = f; break;
        case WEFT_F64: ((double *)p)[i] = r >> 59 == 1 ? (double)f * 1e300 : (double)f / 3; break;
        case WEFT_F16: ((uint16_t *)p)[i] = r >> 59 == 1 ? (uint16_t)r : f32_to_f16(f); break;
        case WEFT_BF16: ((uint16_t *)p)[i] = r >> 59 == 1 ? (uint16_t)r : f32_to_bf16(f); break;
        default: memcpy((char *)p + i * weft_dtype_size(t), &r, weft_dtype_size(t)); break;
        }
    }
}

enum { ALIAS_NONE, ALIAS_A, ALIAS_B, ALIAS_BOTH, ALIAS_COUNT };

static void test_apply(weft_dtype t, weft_op op, size_t n, int alias)
{
    size_t es = weft_dtype_size(t);
    char *a = malloc(n * es + 8), *b = malloc(n * es + 8), *d = malloc(n * es + 8);
    char *a0 = malloc(n * es + 8), *b0 = malloc(n * es + 8);
    if (!a || !b || !d || !a0 || !b0) {
        CHECK(!"out of memory");
        return;
    }
    fill(a0, n, t);
    fill(b0, n, t);
    memcpy(a, a0, n * es);
    memcpy(b, b0, alias == ALIAS_BOTH ? 0 : n * es);
    if (alias == ALIAS_BOTH)
        memcpy(b0, a0, n * es);
    memset(d, 0x5a, n * es + 8);
    void *dst = d, *pa = a, *pb = b;
    if (alias == ALIAS_A) dst = a;
    if (alias == ALIAS_B) dst = b;
    if (alias == ALIAS_BOTH) dst = pb = a;
    /* a sentinel past the end must survive */
    memset((char *)dst + n * es, 0xa5, 8);
    int rc = reduce_apply(dst, pa, pb, n, t, op);
    CHECKF(rc == 0, "reduce_apply %s %s rc %d", weft_dtype_name(t), weft_op_name(op), rc);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        scalar want = ref_op(get(a0, i, t), get(b0, i, t), t, op);
        if (!same(raw(dst, i, es), want, t, op) && bad++ == 0)
            first = i;
    }
    int sentinel = 1;
    for (size_t i = 0; i < 8; i++)
        sentinel &= ((unsigned char *)dst)[n * es + i] == 0xa5;
    CHECKF(bad == 0, "%s %s n=%zu alias=%d: %zu wrong, first at %zu", weft_dtype_name(t),
           weft_op_name(op), n, alias, bad, first);
    CHECKF(sentinel, "%s %s n=%zu alias=%d wrote past the end", weft_dtype_name(t),
           weft_op_name(op), n, alias);
    /* inputs that are not the destination stay untouched */
    if (alias != ALIAS_A && alias != ALIAS_BOTH)
        CHECK(memcmp(a, a0, n * es) == 0);
    if (alias == ALIAS_A || alias == ALIAS_NONE)
        CHECK(memcmp(b, b0, n * es) == 0);
    free(a); free(b); free(d); free(a0); free(b0);
}

TEST(reduce_all)
{
    static const size_t sizes[] = { 0, 1, 7, 1000003 };
    for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
        for (int op = 0; op < WEFT_OP_COUNT; op++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int al = 0; al < ALIAS_COUNT; al++) {
                    /* the big size once per pair, plus once in place */
                    if (sizes[s] > 1000 && al != ALIAS_NONE && al != ALIAS_A)
                        continue;
                    test_apply((weft_dtype)t, (weft_op)op, sizes[s], al);
                }
    /* in place with all three the same, across several scratch blocks */
    for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
        test_apply((weft_dtype)t, WEFT_SUM, 10001, ALIAS_BOTH);
}

TEST(known_values)
{
    int8_t i8a[] = { 127, -128, -1, 100 }, i8b[] = { 1, -1, -1, 3 }, i8d[4];
    CHECK(reduce_apply(i8d, i8a, i8b, 4, WEFT_I8, WEFT_SUM) == 0);
    CHECK(i8d[0] == -128 && i8d[1] == 127 && i8d[2] == -2 && i8d[3] == 103);
    CHECK(reduce_apply(i8d, i8a, i8b, 4, WEFT_I8, WEFT_PROD) == 0);
    CHECK(i8d[0] == 127 && i8d[1] == -128 && i8d[2] == 1 && i8d[3] == 44);
    CHECK(reduce_apply(i8d, i8a, i8b, 4, WEFT_I8, WEFT_MIN) == 0);
    CHECK(i8d[0] == 1 && i8d[1] == -128 && i8d[3] == 3);
    uint8_t u8a[] = { 255, 200 }, u8b[] = { 2, 100 }, u8d[2];
    CHECK(reduce_apply(u8d, u8a, u8b, 2, WEFT_U8, WEFT_SUM) == 0);
    CHECK(u8d[0] == 1 && u8d[1] == 44);
    CHECK(reduce_apply(u8d, u8a, u8b, 2, WEFT_U8, WEFT_MAX) == 0);
    CHECK(u8d[0] == 255 && u8d[1] == 200);
    int32_t i32a[] = { INT32_MAX, INT32_MIN }, i32b[] = { 1, -1 }, i32d[2];
    CHECK(reduce_apply(i32d, i32a, i32b, 2, WEFT_I32, WEFT_SUM) == 0);
    CHECK(i32d[0] == INT32_MIN && i32d[1] == INT32_MAX);
    int64_t i64a[] = { INT64_MIN, 3 }, i64b[] = { -1, -5 }, i64d[2];
    CHECK(reduce_apply(i64d, i64a, i64b, 2, WEFT_I64, WEFT_PROD) == 0);
    CHECK(i64d[0] == INT64_MIN && i64d[1] == -15);
    float fa[] = { NAN, 1.0f, 2.0f }, fb[] = { 1.0f, NAN, 3.0f }, fd[3];
    CHECK(reduce_apply(fd, fa, fb, 3, WEFT_F32, WEFT_MIN) == 0);
    CHECK(isnan(fd[0]) && isnan(fd[1]) && fd[2] == 2.0f);
    CHECK(reduce_apply(fd, fa, fb, 3, WEFT_F32, WEFT_MAX) == 0);
    CHECK(isnan(fd[0]) && isnan(fd[1]) && fd[2] == 3.0f);
    /* f16: 2048 + 1 is a tie between 2048 and 2050, rounds to even 2048 */
    uint16_t ha = f32_to_f16(2048.0f), hb = f32_to_f16(1.0f), hd;
    CHECK(reduce_apply(&hd, &ha, &hb, 1, WEFT_F16, WEFT_SUM) == 0);
    CHECK(hd == f32_to_f16(2048.0f));
    ha = f32_to_f16(65504.0f);
    CHECK(reduce_apply(&hd, &ha, &ha, 1, WEFT_F16, WEFT_SUM) == 0);
    CHECK(hd == 0x7c00);
    /* bf16 keeps the f32 range */
    uint16_t ba = f32_to_bf16(3e38f), bd;
    CHECK(reduce_apply(&bd, &ba, &ba, 1, WEFT_BF16, WEFT_SUM) == 0);
    CHECK(bd == 0x7f80);
}

TEST(avg)
{
    float f[] = { 3.0f, -1.0f, 1.0f };
    CHECK(reduce_avg_finish(f, 3, WEFT_F32, 3) == 0);
    CHECK(f[0] == 1.0f && f[1] == -1.0f / 3 && f[2] == 1.0f / 3);
    double d[] = { 1.0, 7.0 };
    CHECK(reduce_avg_finish(d, 2, WEFT_F64, 2) == 0);
    CHECK(d[0] == 0.5 && d[1] == 3.5);
    int8_t i8[] = { -128, 127, -7, 7 };
    CHECK(reduce_avg_finish(i8, 4, WEFT_I8, 3) == 0);
    CHECK(i8[0] == -42 && i8[1] == 42 && i8[2] == -2 && i8[3] == 2);
    uint8_t u8[] = { 255, 5 };
    CHECK(reduce_avg_finish(u8, 2, WEFT_U8, 2) == 0);
    CHECK(u8[0] == 127 && u8[1] == 2);
    int32_t i32[] = { -7, INT32_MIN, 7 };
    CHECK(reduce_avg_finish(i32, 3, WEFT_I32, 2) == 0);
    CHECK(i32[0] == -3 && i32[1] == INT32_MIN / 2 && i32[2] == 3);
    int64_t i64[] = { INT64_MIN, -1 };
    CHECK(reduce_avg_finish(i64, 2, WEFT_I64, 1) == 0);
    CHECK(i64[0] == INT64_MIN && i64[1] == -1);
    CHECK(reduce_avg_finish(i64, 2, WEFT_I64, 4) == 0);
    CHECK(i64[0] == INT64_MIN / 4 && i64[1] == 0);

    /* f16/bf16: divided in f32, rounded once; over several blocks */
    size_t n = 5000;
    uint16_t *h = malloc(n * 2), *h0 = malloc(n * 2);
    if (!h || !h0)
        return;
    for (int bf = 0; bf < 2; bf++) {
        const fmt16 *fm = bf ? &BF16 : &F16;
        for (size_t i = 0; i < n; i++)
            h[i] = h0[i] = (uint16_t)rnd();
        CHECK(reduce_avg_finish(h, n, bf ? WEFT_BF16 : WEFT_F16, 7) == 0);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = widen(fm, h0[i]) / 7.0f;
            if (isnan(want) ? !is_nan16(fm, h[i]) : h[i] != narrow(fm, want))
                bad++;
        }
        CHECKF(bad == 0, "%zu %s averages wrong", bad, bf ? "bf16" : "f16");
    }
    free(h);
    free(h0);
}

/* reduce_apply_many against reduce_apply folding the sources in turn
 * (checked above against the reference): the same bytes, for k sources,
 * with dst apart or dst == src[0]. */
static void test_many(weft_dtype t, weft_op op, size_t n, int k, int alias)
{
    size_t es = weft_dtype_size(t);
    char *src[6], *want = malloc(n * es + 8), *d = malloc(n * es + 8);
    const void *from[6];
    for (int j = 0; j < k; j++) {
        src[j] = malloc(n * es + 8);
        fill(src[j], n, t);
        from[j] = src[j];
    }
    memcpy(want, src[0], n * es);
    for (int j = 1; j < k; j++)
        reduce_apply(want, want, src[j], n, t, op);
    char *dst = alias ? src[0] : d;
    memset(dst + n * es, 0xa5, 8);
    int rc = reduce_apply_many(dst, from, k, n, t, op), sentinel = 1;
    for (size_t i = 0; i < 8; i++)
        sentinel &= (unsigned char)dst[n * es + i] == 0xa5;
    CHECKF(rc == 0 && memcmp(dst, want, n * es) == 0 && sentinel,
           "reduce_apply_many %s %s n=%zu k=%d alias=%d: rc %d, %s", weft_dtype_name(t),
           weft_op_name(op), n, k, alias, rc,
           rc ? "failed" : sentinel ? "different bytes" : "wrote past the end");
    for (int j = 0; j < k; j++)
        free(src[j]);
    free(want);
    free(d);
}

TEST(many_all)
{
    static const size_t sizes[] = { 0, 5, 4097, 20011 };
    for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
        for (int op = 0; op < WEFT_OP_COUNT; op++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int k = 1; k <= 5; k += (sizes[s] > 5000 ? 3 : 1))
                    test_many((weft_dtype)t, (weft_op)op, sizes[s], k, (k + (int)s) & 1);
    float x[4] = { 1, 2, 3, 4 }, y[4] = { 1, 1, 1, 1 };
    const void *two[2] = { x, y }, *none[2] = { x, NULL };
    CHECK(reduce_apply_many(x, two, 0, 4, WEFT_F32, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply_many(x, none, 2, 4, WEFT_F32, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply_many(NULL, two, 2, 4, WEFT_F32, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply_many(x, two, 2, 4, WEFT_DTYPE_COUNT, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply_many(x, two, 2, 4, WEFT_F32, WEFT_OP_COUNT) == WEFT_EINVAL);
    CHECK(reduce_apply_many(x, two, 1, 4, WEFT_F32, WEFT_OP_COUNT) == WEFT_EINVAL);
    CHECK(x[0] == 1 && x[3] == 4);
    CHECK(reduce_apply_many(x, two, 2, 4, WEFT_F32, WEFT_SUM) == 0);
    CHECK(x[0] == 2 && x[3] == 5);
}

TEST(errors)
{
    float x[2] = { 1, 2 };
    CHECK(reduce_apply(x, x, x, 2, WEFT_DTYPE_COUNT, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply(x, x, x, 2, (weft_dtype)-1, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply(x, x, x, 2, WEFT_F32, WEFT_OP_COUNT) == WEFT_EINVAL);
    CHECK(reduce_apply(x, x, x, 2, WEFT_F16, (weft_op)99) == WEFT_EINVAL);
    CHECK(reduce_apply(NULL, x, x, 2, WEFT_F32, WEFT_SUM) == WEFT_EINVAL);
    CHECK(reduce_apply(NULL, NULL, NULL, 0, WEFT_F32, WEFT_SUM) == 0);
    CHECK(reduce_avg_finish(x, 2, WEFT_F32, 0) == WEFT_EINVAL);
    CHECK(reduce_avg_finish(x, 2, WEFT_DTYPE_COUNT, 2) == WEFT_EINVAL);
    CHECK(x[0] == 1 && x[1] == 2);
    const char *isa = reduce_simd_name();
    CHECK(isa && (!strcmp(isa, "avx512f") || !strcmp(isa, "avx2") || !strcmp(isa, "default")));
}

/* ---- names ------------------------------------------------------------------ */

TEST(names)
{
    static const char *dn[] = { "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64" };
    static const size_t ds[] = { 4, 8, 2, 2, 1, 1, 4, 8 };
    for (int t = 0; t < WEFT_DTYPE_COUNT; t++) {
        weft_dtype p = WEFT_DTYPE_COUNT;
        CHECK(weft_dtype_name((weft_dtype)t) && !strcmp(weft_dtype_name((weft_dtype)t), dn[t]));
        CHECK(weft_dtype_size((weft_dtype)t) == ds[t]);
        CHECK(weft_dtype_parse(dn[t], &p) == 0 && p == (weft_dtype)t);
    }
    CHECK(weft_dtype_name(WEFT_DTYPE_COUNT) == NULL && weft_dtype_size(WEFT_DTYPE_COUNT) == 0);
    CHECK(weft_dtype_name((weft_dtype)-1) == NULL);
    static const struct { const char *s; weft_dtype t; } al[] = {
        { "float", WEFT_F32 }, { "float32", WEFT_F32 }, { "FP32", WEFT_F32 },
        { "double", WEFT_F64 }, { "half", WEFT_F16 }, { "float16", WEFT_F16 },
        { "bfloat16", WEFT_BF16 }, { "int8", WEFT_I8 }, { "uint8", WEFT_U8 },
        { "int32", WEFT_I32 }, { "int", WEFT_I32 }, { "int64", WEFT_I64 },
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        weft_dtype p = WEFT_DTYPE_COUNT;
        CHECKF(weft_dtype_parse(al[i].s, &p) == 0 && p == al[i].t, "dtype alias %s", al[i].s);
    }
    weft_dtype pd = WEFT_I8;
    CHECK(weft_dtype_parse("f31", &pd) == WEFT_EINVAL && pd == WEFT_I8);
    CHECK(weft_dtype_parse("", &pd) == WEFT_EINVAL);
    CHECK(weft_dtype_parse(NULL, &pd) == WEFT_EINVAL);
    CHECK(weft_dtype_parse("f32", NULL) == WEFT_EINVAL);

    static const char *on[] = { "sum", "prod", "min", "max", "avg" };
    for (int o = 0; o < WEFT_OP_COUNT; o++) {
        weft_op p = WEFT_OP_COUNT;
        CHECK(weft_op_name((weft_op)o) && !strcmp(weft_op_name((weft_op)o), on[o]));
        CHECK(weft_op_parse(on[o], &p) == 0 && p == (weft_op)o);
    }
    weft_op po = WEFT_SUM;
    CHECK(weft_op_name(WEFT_OP_COUNT) == NULL);
    CHECK(weft_op_parse("mean", &po) == 0 && po == WEFT_AVG);
    CHECK(weft_op_parse("product", &po) == 0 && po == WEFT_PROD);
    CHECK(weft_op_parse("xor", &po) == WEFT_EINVAL);

    static const char *an[] = { "auto", "naive", "ring", "tree", "rd", "rabenseifner", "hier",
                                "direct", "flat" };
    for (int a = 0; a < WEFT_ALGO_COUNT; a++) {
        weft_algo p = WEFT_ALGO_COUNT;
        CHECK(weft_algo_name((weft_algo)a) && !strcmp(weft_algo_name((weft_algo)a), an[a]));
        CHECK(weft_algo_parse(an[a], &p) == 0 && p == (weft_algo)a);
    }
    weft_algo pa;
    CHECK(weft_algo_name(WEFT_ALGO_COUNT) == NULL);
    CHECK(weft_algo_parse("RING", &pa) == 0 && pa == WEFT_ALGO_RING);
    CHECK(weft_algo_parse("star", &pa) == WEFT_EINVAL);

    static const char *cn[] = { "send", "recv", "barrier", "broadcast", "reduce", "allreduce",
                                "gather", "scatter", "allgather", "reduce_scatter", "alltoall" };
    for (int k = WEFT_COLL_SEND; k < WEFT_COLL_KIND_COUNT; k++)
        CHECKF(weft_coll_name((weft_coll_kind)k) &&
               !strcmp(weft_coll_name((weft_coll_kind)k), cn[k - 1]), "coll %d", k);
    CHECK(weft_coll_name((weft_coll_kind)0) == NULL);
    CHECK(weft_coll_name(WEFT_COLL_KIND_COUNT) == NULL);

    /* every error code has its own message; others are "unknown" */
    for (int e = 0; e >= WEFT_EIO; e--) {
        const char *m = weft_strerror(e);
        CHECK(m && *m && strcmp(m, weft_strerror(1)) != 0);
        for (int f = e + 1; f <= 0; f++)
            CHECK(strcmp(m, weft_strerror(f)) != 0);
    }
    CHECK(!strcmp(weft_strerror(WEFT_EIO - 1), weft_strerror(1)));
    CHECK(!strcmp(weft_version(), WEFT_VERSION_STRING));
}

TEST(widen_f16) { test_widen_all(&F16); }
TEST(widen_bf16) { test_widen_all(&BF16); }
TEST(narrow_f16) { test_narrow(&F16); }
TEST(narrow_bf16) { test_narrow(&BF16); }
