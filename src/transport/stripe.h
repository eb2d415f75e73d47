/* Several TCP streams for one wan-class connection (WEFT_WAN_STREAMS=N),
 * so that one stream's window does not cap a long fat link. The layers
 * above still see one connection: the sender's socket is handed to a
 * thread (as to the WAN pump or the TLS pump) that opens N-1 more to the
 * same peer, each introduced and authenticated as any data connection,
 * and deals what the owner writes out in numbered chunks (a 4-byte length,
 * a 4-byte sequence number, up to 256 KiB), each to a stream that has
 * taken its last chunk whole, the one with the least unacknowledged: a
 * stream backing off after a loss is passed over rather than waited for.
 * Every stream starts with a preamble naming its index and N; the
 * listener files the streams of one sender together, and once all N are
 * there a thread reads whichever streams have data and writes the chunks,
 * put back in sequence (up to 64 held ahead of their turn), into the one
 * socket the owner reads. A stream that breaks closes the owner's socket,
 * which the owner sees as the peer gone. Every rank of a job must set the
 * same N. */
#ifndef WEFT_TRANSPORT_STRIPE_H
#define WEFT_TRANSPORT_STRIPE_H

#include <stddef.h>
#include <stdint.h>

#define STRIPE_MAX 64
#define STRIPE_PREAMBLE 8 /* "WS", index, count: u16 each after the magic */

typedef struct stripe_set stripe_set;

/* How an extra stream to peer is opened and introduced (blocking, from
 * the sending thread): a connected, authenticated socket or a negative
 * code. ctx is the transport's. */
typedef int (*stripe_dial_fn)(void *ctx, int peer, char *err, size_t errlen);

int stripe_set_new(stripe_set **out, int rank, int nstreams, stripe_dial_fn dial, void *ctx,
                   int loglevel);
/* Stops every thread (the senders flush what their owners wrote first,
 * up to flush_s) and closes every stream. */
void stripe_set_free(stripe_set *s, double flush_s);
/* An outgoing connection to peer just became ready: *fd (stream 0) goes
 * to a sending thread and is replaced by the owner's end. 0 or negative. */
int stripe_out(stripe_set *s, int peer, int *fd, char *err, size_t errlen);
/* An incoming stream from src with its preamble pre (STRIPE_PREAMBLE
 * bytes): taken (0), or refused (negative: a bad preamble, a stream seen
 * twice). *owner is set to the owner's end the first time a stream of
 * src arrives, else left alone. */
int stripe_in(stripe_set *s, int src, int fd, const uint8_t *pre, int *owner);
/* The preamble of stream index of n. */
void stripe_preamble(uint8_t out[STRIPE_PREAMBLE], int index, int n);
/* Streams open to (out) or from (in) peer: 0 when it is not striped. */
int stripe_count(const stripe_set *s, int peer, int out);

#endif
