/* Server-side state: the chunks this server owns (ps_table.c), the workers
 * it serves, requests waiting on the consistency rule, and replies held
 * back until the updates they reveal are durable (ps_ckpt.c). */
#ifndef WEFT_PS_SERVER_H
#define WEFT_PS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "ps/ps.h"

typedef struct ps_chunk {
    struct ps_chunk *hnext;
    uint32_t key, idx;
    size_t n;
    uint64_t total;     /* elements of the whole tensor */
    float *param;
    weft_optim *opt;
    int64_t version;    /* updates applied (= optimiser steps) */
    float *acc;         /* BSP: the step's gradients summed so far */
    int contrib;
    uint64_t *push_id;  /* BSP, per worker: its push in this step (0: none) */
    uint64_t *push_gen; /* BSP, per worker: the connection that push came on */
    uint64_t *seq;      /* per worker: sequence number of its last push taken in
                           (applied, dropped as repeated, or BSP: summed) */
    uint64_t *dseq;     /* per worker: the last one whose effect is logged; a
                           restarted server resumes from these */
} ps_chunk;

/* A request parked until the consistency rule lets it through, or a reply
 * held until the log is on disk. */
typedef struct ps_wait {
    struct ps_wait *next;
    int w;
    uint64_t gen;       /* the worker's connection it came on / goes to */
    ps_msg m;
    void *payload;
} ps_wait;

enum { WK_EXPECTED = 0, WK_LIVE, WK_BYE, WK_DEAD };

typedef struct {
    ps_link l;
    int state;
    int64_t clock;
    double heard;       /* last message (or start) */
    uint64_t barrier;   /* pending barrier request id, 0: none */
    uint64_t gen;       /* connections adopted so far: replies and parked
                           requests of an earlier one are dropped */
    double died_at;     /* when it was counted out (for the re-admission report) */
} ps_wk;

struct ps_server {
    ps_wk *wk;
    ps_chunk **bucket;
    size_t nbuckets, nchunks;
    ps_wait *waits;     /* parked requests, in arrival order */
    ps_wait *held, **held_tail;
    uint64_t sent, recvd;
    uint64_t incarnation; /* told to workers: a new one means this server restarted */
    int resumed;          /* started from a checkpoint or log */
    /* durability (ps_ckpt.c) */
    int logfd;          /* -1: no ckpt_dir */
    uint64_t seq;       /* last logged update */
    int64_t since_ckpt;
    int dirty;          /* logged, not yet synced */
    char *ckpt_path, *log_path;
};

/* The server's state, resumed from ckpt_dir when it holds one (done by
 * weft_ps_serve; ps_server_free undoes it). */
int ps_server_init(weft_ps *ps);

ps_chunk *ps_table_find(ps_server *sv, uint32_t key, uint32_t idx);
/* A new chunk of n elements with the given values and fresh optimiser state. */
int ps_table_add(weft_ps *ps, uint32_t key, uint32_t idx, uint64_t total, size_t n,
              const float *values, ps_chunk **out);
/* Optimiser step on c with grad at lr; version += 1. */
int ps_table_apply(ps_chunk *c, const float *grad, float lr);
void ps_table_free(ps_server *sv);
/* Chunks in a stable order (for checkpoints): fills out[0..nchunks). */
void ps_table_list(ps_server *sv, ps_chunk **out);

/* Workers as the server sees them (ps_rules.c). */
int ps_wk_live(const ps_wk *k);           /* expected or connected, not gone */
int ps_wk_reachable(const ps_wk *k);      /* connected and owed replies */
int ps_wk_live_count(const weft_ps *ps);

/* Requests (ps_rules.c). ps_rules_handle consumes payload unless it returns
 * PARK; negative: the server cannot go on. */
enum { DONE = 0, PARK = 1 };
int ps_rules_handle(weft_ps *ps, int w, const ps_msg *m, void *payload);
int ps_rules_park(weft_ps *ps, int w, const ps_msg *m, void *payload);
/* Give every parked request another chance, until nothing moves. */
int ps_rules_retry(weft_ps *ps);

/* Durability: the update log and shard checkpoints. Without ckpt_dir these
 * do nothing. */
int ps_ckpt_recover(weft_ps *ps);  /* load checkpoint, replay log, open log */
enum { LOG_REC_INIT = 1, LOG_REC_APPLY = 2, LOG_REC_SEQ = 3 };
int ps_ckpt_log(weft_ps *ps, int type, const ps_chunk *c, const float *data, float lr);
/* Log c->dseq (the per-worker sequence numbers whose pushes are in effect). */
int ps_ckpt_log_seq(weft_ps *ps, const ps_chunk *c);
int ps_ckpt_sync(weft_ps *ps);
int ps_ckpt_save(weft_ps *ps);
void ps_ckpt_close(ps_server *sv);

#endif
