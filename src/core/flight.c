#include "core/flight.h"

#include "core/clock.h"
#include "weft.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void frame_describe(const frame_hdr *h, char *buf, size_t len)
{
    const char *kind = weft_coll_name((weft_coll_kind)h->kind);
    const char *dt = weft_dtype_name((weft_dtype)h->dtype);
    const char *op = weft_op_name((weft_op)h->op);
    unsigned long long seq = (unsigned long long)h->seq, count = (unsigned long long)h->count;
    kind = kind ? kind : "?";
    dt = dt ? dt : "?";
    op = op ? op : "?";
    switch (h->kind) {
    case WEFT_COLL_SEND:
    case WEFT_COLL_RECV: /* root: the message's tag */
        snprintf(buf, len, "%s(count=%llu, %s, tag %d) as message #%llu", kind, count, dt,
                 h->root, seq);
        break;
    case WEFT_COLL_BARRIER:
        snprintf(buf, len, "barrier() as op #%llu", seq);
        break;
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE_SCATTER:
        snprintf(buf, len, "%s(count=%llu, %s, %s) as op #%llu", kind, count, dt, op, seq);
        break;
    case WEFT_COLL_REDUCE:
        snprintf(buf, len, "%s(count=%llu, %s, %s, root=%d) as op #%llu", kind, count, dt, op,
                 h->root, seq);
        break;
    case WEFT_COLL_BROADCAST:
    case WEFT_COLL_GATHER:
    case WEFT_COLL_SCATTER:
        snprintf(buf, len, "%s(count=%llu, %s, root=%d) as op #%llu", kind, count, dt, h->root,
                 seq);
        break;
    default:
        snprintf(buf, len, "%s(count=%llu, %s) as op #%llu", kind, count, dt, seq);
    }
}

#define SET(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define GET(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static void setd(double *x, double v)
{
    __atomic_store(x, &v, __ATOMIC_RELAXED);
}

static double getd(const double *x)
{
    double v;
    __atomic_load(x, &v, __ATOMIC_RELAXED);
    return v;
}

static void put_fp(frame_hdr *d, const frame_hdr *s)
{
    SET(d->kind, s->kind);
    SET(d->dtype, s->dtype);
    SET(d->op, s->op);
    SET(d->algo, s->algo);
    SET(d->root, s->root);
    SET(d->seq, s->seq);
    SET(d->count, s->count);
}

static void get_fp(frame_hdr *d, const frame_hdr *s)
{
    memset(d, 0, sizeof *d);
    d->kind = GET(s->kind);
    d->dtype = GET(s->dtype);
    d->op = GET(s->op);
    d->algo = GET(s->algo);
    d->root = GET(s->root);
    d->seq = GET(s->seq);
    d->count = GET(s->count);
}

flight_rec *flight_new(flight *f, const frame_hdr *fp, int state)
{
    uint64_t id = atomic_fetch_add(&f->next, 1) + 1;
    flight_rec *r = &f->rec[(id - 1) % FLIGHT_N];
    SET(r->id, 0); /* a reader in between sees an empty slot, not a mix */
    put_fp(&r->fp, fp);
    SET(r->state, state);
    SET(r->rc, 0);
    setd(&r->t_queued, clock_now());
    setd(&r->t_start, getd(&r->t_queued));
    setd(&r->t_end, 0);
    SET(r->nwait, 0);
    SET(r->id, id);
    return r;
}

void flight_start(flight_rec *r, const frame_hdr *fp)
{
    put_fp(&r->fp, fp);
    setd(&r->t_start, clock_now());
    SET(r->nwait, 0);
    SET(r->state, FL_RUNNING);
}

void flight_finish(flight_rec *r, int rc)
{
    SET(r->rc, rc);
    setd(&r->t_end, clock_now());
    SET(r->nwait, 0);
    SET(r->state, rc ? FL_FAILED : FL_DONE);
}

void flight_waiting(flight_rec *r, const int32_t *wait, int n)
{
    for (int i = 0; i < n && i < FLIGHT_WAIT_MAX; i++)
        SET(r->wait[i], wait[i]);
    SET(r->nwait, n);
}

flight_rec *flight_get(flight *f, uint64_t id)
{
    flight_rec *r;
    if (!id)
        return NULL;
    r = &f->rec[(id - 1) % FLIGHT_N];
    return GET(r->id) == id ? r : NULL;
}

/* A consistent-enough copy of one record for printing. */
static void snapshot(const flight_rec *s, flight_rec *d)
{
    d->id = GET(s->id);
    get_fp(&d->fp, &s->fp);
    d->state = GET(s->state);
    d->rc = GET(s->rc);
    d->t_start = getd(&s->t_start);
    d->t_end = getd(&s->t_end);
    d->nwait = GET(s->nwait);
    for (int i = 0; i < FLIGHT_WAIT_MAX; i++)
        d->wait[i] = GET(s->wait[i]);
}

int flight_dump(const flight *f, int fd, int rank, int last)
{
    static const char *const states[] = { "empty", "queued", "in progress", "done", "failed" };
    uint64_t next = atomic_load(&((flight *)f)->next), first;
    double now = clock_now();
    char line[512];
    int n, written = 0;
    if (last <= 0 || last > FLIGHT_N)
        last = FLIGHT_N;
    first = next > (uint64_t)last ? next - (uint64_t)last : 0;
    n = snprintf(line, sizeof line,
                 "weft[%d] flight recorder: last %llu of %llu operations, oldest first\n", rank,
                 (unsigned long long)(next - first), (unsigned long long)next);
    if (write(fd, line, (size_t)n) < 0)
        return 0;
    for (uint64_t id = first + 1; id <= next; id++) {
        flight_rec r;
        char d[200];
        snapshot(&f->rec[(id - 1) % FLIGHT_N], &r);
        if (r.id != id || r.state <= FL_EMPTY || r.state > FL_FAILED)
            continue;
        frame_describe(&r.fp, d, sizeof d);
        if (r.state == FL_QUEUED && r.fp.seq == 0) {
            char *as = strstr(d, " as ");
            if (as)
                *as = 0;
        }
        n = snprintf(line, sizeof line, "weft[%d]   %s algo=%s: %s", rank, d,
                     weft_algo_name((weft_algo)r.fp.algo) ? weft_algo_name((weft_algo)r.fp.algo)
                                                          : "?",
                     states[r.state]);
        if (r.state == FL_DONE || r.state == FL_FAILED)
            n += snprintf(line + n, sizeof line - (size_t)n, " in %.3f ms",
                          (r.t_end - r.t_start) * 1e3);
        if (r.state == FL_FAILED)
            n += snprintf(line + n, sizeof line - (size_t)n, " (%s)", weft_strerror(r.rc));
        if (r.state == FL_RUNNING) {
            n += snprintf(line + n, sizeof line - (size_t)n, " for %.3f s", now - r.t_start);
            if (r.nwait > 0 && r.nwait <= FLIGHT_WAIT_MAX) {
                n += snprintf(line + n, sizeof line - (size_t)n, ", waiting on");
                for (int i = 0; i < r.nwait && n < (int)sizeof line - 24; i++)
                    n += snprintf(line + n, sizeof line - (size_t)n, "%s %s rank %d",
                                  i ? "," : "", r.wait[i] >= 0 ? "from" : "to",
                                  r.wait[i] >= 0 ? r.wait[i] : -r.wait[i] - 1);
            }
        }
        if (n >= (int)sizeof line - 1)
            n = (int)sizeof line - 2;
        line[n++] = '\n';
        if (write(fd, line, (size_t)n) < 0)
            break;
        written++;
    }
    return written;
}
