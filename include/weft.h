/*
 * weft.h — the one public header of weft, a distributed-training system in C.
 *
 * Conventions (as in uv.h and sqlite3.h):
 *   - every function that can fail returns int: 0 on success, a negative
 *     WEFT_E* code on failure; weft_strerror() names the code and
 *     weft_comm_error() gives the communicator's last message, which names
 *     the peer, the operation and the cause;
 *   - no global state: everything hangs off a handle;
 *   - counts are in elements of the given dtype, never bytes.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE, of the simulator's reports */

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden: what this header declares
 * is all that libweft.so exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_STRING "0.1.0"

/* ---- errors ------------------------------------------------------------ */

enum {
    WEFT_OK = 0,
    WEFT_EINVAL = -1,     /* bad argument: NULL pointer, bad dtype/op/root, overflow */
    WEFT_ENOMEM = -2,     /* allocation failed */
    WEFT_ESYS = -3,       /* a system call failed (errno in the message) */
    WEFT_ETIMEDOUT = -4,  /* no progress for WEFT_TIMEOUT s; the message names the
                             operation, its number and the ranks not heard from */
    WEFT_EPEER = -5,      /* a rank died or left: the message names the dead rank
                             ("rank 2 died ..."), also on ranks that learned of it
                             from another rank ("[reported by rank 3; ...]") */
    WEFT_EPROTO = -6,     /* malformed frame or store message on the wire */
    WEFT_EMISMATCH = -7,  /* a peer is in a different collective, count, dtype,
                             op, root or algorithm; the message shows both sides */
    WEFT_ECONFIG = -8,    /* missing or contradictory configuration */
    WEFT_EABORTED = -9,   /* the communicator was aborted */
    WEFT_ENOTSUP = -10,   /* operation/algorithm not supported here */
    WEFT_EAUTH = -11,     /* peer failed to prove the job secret (WEFT_JOB_SECRET) */
    WEFT_EIO = -12        /* file I/O failed or a file is malformed */
};

const char *weft_strerror(int err);
const char *weft_version(void);

/* ---- data types and reduction operators --------------------------------- */

typedef enum {
    WEFT_F32 = 0,
    WEFT_F64,
    WEFT_F16,
    WEFT_BF16,
    WEFT_I8,
    WEFT_U8,
    WEFT_I32,
    WEFT_I64,
    WEFT_DTYPE_COUNT
} weft_dtype;

/* Integer WEFT_AVG is the wrapped sum divided by the rank count, truncated
 * toward zero; f16/bf16 are widened to f32 for every reduction step and
 * rounded (nearest-even) once per step. */
typedef enum {
    WEFT_SUM = 0,
    WEFT_PROD,
    WEFT_MIN,
    WEFT_MAX,
    WEFT_AVG,
    WEFT_OP_COUNT
} weft_op;

size_t weft_dtype_size(weft_dtype t);       /* 0 for an unknown dtype */
const char *weft_dtype_name(weft_dtype t);  /* "f32", ... ; NULL if unknown */
const char *weft_op_name(weft_op op);       /* "sum", ... ; NULL if unknown */
int weft_dtype_parse(const char *s, weft_dtype *out);
int weft_op_parse(const char *s, weft_op *out);

/* ---- algorithms ---------------------------------------------------------- */

typedef enum {
    WEFT_ALGO_AUTO = 0, /* chosen per call by the cost model */
    WEFT_ALGO_NAIVE,    /* everyone sends everything: the baseline */
    WEFT_ALGO_RING,     /* chunked, pipelined ring */
    WEFT_ALGO_TREE,     /* double binary tree */
    WEFT_ALGO_RD,       /* recursive doubling */
    WEFT_ALGO_RABENSEIFNER,
    WEFT_ALGO_HIER,
    WEFT_ALGO_DIRECT,   /* one host: each rank reduces its slice straight out
                           of the others' buffers (single copy), then reads
                           the others' slices */
    WEFT_ALGO_FLAT,     /* one host, small messages: every rank posts its
                           data to a shared board and reduces all of it */
    WEFT_ALGO_COUNT
} weft_algo;

const char *weft_algo_name(weft_algo a);
int weft_algo_parse(const char *s, weft_algo *out);

/* ---- communicators -------------------------------------------------------- */

typedef struct weft_comm weft_comm;

typedef struct {
    int rank;                /* 0 .. world_size-1 */
    int world_size;
    int local_rank;          /* -1: unknown */
    const char *master_addr; /* rendezvous store host; NULL: 127.0.0.1 */
    int master_port;         /* rendezvous store port */
    int host_store;          /* 1: this rank serves the store (default: rank 0
                                unless WEFT_STORE_EXTERNAL=1) ; -1: default */
    const char *ifname;      /* interface for data sockets; NULL: the one that
                                reaches the store */
    weft_algo algo;          /* default algorithm for every collective */
    double timeout_s;        /* collectives; <= 0: 300 s */
    double connect_timeout_s;/* rendezvous; <= 0: 60 s */
    const char *job_secret;  /* NULL: WEFT_JOB_SECRET or none */
} weft_config;

/* Fill cfg with defaults, then overlay the environment: WEFT_RANK /
 * WEFT_WORLD_SIZE / WEFT_LOCAL_RANK / WEFT_MASTER_ADDR / WEFT_MASTER_PORT, and
 * equally torchrun's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
 * MASTER_PORT, Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}, Slurm's
 * SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID and PMI_RANK / PMI_SIZE;
 * WEFT_ALGO, WEFT_TIMEOUT, WEFT_SOCKET_IFNAME. The strings point into the
 * environment. Returns WEFT_ECONFIG when rank or size cannot be found. */
int weft_config_from_env(weft_config *cfg);
void weft_config_default(weft_config *cfg);

/* Join the job cfg describes (rendezvous at its store). On failure *out
 * is NULL, and since no communicator is left to ask weft_comm_error, the
 * reason is logged at ERROR, which every WEFT_DEBUG level shows
 * ("weft[RANK] error: ..." on stderr). */
int weft_comm_init(weft_comm **out, const weft_config *cfg);
int weft_comm_init_env(weft_comm **out);
/* Joining through a key-value store the job already has (torch's c10d
 * Store, a scheduler's), so no address, port or variable of weft's own is
 * needed: cfg gives rank, world size, timeouts and algorithm (master_addr,
 * when set, is the address rank 0 announces; else ifname's, else its
 * first non-loopback IPv4 address). Rank 0 serves weft's store on a port
 * the kernel picks and sets key "weft/store" to its address and a fresh
 * job secret (unless cfg or WEFT_JOB_SECRET gives one); the others get
 * it, waiting up to connect_timeout_s. The callbacks return 0 or a
 * negative code; get's *val is malloc'd (weft frees it). WEFT_* tuning
 * variables apply as for weft_comm_init. */
typedef struct {
    void *arg;
    int (*set)(void *arg, const char *key, const void *val, size_t len);
    int (*get)(void *arg, const char *key, void **val, size_t *len, double timeout_s);
} weft_kv;
int weft_comm_init_kv(weft_comm **out, const weft_config *cfg, const weft_kv *kv);
/* Collective over c: ranks with the same color form a new communicator,
 * ordered by (key, old rank). color < 0: this rank joins none (*out = NULL). */
int weft_comm_split(weft_comm *c, int color, int key, weft_comm **out);
int weft_comm_rank(const weft_comm *c);
int weft_comm_size(const weft_comm *c);
int weft_comm_local_rank(const weft_comm *c);
/* Hosts in the communicator, and the host index (0 .. nhosts-1, in order of
 * first appearance) of rank r. Ranks are on the same host when their host
 * names (or WEFT_HOST_ID, when set) are equal. */
int weft_comm_host_count(const weft_comm *c);
int weft_comm_host_of(const weft_comm *c, int r);
/* Destroy: every rank calls it; c may be NULL. Children of a split may be
 * destroyed in any order; the world communicator that serves the store must
 * be destroyed last. Destroying c twice returns WEFT_EINVAL as long as its
 * memory has not been reused (not guaranteed: do not rely on it). */
int weft_comm_destroy(weft_comm *c);
/* Callable from any thread: every operation in progress or issued later on
 * c returns WEFT_EABORTED. Then destroy c. */
int weft_comm_abort(weft_comm *c);
/* Writes c's flight recorder to file descriptor fd: the last 64 operations
 * with their state (queued, in progress, done, failed), and for one in
 * progress the peers it waits on. Takes no lock and allocates nothing, so a
 * SIGUSR1 handler may call it (the library installs no signal handlers;
 * weftrun forwards SIGUSR1 to every rank). Returns the number of
 * operations written, or WEFT_EINVAL. The recorder is also dumped to
 * stderr when an operation fails (last 4 at the default WEFT_DEBUG=WARN,
 * all at INFO). */
int weft_comm_dump(const weft_comm *c, int fd);
/* Last error message on this communicator ("" when none). */
const char *weft_comm_error(const weft_comm *c);
int weft_comm_set_algo(weft_comm *c, weft_algo a);
weft_algo weft_comm_algo(const weft_comm *c);

/* ---- elastic membership (src/coll/shrink.c) ------------------------------
 * After a rank died (an operation on c returned WEFT_EPEER or
 * WEFT_ETIMEDOUT), every survivor calls weft_comm_shrink(c, &out): they
 * agree on the same set of live ranks, also when another rank dies during
 * the agreement, and each gets *out, a communicator of just them, ranked
 * densely in their old order. A rank that stays away longer than the
 * communicator's timeout (frozen, or its host lost) is counted out; if it
 * comes later it gets WEFT_EPEER. Bounded by the timeout per rank lost.
 * The agreement runs in the rendezvous store, so the store must outlive
 * the dead: with the store in rank 0 (the default), shrinking works while
 * rank 0 lives (its store moves to *out); an elastic job serves the store
 * outside the ranks (weftrun --elastic; weft-store and
 * WEFT_STORE_EXTERNAL=1). Afterwards c can only be destroyed (no barrier:
 * its dead cannot take part). A communicator is shrunk once; shrink *out
 * for a later failure. A rank that dies just after the agreement is a
 * failure of *out, reported by its first operation. */
int weft_comm_shrink(weft_comm *c, weft_comm **out);
/* Growing: a new process (started by hand with the job's store address
 * and secret, by weftrun --elastic, or by a scheduler's relaunch) calls
 * weft_comm_join(cfg, &out) with cfg as for weft_comm_init (rank and world
 * size are ignored): it waits, up to cfg's connect timeout, until the
 * members admit it. The members call weft_comm_grow(c, want, &out)
 * together at a step boundary: every process waiting to join is admitted
 * (first waiting, up to the connect timeout, until want of them are), and
 * *out is the larger communicator: members keep their ranks, joiners come
 * after them in the order they asked. Nobody waiting (want 0): returns 0
 * with *out NULL. c stays usable; destroy it before *out, which takes over
 * the store a member serves. One communicator per job grows (the keys are
 * the job's store's). */
int weft_comm_grow(weft_comm *c, int want, weft_comm **out);
int weft_comm_join(const weft_config *cfg, weft_comm **out);

/* ---- collectives ------------------------------------------------------------
 * Errors (every call): WEFT_EINVAL for a NULL communicator (or a destroyed
 * one, while its memory has not been reused: not guaranteed), an
 * unknown kind/dtype/op/algorithm, a root or peer out of range, a NULL
 * buffer with count > 0, or count * size overflowing; these leave the
 * communicator usable. WEFT_EPEER, WEFT_ETIMEDOUT, WEFT_EMISMATCH,
 * WEFT_EPROTO, WEFT_EAUTH and WEFT_EABORTED leave it unusable (later calls
 * return the same code): destroy it. When one rank fails, every other rank
 * blocked on the communicator returns within about a second with the first
 * failing rank's message (docs/RELIABILITY.md).
 * All blocking. In place when send == recv (for gather/allgather in place
 * means send == recv + rank*count elements, as in MPI_IN_PLACE; the same
 * holds when send == recv exactly). count is per rank for gather, scatter,
 * allgather, reduce_scatter and alltoall. */

/* Tag 0 of weft_send_tag / weft_recv_tag (point-to-point, below). */
int weft_send(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer);
int weft_recv(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer);
int weft_barrier(weft_comm *c);
int weft_broadcast(weft_comm *c, void *buf, size_t count, weft_dtype t, int root);
/* recv is only written on root; it may be NULL elsewhere. */
int weft_reduce(weft_comm *c, const void *send, void *recv, size_t count,
                weft_dtype t, weft_op op, int root);
int weft_allreduce(weft_comm *c, const void *send, void *recv, size_t count,
                   weft_dtype t, weft_op op);
/* recv holds size*count elements on root; may be NULL elsewhere. */
int weft_gather(weft_comm *c, const void *send, void *recv, size_t count,
                weft_dtype t, int root);
/* send holds size*count elements on root; may be NULL elsewhere. */
int weft_scatter(weft_comm *c, const void *send, void *recv, size_t count,
                 weft_dtype t, int root);
int weft_allgather(weft_comm *c, const void *send, void *recv, size_t count,
                   weft_dtype t);
/* send holds size*count elements; recv gets this rank's reduced block. */
int weft_reduce_scatter(weft_comm *c, const void *send, void *recv, size_t count,
                        weft_dtype t, weft_op op);
int weft_alltoall(weft_comm *c, const void *send, void *recv, size_t count,
                  weft_dtype t);
/* Unequal blocks (MPI_Alltoallv): this rank sends send_counts[j] elements
 * from send + send_displs[j] to rank j and receives recv_counts[i]
 * elements from rank i at recv + recv_displs[i] (counts and displacements
 * in elements, arrays of the communicator's size). recv_counts[i] must
 * equal rank i's send_counts[this rank]; send and recv must differ. On
 * one host, where every rank's blocks for the others lie in one region
 * of weft_mem_alloc(c, ...), each rank copies its blocks once, straight
 * out of the senders' pages. */
int weft_alltoallv(weft_comm *c, const void *send, const size_t *send_counts,
                   const size_t *send_displs, void *recv, const size_t *recv_counts,
                   const size_t *recv_displs, weft_dtype t);

/* Same, with an explicit algorithm for this call (WEFT_ALGO_AUTO: the
 * communicator's default). */
typedef enum {
    WEFT_COLL_SEND = 1, WEFT_COLL_RECV, WEFT_COLL_BARRIER, WEFT_COLL_BROADCAST,
    WEFT_COLL_REDUCE, WEFT_COLL_ALLREDUCE, WEFT_COLL_GATHER, WEFT_COLL_SCATTER,
    WEFT_COLL_ALLGATHER, WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_ALLTOALL,
    WEFT_COLL_KIND_COUNT
} weft_coll_kind;
const char *weft_coll_name(weft_coll_kind k);

typedef struct {
    weft_coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    weft_dtype dtype;
    weft_op op;
    int root;       /* root, or peer for send/recv */
    weft_algo algo;
} weft_coll_args;
int weft_collective(weft_comm *c, const weft_coll_args *a);

/* ---- non-blocking collectives ----------------------------------------------
 * Each returns at once with a request; the operation runs in the background
 * in issue order (like a stream: collectives on one communicator never
 * overtake each other, and a blocking collective waits for those issued
 * before it; point-to-point messages, below, are not in that stream).
 * Buffers must stay untouched until the request completes. A
 * communicator is used by one application thread at a time; several
 * communicators progress at the same time, from one thread or several. */
typedef struct weft_request weft_request;

int weft_icollective(weft_comm *c, const weft_coll_args *a, weft_request **req);
int weft_isend(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer,
               weft_request **req);
int weft_irecv(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer,
               weft_request **req);
int weft_ibroadcast(weft_comm *c, void *buf, size_t count, weft_dtype t, int root,
                    weft_request **req);
int weft_ireduce(weft_comm *c, const void *send, void *recv, size_t count, weft_dtype t,
                 weft_op op, int root, weft_request **req);
int weft_iallreduce(weft_comm *c, const void *send, void *recv, size_t count,
                    weft_dtype t, weft_op op, weft_request **req);
int weft_iallgather(weft_comm *c, const void *send, void *recv, size_t count,
                    weft_dtype t, weft_request **req);
int weft_ireduce_scatter(weft_comm *c, const void *send, void *recv, size_t count,
                         weft_dtype t, weft_op op, weft_request **req);
int weft_ialltoall(weft_comm *c, const void *send, void *recv, size_t count,
                   weft_dtype t, weft_request **req);
/* The arrays are copied: only the buffers must outlive the request. */
int weft_ialltoallv(weft_comm *c, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv, const size_t *recv_counts,
                    const size_t *recv_displs, weft_dtype t, weft_request **req);
/* ---- point-to-point ----------------------------------------------------------
 * Messages between two ranks of a communicator, as in MPI and
 * torch.distributed. Each message progresses on its own, independent of
 * the others and of the collective stream: any number may be outstanding,
 * posted in any order, to any peers, and each completes as soon as its
 * match is posted on the other side (so irecv then isend on both ranks of
 * a pair completes, and a collective never waits for a message or a
 * message for a collective). A receive from peer p with tag t takes the
 * oldest message from p with tag t that no earlier receive took (messages
 * of one (peer, tag) never overtake each other). A message and its receive
 * must agree on dtype and count, else the receive fails with
 * WEFT_EMISMATCH naming both (the communicator stays usable). A message
 * that arrives before its receive is kept in memory of its own until a
 * receive takes it. Tags are 0 .. WEFT_TAG_MAX; the calls without _tag
 * use tag 0. A send completes when its bytes have left this process's
 * buffer (the receiver may not have them yet); a receive when the bytes
 * are in buf. A dead peer, a stream that ends mid-message, a timeout with
 * nothing moving or an abort fail the message with WEFT_EPEER,
 * WEFT_ETIMEDOUT or WEFT_EABORTED, name the peer in weft_comm_error, and
 * leave the communicator unusable (the other ranks learn, as for a failed
 * collective). Messages travel over connections of their own (TCP,
 * TLS with WEFT_TLS=1), made on first use. */
#define WEFT_TAG_MAX 0x7fffffff
int weft_send_tag(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer,
                  int tag);
int weft_recv_tag(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer, int tag);
int weft_isend_tag(weft_comm *c, const void *buf, size_t count, weft_dtype t, int peer,
                   int tag, weft_request **req);
int weft_irecv_tag(weft_comm *c, void *buf, size_t count, weft_dtype t, int peer, int tag,
                   weft_request **req);
/* A group, as NCCL's ncclGroupStart/End: between the two, weft_send(_tag)
 * and weft_recv(_tag) post their message and return at once;
 * weft_group_end waits for all of them and returns the first error (a
 * pipeline stage sends an activation and receives a gradient as one
 * step). Groups nest; only the outermost end waits. Collectives inside a
 * group run as usual. */
int weft_group_start(weft_comm *c);
int weft_group_end(weft_comm *c);

/* Memory for messages, as MPI_Alloc_mem or MPI_Win_allocate_shared: a
 * send whose buffer lies wholly in one region from weft_mem_alloc(c, ...)
 * to a rank of c on the same host (shared memory on, WEFT_P2P_SHM) is
 * copied once, by the receiver straight out of the sender's pages. From
 * 256 KiB a region is a memfd mapped shared at a 2 MiB boundary, which the
 * receiver maps once (pidfd_getfd, the permission process_vm_readv needs)
 * and keeps mapped. Where the receive buffer too lies in such a region
 * (the receiver's own weft_mem_alloc), messages from WEFT_P2P_SHARE
 * (1 MiB) on are copied by both: the sender, while it waits for the
 * acknowledgement, maps the receiver's region writable the same way and
 * copies chunks of the payload as the receiver does. Other buffers take two copies through a ring, or one
 * kernel copy with WEFT_SHM_CMA=2, each well under memcpy's rate
 * (docs/BENCHMARKS.md, "Small messages"). Smaller requests are plain
 * memory. The region belongs to c: sends on other communicators take
 * their usual way, and what is not freed by weft_comm_destroy(c) is
 * unmapped then. A region stays in use until the sends from it completed,
 * as any send buffer. weft_mem_free(c, NULL) does nothing; another
 * pointer not from weft_mem_alloc(c, ...) is WEFT_EINVAL. */
int weft_mem_alloc(weft_comm *c, size_t bytes, void **out);
int weft_mem_free(weft_comm *c, void *p);

/* Block until req completes; returns the operation's result and releases
 * req. Waiting again (or weft_test) on a released request returns
 * WEFT_EINVAL until 64 more requests of its communicator were released;
 * after that, or after weft_comm_destroy, the pointer is dangling. */
int weft_wait(weft_request *req);
/* *done = 1 (and req freed, the operation's result returned) if complete;
 * otherwise *done = 0 and 0 is returned. */
int weft_test(weft_request *req, int *done);
/* Waits for all n; returns the first error, frees every request. */
int weft_wait_all(weft_request **reqs, int n);

/* ---- compressed gradients ----------------------------------------------------
 * For gradients crossing slow links (docs/WAN.md). f32 data only, ops
 * WEFT_SUM and WEFT_AVG only (else WEFT_EINVAL); every rank of the
 * communicator calls, with the same arguments.
 *
 * Codecs: what one message carries for n floats.
 *   fp32  4n bytes, exact            fp16, bf16  2n bytes, rounded to nearest even
 *   int8  n bytes + one f32 scale per 256 elements (absmax / 127): the error
 *         of each element is at most half its block's scale
 *   int4  n/2 bytes + the same scales (absmax / 7) */
typedef enum {
    WEFT_CODEC_FP32 = 0,
    WEFT_CODEC_FP16,
    WEFT_CODEC_BF16,
    WEFT_CODEC_INT8,
    WEFT_CODEC_INT4,
    WEFT_CODEC_COUNT
} weft_codec;
const char *weft_codec_name(weft_codec k);  /* "fp16", ...; NULL if unknown */
int weft_codec_parse(const char *s, weft_codec *out);
/* Bytes of n floats in codec k; 0 for an unknown codec. */
size_t weft_codec_bytes(weft_codec k, size_t n);
/* out holds weft_codec_bytes(k, n); decoding needs the same n. */
int weft_codec_encode(weft_codec k, const float *x, size_t n, void *out);
int weft_codec_decode(weft_codec k, const void *in, size_t n, float *x);

/* Ring all-reduce whose every message is in codec k: each partial sum is
 * decoded, added to this rank's part in f32 and encoded again before the
 * next hop; the reduced chunks travel the all-gather encoded once, and
 * every rank (the chunk's owner too) decodes the same bytes, so the result
 * is bit-identical on every rank. Where every rank is a cluster of its own
 * (3 to 8 of them) it goes direct instead: each rank sends each chunk's
 * owner its part encoded, the owner sums them in f32 and sends the sum
 * encoded once to all, two WAN crossings instead of 2(p - 1), the same
 * bytes, the same bits everywhere. Its messages are point-to-point with tag
 * WEFT_TAG_MAX (leave that tag to it). *bytes (may be NULL) grows by the
 * bytes this rank sent. */
int weft_allreduce_codec(weft_comm *c, const float *send, float *recv, size_t count,
                         weft_op op, weft_codec k, uint64_t *bytes);

/* A gradient compressor: the state that error feedback and warm starts
 * keep from call to call, for one flat buffer of count floats.
 *   "fp32", "fp16", "bf16", "int8", "int4"  weft_allreduce_codec
 *   "topk:K" (K elements, or a fraction of count when K < 1): each rank
 *       adds its error to the gradient, sends its K largest magnitudes as
 *       (index, value) pairs over a ring all-gather and keeps the rest as
 *       error; every rank adds the pairs up in rank order
 *   "powersgd:R": each matrix declared with weft_compressor_add_matrix for
 *       which (rows + cols) R <= rows cols / 2 is sent as rank-R factors
 *       P = M Q and Q = M^T P (two ring all-reduces, P orthogonalised, Q
 *       kept as the next call's start, the remainder kept as error); the
 *       other elements ride the first all-reduce uncompressed. */
typedef enum {
    WEFT_COMPRESS_CODEC = 0,
    WEFT_COMPRESS_TOPK,
    WEFT_COMPRESS_POWERSGD
} weft_compress_kind;
typedef struct {
    weft_compress_kind kind;
    weft_codec codec;  /* WEFT_COMPRESS_CODEC */
    size_t k;          /* top-k: elements sent per rank; 0: ratio * count */
    double ratio;
    int rank;          /* PowerSGD */
} weft_compress_spec;
int weft_compress_parse(const char *s, weft_compress_spec *out);
/* Writes the same syntax; returns the length as snprintf does. */
int weft_compress_format(const weft_compress_spec *s, char *buf, size_t len);

typedef struct weft_compressor weft_compressor;
int weft_compressor_create(weft_compressor **out, weft_comm *c, const weft_compress_spec *s,
                           size_t count);
/* A rows x cols row-major matrix at buf + offset (PowerSGD; the others
 * ignore it). Matrices may not overlap; declare them before the first
 * all-reduce, in the same order on every rank. */
int weft_compressor_add_matrix(weft_compressor *z, size_t offset, int rows, int cols);
/* In place: buf (count floats, this rank's gradient) becomes the sum or
 * average of every rank's compressed gradient, the same bits on every rank. */
int weft_compressor_allreduce(weft_compressor *z, float *buf, weft_op op);
/* Bytes this rank has sent, and what an f32 ring all-reduce of the same
 * calls would have sent. */
void weft_compressor_bytes(const weft_compressor *z, uint64_t *sent, uint64_t *raw);
void weft_compressor_destroy(weft_compressor *z);

/* ---- clusters and wide-area links ---------------------------------------------
 * A rank's cluster is WEFT_CLUSTER (0, 1, ...; unset: the whole job is
 * cluster 0). Ranks of different clusters are never on one host (they
 * never share memory, whatever WEFT_HOST_ID says, and weft_comm_host_count
 * counts them apart). A link is of class shm (same host, shared memory),
 * lan (same cluster) or wan (another cluster). A split's children keep
 * their ranks' clusters.
 *
 * WEFT_WAN=delay=50ms,rate=100mbit is for tests and benchmarks only: every
 * TCP connection of a wan-class link then delivers its bytes no sooner than
 * the one-way delay after they were written and no faster than the rate
 * (docs/WAN.md). */
typedef enum { WEFT_LINK_SHM = 0, WEFT_LINK_LAN, WEFT_LINK_WAN, WEFT_LINK_COUNT } weft_link_class;
int weft_comm_cluster_count(const weft_comm *c);
int weft_comm_cluster_of(const weft_comm *c, int r);
/* The class of the link from this rank to peer (WEFT_LINK_SHM for itself). */
int weft_comm_link_class(const weft_comm *c, int peer);
/* Bytes this rank has sent over wan-class links (collectives and
 * point-to-point, on c and every communicator split from it), counted
 * while WEFT_WAN emulates them; 0 otherwise. */
int weft_comm_wan_bytes(const weft_comm *c, uint64_t *sent);
/* All-reduce over clusters with the least WAN traffic: a reduce-scatter
 * inside each cluster, the slices all-reduced across clusters by the ranks
 * that hold them (every rank a gateway for 1/L of the data, L ranks a
 * cluster; each sends 2(C-1)/C of its slice over the WAN, C clusters) in
 * codec k (weft_allreduce_codec), an all-gather inside. f32, WEFT_SUM or
 * WEFT_AVG; the same bits on every rank. create is collective (it splits
 * c twice) and needs every cluster to have as many ranks (else
 * WEFT_ENOTSUP); destroy is collective too, before c's. *bytes (may be
 * NULL) grows by what this rank sent across. */
typedef struct weft_cluster_comm weft_cluster_comm;
int weft_cluster_comm_create(weft_cluster_comm **out, weft_comm *c);
int weft_cluster_allreduce(weft_cluster_comm *h, const float *send, float *recv, size_t count,
                           weft_op op, weft_codec k, uint64_t *bytes);
void weft_cluster_comm_destroy(weft_cluster_comm *h);

/* ==== training engine (src/train) ======================================= */
/* (declarations of weft_model_*, weft_optim_*, weft_data_*, weft_ckpt_* go here) */
/* -- models -- */

/* A model owns one flat fp32 parameter buffer and one gradient buffer of the
 * same length, split into named tensors (weft_model_tensor_info); this is
 * what data parallelism all-reduces, ZeRO shards and checkpoints save as
 * ranges. Weights are stored as in torch.nn.Linear: [out, in], row-major. */
typedef struct weft_model weft_model;

typedef enum { WEFT_MODEL_MLP = 1, WEFT_MODEL_GPT = 2, WEFT_MODEL_LLAMA = 3 } weft_model_type;
typedef enum { WEFT_ACT_RELU = 0, WEFT_ACT_GELU = 1 } weft_activation;
typedef enum { WEFT_PREC_FP32 = 0, WEFT_PREC_BF16 = 1 } weft_precision;

#define WEFT_MLP_MAX_WIDTHS 9   /* input + up to 7 hidden + classes */

/* Plain 4-byte fields only (int32, and the two floats), so a checkpoint
 * can store it field by field. */
typedef struct {
    int32_t type;        /* weft_model_type */
    /* MLP: widths[0] inputs, widths[n_widths-1] classes; hidden layers use
     * `activation`. */
    int32_t n_widths;    /* 2 .. WEFT_MLP_MAX_WIDTHS */
    int32_t widths[WEFT_MLP_MAX_WIDTHS];
    int32_t activation;  /* weft_activation */
    /* GPT (pre-LayerNorm, GELU-tanh MLP of width 4*d_model, tied token
     * embedding / output projection, no dropout). */
    int32_t vocab;
    int32_t ctx;         /* longest sequence (positions) */
    int32_t n_layer;
    int32_t n_head;      /* divides d_model */
    int32_t d_model;
    /* Llama (as transformers' LlamaForCausalLM: RMSNorm, rotary positions,
     * grouped-query attention, SwiGLU MLP, no biases); vocab, ctx,
     * n_layer, n_head and d_model as above. */
    int32_t n_kv_head;   /* divides n_head; each serves n_head/n_kv_head */
    int32_t ffn;         /* the SwiGLU MLP's hidden width */
    int32_t tied;        /* 1: the output projection is the token embedding */
    float rope_theta;    /* rotary base, 10000 by default */
    float rms_eps;       /* RMSNorm's epsilon, 1e-5 by default */
    /* Llama mixture of experts (experts > 0): the MLP becomes `experts`
     * SwiGLU experts of width moe_ffn (0: ffn), each token through its
     * topk best by a linear router, plus `shared` experts every token goes
     * through; docs/TRAINING.md has the conventions. */
    int32_t experts;
    int32_t topk;
    int32_t moe_ffn;
    int32_t shared;
    int32_t router;      /* 0 softmax (top k renormalised), 1 sigmoid */
    int32_t moe_bias;    /* aux-loss-free balancing bias (selection only): 1 stepped by
                          * sign (DeepSeek-V3's), 2 by the load's deviation */
    float capacity;      /* tokens per expert ceil(N*topk/experts*capacity); 0: no drop */
    float aux_loss;      /* load-balancing loss weight */
    float z_loss;        /* router z-loss weight */
} weft_model_config;

/* "mlp:784-512-512-10", "mlp:784-128-10:gelu",
 * "gpt:vocab=256,ctx=64,layers=2,heads=4,dim=64",
 * "llama:vocab=256,ctx=64,layers=2,heads=4,kv_heads=2,dim=64,ffn=172"
 * (optional theta=10000,eps=1e-5,tied=0) (keys in any order). */
int weft_model_config_parse(const char *s, weft_model_config *cfg);
/* Writes the same syntax; returns the length as snprintf does. */
int weft_model_config_format(const weft_model_config *cfg, char *buf, size_t len);
/* WEFT_EINVAL when a field is out of range. */
int weft_model_config_check(const weft_model_config *cfg);

/* A mixture-of-experts Llama's counters for the last step (ended by the
 * backward that announces), over the blocks this rank holds. The loads
 * (load_max, load_mean) are those the balancing bias stepped from: under a
 * weft_run in full sync with a bias, the step's loads summed over the
 * replicas and its micro-batches (one process's over the whole batch);
 * otherwise this rank's own, over its forwards since the step before.
 * routed and dropped are this rank's own. */
typedef struct {
    int64_t routed;         /* token-expert pairs picked */
    int64_t dropped;        /* of them past an expert's capacity */
    double load_max;        /* tokens per expert in the least balanced block: */
    double load_mean;       /*   its busiest expert's and its mean */
    double aux, z;          /* the last forward's balancing losses, summed over blocks
                               (before their weights) */
} weft_moe_stats;
/* WEFT_EINVAL for a model without experts. */
int weft_model_moe_stats(const weft_model *m, weft_moe_stats *out);

/* Parameters are initialised from seed (same seed: same weights, on any
 * machine and world size): MLP as torch.nn.Linear (uniform +-1/sqrt(in)),
 * GPT as GPT-2 (normal 0.02, residual projections 0.02/sqrt(2*n_layer),
 * zero biases, unit LayerNorm gains). Gradients start at zero. Threads:
 * WEFT_THREADS, else cores / ranks on this host (WEFT_LOCAL_SIZE, else
 * LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), at
 * least 1. */
int weft_model_create(weft_model **out, const weft_model_config *cfg, uint64_t seed);
void weft_model_destroy(weft_model *m);
const weft_model_config *weft_model_config_of(const weft_model *m);
int weft_model_init_params(weft_model *m, uint64_t seed);

float *weft_model_params(weft_model *m, size_t *n);
float *weft_model_grads(weft_model *m, size_t *n);

typedef struct {
    const char *name;    /* "layers.0.weight", "blocks.1.attn.qkv.weight", ... */
    size_t offset;       /* first element in the flat buffers */
    size_t numel;
    int ndim;            /* 1 or 2 */
    int shape[4];
    size_t whole_offset; /* its offset in the whole model's buffers (a stage's
                            tensors lie elsewhere in its own) */
    size_t whole_numel;  /* the whole tensor's elements (a tensor-parallel part
                            holds fewer: weft_model_tensor_whole_elem maps them) */
    int block;           /* the model's block it belongs to (weft_model_block_count) */
} weft_tensor_info;
int weft_model_tensor_count(const weft_model *m);
int weft_model_tensor_info(const weft_model *m, int i, weft_tensor_info *out);
/* Index of the tensor called name, or WEFT_EINVAL. */
int weft_model_tensor_find(const weft_model *m, const char *name);

/* WEFT_PREC_BF16: matmul operands (activations, weights, incoming
 * gradients) in bf16 with fp32 accumulation; master weights, gradients and
 * optimiser state stay fp32. The default is WEFT_PREC_FP32. */
int weft_model_set_precision(weft_model *m, weft_precision p);
weft_precision weft_model_precision(const weft_model *m);
/* n <= 0: the default above. OpenBLAS keeps one thread count per process:
 * the last model to set it wins. */
int weft_model_set_threads(weft_model *m, int n);
int weft_model_threads(const weft_model *m);
/* Matmul backend: "openblas" (default when built with it) or "portable";
 * WEFT_MATMUL in the environment picks it at create. WEFT_ENOTSUP when
 * the library was built without OpenBLAS. */
int weft_model_set_matmul(weft_model *m, const char *name);
const char *weft_model_matmul_name(const weft_model *m);

/* Forward pass. MLP: inputs is float[batch * widths[0]], seq is ignored;
 * GPT: inputs is int32 tokens[batch * seq], 1 <= seq <= ctx. targets:
 * int32[batch] (MLP) or int32[batch * seq] (GPT, next tokens); a target of
 * -1 is ignored; NULL computes logits only. *loss (may be NULL) gets the
 * mean cross-entropy over the counted targets. Activations stay in the
 * model for backward until the next forward. */
int weft_model_forward(weft_model *m, const void *inputs, const int32_t *targets,
                       int batch, int seq, float *loss);
/* Adds d(mean loss)/d(params) of the last forward (which needs targets) to
 * the gradient buffer: call weft_model_zero_grad first, or not, to
 * accumulate micro-batches (then scale the gradients by 1/k). Once per
 * forward: it overwrites the probabilities. */
int weft_model_backward(weft_model *m);
int weft_model_zero_grad(weft_model *m);
/* Called from inside weft_model_backward, on its thread, each time the
 * gradients of tensors [first, first + count) are final for this pass
 * (a contiguous range of the flat buffer; ranges arrive from the end of
 * the table towards its start, each tensor once), so that data
 * parallelism can start reducing them while backward goes on. NULL
 * removes the hook. */
typedef void (*weft_grad_ready_fn)(void *arg, int first, int count);
int weft_model_set_grad_hook(weft_model *m, weft_grad_ready_fn fn, void *arg);
/* Called from inside forward and backward (and their recomputation) just
 * before a block reads the parameters of tensors [first, first + count)
 * (need 1) and just after it no longer does (need 0), so that ZeRO-3 can
 * gather a block's parameters and release them block by block. Every need
 * has its done; a non-zero return fails the pass with that code. NULL
 * removes the hook. */
typedef int (*weft_param_need_fn)(void *arg, int first, int count, int need);
int weft_model_set_param_hook(weft_model *m, weft_param_need_fn fn, void *arg);
/* Activation recomputation: a GPT's forward keeps only each transformer
 * block's input and its backward recomputes the block's activations just
 * before using them, so activations take one block's worth plus one
 * residual row set per block (at one more forward's compute). MLP: no
 * effect. */
int weft_model_set_recompute(weft_model *m, int on);
/* Logits of the last forward: rows = batch (MLP) or batch*seq (GPT),
 * cols = classes or vocab. Valid until the next forward. */
const float *weft_model_logits(const weft_model *m, int *rows, int *cols);
/* Number of rows of the last forward whose argmax equals targets[row]
 * (rows with target -1 are not counted). */
/* (A tensor-parallel GPT compares across its vocabulary parts: collective
 * over its group.) */
int weft_model_count_correct(weft_model *m, const int32_t *targets);

/* -- pipeline stages --
 * A model is a sequence of blocks: an MLP's are its linear layers (each
 * with the activation after it); a GPT's are the embedding, each
 * transformer block, then the final LayerNorm with the output projection.
 * A stage holds chunks, contiguous ranges of blocks (more than one for the
 * interleaved schedule), and allocates only their parameters, gradients
 * and activations; its tensors keep the whole model's names and the same
 * initial values. GPT's output projection is the token embedding: a stage
 * with the last block but not the first keeps a copy of it (its tensor
 * weft_model_tied_tensor, first in the buffers) whose gradient the caller
 * sums with the first stage's, as Megatron does.
 *
 * Each chunk keeps activations in slots, one per micro-batch in flight,
 * made on first use and kept. A chunk's forward takes the model's inputs
 * (first chunk) or the previous chunk's output, float[rows * width]
 * (weft_model_chunk_io); its backward takes the gradient of its output
 * (not for the last chunk, which starts from the loss, scaled by weight)
 * and leaves the gradient of its input (not for the first chunk). With
 * WEFT_STAGE_SPLIT_BACKWARD a backward may run in two parts, input then
 * weight (zero-bubble schedules); parameter gradients add up across
 * micro-batches. announce = 0 keeps the gradient hook quiet (a micro-batch
 * that is not the step's last for this chunk). weft_model_create is the
 * stage of all blocks. */
int weft_model_block_count(const weft_model_config *cfg);
typedef struct {
    int32_t first, count;
} weft_block_range;
#define WEFT_STAGE_MAX_CHUNKS 8
#define WEFT_STAGE_SPLIT_BACKWARD 1u
/* Sequence parallelism (tensor-parallel GPT): the residual stream, the
 * LayerNorms and the chunks' inputs and outputs hold rows/tp rows per rank
 * (rows = batch * seq must divide); all-gathers before and reduce-scatters
 * after the tensor-parallel layers replace the all-reduces, and the
 * LayerNorms' gradients are summed over the group at the backward that
 * announces (the step's last for the chunk). fp32 only. */
#define WEFT_STAGE_SEQUENCE_PARALLEL 2u
/* The parameters start at zero instead of the seed's random values: for a
 * model a checkpoint load is about to fill whole, where the initialisation
 * is most of a resume's time and all of it thrown away. */
#define WEFT_STAGE_NO_INIT 4u
typedef enum {
    WEFT_BACKWARD_ALL = 0,
    WEFT_BACKWARD_INPUT = 1,
    WEFT_BACKWARD_WEIGHT = 2
} weft_backward_part;
int weft_model_create_stage(weft_model **out, const weft_model_config *cfg, uint64_t seed,
                            const weft_block_range *chunks, int nchunks, unsigned flags);
/* The same, one tensor-parallel rank of tp_size (Megatron's layers): a
 * GPT's attention split by heads (tp divides the head count), its MLP's 4C
 * hidden width, its token embedding and output projection by vocabulary
 * (padded to a multiple of tp, the padding never counted in the loss) and
 * its cross-entropy computed on the parts (3 all-reduces of rows floats);
 * an MLP's layers in column/row-parallel pairs (a last odd layer
 * replicated). LayerNorms and the biases added after a row-parallel layer
 * are replicated. Forward and backward call collectives on tp (every rank
 * of the group together); tp NULL with tp_size and tp_rank builds the same
 * tensors without a group (a shell that holds or assembles them). */
int weft_model_create_tp(weft_model **out, const weft_model_config *cfg, uint64_t seed,
                         const weft_block_range *chunks, int nchunks, unsigned flags,
                         weft_comm *tp, int tp_size, int tp_rank);
/* Collectives the tensor-parallel layers have called, and their bytes. */
int weft_model_tp_stats(const weft_model *m, uint64_t *calls, uint64_t *bytes);
/* Element e of our tensor i is element *whole of the whole model's tensor
 * of that name; returns 1 (and no *whole) for vocabulary padding. */
int weft_model_tensor_whole_elem(const weft_model *m, int i, size_t e, size_t *whole);
int weft_model_chunk_count(const weft_model *m);
int weft_model_chunk_range(const weft_model *m, int chunk, weft_block_range *r);
/* Floats of a chunk's input (0 for the first chunk) and output (0 for the
 * last) for a micro-batch of batch x seq. */
int weft_model_chunk_io(const weft_model *m, int chunk, int batch, int seq, size_t *in_floats,
                        size_t *out_floats);
int weft_model_chunk_forward(weft_model *m, int chunk, int slot, const void *inputs,
                             const int32_t *targets, int batch, int seq, float *loss);
/* Valid until the slot's next forward. */
const float *weft_model_chunk_output(const weft_model *m, int chunk, int slot);
int weft_model_chunk_backward(weft_model *m, int chunk, int slot, const float *dout,
                              float weight, int part, int announce);
/* The fastest of reps - 1 forward, input-backward and weight-backward
 * passes of m's chunk 0 (best[0..2], seconds), after one to warm up; the
 * model must split its backward (what the planners time blocks by). */
int weft_model_time_chunk(weft_model *m, const void *x, const int32_t *y, const float *dout,
                          int B, int T, int reps, double best[3]);
/* Wall seconds m's attention passes (forward and backward) have taken,
 * summed since its matmul context was made (weft-enginebench --phases
 * tells it apart from the rest of each pass). */
int weft_model_attention_seconds(const weft_model *m, double *seconds);
const float *weft_model_chunk_input_grad(const weft_model *m, int chunk, int slot);
/* Bytes of the activations one micro-batch keeps at chunk 0, slot 0 (after a
 * forward; 0 before). */
size_t weft_model_activation_bytes(const weft_model *m);
/* Our tensor that is a tied copy or original of another stage's, or -1. */
int weft_model_tied_tensor(const weft_model *m);
/* Calls the gradient hook for our tensors [first, first + count). */
int weft_model_grads_ready(weft_model *m, int first, int count);

/* -- pipeline parallelism (src/train/pipe_exec.c) --
 * The ranks of c are the pipeline's stages: rank r runs its part of the
 * schedule ("gpipe", "1f1b", "interleaved:V", "zb") over m micro-batches
 * per step, and m (from weft_model_create_stage) holds the schedule's
 * chunks of rank r: global chunks r, r + p, ..., r + (V-1)p, V = 1 but
 * for the interleaved schedule, in that order. "zb" needs a stage made
 * with WEFT_STAGE_SPLIT_BACKWARD. A step takes the rank's whole batch
 * (every stage the same one: the first reads inputs, the last targets),
 * cut into m micro-batches whose losses weigh n_mb / batch; it adds the
 * gradients (the tied embedding's summed between the first and last
 * stage) and leaves the optimiser step to the caller. The gradient hook
 * hears each tensor once, at its chunk's last backward of the step, so
 * data-parallel reduction overlaps the rest of the pipeline. The first
 * step checks that every rank runs the same schedule (WEFT_EMISMATCH,
 * named by weft_pipe_error); a dead or mismatched peer fails the step on
 * every rank as the point-to-point calls do, never a hang. */
typedef struct weft_pipe weft_pipe;
typedef struct {
    float loss;          /* last stage: the step's loss; others 0 */
    int correct;         /* last stage: rows whose argmax was the target */
    double busy_s;       /* seconds of forward and backward inside the step */
    double step_s;       /* seconds from the step's first action to its last */
    int peak_stash;      /* most micro-batches held at once by one chunk */
    int sends;           /* messages this rank sent (activations, gradients) */
    double send_bytes;
} weft_pipe_stats;
int weft_pipe_create(weft_pipe **out, weft_comm *c, weft_model *m, const char *schedule,
                     int micro_batches);
void weft_pipe_destroy(weft_pipe *p);
int weft_pipe_step(weft_pipe *p, const void *inputs, const int32_t *targets, int batch, int seq,
                   weft_pipe_stats *st);
const char *weft_pipe_error(const weft_pipe *p);
/* Mean seconds per micro-batch so far of our chunk's forward, backward (or,
 * split, its input part) and weight part (0 unless split). */
int weft_pipe_chunk_seconds(const weft_pipe *p, int chunk, double *fwd, double *bwd,
                            double *bwd_weight);

/* -- 3D layouts (src/train/layout.c) --
 * tp x dp x pp job ranks: order lists the dimensions fastest first,
 * "tp-dp-pp" by default (Megatron's: a tensor group is neighbouring ranks,
 * data groups stride tp, pipelines stride tp*dp). dp = world / (tp*pp). */
typedef struct {
    int size[3];         /* tp, dp, pp */
    int order[3];        /* dimension indices (0 tp, 1 dp, 2 pp), fastest first */
} weft_layout;
int weft_layout_init(weft_layout *l, int world, int tp, int pp, const char *order);
void weft_layout_coords(const weft_layout *l, int rank, int *tp, int *dp, int *pp);
int weft_layout_rank(const weft_layout *l, int tp, int dp, int pp);
void weft_layout_format(const weft_layout *l, char *buf, size_t len);
/* This rank's tensor, data and pipeline groups (collective over world). */
int weft_layout_split(const weft_layout *l, weft_comm *world, weft_comm **tp, weft_comm **dp,
                      weft_comm **pp);

/* -- random numbers (xoshiro256**; plain state so checkpoints can save it) -- */
typedef struct { uint64_t s[4]; } weft_rng;
void weft_rng_seed(weft_rng *r, uint64_t seed);
uint64_t weft_rng_next(weft_rng *r);
float weft_rng_uniform(weft_rng *r);          /* [0, 1) */
float weft_rng_normal(weft_rng *r);           /* mean 0, sd 1 */
uint64_t weft_rng_below(weft_rng *r, uint64_t n); /* [0, n), n > 0 */

/* GPT or Llama text generation: tokens[0..n_prompt) is the prompt; fills
 * tokens[n_prompt..n_total). Each step runs the last ctx tokens through the
 * model. temperature <= 0: greedy; top_k <= 0: whole vocabulary. */
int weft_model_generate(weft_model *m, int32_t *tokens, int n_prompt, int n_total,
                        float temperature, int top_k, weft_rng *rng);
/* The token generating picks from one row of logits z[0..v) (what
 * weft_model_generate does at each step, for callers that compute the
 * logits themselves, such as a pipeline's last stage): >= 0, or WEFT_E*. */
int weft_sample_logits(const float *z, int v, float temperature, int top_k, weft_rng *rng);

/* -- optimisers -- */

typedef enum { WEFT_OPTIM_SGD = 1, WEFT_OPTIM_ADAMW = 2 } weft_optim_kind;

typedef struct {
    int32_t kind;          /* weft_optim_kind */
    float momentum;        /* SGD; 0: plain SGD */
    int32_t nesterov;      /* SGD */
    float weight_decay;    /* SGD: L2 added to the gradient (as torch.optim.SGD);
                              AdamW: decoupled (as torch.optim.AdamW) */
    float beta1, beta2, eps; /* AdamW */
} weft_optim_config;
/* SGD: momentum 0.9, nesterov 0, weight_decay 0; AdamW: 0.9, 0.999, 1e-8,
 * weight_decay 0.01 (torch's defaults). */
void weft_optim_config_default(weft_optim_config *c, weft_optim_kind kind);

/* An optimiser keeps state (SGD: momentum; AdamW: m and v) for elements
 * [base, base + n) of a flat parameter buffer: the whole model (base 0,
 * n = all) or one rank's shard (ZeRO). State starts at zero. */
typedef struct weft_optim weft_optim;
int weft_optim_create(weft_optim **out, const weft_optim_config *cfg, size_t base, size_t n);
void weft_optim_destroy(weft_optim *o);
const weft_optim_config *weft_optim_config_of(const weft_optim *o);
/* Threads an update is split over (updates of 64 Ki elements or more):
 * n == 0 the default of weft_model_set_threads, which a trainer should
 * match with weft_model_threads so that the optimiser uses the cores the
 * model does; n < 0 is WEFT_EINVAL. Results do not depend on n.
 * weft_optim_threads is 1 when the threads could not be started. */
int weft_optim_set_threads(weft_optim *o, int n);
int weft_optim_threads(const weft_optim *o);
/* Updates elements [lo, lo + n) (inside the state's range): params[0] and
 * grads[0] are element lo. Uses step number weft_optim_steps(o) + 1 and does
 * not advance it, so one step may be done as several ranges. */
int weft_optim_update(weft_optim *o, float *params, const float *grads,
                      size_t lo, size_t n, float lr);
int weft_optim_advance(weft_optim *o);  /* steps += 1 */
/* The usual case: update the whole state range (params and grads point at
 * element base) and advance. */
int weft_optim_step(weft_optim *o, float *params, const float *grads, float lr);
int64_t weft_optim_steps(const weft_optim *o);
int weft_optim_set_steps(weft_optim *o, int64_t steps);
void weft_optim_range(const weft_optim *o, size_t *base, size_t *n);
/* State buffers, each n floats: SGD 1 ("momentum", 0 if momentum == 0),
 * AdamW 2 ("exp_avg", "exp_avg_sq"). */
int weft_optim_state_count(const weft_optim *o);
float *weft_optim_state(weft_optim *o, int i, const char **name);

/* Sum of squares (in double) of g[0..n): add these over shards, then
 * weft_clip_scale(sqrt(total), max_norm) is the factor to scale by. */
double weft_sumsq(const float *g, size_t n);
float weft_clip_scale(double norm, float max_norm);
void weft_scale(float *g, size_t n, float s);
/* Whole-buffer clipping (torch.nn.utils.clip_grad_norm_): returns in *norm
 * the norm before clipping. max_norm <= 0: only measure. */
int weft_clip_grad_norm(float *g, size_t n, float max_norm, float *norm);

typedef enum { WEFT_LR_CONSTANT = 0, WEFT_LR_COSINE = 1 } weft_lr_kind;
typedef struct {
    int32_t kind;     /* weft_lr_kind */
    float lr;         /* peak */
    float min_lr;     /* cosine floor */
    int32_t warmup;   /* steps of linear warm-up: lr * (step+1) / warmup */
    int32_t total;    /* cosine reaches min_lr at this step and stays */
} weft_lr_schedule;
/* step counts from 0. */
float weft_lr_at(const weft_lr_schedule *s, int64_t step);

/* -- data and checkpoints -- */

/* A dataset is an indexed set of samples. Sample i depends only on the
 * dataset (its files, or its generator's seed), never on ranks. */
typedef struct weft_dataset weft_dataset;

typedef enum {
    WEFT_DATA_IMAGE = 1, /* x: x_dim floats in [0,1] (or normalised); y: one class label */
    WEFT_DATA_SEQ = 2    /* x: x_dim tokens; y: the token after each (-1: no loss) */
} weft_data_kind;

typedef struct {
    weft_data_kind kind;
    uint64_t n;          /* samples */
    int x_dim;           /* image: pixels per sample; seq: tokens per sample */
    int n_classes;       /* image: classes; seq: vocabulary size */
    int width, height;   /* image geometry; 0 for sequences */
    char name[64];       /* e.g. "fashion-mnist/train", "builtin-addition/val" */
} weft_dataset_info;

void weft_dataset_info_get(const weft_dataset *ds, weft_dataset_info *out);
void weft_dataset_free(weft_dataset *ds); /* ds may be NULL */
/* Sample i. Image: x[x_dim] and y[0]; tokens unused (may be NULL).
 * Sequence: tokens[x_dim] and y[x_dim]; x unused (may be NULL). Safe to
 * call from several threads at once. */
int weft_dataset_get(const weft_dataset *ds, uint64_t i, float *x,
                     int32_t *tokens, int32_t *y);
/* Image datasets: from now on x = (pixel - mean) / std (as torchvision's
 * Normalize); mean 0, std 1 restores plain pixels. */
int weft_dataset_normalize(weft_dataset *ds, float mean, float std);
/* Mean and standard deviation of the plain pixels of the first
 * max_samples samples. */
int weft_dataset_pixel_stats(const weft_dataset *ds, uint64_t max_samples, double *mean,
                             double *std);

/* idx files (MNIST layout: u8 images idx3, u8 labels idx1). A path ending in
 * ".gz" is read through `gzip -dc` (the library has no zlib). */
int weft_dataset_open_idx(weft_dataset **out, const char *images, const char *labels);
/* MNIST / Fashion-MNIST directory holding {train,t10k}-{images-idx3,
 * labels-idx1}-ubyte, each plain or .gz. dir NULL: $WEFT_FASHION_MNIST, else
 * /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
 * split: "train" or "test". */
int weft_dataset_open_mnist_dir(weft_dataset **out, const char *dir, const char *split);
#define WEFT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Built-in image task, generated on the fly: 28x28, 10 classes, each class a
 * figure of strokes; samples jitter the strokes, shift, scale, add a stray
 * stroke and noise. split 0: train, 1: test (disjoint sample streams). */
int weft_dataset_synth_images(weft_dataset **out, uint64_t seed, int split, uint64_t n);

/* Built-in sequence task: lines "a+b=c\n" (a, b below 10^digits), bytes as
 * tokens (vocabulary 256). Each sample is seq_len tokens starting at a line.
 * split 0: train, 1: validation; problems are split by a hash of (a, b), so
 * no validation problem ever appears in training. format: 0 plain
 * ("7+35=42"), or a mix of PADDED (operands zero-padded to `digits`, the sum
 * to digits+1: "07+35=042"), REVERSED (the sum's digits least significant
 * first, as it is computed: "07+35=240") and ANSWER_LOSS (targets other than
 * the answer and its newline are -1, which the models skip: no loss on the
 * random operands); small models learn the last three much faster. */
enum { WEFT_ADDITION_PADDED = 1, WEFT_ADDITION_REVERSED = 2, WEFT_ADDITION_ANSWER_LOSS = 4 };
int weft_dataset_addition(weft_dataset **out, uint64_t seed, int split, int digits, int format,
                          int seq_len, uint64_t n);
/* Problem i of a dataset that has prompts (the addition task's validation
 * problems): prompt "a+b=", answer "c\n", both NUL-terminated.
 * WEFT_ENOTSUP for datasets without prompts. */
int weft_dataset_prompt(const weft_dataset *ds, uint64_t i, char *prompt, size_t prompt_cap,
                        char *answer, size_t answer_cap);

/* Token shard file: a 64-byte header (magic "WEFTTOKS", version, vocabulary,
 * token width, count, CRC-32 of the tokens), then little-endian tokens. */
#define WEFT_TOKSHARD_VERSION 1
int weft_tokshard_write(const char *path, const int32_t *tokens, size_t n, uint32_t vocab);
/* *tokens is malloc'ed; free() it. */
int weft_tokshard_read(const char *path, int32_t **tokens, size_t *n, uint32_t *vocab);
/* Sequence dataset over the tokens [begin*n, end*n) of a shard (fractions, so
 * 0..0.9 and 0.9..1 split train and validation): sample i is the
 * non-overlapping window of seq_len tokens at i*seq_len, targets shifted by one. */
int weft_dataset_open_tokens(weft_dataset **out, const char *path, int seq_len,
                             double begin, double end);

/* llm.c token shards (karpathy/llm.c, dev/data): a header of 256
 * little-endian int32 ([0] magic, [1] version, [2] token count, the rest 0),
 * then the tokens, little-endian. GPT-2 shards: magic 20240520, version 1,
 * uint16 tokens; Llama 3 shards: magic 20240801, version 7, uint32 tokens. */
#define WEFT_LLMC_HEADER_BYTES 1024
#define WEFT_LLMC_MAGIC_GPT2 20240520
#define WEFT_LLMC_MAGIC_LLAMA3 20240801
#define WEFT_LLMC_VOCAB_GPT2 50257   /* the tokenizers' vocabularies */
#define WEFT_LLMC_VOCAB_LLAMA3 128256
typedef struct weft_llmc_writer weft_llmc_writer;
/* token_bytes 2: GPT-2's layout (tokens 0..65535); 4: Llama 3's (0..2^31-1).
 * Until close the header's magic is 0, so a file left half-written by a
 * crash is refused by every reader. */
int weft_llmc_writer_open(weft_llmc_writer **out, const char *path, int token_bytes);
/* Appends n tokens. WEFT_EINVAL, and nothing of this call written, for a
 * token that does not fit the width or a shard past 2^31-1 tokens. */
int weft_llmc_writer_put(weft_llmc_writer *w, const int32_t *tokens, size_t n);
/* Writes the count and magic into the header, closes the file and frees w.
 * After a failed write (here or in put) the file is removed and the error
 * returned. */
int weft_llmc_writer_close(weft_llmc_writer *w);

typedef struct {
    int32_t magic, version;
    int token_bytes; /* 2 or 4 */
    uint64_t count;  /* tokens */
} weft_llmc_header;
/* Reads path's header and checks it: a known magic, the version that goes
 * with it, and a token count that agrees with the file's size. WEFT_EIO for
 * a malformed file, with what is wrong in err (may be NULL). */
int weft_llmc_header_read(const char *path, weft_llmc_header *out, char *err, size_t errlen);
/* Sequence dataset over llm.c shards, streamed (each shard stays open; a
 * sample is read when asked for). pattern: one shard, a directory (its
 * *.bin) or a glob; split "train" or "val" takes the shards whose names say
 * so as llm.c names them ("fineweb_train_000001.bin", "tiny_val.bin"); one
 * named file whose name says neither serves as the split asked for; split
 * NULL takes every shard. Sample i is the i-th window of seq_len + 1 tokens
 * (targets shifted by one) at multiples of seq_len inside one shard, shards
 * in name order; windows never straddle shards. vocab 0: the tokenizer's
 * (WEFT_LLMC_VOCAB_*); a smaller one is checked at open on every token (one
 * pass over the shards), and weft_dataset_get fails with WEFT_EINVAL on a
 * token outside the vocabulary. A loader shuffles it through a keyed
 * bijection, not a table: its memory does not grow with the corpus.
 * err (may be NULL) says what went wrong. */
int weft_dataset_open_llmc(weft_dataset **out, const char *pattern, int seq_len,
                           const char *split, int vocab, char *err, size_t errlen);

/* Byte-level tokenizer: token = byte value. decode maps tokens outside
 * 0..255 to '?'. Both return the count written. */
#define WEFT_BYTE_VOCAB 256
size_t weft_bytes_encode(const void *text, size_t n, int32_t *tokens);
size_t weft_bytes_decode(const int32_t *tokens, size_t n, char *text);

/* GPT-2's tokenizer: byte-level BPE giving exactly tiktoken's "gpt2"
 * tokens (50,257 of them; <|endoftext|> is 50256). Its tables are data,
 * encoder.json and vocab.bpe, that `make tokenizer-data` fetches. dir NULL:
 * $WEFT_BPE_DIR, else $(PREFIX)/share/weft/gpt2, else the build folder's
 * data/gpt2. WEFT_ECONFIG when no folder has both files, WEFT_EIO when
 * they are not GPT-2's; why (may be NULL) then says which files and where.
 * A handle encodes on one thread at a time (it keeps a cache of words);
 * decoding only reads it. */
typedef struct weft_bpe weft_bpe;
int weft_bpe_open(weft_bpe **out, const char *dir, char *why, size_t why_cap);
void weft_bpe_free(weft_bpe *b); /* b may be NULL */
/* flags 0: the text is all ordinary text, "<|endoftext|>" too (tiktoken's
 * encode_ordinary); WEFT_BPE_SPECIAL: that string is the token 50256
 * (allowed_special). tokens must have room for n (a token is at least a
 * byte): cap < n is WEFT_EINVAL. Any bytes encode; invalid UTF-8 bytes
 * count as punctuation and decode back unchanged. */
#define WEFT_BPE_SPECIAL 1u
int weft_bpe_encode(weft_bpe *b, const void *text, size_t n, unsigned flags, int32_t *tokens,
                    size_t cap, size_t *count);
/* The bytes of n tokens into text[0..cap), as snprintf: *len is their full
 * length even when cap is short (cap 0 measures). WEFT_EINVAL for a token
 * outside 0 .. vocab-1. */
int weft_bpe_decode(const weft_bpe *b, const int32_t *tokens, size_t n, char *text, size_t cap,
                    size_t *len);
int weft_bpe_vocab(const weft_bpe *b); /* 50257 */
int weft_bpe_eot(const weft_bpe *b);   /* 50256 */
/* 1: built with Unicode's letter, number and space classes (Debian's
 * unicode-data); 0: ASCII alone, where text beyond ASCII splits otherwise
 * than tiktoken's. */
int weft_bpe_unicode(void);

/* Loader: an endless stream of global batches whose order depends only on
 * the seed. The stream is epoch 0's permutation of all samples, then epoch
 * 1's, ...; global batch k is stream[k*B, (k+1)*B) (it may straddle epochs;
 * nothing is dropped). Rank r of w holds the contiguous part
 * [floor(r*B/w), floor((r+1)*B/w)) of each global batch, so the ranks' parts
 * together are the same global batch for every w. When w does not divide B
 * the parts differ by one sample: average gradients weighted by n/global_n. */
typedef struct weft_loader weft_loader;

typedef struct {
    int global_batch;   /* samples per step over all ranks (B) */
    int rank;           /* 0 .. world_size-1 */
    int world_size;     /* 1 .. B */
    uint64_t seed;      /* shuffle seed */
    int shuffle;        /* 0: every epoch in dataset order */
    int part_begin, part_end; /* part_end > 0: this rank's part of each global batch
                               * is [part_begin, part_end) instead (uneven shares) */
} weft_loader_config;

typedef struct {
    int n;                 /* samples in this rank's part */
    int offset;            /* index of its first sample in the global batch */
    int global_n;          /* B */
    int x_dim;
    const float *x;        /* image: n*x_dim features; NULL for sequences */
    const int32_t *tokens; /* sequence: n*x_dim inputs; NULL for images */
    const int32_t *y;      /* image: n labels; sequence: n*x_dim targets */
    const uint64_t *index; /* dataset index of each sample */
    uint64_t step;         /* global batch number k */
} weft_batch;

void weft_loader_config_default(weft_loader_config *cfg); /* B 64, rank 0 of 1, seed 1, shuffle */
int weft_loader_create(weft_loader **out, const weft_dataset *ds, const weft_loader_config *cfg);
/* Fills b with this rank's part of the next global batch; the arrays belong
 * to the loader and stay valid until the next call. */
int weft_loader_next(weft_loader *l, weft_batch *b);
/* Samples of the global stream consumed so far (k*B): the whole data state
 * of a checkpoint, valid for any world size. */
uint64_t weft_loader_position(const weft_loader *l);
/* Next batch starts at stream sample `position` (normally a multiple of B;
 * any value works, e.g. after changing B). */
int weft_loader_seek(weft_loader *l, uint64_t position);
void weft_loader_free(weft_loader *l);
/* This rank's contiguous part [*begin, *end) of n items (evaluation). */
void weft_shard_range(uint64_t n, int rank, int world_size, uint64_t *begin, uint64_t *end);

/* Checkpoint: one self-describing file of named records — tensors (dtype,
 * shape, data) and blobs (bytes) — each with a CRC-32, behind a versioned
 * header. Names carry the meaning ("config", "param/...", "optim/...",
 * "rng", "data"); nothing in the file depends on the rank count. */
#define WEFT_CKPT_VERSION 1
#define WEFT_CKPT_MAX_DIM 8
typedef struct weft_ckpt weft_ckpt;

typedef enum { WEFT_CKPT_TENSOR = 1, WEFT_CKPT_BLOB = 2 } weft_ckpt_kind;

typedef struct {
    const char *name;
    weft_ckpt_kind kind;
    weft_dtype dtype;      /* tensors; WEFT_U8 for blobs */
    int ndim;
    int64_t shape[WEFT_CKPT_MAX_DIM];
    const void *data;
    size_t nbytes;
} weft_ckpt_entry;

int weft_ckpt_new(weft_ckpt **out);
void weft_ckpt_free(weft_ckpt *c); /* c may be NULL */
/* The put functions copy data; a name put twice is replaced. */
int weft_ckpt_put_tensor(weft_ckpt *c, const char *name, weft_dtype t, const void *data,
                         int ndim, const int64_t *shape);
int weft_ckpt_put_blob(weft_ckpt *c, const char *name, const void *data, size_t n);
int weft_ckpt_put_u64(weft_ckpt *c, const char *name, uint64_t v);
int weft_ckpt_put_str(weft_ckpt *c, const char *name, const char *s);
/* Lookups return WEFT_EIO when the name is missing or has the wrong kind. */
int weft_ckpt_find(const weft_ckpt *c, const char *name, weft_ckpt_entry *e);
int weft_ckpt_get_u64(const weft_ckpt *c, const char *name, uint64_t *v);
/* Copies a string blob with its NUL; WEFT_EINVAL when cap is too small. */
int weft_ckpt_get_str(const weft_ckpt *c, const char *name, char *buf, size_t cap);
/* Copies a float tensor out after checking its element count. */
int weft_ckpt_get_f32(const weft_ckpt *c, const char *name, float *dst, size_t count);
int weft_ckpt_count(const weft_ckpt *c);
int weft_ckpt_entry_at(const weft_ckpt *c, int i, weft_ckpt_entry *e);
/* Writes path.tmp, fsyncs, renames: a crash never leaves a torn checkpoint. */
int weft_ckpt_save(const weft_ckpt *c, const char *path);
/* WEFT_EIO for a truncated, corrupted or unknown-version file. A directory
 * is a sharded checkpoint (weft-train --save DIR/: the save its latest
 * names, or a save directory itself): read back, every file's CRC checked,
 * as the one file of the same run would read. */
int weft_ckpt_load(weft_ckpt **out, const char *path);
/* A sharded checkpoint's manifest alone (dir: a save directory, or one
 * whose latest names it): the run's records and the shard/ ones, among
 * them "shard/slices" (i64 [n, 8]: file, vector, first element, run
 * length, stride, runs, file offset, CRC-32; 7 columns, no CRC, in older
 * saves). weft_ckpt_get_params and weft_ckpt_get_optim on it read only the
 * slices that meet what they fill, each slice checked against its CRC. */
int weft_ckpt_load_manifest(weft_ckpt **out, const char *dir);
/* Writes a sharded save's step, layout, files, and each tensor's shape
 * and parameter slices (file, offset, element runs) to f. */
int weft_ckpt_shard_list(const char *dir, FILE *f);

/* Training state under fixed record names (see src/train/ckpt_model.c):
 * the model's config and every tensor, the optimiser's config, step count
 * and state. Whole tensors only, so a checkpoint does not depend on the
 * rank count that wrote it; a sharded (ZeRO) optimiser is gathered to the
 * full range before put_optim. */
int weft_ckpt_put_model(weft_ckpt *c, weft_model *m);
int weft_ckpt_model_config(const weft_ckpt *c, weft_model_config *cfg);
/* Copies the parameters into m, whose config must match the checkpoint's. */
int weft_ckpt_get_params(const weft_ckpt *c, weft_model *m);
/* Creates the model from the stored config and loads its parameters. */
int weft_ckpt_get_model(const weft_ckpt *c, weft_model **out);

/* -- Hugging Face weights (src/train/hf_load.c, hf_save.c) --
 * A directory as transformers' save_pretrained writes it: config.json and
 * model.safetensors (or shards named by model.safetensors.index.json).
 * GPT is GPT2LMHeadModel, Llama LlamaForCausalLM, a Llama with experts
 * MixtralForCausalLM; docs/TRAINING.md maps the names. err (may be NULL)
 * gets the reason on failure. */
/* config.json as weft's model config; WEFT_ENOTSUP for what weft's
 * models cannot represent (the field named in err). */
int weft_hf_config_read(const char *dir, weft_model_config *cfg, char *err, size_t cap);
/* Loads m's parameters (a whole model, a pipeline stage or a
 * tensor-parallel part: each reads only the elements it holds), from f32,
 * bf16 or f16; config.json must describe m's config (WEFT_ECONFIG). */
int weft_model_load_hf(weft_model *m, const char *dir, char *err, size_t cap);
/* Writes a whole model's config.json and f32 model.safetensors into dir
 * (made if missing), tensor by tensor; WEFT_ENOTSUP, writing nothing, for
 * a model no transformers architecture computes (an MLP, a GPT's experts,
 * a sigmoid router, the balancing bias, shared experts). */
int weft_model_save_hf(weft_model *m, const char *dir, char *err, size_t cap);
int weft_ckpt_put_optim(weft_ckpt *c, weft_optim *o);
int weft_ckpt_optim_config(const weft_ckpt *c, weft_optim_config *oc);
/* Creates an optimiser for [base, base + n) (any sub-range of the saved
 * one) with the stored config, state and step count. */
int weft_ckpt_get_optim(const weft_ckpt *c, size_t base, size_t n, weft_optim **out);
int weft_ckpt_put_rng(weft_ckpt *c, const char *name, const weft_rng *r);
int weft_ckpt_get_rng(const weft_ckpt *c, const char *name, weft_rng *r);

/* ==== end training engine ============================================== */

/* ---- data parallelism (src/train/dp.c) ------------------------------------ */
/* Every rank holds the whole model; gradients are averaged across the
 * communicator in buckets of contiguous tensors (PyTorch DDP's scheme),
 * each bucket's all-reduce launched non-blocking as soon as its tensors are
 * final. */
typedef struct weft_dp weft_dp;
#define WEFT_DP_DEFAULT_BUCKET (25u << 20) /* bytes, as PyTorch DDP */

/* bucket_bytes 0: the default. The model must outlive the handle. */
int weft_dp_create(weft_dp **out, weft_comm *c, weft_model *m, size_t bucket_bytes);
void weft_dp_destroy(weft_dp *d);
int weft_dp_bucket_count(const weft_dp *d);
/* Make every rank's parameters equal to rank 0's. */
int weft_dp_broadcast_params(weft_dp *d);
/* Tell the handle that tensor i's gradient is final (from a backward hook):
 * its bucket starts reducing once complete. Optional. */
int weft_dp_grad_ready(weft_dp *d, int tensor);
/* Launch what is left and wait: afterwards the gradient buffer holds the
 * average over ranks on every rank. */
int weft_dp_sync_grads(weft_dp *d);
/* This rank computed the mean gradient over n of the global_n samples of
 * the step (the loader's parts differ by one when the world size does not
 * divide the batch): weight it so that the average over ranks is the mean
 * over all global_n samples. Default: equal parts. */
int weft_dp_set_share(weft_dp *d, int n, int global_n);
/* Average n floats (losses, accuracies) over the ranks, in place. */
int weft_dp_average(weft_dp *d, float *vals, int n);
/* Gradient accumulation: while hold is set, backward launches nothing and
 * gradients only add up locally; clear it before the last micro-step's
 * backward, whose hook then launches every bucket. */
int weft_dp_hold(weft_dp *d, int hold);
/* Buckets launched since the last sync (what the hook has started). */
int weft_dp_launched(const weft_dp *d);

/* ---- ZeRO: sharded data parallelism (src/train/zero.c) -------------------- */
/* One handle drives a data-parallel training step at ZeRO stage 0..3 (0:
 * plain DP; 1: optimiser state sharded; 2: + gradients; 3: + parameters).
 * The flat buffer is cut into buckets of whole tensors (bucket_bytes, as
 * weft_dp) and each bucket is sharded on its own (as FSDP's flat
 * parameters): of a bucket of m elements rank r owns [r*S, r*S + S),
 * S = m / p, and the last rank also owns the m mod p tail, so any world size
 * works without a padded copy. At stages 2-3 each bucket's gradients are
 * reduce-scattered in place as soon as backward finishes them; parameters
 * are all-gathered. The engine's forward/backward need whole flat buffers,
 * so those stay allocated: at stage 3 only this rank's shards hold valid
 * parameters between steps (weft_zero_gather_params restores the rest); at
 * stage 2 only its shards hold the reduced gradient. comm NULL: one process
 * (same code path, any stage). Every rank must own some element (n >= p
 * when there is one bucket): WEFT_EINVAL otherwise. */
typedef struct weft_zero weft_zero;

/* Takes over the model's gradient hook. The optimiser state is created for
 * this rank's shards (stages 1-3) or everything (0). */
int weft_zero_create(weft_zero **out, weft_comm *c, weft_model *m, const weft_optim_config *oc,
                     int stage, size_t bucket_bytes);
void weft_zero_destroy(weft_zero *z);
/* The optimiser (stages 1-3: the one of this rank's first shard; all
 * shards have the same config and step count). */
weft_optim *weft_zero_optim(weft_zero *z);
int weft_zero_stage(const weft_zero *z);
int weft_zero_bucket_count(const weft_zero *z);
/* Buckets whose reduction backward has launched in this step (stages 0-1:
 * those of the all-reduce; 2-3: of the reduce-scatter). */
int weft_zero_launched(const weft_zero *z);
int weft_zero_broadcast_params(weft_zero *z);
/* Before each micro-step's forward: this rank's micro-batch has n of the
 * step's global_n samples (over all ranks and micro-steps); last marks the
 * final micro-step, the only one whose backward communicates. The first
 * micro-step of a step zeroes the gradients (and at stage 3 gathers the
 * parameters). Micro-steps of unequal size are weighted by their size. */
int weft_zero_micro(weft_zero *z, int n, int global_n, int last);
/* After the last backward: average gradients, clip to clip (> 0; the global
 * norm before clipping in *norm if norm), update this rank's range, share
 * the parameters (stages 1-2; stage 3 at the next micro-step). */
int weft_zero_step(weft_zero *z, float lr, float clip, float *norm);
/* Pipeline stages and tensor-parallel ranks hold parts of one model: the
 * norm that clips (and *norm) also sums over comms (up to 2: this rank's
 * pipeline, its tensor group) and leaves out the tensors with skip[i] set
 * (a tied copy, a replica another rank counts; NULL: none). */
int weft_zero_set_norm_group(weft_zero *z, weft_comm *const *comms, int ncomms,
                             const unsigned char *skip);
/* Stage 3: make the whole parameter buffer valid (before eval or saving). */
int weft_zero_gather_params(weft_zero *z);
/* Seconds weft_zero_step has spent waiting for gradient reductions and
 * parameter all-gathers to finish (what backward did not hide). */
double weft_zero_wait_s(const weft_zero *z);

/* Bytes per rank held for the training state at this stage (fp32, Ψ = n,
 * K = optimiser bytes per parameter: SGD 4 (0 without momentum), AdamW 8;
 * no separate master copy since parameters are fp32):
 *   stage 0: 4Ψ + 4Ψ + KΨ      stage 1: 4Ψ + 4Ψ + KΨ/N
 *   stage 2: 4Ψ + (4+K)Ψ/N     stage 3: (4+4+K)Ψ/N
 * param/grad/optim_bytes count what this rank owns (per bucket S or
 * S + tail elements, so they differ from the formula by < N elements per
 * bucket); work_bytes is what the engine's full flat buffers add while they
 * are in use. Between steps the pages a rank does not own are returned to
 * the kernel (stages 2-3: gradients; 3: other ranks' parameters), and
 * resident_bytes measures it: the resident pages (mincore) of the
 * parameter and gradient buffers plus the optimiser state. Stage 3 layer
 * by layer holds during a step only a few blocks' whole parameters and
 * gradients besides its shards: work_bytes is then that bound (the three
 * largest blocks' parameters — the one computing, the one prefetched, a
 * tied output projection — and the four largest blocks' gradients, plus
 * the pages a shard boundary shares), and peak_bytes measures the most
 * the two buffers held resident at any block boundary of the last step,
 * plus the optimiser state. */
typedef struct {
    int stage, world, state_bytes_per_param, buckets;
    size_t n, shard;
    size_t param_bytes, grad_bytes, optim_bytes, work_bytes;
    double formula_bytes;
    size_t resident_bytes;
    size_t peak_bytes;
    int layerwise;
} weft_zero_mem;
int weft_zero_memory(const weft_zero *z, weft_zero_mem *m);
/* Stage 3: gather and release block by block (on, the default) or the
 * whole model once per step (off: a pipeline's micro-batches would
 * otherwise gather each block once per micro-batch). */
int weft_zero_set_layerwise(weft_zero *z, int on);
/* Bucket k's elements of the flat buffer that hold this rank's valid
 * parameters between steps: at stage 3 over ranks its shard (the tail on
 * the last rank), else the whole bucket (stage 0: one bucket, the whole
 * buffer). For writers that write each element once, by its owner. */
int weft_zero_owned(const weft_zero *z, int k, size_t *lo, size_t *n);

/* Checkpoints stay world-size independent: put_optim gathers the state to
 * rank 0 and stores the full range there (collective; ck may be NULL on
 * other ranks); load_optim gives each rank its own sub-range of the saved
 * state. */
int weft_zero_put_optim(weft_zero *z, weft_ckpt *ck);
int weft_zero_load_optim(weft_zero *z, const weft_ckpt *ck);

/* ---- ZeRO state that outlives a rank (src/train/zero_elastic.c) ----------
 * Stages 1-3 (elastic training, docs/TRAINING.md): at a step boundary
 * weft_zero_replicate(z, gen) (collective) sends this rank's shards
 * (parameters and optimiser state) to the next rank of the ring and keeps
 * the previous rank's, as generation gen, with the one before it (ranks
 * may be one step apart when a rank dies). After a failure
 * weft_zero_take_replicas moves them out of z (z may then be destroyed);
 * weft_zero_replicas_export(r, gen, gone, full, &steps) writes, into full
 * ([params n | optimiser state 0 n | state 1 n ...], zeroed by the caller),
 * this rank's shards of that generation and, when gone[previous rank] is
 * set, the previous rank's: summed over the survivors (an all-reduce) it
 * is the whole state, unless two neighbours in the ring are gone
 * (WEFT_ENOTSUP: the same on every survivor). WEFT_EINVAL: that
 * generation is not held. weft_zero_import gives a new weft_zero (any
 * world size) its shards of such a whole state and the optimiser's step
 * count. Costs: 4 shards of memory (two generations, own and the
 * neighbour's), one shard sent per step. */
typedef struct weft_zero_replicas weft_zero_replicas;
int weft_zero_replicate(weft_zero *z, int64_t gen);
int weft_zero_take_replicas(weft_zero *z, weft_zero_replicas **out);
int weft_zero_replicas_export(const weft_zero_replicas *r, int64_t gen, const unsigned char *gone,
                              float *full, int64_t *steps);
int weft_zero_replicas_world(const weft_zero_replicas *r);
void weft_zero_replicas_free(weft_zero_replicas *r);
/* Floats of a whole state: n times (1 + the optimiser's state count). */
size_t weft_zero_full_count(const weft_zero *z);
int weft_zero_import(weft_zero *z, const float *full, int64_t steps);

/* ---- sync modes (src/train/sync.c) ----------------------------------------- */
/* Parameter-averaging modes (docs/TRAINING.md): each rank steps its own
 * optimiser on its part of every global batch, with no gradient exchange,
 * and weft_sync_after_step pulls the models together:
 *   "full"      gradients averaged every step (weft_dp / weft_zero; no handle)
 *   "local:H"   parameters averaged every H steps (local SGD)
 *   "diloco:H"  every H steps an outer Nesterov-SGD step (momentum 0.9,
 *               lr 0.7) on the averaged pseudo-gradient theta_old - theta
 *   "gossip"    every step, average with one peer on the one-peer
 *               exponential graph (exact mixing in log2 p steps, p = 2^k)
 *   "stale:s"   bounded staleness: every step's gradients are all-reduced in
 *               the background and applied s steps later, so no rank runs
 *               more than s steps ahead of the slowest ("stale:0" = full)
 *   "backup:b"  backup workers: each step averages the gradients of the
 *               first N - b ranks to reach rank 0 (which decides and sends
 *               the result to all); late gradients are dropped; a rank that
 *               is late skips the steps decided without it */
typedef enum {
    WEFT_SYNC_FULL = 0, WEFT_SYNC_LOCAL, WEFT_SYNC_DILOCO, WEFT_SYNC_GOSSIP, WEFT_SYNC_STALE,
    WEFT_SYNC_BACKUP, WEFT_SYNC_STREAMING
} weft_sync_mode;
/* Across clusters (docs/WAN.md):
 *   "streaming:H:F[:T]"  Streaming DiLoCo: the flat parameters cut into F
 *               fragments of equal size; fragment f takes its outer step at
 *               the steps t with t mod H = (f+1)H/F mod H (each every H
 *               steps, staggered by H/F); its outer
 *               all-reduce runs in the background for T steps (default 1,
 *               at most H; above H/F several are in flight at once, each
 *               fragment on its own communicator), then the fragment
 *               becomes mix * local + (1 - mix) * global
 *               (mix 0.5). T = 0: blocking and replaced (F = 1: diloco:H).
 *   "hier:full/diloco:H", "hier:full/streaming:H:F[:T]"  full sync inside
 *               each cluster every step (the caller's, over
 *               weft_sync_inner_comm), the outer step across clusters: rank i
 *               of each cluster reduces slice i of the outer gradient with
 *               rank i of the others, then the slices are gathered inside.
 * compress (diloco, streaming, hier): the outer gradient's compressor. */
typedef struct {
    int mode;              /* weft_sync_mode */
    int period;            /* H; stale: s; backup: b */
    float outer_lr, outer_momentum;  /* diloco: 0.7, 0.9 */
    int fragments, overlap;          /* streaming: F, T */
    float mix;                       /* streaming: 0.5 */
    int hier;                        /* hier:full/...: across clusters only */
    int compressed;                  /* compress holds the outer compressor */
    weft_compress_spec compress;
    float weight;          /* outer modes: this rank's pseudo-gradient's weight in
                            * the mean (uneven shares; 0: 1) */
} weft_sync_config;
typedef struct weft_sync weft_sync;
int weft_sync_parse(const char *s, weft_sync_config *c);
/* Broadcasts rank 0's parameters. Modes other than full only. */
int weft_sync_create(weft_sync **out, weft_comm *c, weft_model *m, const weft_sync_config *cfg);
void weft_sync_destroy(weft_sync *s);
/* After every local optimiser step (collective on the mode's schedule). */
int weft_sync_after_step(weft_sync *s);
/* At the end: leave every rank with one model (the average; diloco: a last
 * outer step if the run did not end on one). */
int weft_sync_finish(weft_sync *s);
/* stale:s, after backward: launch the average of this step's gradients
 * (times share, this rank's weight as in weft_dp_set_share) and, once s
 * steps are in flight, wait for the oldest and put it in the model's
 * gradient buffer: *ready = 1 means step the optimiser on it. */
int weft_sync_push_grads(weft_sync *s, float share, int *ready);
/* At the end: the next average still in flight (*ready = 0: none left). */
int weft_sync_pop_grads(weft_sync *s, int *ready);
/* backup:b, before a step's forward: *skip = 1 when the step has been
 * decided without this rank (it is late): compute nothing and call
 * weft_sync_backup_grads with n = 0, which applies the step's result. */
int weft_sync_backup_begin(weft_sync *s, int *skip);
/* backup:b, after backward, the model's gradients being the mean over this
 * rank's n samples (n = 0: skipped), in[] = { mean loss, correct count }
 * over them: sends them to rank 0 and leaves in the gradient buffer the
 * mean gradient over the samples of the ranks included in the step, the
 * same on every rank; out[] = { their mean loss, correct count, samples }.
 * Collective on its own schedule: every rank calls it every step. */
int weft_sync_backup_grads(weft_sync *s, int n, const float in[2], float out[3]);
/* backup:b: bit r set when rank r (< 64) was included in the last step. */
uint64_t weft_sync_included(const weft_sync *s);
/* Parameter bytes this rank has handed to collectives or sent to peers
 * (compressed: the bytes the compressor sent). */
uint64_t weft_sync_bytes(const weft_sync *s);
/* hier: this rank's cluster (split from c; the caller's full sync runs on
 * it), else NULL. */
weft_comm *weft_sync_inner_comm(const weft_sync *s);
/* Of weft_sync_bytes: across clusters, and inside (hier's gathers). */
void weft_sync_bytes_split(const weft_sync *s, uint64_t *across, uint64_t *inside);

/* ---- sizes (src/core/size_api.c) ------------------------------------------
 * Bytes as people write them, the one grammar every weft option and
 * WEFT_* variable that takes a size reads: 65536, 64K, 64KiB, 2M, 1.5G,
 * 0x20000, 512B. K, M, G and T are powers of 1024 (case does not matter;
 * "iB" or "B" after them changes nothing); a fraction needs a unit and is
 * rounded down to a whole byte. */
/* Reads s into *out. 0, or WEFT_EINVAL when s is no size or lies outside
 * lo..hi; then why (when not NULL) says which, in words that follow a
 * name: "bad size '64Q' (want bytes or ..., e.g. 64M)". */
int weft_size_parse(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, char *why,
                    size_t cap);
/* v the shortest exact way ("64M", "1536K", "1000"); returns buf. */
const char *weft_size_text(uint64_t v, char *buf, size_t cap);

/* ---- simulator: collectives on a machine model (src/sim/sim_api.c) --------
 * The library's own schedules run over a topology model instead of sockets
 * (docs/SIMULATION.md): how long a collective takes on machines this one is
 * not. A topology is a built-in preset ("summit", "dgx-h100", ...) or a
 * file in the text format. */
typedef struct weft_sim_topo weft_sim_topo;
/* A preset name or a file; on failure err says which line and why. */
int weft_sim_topo_load(weft_sim_topo **out, const char *name_or_path, char *err,
                       size_t errlen);
void weft_sim_topo_free(weft_sim_topo *t);
const char *weft_sim_topo_name(const weft_sim_topo *t);
/* The topology's one-line description ("" when none). */
const char *weft_sim_topo_note(const weft_sim_topo *t);
int weft_sim_topo_ranks_per_node(const weft_sim_topo *t);
/* Writes t in the text format. */
int weft_sim_topo_write(const weft_sim_topo *t, FILE *f);
/* Name of built-in topology i, NULL past the last. */
const char *weft_sim_topo_preset(int i);

/* Algorithms the simulator runs: weft_algo's values (but auto), the
 * parameter-server pattern "ps" and NCCL's "nccl-ring" and "nccl-tree". */
int weft_sim_algo_parse(const char *s, int *algo);
const char *weft_sim_algo_name(int algo);
/* NCCL's protocols: "ll", "ll128", "simple"; "auto" (WEFT_SIM_PROTO_AUTO)
 * lets the simulator take the one its model says is fastest. */
#define WEFT_SIM_PROTO_AUTO 0
int weft_sim_protocol_parse(const char *s, int *proto);
const char *weft_sim_protocol_name(int proto);
/* Link classes, innermost first: "intra" (in a node), "nic", "pod", "wan",
 * and "cpu" (a node's cores, on topologies with a cpu line). */
#define WEFT_SIM_LINK_CLASSES 5
const char *weft_sim_link_name(int c);

typedef struct {
    const weft_sim_topo *topo;
    int algo;               /* weft_sim_algo_parse's */
    weft_coll_kind kind;
    int nranks;
    uint64_t count;         /* elements per rank, as the API counts them */
    uint32_t esize;         /* bytes per element */
    uint64_t chunk_bytes;   /* pipelining chunk; 0: the schedules' default */
    int ps_servers;         /* algorithm ps: servers (0: 1) */
    int no_fold;            /* 1: simulate every rank even when symmetric */
    uint64_t op_budget;     /* ops simulated before extrapolating in the
                               count; 0: 1 million */
    int proto;              /* for algorithms with hop lines in the topology */
    int channels;           /* of the NCCL schedules; 0: the topology's */
    int calls;              /* back to back, the result per call; 0: one */
} weft_sim_job;

typedef struct {
    double time_us;         /* until the last rank finishes */
    double algbw_GBps;      /* the whole buffer (as nccl-tests) / time */
    double busbw_GBps;      /* algbw times nccl-tests' bus factor */
    double util[WEFT_SIM_LINK_CLASSES];     /* mean utilisation (-1: no such link) */
    double util_max[WEFT_SIM_LINK_CLASSES]; /* the busiest link of the class */
    double bytes[WEFT_SIM_LINK_CLASSES];    /* carried by all its links */
    int fold;               /* ranks simulated stand for p/fold each; 0: none */
    int fold_exact;         /* every op identical up to the shift */
    double fold_err_us;     /* estimated error of an inexact fold */
    int extrapolated;       /* times from two smaller counts, linearly */
    uint64_t ops, events;   /* simulated */
    uint32_t max_rounds;    /* the longest schedule, in rounds */
    int proto;              /* the protocol simulated; 0: none */
} weft_sim_result;

/* err says why a job cannot run (an algorithm without that collective, a
 * rank count the topology cannot place, ...). */
int weft_sim_run(const weft_sim_job *job, weft_sim_result *out, char *err, size_t errlen);

/* The data behind docs/SIMULATION.md's figures: NCCL on Summit (8-byte
 * latency and 64 MB bus bandwidth of ring and tree, 96 to 24,576 GPUs) and
 * GPT-3's gradients; columns documented in the output. */
int weft_sim_figure_summit(FILE *f);
int weft_sim_figure_gpt3(FILE *f);
/* Predictions against published and measured figures, with the error of
 * each, for one set ("summit", "dgx-h100", "host"; NULL: all). Returns 0,
 * or the first failure. */
int weft_sim_validate(FILE *f, const char *set);

/* ---- simulator: pipeline schedules and layouts (src/sim/sim_api.c) --------
 * A pipeline schedule ("gpipe", "1f1b", "interleaved:V", "zb") over a
 * model's blocks: the partition, each chunk's costs, the step, bubble and
 * stash, from measured costs or from the model's FLOPs. */
/* 0 when the pipeline can run schedule over p ranks and m micro-batches
 * (names as weft_pipe_create reads them), else WEFT_EINVAL. */
int weft_sim_schedule_check(const char *schedule, int p, int m);

typedef struct {
    const char *schedule;
    int p, m;                     /* ranks, micro-batches a step */
    /* the costs: a file, one line a block "name fwd_s bwd_input_s
     * bwd_weight_s act_bytes state_bytes [out_bytes]" ('#' comments;
     * weft-train writes it); or, costs NULL, from model's FLOPs for
     * micro-batches of batch samples (GPT: of seq tokens; 0: ctx) at gflops
     * sustained GFLOP/s */
    const char *costs;
    const weft_model_config *model;
    int batch, seq;
    double gflops;
    const char *partition;        /* "auto" (balanced), "uniform" or "3,3,2" */
    double mem_cap;               /* bytes a chunk may hold; <= 0: none */
    double latency, bandwidth;    /* of the links, seconds and bytes/s; <= 0: free */
} weft_sim_pipe_query;

typedef struct weft_sim_pipeline weft_sim_pipeline;
typedef struct {
    char schedule[32];            /* the name back */
    int p, m, chunks, blocks;
    double step_s;                /* predicted seconds a step */
    double formula_bubble;        /* the textbook bubble, every chunk at the mean */
} weft_sim_pipe_summary;
typedef struct {
    int rank, first_block, last_block;
    double fwd_s, bwd_input_s, bwd_weight_s;  /* a micro-batch */
    int stash;                    /* micro-batches held at once */
    double mem_bytes;             /* state + stash x activations */
} weft_sim_pipe_chunk;
typedef struct {
    double busy_s, bubble;        /* bubble: idle share of the step */
    int peak_stash;
} weft_sim_pipe_rank;

/* err says what was wrong: a cost file's line, a partition, the memory cap. */
int weft_sim_pipeline_run(const weft_sim_pipe_query *q, weft_sim_pipeline **out, char *err,
                          size_t errlen);
void weft_sim_pipeline_free(weft_sim_pipeline *pl);
int weft_sim_pipeline_summary(const weft_sim_pipeline *pl, weft_sim_pipe_summary *out);
/* WEFT_EINVAL for a chunk or rank out of range. */
int weft_sim_pipeline_chunk(const weft_sim_pipeline *pl, int chunk, weft_sim_pipe_chunk *out);
int weft_sim_pipeline_rank(const weft_sim_pipeline *pl, int rank, weft_sim_pipe_rank *out);
/* The block's name from the costs; "" out of range. */
const char *weft_sim_pipeline_block_name(const weft_sim_pipeline *pl, int block);

/* Every tp x cp x dp x pp layout (ep inside dp) of a GPT or a Llama on a
 * machine, with each schedule,
 * micro-batch count, ZeRO stage and sequence parallelism that applies,
 * predicted and sorted fastest first (docs/SIMULATION.md, "Planning a
 * layout"). */
typedef struct {
    weft_model_config model;      /* a GPT or a Llama */
    int batch;                    /* global sequences a step */
    int seq;                      /* tokens a sequence; 0: the model's ctx */
    int ranks;
    const weft_sim_topo *topo;
    double gflops;                /* sustained GFLOP/s of a rank (of a core, on a
                                     topology with a cpu line) */
    double mem;                   /* bytes a rank may hold; <= 0: no limit */
    int optim_bytes;              /* optimiser bytes a parameter: 8 AdamW, 4 SGD */
    /* Calibration (docs/SIMULATION.md, "Calibrating the planner"): a file of
     * this host's cores, weft-tune's constants and measured block costs.
     * NULL or a missing file: every input assumed (unless calibrate).
     * calibrate: also take the cores and weft-tune's file from this host,
     * probe the block shapes the file lacks, and save it back. */
    const char *calib;
    int calibrate;
    /* expert parallelism (a Llama with experts) and context parallelism:
     * 0 none, -1 every degree weft-train can run, N > 0 that one */
    int ep, cp;
} weft_sim_plan_query;

enum { WEFT_SIM_PLAN_TP = 0, WEFT_SIM_PLAN_PP, WEFT_SIM_PLAN_DP, WEFT_SIM_PLAN_EP,
       WEFT_SIM_PLAN_CP, WEFT_SIM_PLAN_DIMS };
typedef struct {
    int tp, pp, dp, sp, zero;
    int ep, cp;                   /* ranks = tp x cp x dp x pp; ep groups inside dp */
    char schedule[32];
    int m;                        /* micro-batches a step */
    double step_s, pipe_s, tp_s, dp_s;  /* predicted seconds a step, and its parts */
    double ep_s, cp_s;            /* the experts' all-to-alls; the context ring's waits */
    double bubble;                /* the pipeline's mean idle share */
    double state_bytes, act_bytes, mem_bytes;  /* the fullest rank */
    double bytes[WEFT_SIM_PLAN_DIMS];   /* a rank's payload a step, the busiest */
    int link[WEFT_SIM_PLAN_DIMS]; /* link class the traffic tops out at; -1: none */
    int fits;                     /* within the query's mem */
} weft_sim_layout;

typedef struct weft_sim_plan weft_sim_plan;
/* WEFT_EINVAL with a reason in err for a query that makes no sense (not a
 * GPT, no ranks, ...); no layout fitting the memory is not an error. */
int weft_sim_plan_run(const weft_sim_plan_query *q, weft_sim_plan **out, char *err,
                      size_t errlen);
void weft_sim_plan_free(weft_sim_plan *pl);
/* Which inputs of the plan were measured and which assumed, one line. */
int weft_sim_plan_inputs(const weft_sim_plan *pl, char *buf, size_t len);
/* This host's calibration file (the default of weft-sim plan). */
int weft_sim_plan_calib_path(char *buf, size_t len);
int weft_sim_plan_count(const weft_sim_plan *pl);
/* The fastest layout that fits, and the one needing least memory; -1: none. */
int weft_sim_plan_best(const weft_sim_plan *pl);
int weft_sim_plan_smallest(const weft_sim_plan *pl);
/* Layout i, 0 fastest; WEFT_EINVAL out of range. */
int weft_sim_plan_layout(const weft_sim_plan *pl, int i, weft_sim_layout *out);
/* "tp=2 pp=2 dp=2 sp=0 schedule=1f1b m=8 zero=1 step_ms=12.345
 * mem_bytes=123456", as weft-train --layout reads it back; returns the
 * length as snprintf does (negative: WEFT_EINVAL). */
int weft_sim_plan_format(const weft_sim_plan *pl, int i, char *buf, size_t len);

/* ---- matmul kernels, the machine's peak, model FLOPs (src/train/engine_api.c)
 * What a benchmark of the engine measures against: the kernels the layers
 * multiply with, one thread's peak rate (the denominator of model-FLOPs
 * utilisation) and a step's model FLOPs (its numerator). */
typedef struct weft_matmul weft_matmul;
/* kernel "portable" or "openblas" (WEFT_ENOTSUP when not built in), on
 * threads threads (<= 0: WEFT_THREADS's default). */
int weft_matmul_create(weft_matmul **out, const char *kernel, int threads);
void weft_matmul_destroy(weft_matmul *mm);
/* Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C, op(X) transposed
 * where its flag (ta, tb) is set. */
int weft_matmul_gemm(weft_matmul *mm, int ta, int tb, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* One thread's single-precision GEMM rate with each kernel on a few shapes
 * of a transformer step: measured once per host and kept in a small cache
 * file (WEFT_PEAK_FILE names it), so that every process agrees. */
typedef struct {
    double gflops;        /* the peak: WEFT_PEAK_GFLOPS, else the faster kernel's
                             best shape */
    double port_gflops;   /* the portable kernel's best shape */
    double blas_gflops;   /* OpenBLAS's; 0 when not built in */
    double port_mix;      /* the portable kernel over all the shapes together */
    double blas_mix;      /* OpenBLAS's; the faster mix is what "auto" takes */
    char best[16];        /* that kernel: "portable" or "openblas" */
    char port_name[32];   /* "portable avx2" */
    char blas_name[48];   /* "openblas Zen"; "" when not built in */
    char source[320];     /* "measured now", the cache file, ... */
} weft_matmul_peak;
/* From the cache, measuring when it has none; errors: a bad WEFT_PEAK_*
 * value, no memory. */
int weft_matmul_peak_get(weft_matmul_peak *out);
/* Measures now and writes nothing. */
int weft_matmul_peak_measure(weft_matmul_peak *out);
/* The textbook bound at the clock /proc/cpuinfo shows (two FMA units x the
 * vector's lanes x 2 x the clock), GFLOP/s, and that clock in MHz; both 0
 * when unknown. A boosting CPU may run above it. */
int weft_matmul_peak_theory(double *gflops, double *mhz);
/* A bf16 run's peak (src/train/peak.c): one thread's rate of bf16
 * products (fp32 sums) on the same shapes, kept with the others (measure:
 * measured now, nothing written), and their kernel in words: "portable
 * amx" (AMX tiles), "portable avx512bf16", or "portable avx512 widened"
 * where bf16 is widened to fp32 (no AVX512-BF16, or WEFT_MATMUL_ISA below
 * it). */
int weft_matmul_peak_bf16(int measure, double *gflops, char *kernel, size_t cap);
/* One thread's best GFLOP/s over runs runs (after one more to warm up) of
 * C[M,N] = A[M,K] B[K,N] on the portable kernel capped at isa
 * (WEFT_MATMUL_ISA's words; NULL: as the variable says), with fp32
 * operands or, bf16 set, bf16 ones; kernel (cap bytes) gets its name.
 * WEFT_ECONFIG for another word, or amx or avx512bf16 on a CPU without it. */
int weft_matmul_rate(const char *isa, int bf16, int M, int N, int K, int runs, double *gflops,
                     char *kernel, size_t cap);

/* FLOPs of a training step's forward and backward for batch samples (GPT:
 * of seq tokens): 6 per parameter a token, plus a GPT's attention matmuls
 * (12 x layers x seq x width a token); an MLP sample is one token. */
int weft_model_flops(const weft_model_config *cfg, int batch, int seq, double *flops);
/* With the matmul kernel "auto": the choice made on the model's own
 * products in words, its length returned as snprintf does; 0 (buf "")
 * while none was made. */
int weft_model_matmul_choice(const weft_model *m, char *buf, size_t cap);

/* ---- rendezvous store server (src/bootstrap/store_api.c) ------------------
 * The key-value store ranks meet at (WEFT_MASTER_ADDR:WEFT_MASTER_PORT),
 * served outside every rank: by a launcher that must outlive its ranks
 * (weftrun --elastic) or a standalone process (weft-store, with
 * WEFT_STORE_EXTERNAL=1 in the ranks' environment). With a job secret
 * every client proves it (HMAC-SHA256) or is dropped. */
typedef struct weft_store_server weft_store_server;
/* Serves host:port (host NULL: all addresses; port 0: any) from a new
 * thread; *port_out gets the bound port. secret NULL: no authentication.
 * err says why it cannot listen. */
int weft_store_server_start(weft_store_server **out, const char *host, int port, int *port_out,
                            const char *secret, char *err, size_t errlen);
/* The same to be served by weft_store_server_run in the calling thread;
 * clients prove WEFT_JOB_SECRET when that is set. */
int weft_store_server_create(weft_store_server **out, const char *host, int port,
                             int *port_out, char *err, size_t errlen);
/* Serves until weft_store_server_stop is called from another thread. */
int weft_store_server_run(weft_store_server *s);
/* Stops, joins and frees; s may be NULL. */
void weft_store_server_stop(weft_store_server *s);
/* A TCP port free on this host outside the kernel's ephemeral range (which
 * any connection's source port may take before a listener binds it), to
 * hand to a store not yet started. WEFT_ESYS (errno says why) when none. */
int weft_spare_port(int *port);

/* ---- the cost model and local reductions (src/coll/tune/tune_api.c) -------
 * The α-β-γ constants WEFT_ALGO_AUTO chooses algorithms by (docs/TUNING.md):
 * what weft-tune measures and WEFT_TUNE / WEFT_TUNE_FILE set. Seconds per
 * round, per message, per byte. */
typedef struct {
    double alpha;       /* a round on a host with a core per rank */
    double alpha_over;  /* a round on a host with more ranks than cores */
    double msg;         /* each further message of a round */
    double msg_over;    /* the same on an oversubscribed host */
    double beta;        /* a byte between ranks on one host */
    double gamma;       /* a byte reduced */
    double alpha_inter; /* a round that crosses hosts */
    double beta_inter;  /* a byte leaving a host */
    double alpha_wan;   /* a round that crosses clusters; < 0: not set */
    double beta_wan;    /* a byte to another cluster; < 0: not set */
    int cores;          /* per host; 0: oversubscription not modelled */
    int shm;            /* ranks on one host share memory (WEFT_SHM) */
} weft_cost_params;
/* The library's constants for its kind of host, ranks on one host talking
 * through shared memory (shm 1) or TCP over loopback (shm 0); shm < 0: as
 * WEFT_SHM says (WEFT_ECONFIG, said on stderr, for a bad value). */
int weft_cost_default(weft_cost_params *c, int shm);
/* "alpha=30e-6,beta=5e-10 gamma=1e-10": the keys above separated by
 * commas, blanks or newlines, '#' to the end of a line a comment (the
 * format of WEFT_TUNE and WEFT_TUNE_FILE). Keys before an error stay set.
 * WEFT_ECONFIG for an unknown key or a bad or negative number; *where (if
 * not NULL) then points at it. */
int weft_cost_parse(weft_cost_params *c, const char *text, const char **where);
/* The table of predicted times per algorithm and size, 8 B to max_bytes,
 * for nranks ranks on one host, as the selector weighs them. */
int weft_cost_print(const weft_cost_params *c, int nranks, weft_coll_kind kind,
                    uint64_t max_bytes, FILE *f);
/* The algorithm WEFT_ALGO_AUTO runs a call of bytes (esize an element) with
 * on c now; WEFT_ALGO_AUTO until c's first auto call has made its
 * selector. */
int weft_comm_auto_algo(const weft_comm *c, weft_coll_kind kind, uint64_t bytes,
                        uint32_t esize, weft_algo *out);
/* The most calls of one size WEFT_ALGO_AUTO spends trying close
 * candidates in turn (WEFT_AUTOTUNE) before it settles: a benchmark's
 * warm-up, so that what it times is the settled choice. */
#define WEFT_AUTO_TRIAL_CALLS 16
/* dst[i] = op(a[i], b[i]) for count elements, with the kernels the
 * collectives reduce with (WEFT_AVG adds, as WEFT_SUM). dst may be a or b;
 * no other overlap. */
int weft_reduce_local(void *dst, const void *a, const void *b, size_t count, weft_dtype t,
                      weft_op op);

/* ---- parameter server (src/ps/) -------------------------------------------
 * k servers hold the parameters, w workers compute gradients
 * (docs/PARAMETER_SERVER.md). Every tensor is registered under a key and
 * cut into chunks spread round-robin over the servers; a worker pushes
 * gradients and pulls parameters, and each server applies its own
 * optimiser to the chunks it owns. Under weftrun -n W --servers K the
 * world is W + K ranks: workers 0..W-1, servers W..W+K-1.
 *
 * Worker loop:  init; register(key, params, n) once; pull(key, params);
 *               each step: zero_grad, forward, backward,
 *               push(key, grads) + clock + pull(key, params), wait both;
 *               shutdown; destroy.
 * Server:       init; serve (returns once every worker shut down or died);
 *               destroy. */
typedef enum {
    WEFT_PS_BSP = 0, /* a step's update is applied once every live worker pushed
                        it; a pull at clock c sees exactly steps 0..c-1 */
    WEFT_PS_SSP = 1, /* each push applied on arrival; a pull at clock c waits
                        until every live worker has reached clock c - s, so it
                        sees all updates of clocks <= c-s-1 (and its own) */
    WEFT_PS_ASP = 2  /* each push applied on arrival; pulls never wait */
} weft_ps_consistency;

typedef enum { WEFT_PS_ROLE_AUTO = 0, WEFT_PS_ROLE_WORKER = 1, WEFT_PS_ROLE_SERVER = 2 } weft_ps_role_kind;

typedef struct {
    int32_t role;            /* weft_ps_role_kind; AUTO: WEFT_ROLE, else rank < workers */
    int32_t num_workers;     /* <= 0: WEFT_NUM_WORKERS (else every rank but one) */
    int32_t consistency;     /* weft_ps_consistency (servers and workers agree) */
    int32_t staleness;       /* SSP's s >= 0 (0 behaves as BSP's visibility) */
    weft_optim_config optim; /* servers' optimiser (SGD momentum/nesterov, AdamW) */
    weft_lr_schedule lr;     /* at each chunk's update count (BSP: the step) */
    double dead_worker_wait_s; /* BSP/SSP: a worker silent this long while others
                                  wait on it is declared dead; <= 0: 60 */
    double timeout_s;        /* a worker's wait on a server, and how long it tries to
                                reconnect to a durable one; <= 0: WEFT_TIMEOUT, else 300 */
    const char *ckpt_dir;    /* servers: shard checkpoints + update log here;
                                NULL: none (acknowledgements are not durable) */
    int32_t ckpt_interval;   /* full shard checkpoint every this many updates
                                (the log covers those between); <= 0: 1000 */
    int32_t chunk_max;       /* most elements per chunk; <= 0: 1 << 15 (128 KiB,
                                small enough for push and pull to overlap) */
    int32_t chunk_min;       /* fewest elements per chunk when spreading a
                                tensor over the servers; <= 0: 4096 */
} weft_ps_config;

/* BSP, SGD (momentum 0.9) at constant lr 0.1, no checkpoints. */
void weft_ps_config_default(weft_ps_config *c);
/* "bsp", "ssp:S", "asp" -> consistency and staleness. */
int weft_ps_consistency_parse(const char *s, weft_ps_config *c);

typedef struct weft_ps weft_ps;
typedef struct weft_ps_request weft_ps_request;

/* world: the job's communicator (W + K ranks), used for its rank and its
 * rendezvous store; NULL: rank, size, store address and secret from the
 * environment as weft_config_from_env reads them (a server restarted on
 * its own). No collective: servers publish their addresses in the store,
 * and workers connect to every server (authenticated with the job secret)
 * at their first weft_ps_* call, so every rank may still take part in,
 * e.g., a weft_comm_split of world before the servers call
 * weft_ps_serve. */
int weft_ps_init(weft_ps **out, weft_comm *world, const weft_ps_config *cfg);
void weft_ps_destroy(weft_ps *ps); /* ps may be NULL; closes without a goodbye */
int weft_ps_role(const weft_ps *ps);        /* WEFT_PS_ROLE_WORKER or _SERVER */
int weft_ps_rank(const weft_ps *ps);        /* 0..W-1 or 0..K-1 within the role */
int weft_ps_num_workers(const weft_ps *ps);
int weft_ps_num_servers(const weft_ps *ps);
/* Last error message ("" when none): names the server or worker and cause. */
const char *weft_ps_error(const weft_ps *ps);

/* Worker. Declare tensor `key` of count floats; every worker registers the
 * same keys and counts. The servers take worker 0's values as the initial
 * parameters unless they already hold the tensor (a resumed server keeps
 * its checkpoint); values may be NULL on other workers. Blocking: returns
 * once every chunk exists. Pull afterwards to get the servers' values. */
int weft_ps_register(weft_ps *ps, uint32_t key, const float *values, size_t count);
/* Worker, non-blocking: send the tensor's gradient (count floats as
 * registered; the buffer must stay untouched until the request is
 * waited for; zero-copy). The request completes when every server has
 * acknowledged its chunks: applied, and durable when ckpt_dir is set
 * (BSP: once the step's aggregate was applied). */
int weft_ps_push(weft_ps *ps, uint32_t key, const float *grads, weft_ps_request **req);
/* Worker, non-blocking: fetch the parameters into params (written directly
 * as chunks arrive), as the consistency mode allows at this worker's clock. */
int weft_ps_pull(weft_ps *ps, uint32_t key, float *params, weft_ps_request **req);
/* Progress every outstanding request until req completes; returns its
 * result and frees it. WEFT_EPEER: a server died ("parameter server 1
 * (rank 5) died ..."; a server with ckpt_dir is first reconnected to for
 * up to timeout_s, and what it had not answered is sent again, so a
 * restarted one costs no error); WEFT_ETIMEDOUT: no reply within
 * timeout_s. */
int weft_ps_wait(weft_ps_request *req);
int weft_ps_test(weft_ps_request *req, int *done); /* *done = 1: freed, result returned */
/* End of this worker's step: clock += 1 (sent to every server; does not block). */
int weft_ps_clock(weft_ps *ps);
/* This worker's clock. Register moves it to where the servers have it:
 * under BSP their step (that of the chunk furthest behind), so a worker
 * joining resumed servers, or restarted and re-admitted, goes on from
 * there (a push for a step a chunk already applied is acknowledged and
 * dropped); under SSP/ASP a re-admitted worker's clock is the slowest
 * live worker's. */
int64_t weft_ps_clock_value(const weft_ps *ps);
/* Every live worker (servers count the dead out); blocking. */
int weft_ps_barrier(weft_ps *ps);
/* Ask every server to write its shard checkpoint now; blocking. WEFT_ENOTSUP
 * when the servers have no ckpt_dir. */
int weft_ps_checkpoint(weft_ps *ps);
/* Worker: finish outstanding requests and tell the servers this worker is
 * done (servers then stop waiting for it). */
int weft_ps_shutdown(weft_ps *ps);

/* Server: serve until every worker shut down or died (when all died, after
 * waiting dead_worker_wait_s for a restarted one, which is re-admitted).
 * Resumes from ckpt_dir's checkpoint and log when they exist. Returns 0,
 * or WEFT_EPEER when no worker shut down cleanly. */
int weft_ps_serve(weft_ps *ps);

/* Bytes this process sent to / received from its peers (headers included). */
void weft_ps_bytes(const weft_ps *ps, uint64_t *sent, uint64_t *received);

/* ---- Training runs ---------------------------------------------------------
 *
 * A weft_run is one training run on one rank of a job: the model, its data
 * and loader, the optimiser, the sync mode, ZeRO, the pipeline and tensor
 * layout, checkpoints and elastic recovery, all set up from one
 * configuration. weft-train is a short program over this API; the Python
 * package's weft.Run is another. The loop reads:
 *
 *     weft_run_config *cfg;
 *     weft_run_config_new(&cfg);
 *     weft_run_config_set(cfg, "model", "gpt");
 *     weft_run_config_set(cfg, "tp", "2");
 *     weft_run *run;
 *     int rc = weft_run_open(cfg, comm, &run);     (comm NULL: one process)
 *     while (rc >= 0 && (rc = weft_run_step(run)) != WEFT_RUN_DONE)
 *         if (rc == WEFT_RUN_LEFT || rc == WEFT_RUN_REJOIN)
 *             break;                               (this rank is out of the job)
 *     if (rc == WEFT_RUN_DONE) rc = weft_run_finish(run);
 *     if (rc < 0) fprintf(stderr, "%s\n", weft_run_error(run));
 *     weft_run_close(run);
 *
 * Configuration keys are weft-train's long options without their dashes
 * ("model", "data", "steps", "batch", "zero", "pp", "tp", "cp", "sync",
 * "elastic", ...; docs/TRAINING.md); flags take a NULL value. The library
 * prints nothing: banners, summaries and warnings go to the log callback
 * as whole lines (without their line end), and each step's outcome is read
 * with weft_run_info. The metrics file ("metrics") is the library's: the
 * job's rank 0 writes a row a step and one an evaluation. */
typedef struct weft_run_config weft_run_config;
typedef struct weft_run weft_run;

/* Outcomes of weft_run_step beside 0 (a step done) and the WEFT_E* codes. */
enum {
    WEFT_RUN_DONE = 1,      /* every planned step is done (or --stop-at reached):
                             * weft_run_finish next */
    WEFT_RUN_RECOVERED = 2, /* elastic: a rank failed or joined and the job
                             * recovered; no step was taken (the next call
                             * takes the step again, on the new membership) */
    WEFT_RUN_LEFT = 3,      /* elastic: this rank's replica lost a rank and this
                             * rank left the job; the others finish the run.
                             * weft_run_close next */
    WEFT_RUN_REJOIN = 4     /* elastic across clusters: this rank's cluster lost a
                             * rank, so this rank left the job as a failed one
                             * would: a tool ends its process at once with status
                             * WEFT_RUN_REJOIN_STATUS (no weft_run_close, no
                             * weft_comm_destroy), so that a launcher restarting
                             * the dead (weftrun --restarts) starts the cluster
                             * again whole */
};
#define WEFT_RUN_REJOIN_STATUS 75 /* EX_TEMPFAIL */

/* Log levels of the callback's lines. */
enum {
    WEFT_RUN_OUT = 0,  /* a report: the banner, summaries, the evaluation */
    WEFT_RUN_WARN = 1, /* something the user should know (weft-train: stderr) */
    WEFT_RUN_NOTE = 2  /* progress of membership changes and the like (stderr) */
};
typedef void (*weft_run_log_fn)(void *arg, int level, const char *line);

int weft_run_config_new(weft_run_config **out);
/* WEFT_ENOTSUP for an unknown key ("unknown option '--KEY'"), WEFT_EINVAL
 * for a bad value, a value given to a flag or none to a key that takes
 * one ("bad argument '--KEY'"); weft_run_config_error names the option and
 * an accepted form. */
int weft_run_config_set(weft_run_config *cfg, const char *key, const char *value);
/* The options against each other (weft_run_open checks them too, first):
 * WEFT_ECONFIG with the message in weft_run_config_error. joining: also
 * what a process that is to join a running elastic job (weft_comm_join)
 * cannot carry; call it before joining. */
int weft_run_config_check(weft_run_config *cfg, int joining);
const char *weft_run_config_error(const weft_run_config *cfg);
/* Where the run's lines go (NULL: nowhere). Copied into the run at open. */
void weft_run_config_log(weft_run_config *cfg, weft_run_log_fn fn, void *arg);
void weft_run_config_free(weft_run_config *cfg);

/* Sets the run up on comm (NULL: one process; collective over comm
 * otherwise). joined: this process came in with weft_comm_join into a
 * running elastic job. Only the job's rank 0 reports (the others run as
 * if quiet). *out is set whenever memory allows, also on failure, so that
 * weft_run_error says why; close it in either case.
 *
 * mode ps (weftrun --servers K): the job's workers and servers each open
 * a run. A worker's weft_run_step is one step (push, clock, pull) and
 * weft_run_finish shuts the servers down, reports and evaluates; a
 * server's first weft_run_step serves until the workers are done and
 * returns WEFT_RUN_DONE, and its weft_run_finish has nothing to do. */
int weft_run_open(const weft_run_config *cfg, weft_comm *comm, int joined, weft_run **out);
/* One training step (collective over the job): 0, or a WEFT_RUN_* outcome,
 * or a WEFT_E* code (the run cannot go on; weft_run_error says why). */
int weft_run_step(weft_run *run);
/* After the last step: the last averages, the checkpoint (save), the
 * summary and the final evaluation (unless no-eval). */
int weft_run_finish(weft_run *run);
/* Collective: the evaluation of the model as it is now (accuracy or
 * exact-match on the held-out set, reported through the log and the
 * metrics file). Between steps, before weft_run_finish; not in mode ps. */
int weft_run_eval(weft_run *run);
/* Collective: a checkpoint of the run as it is now, at path (resumable
 * with "resume"). Between steps, before weft_run_finish; not in mode ps. */
int weft_run_save(weft_run *run, const char *path);
/* Frees the run; the communicator stays the caller's. An elastic
 * membership change replaces (and destroys) the one given to open: take
 * weft_run_comm before closing, and destroy that one (NULL: none left). */
int weft_run_close(weft_run *run);
const char *weft_run_error(const weft_run *run);

typedef struct {
    long step;         /* steps done (the next step's index) */
    long steps;        /* the planned run's steps */
    long first_step;   /* where this launch started (a resumed run: > 0) */
    double epoch;
    float loss;        /* the last step's mean loss over the global batch */
    float gnorm;       /* its gradient norm; < 0: not measured */
    double lr;
    int correct, seen; /* correct predictions of the last step, out of seen
                        * (samples, times tokens per sample for a GPT) */
    int skip;          /* backup sync: the step was decided without this rank */
    double bubble;     /* pipeline: idle share of the last step; < 0: none */
    int rank, world;   /* this rank in the job now, and the job's ranks */
    int lead;          /* this rank reports for the job */
    int global_batch;  /* samples per step over the job */
    double mfu;        /* model-FLOPs utilisation of the last step; < 0: unknown */
    long end;          /* where this launch stops (stop-at, else steps) */
    double elapsed;    /* seconds from this launch's first step to the last's end */
    double rate;       /* samples a second over the launch so far */
    int quiet;         /* this rank draws no progress (quiet, or not the lead) */
    long log_every;    /* the plain progress line's period (log-every, else steps/20) */
} weft_run_info;

int weft_run_info_get(const weft_run *run, weft_run_info *out);
/* The job communicator now (elastic membership changes replace it; NULL
 * when this process left or ran alone). */
weft_comm *weft_run_comm(const weft_run *run);
/* The model being trained (on this rank: its stage or tensor part). */
weft_model *weft_run_model(const weft_run *run);

/* ---- the compute power network (src/cpn/, docs/CPN.md) ------------------
 * weft-cpn's subcommands, each a program's main over its own arguments
 * (argv[0] the subcommand's name): probe measures this cluster, serve runs
 * the registry, report publishes a description and heartbeats, clusters
 * and links print the registry, plan places a job on clusters. They print
 * to stdout and stderr and return 0 or a WEFT_E*. */
int weft_cpn_probe_main(int argc, char **argv);
int weft_cpn_serve_main(int argc, char **argv);
int weft_cpn_report_main(int argc, char **argv);
int weft_cpn_clusters_main(int argc, char **argv);
int weft_cpn_links_main(int argc, char **argv);
int weft_cpn_plan_main(int argc, char **argv);
/* run starts a plan's parts through their clusters' launchers as one job
 * and watches them; status prints each part's progress against the plan. */
int weft_cpn_run_main(int argc, char **argv);
int weft_cpn_status_main(int argc, char **argv);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
