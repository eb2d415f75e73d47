#include "core/frame.h"

#include "weft.h"

#include <stdio.h>
#include <string.h>

#define BAD(msg) do { *why = (msg); return WEFT_EPROTO; } while (0)

/* payload bytes no frame may exceed: 2^56, far above any real buffer, low
 * enough that offsets computed from it cannot wrap */
#define FRAME_MAX_LEN (1ull << 56)

int frame_decode(const void *buf, size_t n, frame_hdr *out, const char **why)
{
    frame_hdr h;
    size_t es;
    if (n < sizeof h)
        BAD("short frame header");
    memcpy(&h, buf, sizeof h);
    if (h.magic != FRAME_MAGIC)
        BAD("bad frame magic");
    if (h.version != WIRE_VERSION)
        BAD("unknown frame version");
    if (h.flags & ~FRAME_FLAGS)
        BAD("unknown frame flags");
    if (h.kind < WEFT_COLL_SEND || h.kind >= WEFT_COLL_KIND_COUNT)
        BAD("unknown collective kind");
    if (h.dtype >= WEFT_DTYPE_COUNT)
        BAD("unknown dtype");
    if (h.op >= WEFT_OP_COUNT)
        BAD("unknown reduction op");
    if (h.algo >= WEFT_ALGO_COUNT)
        BAD("unknown algorithm");
    if (h.root < -1)
        BAD("negative root");
    es = weft_dtype_size((weft_dtype)h.dtype);
    if (h.count > FRAME_MAX_LEN / es || h.len > FRAME_MAX_LEN)
        BAD("length out of range");
    if (h.len % es)
        BAD("payload not a whole number of elements");
    *out = h;
    return 0;
}

int frame_hello_decode(const void *buf, size_t n, int size, hello_msg *out, const char **why)
{
    hello_msg h;
    if (n < sizeof h)
        BAD("short hello");
    memcpy(&h, buf, sizeof h);
    if (h.magic != HELLO_MAGIC)
        BAD("bad hello magic");
    if (h.version != WIRE_VERSION)
        BAD("unknown hello version");
    if (h.auth > 1)
        BAD("bad hello auth flag");
    if (h.src < 0 || h.src >= size || h.dst < 0 || h.dst >= size || h.src == h.dst)
        BAD("hello names ranks outside the communicator");
    *out = h;
    return 0;
}

/* The two authentication messages share their leading fields. */
#define AUTH_DECODE(type, what)                                   \
    do {                                                          \
        type h;                                                   \
        if (n < sizeof h)                                         \
            BAD("short " what);                                   \
        memcpy(&h, buf, sizeof h);                                \
        if (h.magic != AUTH_MAGIC || h.version != WIRE_VERSION)   \
            BAD("not an " what);                                  \
        if (h.role != AUTH_ROLE_DATA && h.role != AUTH_ROLE_STORE) \
            BAD("unknown auth role");                             \
        *out = h;                                                 \
        return 0;                                                 \
    } while (0)

int auth_hello_decode(const void *buf, size_t n, auth_hello *out, const char **why)
{
    AUTH_DECODE(auth_hello, "auth hello");
}

int auth_challenge_decode(const void *buf, size_t n, auth_challenge *out, const char **why)
{
    AUTH_DECODE(auth_challenge, "auth challenge");
}

int store_req_decode(const void *buf, size_t n, store_req *out, const char **why)
{
    store_req q;
    if (n < sizeof q)
        BAD("short store request");
    memcpy(&q, buf, sizeof q);
    if (q.magic != STORE_MAGIC)
        BAD("bad store magic");
    if (q.cmd < STORE_SET || q.cmd > STORE_SETNX)
        BAD("unknown store command");
    if (q.pad[0] || q.pad[1] || q.pad[2] || q.pad2)
        BAD("nonzero padding in store request");
    if (q.keylen == 0 || q.keylen > STORE_MAX_KEY)
        BAD("store key length out of range");
    if (q.vallen > STORE_MAX_VALUE)
        BAD("store value too large");
    if (q.cmd != STORE_SET && q.cmd != STORE_HOLD && q.cmd != STORE_SETNX && q.vallen)
        BAD("store command carries an unexpected value");
    if (q.cmd == STORE_GET && q.arg < 0)
        BAD("negative store wait");
    *out = q;
    return 0;
}

int store_msg_decode(const void *buf, size_t n, store_req *out, char *key, const void **val,
                     const char **why)
{
    const char *p = buf;
    store_req q;
    int rc = store_req_decode(buf, n, &q, why);
    if (rc)
        return rc;
    if (n != sizeof q + q.keylen + q.vallen)
        BAD("store request length does not match its header");
    if (memchr(p + sizeof q, 0, q.keylen))
        BAD("NUL byte inside a store key");
    memcpy(key, p + sizeof q, q.keylen);
    key[q.keylen] = 0;
    *val = p + sizeof q + q.keylen;
    *out = q;
    return 0;
}

int store_resp_decode(const void *buf, size_t n, store_resp *out, const char **why)
{
    store_resp r;
    if (n < sizeof r)
        BAD("short store reply");
    memcpy(&r, buf, sizeof r);
    if (r.magic != STORE_MAGIC)
        BAD("bad store reply magic");
    if (r.status > 0 || r.status < WEFT_EIO)
        BAD("unknown store status");
    if (r.vallen > STORE_MAX_VALUE)
        BAD("store reply too large");
    *out = r;
    return 0;
}

int fail_note_encode(const fail_note *f, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%d %d %d %s", f->code, f->culprit, f->witness, f->text);
    if (n < 0 || (size_t)n >= len)
        n = (int)len - 1;
    return n + 1;
}

static int parse_int(const char **p, const char *end, int lo, int hi, int *out)
{
    long v = 0;
    int neg = 0, digits = 0;
    if (*p < end && **p == '-') {
        neg = 1;
        (*p)++;
    }
    while (*p < end && **p >= '0' && **p <= '9' && digits < 10) {
        v = v * 10 + (**p - '0');
        (*p)++;
        digits++;
    }
    if (!digits || (*p < end && **p != ' '))
        return -1;
    if (neg)
        v = -v;
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    if (*p < end)
        (*p)++;
    return 0;
}

int fail_note_decode(const void *buf, size_t n, int size, fail_note *out, const char **why)
{
    const char *p = buf, *end = p + n;
    fail_note f;
    size_t tl;
    if (n && end[-1] == 0)
        end--; /* the store keeps the NUL the writer sent */
    if (parse_int(&p, end, WEFT_EIO, -1, &f.code) ||
        parse_int(&p, end, -1, size - 1, &f.culprit) ||
        parse_int(&p, end, -1, size - 1, &f.witness))
        BAD("malformed failure notice");
    tl = (size_t)(end - p);
    if (tl >= sizeof f.text)
        tl = sizeof f.text - 1;
    memcpy(f.text, p, tl);
    f.text[tl] = 0;
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)f.text[i] < 0x20 || f.text[i] == 0x7f)
            f.text[i] = '?'; /* it ends up in a terminal */
    *out = f;
    return 0;
}
