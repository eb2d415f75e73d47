#include "core/auth.h"

#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#ifdef WEFT_HAVE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

int auth_compiled(void)
{
#ifdef WEFT_HAVE_OPENSSL
    return 1;
#else
    return 0;
#endif
}

static int nonce(uint8_t *out, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(out + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return WEFT_ESYS;
        got += (size_t)r;
    }
    return 0;
}

/* HMAC-SHA256(secret, tag || role || nc || na || bind) */
static int mac(const char *secret, char tag, uint16_t role, const uint8_t *nc,
               const uint8_t *na, const void *bind, size_t bindlen, uint8_t out[AUTH_MAC_LEN])
{
#ifdef WEFT_HAVE_OPENSSL
    uint8_t msg[1 + 2 + 2 * AUTH_NONCE_LEN + AUTH_BIND_MAX];
    unsigned int outlen = 0;
    size_t n = 0;
    if (bindlen > AUTH_BIND_MAX || !secret || !*secret)
        return WEFT_EINVAL;
    msg[n++] = (uint8_t)tag;
    memcpy(msg + n, &role, 2);
    n += 2;
    memcpy(msg + n, nc, AUTH_NONCE_LEN);
    n += AUTH_NONCE_LEN;
    memcpy(msg + n, na, AUTH_NONCE_LEN);
    n += AUTH_NONCE_LEN;
    if (bindlen)
        memcpy(msg + n, bind, bindlen);
    n += bindlen;
    /* No clean-up at exit: a store or engine thread may still answer a
     * handshake while the main thread returns from main(), and libcrypto's
     * atexit handler would free the locks under its HMAC (a SIGSEGV at
     * exit). Only the first initialisation's options count; a no-op after. */
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, n, out, &outlen) ||
        outlen != AUTH_MAC_LEN)
        return WEFT_ESYS;
    return 0;
#else
    (void)secret; (void)tag; (void)role; (void)nc; (void)na; (void)bind; (void)bindlen;
    memset(out, 0, AUTH_MAC_LEN);
    return WEFT_ENOTSUP;
#endif
}

int auth_check(const uint8_t a[AUTH_MAC_LEN], const uint8_t b[AUTH_MAC_LEN])
{
#ifdef WEFT_HAVE_OPENSSL
    return CRYPTO_memcmp(a, b, AUTH_MAC_LEN) ? WEFT_EAUTH : 0;
#else
    unsigned char d = 0;
    for (int i = 0; i < AUTH_MAC_LEN; i++)
        d |= a[i] ^ b[i];
    return d ? WEFT_EAUTH : 0;
#endif
}

int auth_start(auth_hello *h, int role)
{
    memset(h, 0, sizeof *h);
    h->magic = AUTH_MAGIC;
    h->version = WIRE_VERSION;
    h->role = (uint16_t)role;
    return nonce(h->nonce, sizeof h->nonce);
}

int auth_challenge_make(const char *secret, const auth_hello *h, const void *bind,
                        size_t bindlen, auth_challenge *ch, uint8_t expect[AUTH_MAC_LEN])
{
    int rc;
    memset(ch, 0, sizeof *ch);
    ch->magic = AUTH_MAGIC;
    ch->version = WIRE_VERSION;
    ch->role = h->role;
    if ((rc = nonce(ch->nonce, sizeof ch->nonce)) ||
        (rc = mac(secret, 'A', h->role, h->nonce, ch->nonce, bind, bindlen, ch->mac)) ||
        (rc = mac(secret, 'C', h->role, h->nonce, ch->nonce, bind, bindlen, expect)))
        return rc;
    return 0;
}

int auth_answer(const char *secret, const auth_hello *mine, const auth_challenge *ch,
                const void *bind, size_t bindlen, uint8_t proof[AUTH_MAC_LEN])
{
    uint8_t want[AUTH_MAC_LEN];
    int rc;
    if (ch->role != mine->role)
        return WEFT_EAUTH;
    if ((rc = mac(secret, 'A', mine->role, mine->nonce, ch->nonce, bind, bindlen, want)))
        return rc;
    if (auth_check(want, ch->mac))
        return WEFT_EAUTH;
    return mac(secret, 'C', mine->role, mine->nonce, ch->nonce, bind, bindlen, proof);
}

int auth_channel_key(const char *secret, const auth_hello *h, const auth_challenge *ch,
                     const void *bind, size_t bindlen, uint8_t key[AUTH_MAC_LEN])
{
    return mac(secret, 'K', h->role, h->nonce, ch->nonce, bind, bindlen, key);
}
