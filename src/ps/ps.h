/* The parameter-server handle, shared by the worker side (ps_worker.c), the
 * server side (ps_server.c) and set-up (ps_init.c). */
#ifndef WEFT_PS_PS_H
#define WEFT_PS_PS_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/store.h"
#include "core/param.h"
#include "ps/ps_link.h"
#include "transport/tcp.h"
#include "weft.h"

#define PS_DEFAULT_CHUNK_MIN 4096
#define PS_DEFAULT_CHUNK_MAX (1 << 15)

typedef struct {
    uint32_t key;
    size_t count, nchunks;
    uint64_t *seq;           /* per chunk: sequence number of the last push */
} ps_tensor;

/* One message of a request, kept until its server answers it, so that it
 * can be sent again on a new connection. */
typedef struct {
    int s;                   /* server */
    int done;
    ps_msg hdr;
    const void *data;        /* payload: the caller's buffer */
} ps_part;

/* A worker's view of one server beyond its link. */
typedef struct {
    uint64_t inc;            /* incarnation from its hello; 0: none yet */
    int durable;             /* its updates survive a restart */
    int hello;               /* the current connection's hello has arrived */
    uint64_t newinc;         /* incarnation in the current connection's hello */
    double lost_at;          /* > 0: connection lost, reconnecting */
    double ping_at;          /* the last ping sent (see ping in ps_worker.c) */
    double unanswered;       /* > 0: when the first ping not yet answered went out */
    double next_try, backoff;
    char why[256];           /* how it was lost */
    char last[256];          /* why the last try to reconnect failed */
} ps_srv;

typedef struct ps_server ps_server;

struct weft_ps_request {
    struct weft_ps_request *next;
    weft_ps *ps;
    uint64_t id;
    int type;         /* PS_INIT, PS_PUSH, ... */
    int tensor;       /* index in ps->tens, or -1 */
    float *dst;       /* pull */
    int pending;      /* replies still to come */
    int64_t minv;     /* register: lowest update count among the chunks */
    int *pend;        /* per server */
    ps_part *parts;
    int nparts, cap;
    int rc;
};

struct weft_ps {
    int role;                /* WEFT_PS_ROLE_WORKER or _SERVER */
    int rank;                /* within the role */
    int world_rank, world_size, nworkers, nservers;
    weft_ps_config cfg;      /* ckpt_dir points at ckpt_dir_buf */
    char *ckpt_dir_buf;
    double timeout_s, connect_timeout_s;
    int loglevel;
    param_set params;        /* every WEFT_* variable: the world's, or read at init */
    uint64_t comm_id;
    char *secret;
    char store_host[256];
    int store_port;
    tcp_net net;
    char addr[SOCK_ADDR_MAX];
    uint64_t sent, recvd;    /* by links already closed */
    char err[512];
    /* worker */
    store_client *store;     /* until connected to the servers */
    int connected;
    ps_link *srv;            /* per server */
    int *srv_rc;             /* 0 while the server is alive (or may come back) */
    ps_srv *sx;              /* per server */
    ps_tensor *tens;
    int ntens, tens_cap;
    struct weft_ps_request *reqs; /* in flight */
    uint64_t next_id;
    int64_t clock;
    double beat_at;          /* last heartbeat (see beat in ps_worker.c) */
    uint64_t pong_bytes;     /* answers to pings: a sign of life, not of progress */
    int bye;                 /* shutdown done */
    char errbuf[PS_ERR_MAX + 1];
    /* server */
    ps_server *srvst;
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int ps_fail(weft_ps *ps, int code, const char *fmt, ...);

/* Worker connections (ps_conn.c): connect to every server through
 * ps->store; a lost connection (down) is retried (retry: when its backoff
 * allows) until timeout_s, then the server is lost. */
int ps_worker_connect(weft_ps *ps);
int ps_server_world_rank(const weft_ps *ps, int s);
void ps_srv_down(weft_ps *ps, int s, int rc, const char *why);
void ps_srv_retry(weft_ps *ps, int s);
/* Worker requests (ps_worker.c): read what server s sent; fail what waits
 * on a server that is gone for good. */
int ps_worker_read(weft_ps *ps, int s, char *err, size_t errlen);
void ps_server_lost(weft_ps *ps, int s, int rc, const char *why);
void ps_worker_free(weft_ps *ps);
void ps_server_free(weft_ps *ps);
/* Bytes the server side sent (returned) and received (added to *recvd). */
uint64_t ps_server_bytes(const weft_ps *ps, uint64_t *recvd);

#endif
