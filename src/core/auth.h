/* Connection authentication: a challenge-response in which both ends prove
 * they know the job secret without sending it, with HMAC-SHA256 from
 * OpenSSL's libcrypto (when built with it: WEFT_HAVE_OPENSSL). Each side
 * picks a fresh 32-byte nonce (getrandom), so a recorded exchange cannot be
 * replayed, and each proof also covers `bind` (what the connection claims
 * to be: communicator, source and destination rank), so a proof for one
 * connection is worthless for another.
 *
 *   connector -> acceptor   auth_hello      (nonce C)
 *   acceptor  -> connector  auth_challenge  (nonce A, HMAC(k, "A" C A bind))
 *   connector -> acceptor   proof           (HMAC(k, "C" C A bind))
 *
 * The acceptor never waits for anything but the connector's next message,
 * which the connector sends without waiting on anyone else: two ranks that
 * connect to each other at the same time cannot deadlock. */
#ifndef WEFT_CORE_AUTH_H
#define WEFT_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/frame.h"

#define AUTH_BIND_MAX 64

/* 1 when this build can authenticate (libcrypto), else 0. */
int auth_compiled(void);

/* Connector: fill *h with a fresh nonce. */
int auth_start(auth_hello *h, int role);
/* Acceptor: answer hello h; *ch is to be sent, expect[] is the proof the
 * connector must send back. */
int auth_challenge_make(const char *secret, const auth_hello *h, const void *bind,
                        size_t bindlen, auth_challenge *ch, uint8_t expect[AUTH_MAC_LEN]);
/* Connector: check the acceptor's proof in ch (WEFT_EAUTH if wrong) and
 * compute its own into proof[]. */
int auth_answer(const char *secret, const auth_hello *mine, const auth_challenge *ch,
                const void *bind, size_t bindlen, uint8_t proof[AUTH_MAC_LEN]);
/* Either end, once the exchange is done: a key for this connection alone,
 * HMAC(k, "K" C A bind), which nobody without the secret can compute (the
 * TLS pre-shared key of transport/tls.h). */
int auth_channel_key(const char *secret, const auth_hello *h, const auth_challenge *ch,
                     const void *bind, size_t bindlen, uint8_t key[AUTH_MAC_LEN]);
/* Constant-time comparison of two proofs: 0 when equal. */
int auth_check(const uint8_t a[AUTH_MAC_LEN], const uint8_t b[AUTH_MAC_LEN]);

#endif
