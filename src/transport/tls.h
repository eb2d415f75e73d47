/* Optional TLS 1.3 for every data and store connection (WEFT_TLS=1), with
 * OpenSSL's libssl when built with it (WEFT_HAVE_LIBSSL).
 *
 * Everything above the transport reads and writes plain file descriptors
 * (sendmsg, recv, poll), and the kernel here has no TLS offload, so a
 * secured connection is handed to a pump: its owner gets one end of a
 * socketpair in place of the TCP socket, and a thread per pump moves bytes
 * between the other end and the TLS session, encrypting one way and
 * decrypting the other. An end of stream or a reset on either side closes
 * the other, so a dead peer still reads as end of stream.
 *
 * There are no certificates: both ends derive a 256-bit external pre-shared
 * key from the job secret and the nonces of the connection's own
 * challenge-response (auth_channel_key), so only an end that knows the
 * secret can complete the handshake, and each connection has its own key.
 * The handshake still runs an ephemeral (EC)DHE exchange (psk_dhe_ke), so a
 * secret that leaks later does not decrypt recorded traffic. */
#ifndef WEFT_TRANSPORT_TLS_H
#define WEFT_TRANSPORT_TLS_H

#include <stddef.h>
#include <stdint.h>

#define TLS_KEY_LEN 32

typedef struct tls_pump tls_pump;

/* 1 when this build has libssl. */
int tls_compiled(void);
/* WEFT_TLS from the environment: 1 on, 0 off, negative (with err) when it
 * is set but cannot be honoured (no libssl, or a bad value). */
int tls_wanted(char *err, size_t errlen);

int tls_pump_new(tls_pump **out, int loglevel, int rank, char *err, size_t errlen);
/* Hand the connected socket net_fd (a TCP connection that has just
 * authenticated) to the pump, which owns it from now on. The handshake runs
 * in the pump's thread; *app_fd gets the end its owner reads and writes
 * instead (non-blocking, close-on-exec). what names the link in log
 * messages. */
int tls_pump_add(tls_pump *p, int net_fd, int is_server, const uint8_t key[TLS_KEY_LEN],
                 const char *what, int *app_fd, char *err, size_t errlen);
/* Stop the pump: its links' owners have closed their ends; what they wrote
 * is still sent (for up to flush_s seconds), then every socket is closed
 * and the thread joined. NULL is fine. */
void tls_pump_free(tls_pump *p, double flush_s);

#endif
