/* Shared-memory transport: one single-producer, single-consumer byte ring
 * per ordered pair of ranks on the same host, in a POSIX shared segment
 * that the sending rank creates at its first send to that peer.
 *
 * The pair's TCP connection stays: its first bytes (sender to receiver)
 * are an shm_hello naming the segment (or saying "use TCP": the segment
 * could not be made), and afterwards it carries only doorbells, one byte
 * each way, rung only at a side that declared itself asleep. So a waiting
 * rank costs no wake-up per message while it polls, blocks in poll() when
 * idle, and still learns of its peer's death by end of stream.
 *
 * A name exists in /dev/shm only from the sender's first send until the
 * receiver's first receive from it maps and unlinks it. The sender may
 * finish and exit inside that window (its last message still has to be
 * read), so the name outlives it. A communicator that fails unlinks the
 * names nobody will map: a receiver every name addressed to it, a sender
 * those whose receiver is gone (coll/exec/exec.h, exec_shm_reap). Only when
 * both ends of a pair die inside the window is
 * /dev/shm/weft-<comm>-<src>-<dst>-<sender pid> (2 MiB by default) left
 * behind, removable by hand.
 *
 * Messages start 8-byte aligned in the ring, so no element of any dtype
 * straddles its end: a receiver reduces straight out of the ring.
 *
 * A message of SHM_CMA_MIN bytes or more carries, after its header, an
 * shm_cma_desc. When it says so, the payload stays in the sender's memory
 * and the receiver reads it from there with process_vm_readv (one copy
 * instead of two), then acknowledges in the segment (cma_acks); the
 * sender's buffer is in use until then. A receiver that cannot read
 * another process's memory (ptrace rules, seccomp, another pid namespace:
 * the first read checks a cookie) refuses in its acknowledgement, and the
 * payload follows through the ring instead; the sender asks no more. */
#ifndef WEFT_TRANSPORT_SHM_H
#define WEFT_TRANSPORT_SHM_H

#include "core/param.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_HELLO_MAGIC 0x4d544657u /* "WFTM" */
#define SHM_NAME_MAX 72
#define SHM_VERSION 3 /* of the hello and the segment: 2 added single copy, 3 its share */
#define SHM_CMA_MIN (256u << 10) /* smaller payloads go through the ring */

enum { SHM_MODE_TCP = 0, SHM_MODE_RING = 1 };

/* On the TCP connection, first thing from the sender of a same-host pair. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t mode;            /* SHM_MODE_* */
    uint64_t bytes;           /* ring capacity */
    char name[SHM_NAME_MAX];  /* NUL-terminated */
} shm_hello;

/* After the header of a message of SHM_CMA_MIN bytes or more. */
typedef struct {
    uint32_t cma;     /* 1: read the payload at addr in pid; 0: it follows in the ring */
    int32_t pid;
    uint64_t addr;
    uint64_t cookie;  /* at cookie_addr in pid, so the reader knows it reads the right process */
    uint64_t cookie_addr;
} shm_cma_desc;

/* A single copy shared (shm_share_*): a receiver whose destination
 * lies in a region of its own weft_mem_alloc offers it, and a sender
 * waiting for the acknowledgement copies chunks of the payload into it
 * too, each side claiming chunks from next. */
typedef struct {
    _Atomic uint64_t seq;  /* the single copy offered (1: the first announced); 0: none */
    shm_cma_desc dst;      /* the receiver's destination */
    uint64_t len;
    _Alignas(64) _Atomic uint64_t next; /* chunks claimed, by either side */
    _Alignas(64) _Atomic uint64_t done; /* bytes the sender has copied */
} shm_share;

/* Head of the segment; the ring's bytes follow at SHM_DATA_OFF. Each
 * cache line is written by one side only (the sleeping flags excepted:
 * the other side clears them when it rings). */
typedef struct {
    uint32_t magic, version;
    uint64_t bytes;
    _Atomic uint32_t attached;              /* the receiver mapped it (and unlinked the name) */
    _Alignas(64) _Atomic uint64_t tail;     /* bytes published by the sender */
    _Atomic uint32_t writer_asleep;         /* sender blocks on a full ring */
    _Alignas(64) _Atomic uint64_t head;     /* bytes consumed by the receiver */
    _Atomic uint32_t reader_asleep;         /* receiver blocks on an empty ring */
    _Atomic uint32_t cma_refused;           /* with the last acknowledgement: send it in the ring */
    _Atomic uint64_t cma_acks;              /* single-copy messages the receiver has read */
    _Alignas(64) shm_share share;           /* the receiver's offer, and both sides' claims */
} shm_ctl;

#define SHM_DATA_OFF 4096u

typedef struct {
    shm_ctl *ctl;
    char *data;
    uint64_t bytes;    /* capacity, a multiple of 8 */
    uint64_t pos;      /* own side: next byte to write (sender) or read (receiver) */
    uint64_t seen;     /* sender: the receiver's head when last loaded */
    size_t map_len;
    uint64_t cma_sent;       /* sender: single-copy messages announced */
    uint64_t cookie;         /* sender: read back by the receiver's first single copy */
    char name[SHM_NAME_MAX]; /* sender: still linked until the receiver maps it */
} shm_ring;

/* One direction of a same-host pair as the executor sees it. */
enum { SHM_LINK_NEW = 0, SHM_LINK_HELLO, SHM_LINK_RING, SHM_LINK_TCP };

typedef struct {
    int state;           /* SHM_LINK_* */
    int closed;          /* its connection reached end of stream */
    uint32_t hello_done; /* bytes of the hello sent or received */
    int cma_off;         /* this pair makes no single copies (either side's choice) */
    int cma_all;         /* sender: also where the receiver reduces */
    int cma_checked;     /* receiver: the cookie matched once */
    char *stage;         /* receiver: single-copy pieces to reduce from */
    shm_hello hello;
    shm_ring ring;
} shm_link;

/* Close the rings of n links, free their staging and the array (NULL:
 * nothing). */
void shm_links_free(shm_link *l, int n);

/* Ring capacity: p's WEFT_SHM_RING, rounded down to 8. (Its WEFT_SHM_CMA:
 * 0 no single copy on this side, 1 only in collectives that do not
 * reduce, 2 in all.) */
uint64_t shm_ring_bytes(const param_set *p);

/* What the rings of one rank to all its peers on its host may take
 * together: a ring is want bytes (WEFT_SHM_RING) while that fits, else
 * this share of it, and never under 64 KiB. An all-to-all of 256 ranks on
 * one host at 2 MiB a ring reserved 130 GiB of /dev/shm; this way they
 * take at most 8 GiB. host: every rank's host index (size of them). */
#define SHM_RANK_BUDGET (32ull << 20)
uint64_t shm_ring_fit(uint64_t want, const int32_t *host, int size, int rank);
/* Sender: create, size (with the pages reserved, so a full /dev/shm
 * fails here rather than with SIGBUS later) and map the segment, and fill
 * the hello. WEFT_ESYS with err filled on failure (*r left empty). */
int shm_ring_create(shm_ring *r, uint64_t comm_id, int src, int dst, uint64_t bytes,
                    shm_hello *hello, char *err, size_t errlen);
/* A segment of len bytes: create name exclusively (replacing a leftover
 * of a dead process that had this pid), reserve its pages and map it. On
 * failure the name is gone and err says why (WEFT_ESYS). */
int shm_segment_create(const char *name, size_t len, void **map, char *err, size_t errlen);
/* Map the existing segment name, which must be len bytes (else
 * WEFT_EPROTO); unlink: remove the name once it is open. */
int shm_segment_open(const char *name, size_t len, int unlink, void **map, char *err,
                     size_t errlen);
/* Receiver: check a hello that arrived (0 or WEFT_EPROTO with *why). */
int shm_hello_check(const shm_hello *h, const char **why);
/* Receiver whose communicator failed (it will read nothing more): unlink
 * every name in /dev/shm addressed to it in that communicator, also those
 * whose hello never reached it. */
void shm_unlink_to(uint64_t comm_id, int dst);
/* Unlink every weft segment in /dev/shm whose name carries its creator's
 * pid (rings, flat boards) where that process is gone and the segment is
 * at least min_age_s old: a rank killed between making a segment and its
 * peer opening it (which removes the name) leaves it behind otherwise,
 * holding tmpfs memory until the host reboots. Called as a job's boards
 * are made, with SHM_ORPHAN_AGE. */
#define SHM_ORPHAN_AGE 60
void shm_reap_orphans(int min_age_s);
/* Receiver: map the segment the hello names and unlink its name. */
int shm_ring_attach(shm_ring *r, const shm_hello *h, char *err, size_t errlen);
/* Unmap. */
void shm_ring_close(shm_ring *r);
/* Sender: unlink the name unless the receiver has mapped it (and so
 * unlinked it already). */
void shm_ring_unlink(shm_ring *r);

/* Sender: copy up to n bytes in (fewer when the ring is fuller) without
 * publishing them yet. Returns the bytes copied. */
size_t shm_ring_put(shm_ring *r, const void *src, size_t n);
/* Sender: publish what was put. Returns 1 when the receiver was asleep:
 * ring its doorbell. */
int shm_ring_flush(shm_ring *r);
/* Sender: the next message starts 8-byte aligned. */
void shm_ring_end_msg(shm_ring *r);
/* Receiver: the readable bytes at its position that lie contiguous in the
 * ring (at most max); 0 when none. */
size_t shm_ring_peek(const shm_ring *r, const char **p, size_t max);
/* Receiver: n bytes at *p were used; *ring is set when the sender was
 * asleep waiting for room. */
void shm_ring_consume(shm_ring *r, size_t n, int *ring);
/* Receiver: skip to the next message (8-byte aligned). */
void shm_ring_end_msg_read(shm_ring *r);
/* Copy up to n bytes out (both pieces across the end), consume them. */
size_t shm_ring_read(shm_ring *r, void *dst, size_t n, int *ring);

/* Can this side move now? Sender: room for a byte; receiver: a byte. */
int shm_ring_can_write(const shm_ring *r);
int shm_ring_can_read(const shm_ring *r);
/* Going to sleep: declare it, then check once more (a message may have
 * landed in between). Returns 1 when the caller may block in poll() on its
 * doorbell; 0 when it must not (the flag is already withdrawn). */
int shm_ring_sleep(shm_ring *r, int writer);
/* writer 2 (in can_move, sleep and wake): a sender waiting for the
 * acknowledgement of its single copy. */
int shm_ring_can_move(const shm_ring *r, int writer);
/* Woken (or gave up sleeping): withdraw the flag. */
void shm_ring_wake(shm_ring *r, int writer);

/* Sender: the receiver acknowledged every single copy announced; *refused
 * says whether it refused the last one. */
int shm_cma_acked(const shm_ring *r, int *refused);
/* Receiver: acknowledge a single copy (refused: send it in the ring).
 * Returns 1 when the sender was asleep: ring its doorbell. */
int shm_cma_ack(shm_ring *r, int refused);
/* The share of one single copy, in chunks of SHM_SHARE_CHUNK bytes: large
 * enough that claiming one costs nothing beside its copy, small enough
 * that the side that joins late still takes half of a 1 MiB payload. */
#define SHM_SHARE_CHUNK (128u << 10)
/* Receiver, before its first chunk of the single copy it is reading:
 * offer dst (len bytes) to the sender. */
void shm_share_offer(shm_ring *r, const shm_cma_desc *dst, uint64_t len);
/* Sender, waiting for its single copy's acknowledgement: 1 with *dst and
 * *len when the receiver offers to share it and chunks are left. */
int shm_share_offered(const shm_ring *r, shm_cma_desc *dst, uint64_t *len);
/* Either side: claim the next chunk of a payload of len; its bytes (0:
 * none left) and *off. */
uint64_t shm_share_claim(shm_ring *r, uint64_t len, uint64_t *off);
/* Sender: n more bytes copied. Returns 1 when the receiver was asleep:
 * ring its doorbell. */
int shm_share_done(shm_ring *r, uint64_t n);
/* Receiver: the bytes the sender has copied. */
uint64_t shm_share_copied(const shm_ring *r);
/* Receiver about to block on its doorbell until the sender has copied
 * want bytes: 1 when it may (its flag is up), 0 when they are in. */
int shm_share_sleep(shm_ring *r, uint64_t want);
/* Receiver: the offer is over (every chunk copied). */
void shm_share_end(shm_ring *r);
/* Receiver: read n bytes at addr in process pid into dst. Returns the
 * bytes read (maybe fewer), or -errno. */
long shm_cma_read(int pid, void *dst, uint64_t addr, size_t n);

#endif
