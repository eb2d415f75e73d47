/* The rendezvous record (coll/rdv_record.h): what the encoder makes, the
 * decoder gives back field for field; every truncation of an encoding,
 * and every single-byte change the format does not allow, is refused
 * with a reason, never read past its end. */
#include "test.h"

#include "coll/rdv_record.h"

#include <stdlib.h>
#include <string.h>

static void sample(rdv_record *r)
{
    memset(r, 0, sizeof *r);
    strcpy(r->tcp, "10.0.0.7:41234");
    strcpy(r->p2p, "10.0.0.7:41235");
    strcpy(r->host, "node-3#c1");
    strcpy(r->ofi, "0a1b2c/3d4e");
    strcpy(r->p2p_ofi, "");
    r->shm = 1;
}

static int same(const rdv_record *a, const rdv_record *b)
{
    return !strcmp(a->tcp, b->tcp) && !strcmp(a->p2p, b->p2p) && !strcmp(a->host, b->host) &&
           !strcmp(a->ofi, b->ofi) && !strcmp(a->p2p_ofi, b->p2p_ofi) && a->shm == b->shm;
}

/* An exact-size heap copy, so that a sanitizer build sees any overread. */
static int decode_copy(const char *buf, size_t n, rdv_record *out, const char **why)
{
    char *c = malloc(n ? n : 1);
    memcpy(c, buf, n);
    int rc = rdv_record_decode(c, n, out, why);
    free(c);
    return rc;
}

TEST(round_trip)
{
    rdv_record r, back;
    char buf[RDV_RECORD_MAX];
    size_t n;
    const char *why = NULL;
    sample(&r);
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == 0);
    CHECK(n == strlen(buf));
    CHECK(!strncmp(buf, "rdv1 1 14:10.0.0.7:41234 ", 25));
    CHECK(decode_copy(buf, n, &back, &why) == 0);
    CHECK(same(&r, &back));
    /* every field at its longest */
    memset(r.tcp, 'a', sizeof r.tcp - 1);
    memset(r.p2p, 'b', sizeof r.p2p - 1);
    memset(r.host, 'c', sizeof r.host - 1);
    memset(r.ofi, 'd', sizeof r.ofi - 1);
    memset(r.p2p_ofi, 'e', sizeof r.p2p_ofi - 1);
    r.shm = 0;
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == 0);
    CHECK(n < sizeof buf);
    CHECK(decode_copy(buf, n, &back, &why) == 0 && same(&r, &back));
    size_t need = n + 1;
    CHECK(rdv_record_encode(&r, buf, need, &n) == 0);
    CHECK(rdv_record_encode(&r, buf, need - 1, &n) == WEFT_ENOMEM);
}

TEST(encoder_refuses)
{
    rdv_record r;
    char buf[RDV_RECORD_MAX];
    size_t n;
    sample(&r);
    r.shm = 2;
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == WEFT_EINVAL);
    sample(&r);
    r.host[2] = '\n';
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == WEFT_EINVAL);
    sample(&r);
    memset(r.tcp, 'x', sizeof r.tcp); /* no NUL in its array */
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == WEFT_EINVAL);
}

TEST(truncations_refused)
{
    rdv_record r, back;
    char buf[RDV_RECORD_MAX];
    size_t n;
    const char *why;
    int all = 1;
    sample(&r);
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == 0);
    for (size_t k = 0; k < n; k++) {
        why = NULL;
        if (decode_copy(buf, k, &back, &why) != WEFT_EPROTO || !why)
            all = 0;
    }
    CHECK(all);
    /* and one byte more */
    buf[n] = ' ';
    CHECK(decode_copy(buf, n + 1, &back, &why) == WEFT_EPROTO);
}

TEST(malformed_refused)
{
    static const char *bad[] = {
        "",
        "rdv2 1 0: 0: 0: 0: 0:",
        "rdv1 2 0: 0: 0: 0: 0:",
        "rdv1 1 0: 0: 0: 0:",                 /* a field short */
        "rdv1 1 0: 0: 0: 0: 0: 0:",           /* one too many */
        "rdv1 1 00: 0: 0: 0: 0:",             /* a leading zero */
        "rdv1 1 1: 0: 0: 0: 0:",              /* the length runs into the next */
        "rdv1 1 x: 0: 0: 0: 0:",
        "rdv1 1 0:  0: 0: 0: 0:",
        "rdv1 1 99999:a 0: 0: 0: 0:",         /* too many digits */
        ("rdv1 1 80:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         " 0: 0: 0: 0:"),                      /* longer than its array */
        "rdv1 1 2:a\tb 0: 0: 0: 0:",
        "rdv1 10: 0: 0: 0: 0:",
    };
    rdv_record back;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = NULL;
        int rc = decode_copy(bad[i], strlen(bad[i]), &back, &why);
        CHECKF(rc == WEFT_EPROTO && why, "case %zu \"%s\": %d", i, bad[i], rc);
    }
    /* a NUL inside a field */
    const char nul[] = "rdv1 1 3:a\0b 0: 0: 0: 0:";
    const char *why;
    CHECK(decode_copy(nul, sizeof nul - 1, &back, &why) == WEFT_EPROTO);
    /* the shortest well-formed record: every field empty */
    const char *empty = "rdv1 0 0: 0: 0: 0: 0:";
    CHECK(decode_copy(empty, strlen(empty), &back, &why) == 0 && back.shm == 0 && !back.tcp[0]);
}

/* Every byte of a good record changed to every value: the decoder either
 * refuses it or gives back printable NUL-terminated fields and a flag of
 * 0 or 1. */
TEST(every_byte_changed)
{
    rdv_record r, back;
    char buf[RDV_RECORD_MAX];
    size_t n;
    int ok = 1;
    sample(&r);
    CHECK(rdv_record_encode(&r, buf, sizeof buf, &n) == 0);
    for (size_t i = 0; i < n; i++) {
        char keep = buf[i];
        for (int v = 0; v < 256; v++) {
            const char *why;
            buf[i] = (char)v;
            if (decode_copy(buf, n, &back, &why) == 0 &&
                ((back.shm != 0 && back.shm != 1) || strlen(back.tcp) >= sizeof back.tcp ||
                 strlen(back.host) >= sizeof back.host))
                ok = 0;
        }
        buf[i] = keep;
    }
    CHECK(ok);
}
