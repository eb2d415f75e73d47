/* The size grammar of size.h: parsed by hand because strtod takes "1e3",
 * "inf" and " 5", and strtoll's base 0 reads "010" as eight. */
#include "core/size.h"

#include "weft.h"

#include <stdio.h>

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int hexval(int c)
{
    c = lower(c);
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 0 when s is well formed (*out set), -1 when not, -2 when it overflows. */
static int scan(const char *s, uint64_t *out)
{
    const char *p = s;
    uint64_t whole = 0;
    double frac = 0;
    int digits = 0, fraction = 0;
    if (p[0] == '0' && lower(p[1]) == 'x') {
        for (p += 2; hexval(*p) >= 0; p++, digits++) {
            if (whole >> 60)
                return -2;
            whole = whole << 4 | (uint64_t)hexval(*p);
        }
    } else {
        for (; *p >= '0' && *p <= '9'; p++, digits++) {
            uint64_t d = (uint64_t)(*p - '0');
            if (whole > (UINT64_MAX - d) / 10)
                return -2;
            whole = whole * 10 + d;
        }
        if (*p == '.') {
            double place = 0.1;
            for (p++; *p >= '0' && *p <= '9'; p++, digits++, fraction++, place /= 10)
                frac += (*p - '0') * place;
            if (!fraction)
                return -1; /* "1." */
        }
    }
    if (!digits)
        return -1;
    int shift = 0;
    switch (lower(*p)) {
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    case 't': shift = 40; break;
    default: break;
    }
    if (shift) {
        p++;
        if (*p == 'i' || *p == 'I') {
            if (lower(p[1]) != 'b')
                return -1; /* "64Mi" */
            p++;
        }
    }
    if (lower(*p) == 'b')
        p++;
    if (*p || (fraction && !shift))
        return -1; /* a fraction of one byte means nothing */
    if (shift && whole > UINT64_MAX >> shift)
        return -2;
    uint64_t v = whole << shift;
    /* frac < 1, so the product is below 2^40: exact enough in a double */
    uint64_t part = (uint64_t)(frac * (double)((uint64_t)1 << shift));
    if (v > UINT64_MAX - part)
        return -2;
    *out = v + part;
    return 0;
}

const char *size_text(uint64_t v, char *buf, size_t cap)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    else
        snprintf(buf, cap, "%llu%c", (unsigned long long)v, units[u]);
    return buf;
}

int size_parse(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, char *err, size_t cap)
{
    uint64_t v = 0;
    int rc = s ? scan(s, &v) : -1;
    if (rc == -1) {
        if (err)
            snprintf(err, cap, "bad size '%.60s' (want " SIZE_FORM ")", s ? s : "");
        return WEFT_EINVAL;
    }
    if (rc == -2 || v < lo || v > hi) {
        if (err) {
            char a[32], b[32], bytes[64] = "";
            size_text(lo, a, sizeof a);
            size_text(hi, b, sizeof b);
            if (lo % 1024 == 0 && hi % 1024 == 0 && (lo || hi)) /* units shown: bytes too */
                snprintf(bytes, sizeof bytes, ", %llu to %llu bytes", (unsigned long long)lo,
                         (unsigned long long)hi);
            snprintf(err, cap, "size '%.60s' out of range (want %s to %s%s)", s, a, b, bytes);
        }
        return WEFT_EINVAL;
    }
    *out = v;
    return 0;
}
