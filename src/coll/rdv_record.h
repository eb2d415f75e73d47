/* The record each rank publishes at a communicator's rendezvous (through
 * the store, bootstrap/world.h): where its data connections listen, which
 * host it runs on, and whether it shares memory with its host's ranks.
 *
 * Encoded as "rdv1 S" followed by five fields, each " LEN:BYTES" (LEN in
 * decimal): tcp, p2p, host, ofi, p2p_ofi; S is the rank's WEFT_SHM, 0 or
 * 1. Every byte of a field is printable, so the record is a string the
 * store and world_exchange carry as text. The decoder trusts nothing: a
 * record from another process of the job is checked as if it came from a
 * stranger. */
#ifndef WEFT_COLL_RDV_RECORD_H
#define WEFT_COLL_RDV_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "transport/ofi.h"
#include "transport/sock.h"
#include "weft.h"

#define RDV_HOST_MAX 64

typedef struct {
    char tcp[SOCK_ADDR_MAX];     /* collectives' listener, "host:port" */
    char p2p[SOCK_ADDR_MAX];     /* point-to-point listener; "" for none */
    char host[RDV_HOST_MAX];     /* host id, with its cluster tag (coll/comm_cluster.h) */
    char ofi[OFI_ADDR_MAX];      /* libfabric endpoint; "" without */
    char p2p_ofi[OFI_ADDR_MAX];  /* the point-to-point engine's; "" without */
    int32_t shm;                 /* the rank's WEFT_SHM: 0 or 1 */
} rdv_record;

/* The longest encoding, its NUL included. */
#define RDV_RECORD_MAX                                                                    \
    (8 + 5 * 6 + 2 * (SOCK_ADDR_MAX - 1) + (RDV_HOST_MAX - 1) + 2 * (OFI_ADDR_MAX - 1) + 1)

/* r into buf (cap bytes, NUL-terminated); *len: its length without the
 * NUL. WEFT_EINVAL when a field is not a NUL-terminated printable string
 * of its array or shm is neither 0 nor 1, WEFT_ENOMEM when cap is short. */
int rdv_record_encode(const rdv_record *r, char *buf, size_t cap, size_t *len);
/* The n bytes at buf (no NUL needed) into *out; WEFT_EPROTO with *why
 * saying what is wrong for anything that rdv_record_encode does not make. */
int rdv_record_decode(const void *buf, size_t n, rdv_record *out, const char **why);

#endif
