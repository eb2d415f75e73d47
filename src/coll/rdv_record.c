/* The rendezvous record's encoding (rdv_record.h). */
#include "coll/rdv_record.h"


#include <stdio.h>
#include <string.h>

#define MAGIC "rdv1 "
#define LEN_DIGITS 4 /* every field is shorter than 10^4 bytes */

typedef struct {
    size_t off;  /* of the field in rdv_record */
    size_t cap;  /* its array's size, NUL included */
} field;

static const field fields[] = {
    { offsetof(rdv_record, tcp), SOCK_ADDR_MAX },
    { offsetof(rdv_record, p2p), SOCK_ADDR_MAX },
    { offsetof(rdv_record, host), RDV_HOST_MAX },
    { offsetof(rdv_record, ofi), OFI_ADDR_MAX },
    { offsetof(rdv_record, p2p_ofi), OFI_ADDR_MAX },
};
#define NFIELDS (sizeof fields / sizeof fields[0])

static int printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

int rdv_record_encode(const rdv_record *r, char *buf, size_t cap, size_t *len)
{
    size_t o;
    int n;
    if (r->shm != 0 && r->shm != 1)
        return WEFT_EINVAL;
    n = snprintf(buf, cap, MAGIC "%d", (int)r->shm);
    if (n < 0 || (size_t)n >= cap)
        return WEFT_ENOMEM;
    o = (size_t)n;
    for (size_t k = 0; k < NFIELDS; k++) {
        const char *s = (const char *)r + fields[k].off;
        size_t sl = strnlen(s, fields[k].cap);
        if (sl == fields[k].cap || !printable(s, sl))
            return WEFT_EINVAL;
        n = snprintf(buf + o, cap - o, " %zu:%s", sl, s);
        if (n < 0 || (size_t)n >= cap - o)
            return WEFT_ENOMEM;
        o += (size_t)n;
    }
    *len = o;
    return 0;
}

/* " LEN:" at *p (n bytes left): the field's length, or -1. */
static long field_len(const char *p, size_t n, size_t *used)
{
    size_t i = 1;
    long v = 0;
    if (n < 3 || p[0] != ' ')
        return -1;
    while (i < n && i <= LEN_DIGITS && p[i] >= '0' && p[i] <= '9') {
        v = v * 10 + (p[i] - '0');
        i++;
    }
    if (i == 1 || i >= n || p[i] != ':' || (p[1] == '0' && i > 2))
        return -1; /* no digits, too many, no colon, or a leading zero */
    *used = i + 1;
    return v;
}

int rdv_record_decode(const void *buf, size_t n, rdv_record *out, const char **why)
{
    const char *p = buf;
    size_t o = sizeof MAGIC - 1;
    memset(out, 0, sizeof *out);
    if (n < o + 1 || memcmp(p, MAGIC, o)) {
        *why = "not a rendezvous record (no \"rdv1\" tag)";
        return WEFT_EPROTO;
    }
    if (p[o] != '0' && p[o] != '1') {
        *why = "shared-memory flag is neither 0 nor 1";
        return WEFT_EPROTO;
    }
    out->shm = p[o++] - '0';
    for (size_t k = 0; k < NFIELDS; k++) {
        size_t used;
        long fl = field_len(p + o, n - o, &used);
        if (fl < 0) {
            *why = "malformed field length";
            return WEFT_EPROTO;
        }
        o += used;
        if ((size_t)fl >= fields[k].cap || (size_t)fl > n - o) {
            *why = "field longer than its limit or than the record";
            return WEFT_EPROTO;
        }
        if (!printable(p + o, (size_t)fl)) {
            *why = "field holds a byte that is not printable";
            return WEFT_EPROTO;
        }
        memcpy((char *)out + fields[k].off, p + o, (size_t)fl);
        o += (size_t)fl;
    }
    if (o != n) {
        *why = "bytes after the last field";
        return WEFT_EPROTO;
    }
    return 0;
}
