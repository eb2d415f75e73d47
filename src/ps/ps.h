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
    uint64_t pushes;         /* pushes issued */
} ps_tensor;

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
    int *srv_rc;             /* 0 while the server is alive */
    ps_tensor *tens;
    int ntens, tens_cap;
    struct weft_ps_request *reqs; /* in flight */
    uint64_t next_id;
    int64_t clock;
    double beat_at;          /* last heartbeat (see beat in ps_worker.c) */
    int bye;                 /* shutdown done */
    char errbuf[PS_ERR_MAX + 1];
    /* server */
    ps_server *srvst;
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int ps_fail(weft_ps *ps, int code, const char *fmt, ...);

/* Worker: connect to every server (ps_worker.c). */
int ps_worker_connect(weft_ps *ps, store_client *st);
void ps_worker_free(weft_ps *ps);
void ps_server_free(weft_ps *ps);
/* Bytes the server side sent (returned) and received (added to *recvd). */
uint64_t ps_server_bytes(const weft_ps *ps, uint64_t *recvd);

#endif
