/* Backup workers: every step aggregates the gradients of the first N - b
 * ranks to arrive; the others' are dropped.
 *
 * Rank 0 coordinates. A collective cannot do it: it completes only when
 * every rank has joined, which is waiting for the slowest, and operations
 * on one communicator complete in issue order, so a receive from a slow
 * rank would hold back those from fast ones. So each other rank r gets two
 * private two-rank communicators with rank 0 (split off the job's at
 * start): "up" carries r's gradients to rank 0 and "down" carries each
 * step's result back. Each is its own stream, so rank 0 keeps a receive
 * posted on every up stream and tests them in turn: the order in which
 * they complete is the arrival order, which only rank 0 sees, so only it
 * decides, and the result it sends down names the ranks it included.
 *
 * A step's message is the gradient times the rank's sample count, then a
 * header (step, samples, loss sum, correct count); the result is the sum
 * over the chosen ranks divided by their sample total: the mean gradient
 * over the chosen ranks' samples, as if the batch had held only them.
 *
 * Late gradients are dropped, not applied next step: a gradient computed
 * on parameters one step old would be a stale:1 gradient for one rank and
 * a fresh one for the rest, and momentum amplifies such mixtures (see
 * stale:s in docs/TRAINING.md); the step's sample count only shrinks.
 * A late rank still receives every step's result, in order, so all ranks
 * keep identical parameters; when it starts a step whose result has
 * already arrived (the step was decided without it) it skips the
 * computation and just applies the result, which is how it catches up.
 * Rank 0 itself is never skipped: a slow rank 0 delays every step.
 *
 * Results go down through LAG buffers: rank 0 reuses one only when every
 * rank has taken the result it held, so a late rank may fall at most LAG
 * steps behind before rank 0 waits for it. At the end every rank sends an
 * end marker up and rank 0 answers with one down, which consumes every
 * message still posted, so that no request is left behind. */
#include "sync_backup.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAG 4

typedef struct {
    int64_t step;          /* -1: end of the run */
    int64_t samples;
    uint64_t mask;         /* result: ranks included (rank < 64) */
    double loss_sum, correct;
} hdr;

#define HDR_FLOATS ((sizeof(hdr) + sizeof(float) - 1) / sizeof(float))

struct backup {
    int rank, size, need;
    size_t n, cnt;         /* parameters; floats per message (n + header) */
    weft_model *model;
    weft_comm **up, **down; /* by peer rank; a non-zero rank uses its own index */
    /* rank != 0 */
    float *msg, *res;
    weft_request *send_req, *recv_req;
    int have;              /* res holds this step's result (the step is skipped) */
    /* rank 0 */
    float *in;             /* one receive buffer per peer */
    weft_request **in_req;
    float *slot[LAG];
    weft_request **slot_req; /* LAG x size sends */
    int64_t step;
    uint64_t included, bytes;
};

static void put_hdr(float *m, size_t n, const hdr *h) { memcpy(m + n, h, sizeof *h); }
static void get_hdr(const float *m, size_t n, hdr *h) { memcpy(h, m + n, sizeof *h); }

int train_backup_create(backup **out, weft_comm *c, weft_model *m, int b)
{
    backup *k;
    int rc = 0, p = weft_comm_size(c), r = weft_comm_rank(c);
    *out = NULL;
    if (b < 0 || b >= p)
        return WEFT_EINVAL;
    if (!(k = calloc(1, sizeof *k)))
        return WEFT_ENOMEM;
    k->rank = r;
    k->size = p;
    k->need = p - b;
    k->model = m;
    weft_model_params(m, &k->n);
    k->cnt = k->n + HDR_FLOATS;
    k->up = calloc((size_t)p, sizeof *k->up);
    k->down = calloc((size_t)p, sizeof *k->down);
    if (!k->up || !k->down) {
        train_backup_destroy(k);
        return WEFT_ENOMEM;
    }
    /* every rank takes part in every split, even after a failure, so that
     * none is left waiting */
    for (int q = 1; q < p; q++) {
        int color = r == 0 || r == q ? 0 : -1;
        int r1 = weft_comm_split(c, color, r, &k->up[q]);
        int r2 = weft_comm_split(c, color, r, &k->down[q]);
        if (!rc)
            rc = r1 ? r1 : r2;
    }
    if (rc == 0 && r != 0) {
        k->msg = malloc(k->cnt * sizeof(float));
        k->res = malloc(k->cnt * sizeof(float));
        if (!k->msg || !k->res)
            rc = WEFT_ENOMEM;
        else /* step 0's result may come before this rank asks for it */
            rc = weft_irecv(k->down[r], k->res, k->cnt, WEFT_F32, 0, &k->recv_req);
    } else if (rc == 0) {
        k->in = malloc((size_t)p * k->cnt * sizeof(float));
        k->in_req = calloc((size_t)p, sizeof *k->in_req);
        k->slot_req = calloc((size_t)LAG * (size_t)p, sizeof *k->slot_req);
        for (int i = 0; i < LAG; i++)
            if (!(k->slot[i] = malloc(k->cnt * sizeof(float))))
                rc = WEFT_ENOMEM;
        if (!k->in || !k->in_req || !k->slot_req)
            rc = WEFT_ENOMEM;
        for (int q = 1; rc == 0 && q < p; q++)
            rc = weft_irecv(k->up[q], k->in + (size_t)q * k->cnt, k->cnt, WEFT_F32, 1,
                            &k->in_req[q]);
    }
    if (rc) {
        train_backup_destroy(k);
        return rc;
    }
    *out = k;
    return 0;
}

void train_backup_destroy(backup *k)
{
    if (!k)
        return;
    /* after train_backup_finish nothing is in flight; after a failure the
     * communicators are broken and destroying them is all that is left */
    for (int q = 1; k->up && q < k->size; q++) {
        weft_comm_destroy(k->up[q]);
        weft_comm_destroy(k->down[q]);
    }
    free(k->up);
    free(k->down);
    free(k->msg);
    free(k->res);
    free(k->in);
    free(k->in_req);
    free(k->slot_req);
    for (int i = 0; i < LAG; i++)
        free(k->slot[i]);
    free(k);
}

int train_backup_begin(backup *k, int *skip)
{
    int done = 0, rc = 0;
    *skip = 0;
    if (k->rank == 0 || k->have)
        return 0;
    if ((rc = weft_test(k->recv_req, &done)) || !done)
        return rc;
    k->recv_req = NULL;
    k->have = 1;
    *skip = 1;
    return 0;
}

static void pause_us(long us)
{
    struct timespec ts = { 0, us * 1000 };
    nanosleep(&ts, NULL);
}

/* Rank 0: messages that have arrived from peers, in the order seen; those
 * of this step count while fewer than need have, the rest are dropped. */
static int collect(backup *k, float *acc, hdr *sum, int *count, int *progressed)
{
    for (int q = 1; q < k->size; q++) {
        int done = 0, rc;
        if (!k->in_req[q])
            continue;
        if ((rc = weft_test(k->in_req[q], &done)))
            return rc;
        if (!done)
            continue;
        k->in_req[q] = NULL;
        *progressed = 1;
        float *m = k->in + (size_t)q * k->cnt;
        hdr h;
        get_hdr(m, k->n, &h);
        if (h.step < 0 || h.step > k->step)
            return WEFT_EPROTO; /* an end marker or a step from the future */
        if (h.step == k->step && *count < k->need) {
            for (size_t i = 0; i < k->n; i++)
                acc[i] += m[i];
            sum->samples += h.samples;
            sum->loss_sum += h.loss_sum;
            sum->correct += h.correct;
            if (q < 64)
                sum->mask |= 1ull << q;
            (*count)++;
        }
        if ((rc = weft_irecv(k->up[q], m, k->cnt, WEFT_F32, 1, &k->in_req[q])))
            return rc;
    }
    return 0;
}

static int coordinate(backup *k, int n, const float in[2], float *g)
{
    float *acc = k->slot[k->step % LAG];
    weft_request **sreq = k->slot_req + (size_t)(k->step % LAG) * (size_t)k->size;
    hdr sum = { .step = k->step };
    int count = 0, rc, progressed = 0;
    for (int q = 1; q < k->size; q++)
        if (sreq[q]) { /* this buffer's last result must be out before reuse */
            rc = weft_wait(sreq[q]);
            sreq[q] = NULL;
            if (rc)
                return rc;
        }
    memset(acc, 0, k->n * sizeof *acc);
    /* what came before this rank's own gradient was ready arrived first */
    if ((rc = collect(k, acc, &sum, &count, &progressed)))
        return rc;
    if (count < k->need && n > 0) {
        for (size_t i = 0; i < k->n; i++)
            acc[i] += g[i] * (float)n;
        sum.samples += n;
        sum.loss_sum += (double)in[0] * n;
        sum.correct += in[1];
        sum.mask |= 1;
        count++;
    }
    for (long wait_us = 20; count < k->need;) {
        progressed = 0;
        if ((rc = collect(k, acc, &sum, &count, &progressed)))
            return rc;
        if (!progressed) {
            pause_us(wait_us);
            wait_us = wait_us < 1000 ? wait_us * 2 : 1000;
        } else {
            wait_us = 20;
        }
    }
    if (sum.samples > 0) {
        float inv = 1.0f / (float)sum.samples;
        for (size_t i = 0; i < k->n; i++)
            acc[i] *= inv;
    }
    put_hdr(acc, k->n, &sum);
    for (int q = 1; q < k->size; q++) {
        if ((rc = weft_isend(k->down[q], acc, k->cnt, WEFT_F32, 1, &sreq[q])))
            return rc;
        k->bytes += k->n * sizeof(float);
    }
    return 0;
}

int train_backup_grads(backup *k, int n, const float in[2], float out[3])
{
    float *g = weft_model_grads(k->model, NULL);
    const float *res;
    hdr h;
    int rc;
    if (n < 0 || (n > 0 && k->have))
        return WEFT_EINVAL;
    if (k->rank == 0) {
        if ((rc = coordinate(k, n, in, g)))
            return rc;
        res = k->slot[k->step % LAG];
    } else {
        if (n > 0) {
            if (k->send_req) {
                rc = weft_wait(k->send_req);
                k->send_req = NULL;
                if (rc)
                    return rc;
            }
            for (size_t i = 0; i < k->n; i++)
                k->msg[i] = g[i] * (float)n;
            h = (hdr){ .step = k->step, .samples = n, .loss_sum = (double)in[0] * n,
                       .correct = in[1] };
            put_hdr(k->msg, k->n, &h);
            if ((rc = weft_isend(k->up[k->rank], k->msg, k->cnt, WEFT_F32, 0, &k->send_req)))
                return rc;
            k->bytes += k->n * sizeof(float);
        }
        if (!k->have) {
            rc = weft_wait(k->recv_req);
            k->recv_req = NULL;
            if (rc)
                return rc;
        }
        k->have = 0;
        res = k->res;
    }
    get_hdr(res, k->n, &h);
    if (h.step != k->step)
        return WEFT_EPROTO;
    memcpy(g, res, k->n * sizeof *g);
    k->included = h.mask;
    out[0] = h.samples > 0 ? (float)(h.loss_sum / (double)h.samples) : 0.0f;
    out[1] = (float)h.correct;
    out[2] = (float)h.samples;
    k->step++;
    /* the next result may arrive while this rank computes */
    if (k->rank != 0 && (rc = weft_irecv(k->down[k->rank], k->res, k->cnt, WEFT_F32, 0,
                                         &k->recv_req)))
        return rc;
    return 0;
}

int train_backup_finish(backup *k)
{
    int rc = 0;
    hdr end = { .step = -1 };
    if (k->rank != 0) {
        if (k->send_req)
            rc = weft_wait(k->send_req);
        k->send_req = NULL;
        put_hdr(k->msg, k->n, &end);
        int r1 = rc ? rc : weft_send(k->up[k->rank], k->msg, k->cnt, WEFT_F32, 0);
        /* the receive posted for a next step gets rank 0's end marker */
        int r2 = k->recv_req ? weft_wait(k->recv_req) : 0;
        k->recv_req = NULL;
        if (!r1 && !r2 && !k->have) {
            hdr h;
            get_hdr(k->res, k->n, &h);
            r2 = h.step == -1 ? 0 : WEFT_EPROTO;
        }
        return r1 ? r1 : r2;
    }
    for (int q = 1; q < k->size; q++) {
        /* drop late gradients until the end marker */
        while (rc == 0 && k->in_req[q]) {
            hdr h;
            float *m = k->in + (size_t)q * k->cnt;
            rc = weft_wait(k->in_req[q]);
            k->in_req[q] = NULL;
            if (rc)
                break;
            get_hdr(m, k->n, &h);
            if (h.step != -1)
                rc = weft_irecv(k->up[q], m, k->cnt, WEFT_F32, 1, &k->in_req[q]);
        }
    }
    for (int i = 0; i < LAG * k->size; i++)
        if (k->slot_req[i]) {
            int r = weft_wait(k->slot_req[i]);
            k->slot_req[i] = NULL;
            if (r && !rc)
                rc = r;
        }
    if (rc)
        return rc;
    put_hdr(k->slot[0], k->n, &end);
    for (int q = 1; q < k->size && rc == 0; q++)
        rc = weft_send(k->down[q], k->slot[0], k->cnt, WEFT_F32, 1);
    return rc;
}

uint64_t train_backup_included(const backup *k) { return k->included; }
uint64_t train_backup_bytes(const backup *k) { return k->bytes; }
