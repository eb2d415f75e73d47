/* The board of the flat algorithm (coll/local/flat.h): one POSIX shared segment
 * per communicator, in which every rank has a slot per call parity.
 *
 *   head      magic, sizes, the futex word
 *   rank r    its pid (and pid namespace), then per parity a post: the
 *             call's sequence number and description, and its payload
 *             when that is at most FLAT_INLINE bytes
 *   data      per rank and parity, FLAT_SLOT bytes
 *
 * Rank 0 creates the segment as /weft-<comm id>-flat-<its pid>; the
 * others map it once they learn the name, and every rank that mapped it
 * unlinks it when all have (or when it gives up). A name is left in
 * /dev/shm only when rank 0 dies after making it and before anyone else
 * mapped it; flat_board_reap removes such names whose creator is gone.
 *
 * Large all-reduces (more than a slot) run through a second segment, the
 * pipe, made the same way at the first such call and named like the
 * board with "-pipe" after the pid:
 *
 *   head      magic, sizes
 *   step      per rank, its own cache line: the pipeline steps it has done
 *   in        per rank and chunk parity, FLAT_CHUNK bytes of its input
 *   out       per chunk parity, FLAT_CHUNK bytes of the reduced chunk
 *
 * p x (2 x FLAT_CHUNK) + 2 x FLAT_CHUNK bytes whatever the message size. */
#ifndef WEFT_COLL_FLAT_BOARD_H
#define WEFT_COLL_FLAT_BOARD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FLAT_SLOT (16u << 10) /* bytes a rank can post in one call */
#define FLAT_NAME_MAX 64
#ifndef FLAT_CHUNK
#define FLAT_CHUNK (256u << 10) /* bytes of a rank's input a pipeline step takes */
#endif

#define FLAT_INLINE 32 /* posts this small travel in the post's own cache line */

/* What a rank posts: enough of the call to tell a mismatched peer, and a
 * small payload. One cache line, written by its rank only; seq last. */
typedef struct {
    _Alignas(64) _Atomic uint64_t seq; /* the call (1, 2, ...); 0: none yet */
    uint64_t opseq;                    /* the operation's number on the communicator */
    uint64_t count;
    int32_t root;
    uint8_t kind, dtype, op, flags; /* flags: the call's FRAME_* */
    _Alignas(8) char inl[FLAT_INLINE];
} flat_post;

typedef struct {
    int32_t pid;
    _Atomic uint32_t cpu;    /* 1 + the CPU it last posted from (0: unknown); small.c */
    uint64_t pidns;          /* inode of its pid namespace; 0: unknown */
    flat_post post[2];
} flat_rank;

typedef struct {
    uint32_t magic, version;
    uint32_t nranks, slot;
    uint64_t comm_id;
    /* the futex a waiting rank sleeps on, rung only when sleepers > 0 */
    _Alignas(64) _Atomic uint32_t bell;
    _Atomic uint32_t sleepers;
} flat_head;

typedef struct {
    flat_head *head;
    flat_rank *ranks;  /* [nranks] */
    char *data;        /* [nranks][2][FLAT_SLOT] */
    size_t map_len;
    int nranks;
    char name[FLAT_NAME_MAX]; /* while this rank still has to unlink it */
} flat_board;

typedef struct {
    _Alignas(64) _Atomic uint64_t done; /* steps done, over all calls */
    char pad[56];
} flat_step;

typedef struct {
    uint32_t magic, version;
    uint32_t nranks, chunk;
    uint64_t comm_id;
} flat_pipe_head;

typedef struct {
    flat_pipe_head *head;
    flat_step *step;   /* [nranks] */
    char *in;          /* [nranks][2][FLAT_CHUNK] */
    char *out;         /* [2][FLAT_CHUNK] */
    size_t map_len;
    int nranks;
    char name[FLAT_NAME_MAX];
} flat_pipe;

/* Rank 0: make, size (pages reserved) and map the board of nranks ranks.
 * WEFT_ESYS with err filled on failure (*b left empty). */
int flat_board_create(flat_board *b, uint64_t comm_id, int nranks, char *err, size_t errlen);
/* The others: map the board rank 0 made (its pid names it). */
int flat_board_attach(flat_board *b, uint64_t comm_id, int nranks, long creator_pid,
                      char *err, size_t errlen);
/* Fill in this rank's pid (and pid namespace). */
void flat_board_join(flat_board *b, int rank);
/* Unlink the name if this rank still holds it. */
void flat_board_unlink(flat_board *b);
/* Unlink every board name of this communicator whose creator has died. */
void flat_board_reap(uint64_t comm_id);
/* Unmap (and unlink, if still held). */
void flat_board_close(flat_board *b);

/* The same for the pipe: made by rank 0, mapped by the others; its name
 * is unlinked by every rank that mapped it once all have it
 * (flat_pipe_unlink) and reaped like the board's. */
int flat_pipe_create(flat_pipe *x, uint64_t comm_id, int nranks, char *err, size_t errlen);
int flat_pipe_attach(flat_pipe *x, uint64_t comm_id, int nranks, long creator_pid,
                     char *err, size_t errlen);
void flat_pipe_unlink(flat_pipe *x);
void flat_pipe_close(flat_pipe *x);

static inline char *flat_pipe_in(const flat_pipe *x, int rank, int parity)
{
    return x->in + ((size_t)rank * 2 + (size_t)parity) * FLAT_CHUNK;
}

/* Where a rank's payload of `bytes` lies for calls of this parity. */
static inline char *flat_board_slot(const flat_board *b, int rank, int parity, size_t bytes)
{
    if (bytes <= FLAT_INLINE)
        return b->ranks[rank].post[parity].inl;
    return b->data + ((size_t)rank * 2 + (size_t)parity) * FLAT_SLOT;
}

#endif
