/* The communicator's state: made, asked about, and told of errors. */
#include "coll/comm_core.h"

#include "core/log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int comm_fail(weft_comm *c, int code, const char *fmt, ...)
{
    char msg[sizeof c->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(c->err, msg, sizeof msg);
    log_msg(c->loglevel, LOG_DEBUG, c->rank, "%s", msg);
    return code;
}

/* FNV-1a: a stable id that every member computes from the same inputs. */
uint64_t comm_derive_id(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    if (!h)
        h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* WEFT_SPIN_US: how long a waiting rank polls (yielding) before it
 * sleeps; 0 sleeps at once. */
static double spin_from_env(const param_set *p)
{
    double us = p->spin_us;
    return us > 0 ? us * 1e-6 : 0;
}

weft_comm *comm_alloc(int rank, int size, const param_set *p)
{
    weft_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->size = size;
    c->local_rank = -1;
    c->params = *p;
    c->spin_s = spin_from_env(p);
    c->spin_yields = -1;
    c->shm_on = p->shm;
    c->shm_bytes = shm_ring_bytes(p);
    c->net.lfd = -1;
    c->fail_peer = -1;
    c->store_rank = -1;
    c->host = calloc((size_t)size, sizeof *c->host);
    c->nhosts = 1;
    c->stage = calloc((size_t)size, sizeof *c->stage);
    sched_init(&c->sched);
    pthread_mutex_init(&c->amu, NULL);
    pthread_cond_init(&c->acv, NULL);
    pthread_cond_init(&c->dcv, NULL);
    if (pipe2(c->abort_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        c->abort_pipe[0] = c->abort_pipe[1] = -1;
    if (!c->host || !c->stage) {
        free(c->host);
        free(c->stage);
        free(c);
        return NULL;
    }
    return c;
}

int comm_yields_for(const weft_comm *c)
{
    /* More ranks than cores on this host: a yield may hand the core to
     * each of the others before the awaited message can come, so the
     * spin lasts long enough for all of them to have had a turn. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = 0;
    for (int r = 0; r < c->size; r++)
        local += c->host[r] == c->host[c->rank];
    return cores > 0 && local > cores ? 2 * local : 0;
}

int comm_spin_yields(weft_comm *c)
{
    if (c->spin_yields < 0)
        c->spin_yields = comm_yields_for(c);
    return c->spin_yields;
}

int weft_comm_rank(const weft_comm *c) { return c ? c->rank : WEFT_EINVAL; }
int weft_comm_size(const weft_comm *c) { return c ? c->size : WEFT_EINVAL; }
int weft_comm_local_rank(const weft_comm *c) { return c ? c->local_rank : WEFT_EINVAL; }
int weft_comm_host_count(const weft_comm *c) { return c ? c->nhosts : WEFT_EINVAL; }

int weft_comm_host_of(const weft_comm *c, int r)
{
    return c && r >= 0 && r < c->size ? c->host[r] : WEFT_EINVAL;
}
const char *weft_comm_error(const weft_comm *c) { return c ? c->err : "no communicator"; }

int weft_comm_set_algo(weft_comm *c, weft_algo a)
{
    if (!c || a < 0 || a >= WEFT_ALGO_COUNT)
        return WEFT_EINVAL;
    c->algo = a;
    return 0;
}

weft_algo weft_comm_algo(const weft_comm *c) { return c ? c->algo : WEFT_ALGO_AUTO; }

int weft_comm_abort(weft_comm *c)
{
    if (!c || c->magic != COMM_MAGIC)
        return WEFT_EINVAL;
    atomic_store(&c->aborted, 1);
    if (c->abort_pipe[1] >= 0 && write(c->abort_pipe[1], "a", 1) < 0) {
        /* the pipe is full: a wake-up is already pending */
    }
    return 0;
}

int weft_comm_dump(const weft_comm *c, int fd)
{
    if (!c || c->magic != COMM_MAGIC || fd < 0)
        return WEFT_EINVAL;
    return flight_dump(&c->fl, fd, c->rank, 0);
}
