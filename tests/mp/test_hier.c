/* The hierarchical algorithm over real sockets, with ranks claiming to sit
 * on several hosts (WEFT_HOST_ID): all-reduce, broadcast and reduce at 2..8
 * ranks, 1 to 3 ranks per host (so some hosts are short), in place and not,
 * against a serial reference; and float all-reduce results that are the
 * same bits on every rank. Rabenseifner runs the same all-reduce cases.
 * Then the all-reduce schedules of every p from 2 to 16 in six host
 * layouts run against each other in memory, the large-message wavefront
 * with small chunks, checked for results, races within a round and
 * messages that do not match. */
#include "mp.h"
#include "coll/reduce.h"
#include "coll/sched/sched.h"

#include <stdint.h>
#include <stdlib.h>

/* Exact in any order: small integers. */
static double input(int r, uint64_t i, weft_op op)
{
    if (op == WEFT_MAX)
        return (double)((r * 5 + (int)(i % 13) * 3) % 11) - 5;
    return (double)((r * 3 + (int)(i % 17) * 7) % 5);
}

static void put(void *b, weft_dtype t, uint64_t i, double v)
{
    switch (t) {
    case WEFT_F32: ((float *)b)[i] = (float)v; break;
    case WEFT_F64: ((double *)b)[i] = v; break;
    case WEFT_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    default: break;
    }
}

static double get(const void *b, weft_dtype t, uint64_t i)
{
    switch (t) {
    case WEFT_F32: return ((const float *)b)[i];
    case WEFT_F64: return ((const double *)b)[i];
    case WEFT_I32: return ((const int32_t *)b)[i];
    default: return 0;
    }
}

static double reduced(int n, uint64_t i, weft_op op)
{
    double acc = input(0, i, op);
    for (int r = 1; r < n; r++) {
        double x = input(r, i, op);
        acc = op == WEFT_MAX ? (x > acc ? x : acc) : acc + x;
    }
    return acc;
}

static void one(weft_comm *c, weft_coll_kind kind, weft_algo algo, weft_dtype t, weft_op op,
                uint64_t cnt, int inplace, int root)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t);
    char *in = calloc(cnt + 1, es), *out = calloc(cnt + 1, es);
    int is_root = kind != WEFT_COLL_REDUCE || r == root;
    for (uint64_t i = 0; i < cnt; i++) {
        put(in, t, i, kind == WEFT_COLL_BROADCAST ? input(root, i, op) : input(r, i, op));
        put(out, t, i, -77);
    }
    weft_coll_args a = { .kind = kind, .send = in, .recv = out, .count = cnt, .dtype = t,
                         .op = op, .root = root, .algo = algo };
    if (kind == WEFT_COLL_BROADCAST) {
        if (r == root)
            memcpy(out, in, cnt * es);
        a.send = out;
    } else if (inplace) {
        memcpy(out, in, cnt * es);
        a.send = out;
    }
    int rc = weft_collective(c, &a);
    CHECKF(rc == 0, "%s %s %s %s count=%llu inplace=%d root=%d n=%d: %s",
           weft_algo_name(algo), weft_coll_name(kind), weft_dtype_name(t), weft_op_name(op),
           (unsigned long long)cnt, inplace, root, n, weft_comm_error(c));
    if (rc == 0 && is_root) {
        uint64_t bad = cnt;
        double want = 0;
        for (uint64_t i = 0; i < cnt && bad == cnt; i++) {
            want = kind == WEFT_COLL_BROADCAST ? input(root, i, op) : reduced(n, i, op);
            if (op == WEFT_AVG)
                want = t == WEFT_I32 ? (double)((int64_t)want / n)
                                     : t == WEFT_F32 ? (double)((float)want / (float)n)
                                                     : want / n;
            if (get(out, t, i) != want)
                bad = i;
        }
        CHECKF(bad == cnt,
               "%s %s %s %s count=%llu inplace=%d n=%d: rank %d element %llu is %g, want %g",
               weft_algo_name(algo), weft_coll_name(kind), weft_dtype_name(t), weft_op_name(op),
               (unsigned long long)cnt, inplace, n, r, (unsigned long long)bad,
               get(out, t, bad), want);
    }
    free(in);
    free(out);
}

/* Float sums whose bits depend on the order of additions: every rank must
 * hold the same bits, compared through an all-gather of a hash. */
static void same_bits(weft_comm *c, weft_algo algo, uint64_t cnt)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    float *x = malloc(cnt * sizeof *x);
    uint32_t seed = 2166136261u;
    for (uint64_t i = 0; i < cnt; i++) {
        uint32_t h = (uint32_t)(r + 1) * 2654435761u ^ (uint32_t)i * 40503u;
        h ^= h >> 15;
        h *= 0x2c1b3c6du;
        x[i] = (float)(h % 1000003u) * 1e-4f + (float)(h % 5u) * 1e4f;
    }
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = x, .recv = x, .count = cnt,
                         .dtype = WEFT_F32, .op = WEFT_SUM, .algo = algo };
    int rc = weft_collective(c, &a);
    CHECKF(rc == 0, "%s same-bits all-reduce: %s", weft_algo_name(algo), weft_comm_error(c));
    for (uint64_t i = 0; i < cnt; i++) { /* FNV-1a over the result's bytes */
        const unsigned char *b = (const unsigned char *)&x[i];
        for (int k = 0; k < 4; k++)
            seed = (seed ^ b[k]) * 16777619u;
    }
    uint32_t *all = calloc((size_t)n, sizeof *all);
    CHECK(weft_allgather(c, &seed, all, 1, WEFT_I32) == 0);
    int differ = 0;
    for (int j = 0; j < n; j++)
        differ += all[j] != all[0];
    CHECKF(differ == 0, "%s: %d ranks hold other bits than rank 0", weft_algo_name(algo), differ);
    free(all);
    free(x);
}

static void cases(weft_comm *c, void *arg)
{
    static const weft_dtype dts[] = { WEFT_F32, WEFT_F64, WEFT_I32 };
    static const weft_op ops[] = { WEFT_SUM, WEFT_MAX, WEFT_AVG };
    int n = weft_comm_size(c), seq = 0;
    uint64_t counts[] = { 0, 1, 13, (uint64_t)n * 7 + 3, 100003 };
    (void)arg;
    CHECK(weft_comm_host_count(c) >= 2);
    for (unsigned ci = 0; ci < 5; ci++)
        for (int inplace = 0; inplace < 2; inplace++) {
            for (unsigned d = 0; d < 3; d++)
                for (unsigned o = 0; o < 3; o++) {
                    one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_HIER, dts[d], ops[o], counts[ci],
                        inplace, 0);
                    if (ci == 2 || ci == 4)
                        one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RABENSEIFNER, dts[d], ops[o],
                            counts[ci], inplace, 0);
                }
            one(c, WEFT_COLL_BROADCAST, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, counts[ci], 0,
                seq++ % n);
            one(c, WEFT_COLL_REDUCE, WEFT_ALGO_HIER, WEFT_I32, WEFT_SUM, counts[ci], inplace,
                seq++ % n);
        }
    /* > 4 MiB: many chunks through the pipelines; all-reduce as the
     * wavefront, in place and not, at a count no multiple of a chunk */
    one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, (1u << 20) + 5, 1, 0);
    one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_HIER, WEFT_I32, WEFT_MAX, (1u << 20) + 5, 0, 0);
    one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_HIER, WEFT_F64, WEFT_AVG, (1u << 19) + 3, 1, 0);
    one(c, WEFT_COLL_BROADCAST, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, (1u << 20) + 5, 0, n - 1);
    one(c, WEFT_COLL_REDUCE, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, (1u << 20) + 5, 0, 1);
    same_bits(c, WEFT_ALGO_HIER, 50021);
    same_bits(c, WEFT_ALGO_RABENSEIFNER, 50021);
}

/* ---- every rank's schedule run in memory --------------------------------
 * The schedules of all p ranks, run against each other with a FIFO of
 * messages per ordered pair, the executor's round semantics (local ops
 * first, sends posted when the round starts, the round over when its
 * receives have arrived), so that every p from 2 to 16 and many host
 * layouts cost milliseconds instead of processes. It also fails a round
 * whose reads and writes of one rank's memory overlap (the executor runs
 * a round's ops concurrently, so such a schedule would race), a message
 * whose length differs from its receive's, schedules that never match up
 * and messages left over. */

typedef struct {
    char *data;
    uint64_t len;
} smsg;

typedef struct {
    smsg *q;
    uint32_t n, cap, head;
} slane;

typedef struct {
    int buf; /* memory: 0 input, 1 output (the same when in place), 2 scratch */
    uint64_t lo, hi;
} span;

static int mem_of(int b, int inplace) { return b == SB_SEND && inplace ? SB_RECV : b; }

static int spans_meet(const span *a, const span *b)
{
    return a->buf == b->buf && a->lo < b->hi && b->lo < a->hi;
}

/* A round's writes against its reads and other writes; a receive that
 * reduces into exactly its own operand is the kernels' allowed alias. */
static int round_races(const weft_sched *s, uint32_t b, uint32_t e, int inplace)
{
    for (uint32_t i = b; i < e; i++) {
        const sched_op *w = &s->ops[i];
        if (w->kind != SOP_RECV && w->kind != SOP_RECV_REDUCE)
            continue;
        span ws = { mem_of(w->buf, inplace), w->off, w->off + w->len };
        for (uint32_t j = b; j < e; j++) {
            const sched_op *o = &s->ops[j];
            span rd = { -1, 0, 0 }, wr = { -1, 0, 0 };
            if (o->kind == SOP_SEND)
                rd = (span){ mem_of(o->buf, inplace), o->off, o->off + o->len };
            if (o->kind == SOP_RECV_REDUCE && j != i)
                rd = (span){ mem_of(o->src_buf, inplace), o->src_off, o->src_off + o->len };
            if (o->kind == SOP_RECV_REDUCE && j == i &&
                (mem_of(o->src_buf, inplace) != ws.buf || o->src_off != o->off))
                rd = (span){ mem_of(o->src_buf, inplace), o->src_off, o->src_off + o->len };
            if ((o->kind == SOP_RECV || o->kind == SOP_RECV_REDUCE) && j != i)
                wr = (span){ mem_of(o->buf, inplace), o->off, o->off + o->len };
            if (w->len && ((rd.buf >= 0 && rd.hi > rd.lo && spans_meet(&ws, &rd)) ||
                           (wr.buf >= 0 && wr.hi > wr.lo && spans_meet(&ws, &wr))))
                return 1;
        }
    }
    return 0;
}

typedef struct {
    weft_sched s;
    char *mem[SB_COUNT];
    uint32_t round, op;
    int posted;
} srank;

/* Runs all-reduce with algorithm a on p ranks laid out as host[]: inputs
 * in[r] (count elements), results into out[r]. 0, or a description of
 * what went wrong in why. */
static int mem_allreduce(int p, const int32_t *host, weft_algo a, weft_dtype t, weft_op op,
                         uint64_t count, int inplace, uint64_t chunk, char **in, char **out,
                         char *why, size_t cap)
{
    size_t es = weft_dtype_size(t), n = (size_t)count * es;
    srank *rs = calloc((size_t)p, sizeof *rs);
    slane *ln = calloc((size_t)p * (size_t)p, sizeof *ln);
    uint32_t *need = calloc((size_t)p, sizeof *need);
    int rc = 0, left = p;
    why[0] = 0;
    for (int r = 0; r < p && !rc; r++) {
        sched_params sp = { .kind = WEFT_COLL_ALLREDUCE, .rank = r, .nranks = p, .count = count,
                            .esize = (uint32_t)es, .inplace = inplace, .chunk_bytes = chunk,
                            .host = host };
        sched_init(&rs[r].s);
        if ((rc = sched_build(&rs[r].s, a, &sp)) || rs[r].s.err) {
            snprintf(why, cap, "rank %d: no schedule (%d)", r, rc ? rc : rs[r].s.err);
            rc = rc ? rc : -1;
            break;
        }
        memcpy(out[r], in[r], n);
        rs[r].mem[SB_RECV] = out[r];
        rs[r].mem[SB_SEND] = inplace ? out[r] : in[r];
        rs[r].mem[SB_TMP] = calloc(rs[r].s.tmp_bytes + 1, 1);
        if (!inplace)
            memset(out[r], 0x5a, n);
        left -= rs[r].s.nrounds == 0;
    }
    while (!rc && left > 0) {
        int progress = 0;
        for (int r = 0; r < p && !rc; r++) {
            srank *k = &rs[r];
            while (!rc && k->round < k->s.nrounds) {
                uint32_t b = k->op, e = k->s.round_end[k->round];
                if (!k->posted) {
                    if (round_races(&k->s, b, e, inplace)) {
                        snprintf(why, cap, "rank %d round %u: reads and writes overlap", r,
                                 k->round);
                        rc = -1;
                        break;
                    }
                    for (uint32_t i = b; i < e; i++) {
                        const sched_op *o = &k->s.ops[i];
                        if (o->kind == SOP_COPY)
                            memmove(k->mem[o->buf] + o->off, k->mem[o->src_buf] + o->src_off,
                                    o->len);
                        else if (o->kind == SOP_REDUCE)
                            reduce_apply(k->mem[o->buf] + o->off, k->mem[o->buf] + o->off,
                                         k->mem[o->src_buf] + o->src_off, o->len / es, t, op);
                    }
                    for (uint32_t i = b; i < e; i++) {
                        const sched_op *o = &k->s.ops[i];
                        if (o->kind != SOP_SEND)
                            continue;
                        slane *q = &ln[(size_t)r * p + o->peer];
                        if (q->n == q->cap) {
                            q->cap = q->cap ? 2 * q->cap : 16;
                            q->q = realloc(q->q, q->cap * sizeof *q->q);
                        }
                        q->q[q->n].data = malloc(o->len + 1);
                        memcpy(q->q[q->n].data, k->mem[o->buf] + o->off, o->len);
                        q->q[q->n++].len = o->len;
                    }
                    k->posted = 1;
                    progress = 1;
                }
                int ready = 1;
                memset(need, 0, (size_t)p * sizeof *need);
                for (uint32_t i = b; i < e && ready; i++) {
                    const sched_op *o = &k->s.ops[i];
                    if (o->kind == SOP_RECV || o->kind == SOP_RECV_REDUCE) {
                        slane *q = &ln[(size_t)o->peer * p + r];
                        ready = q->n - q->head > need[o->peer]++;
                    }
                }
                if (!ready)
                    break;
                for (uint32_t i = b; i < e && !rc; i++) {
                    const sched_op *o = &k->s.ops[i];
                    if (o->kind != SOP_RECV && o->kind != SOP_RECV_REDUCE)
                        continue;
                    slane *q = &ln[(size_t)o->peer * p + r];
                    smsg m = q->q[q->head++];
                    if (m.len != o->len) {
                        snprintf(why, cap, "rank %d round %u: %llu bytes from %d, wants %llu", r,
                                 k->round, (unsigned long long)m.len, o->peer,
                                 (unsigned long long)o->len);
                        rc = -1;
                    } else if (o->kind == SOP_RECV) {
                        memcpy(k->mem[o->buf] + o->off, m.data, m.len);
                    } else {
                        reduce_apply(k->mem[o->buf] + o->off, k->mem[o->src_buf] + o->src_off,
                                     m.data, m.len / es, t, op);
                    }
                    free(m.data);
                }
                k->op = e;
                k->round++;
                k->posted = 0;
                progress = 1;
                if (k->round == k->s.nrounds)
                    left--;
            }
        }
        if (!rc && !progress) {
            snprintf(why, cap, "the schedules never match up (%d ranks left)", left);
            rc = -1;
        }
    }
    for (size_t i = 0; i < (size_t)p * (size_t)p; i++) {
        if (!rc && ln[i].head != ln[i].n) {
            snprintf(why, cap, "%u messages from %d to %d never received",
                     ln[i].n - ln[i].head, (int)(i / (size_t)p), (int)(i % (size_t)p));
            rc = -1;
        }
        for (uint32_t j = ln[i].head; j < ln[i].n; j++)
            free(ln[i].q[j].data);
        free(ln[i].q);
    }
    for (int r = 0; r < p; r++) {
        if (!rc && op == WEFT_AVG)
            reduce_avg_finish(out[r], count, t, p);
        sched_free(&rs[r].s);
        free(rs[r].mem[SB_TMP]);
    }
    free(need);
    free(ln);
    free(rs);
    return rc;
}

/* Host layouts of p ranks, host indices in order of first appearance. */
static int layout(int kind, int p, int32_t *h)
{
    static const int sizes[] = { 1, 3, 2, 4 };
    int g = 0, used = 0;
    for (int r = 0; r < p; r++) {
        switch (kind) {
        case 0: h[r] = r; break;                /* one rank per host */
        case 1: h[r] = r / 2; break;            /* two per host, the last maybe alone */
        case 2: h[r] = r / 3; break;
        case 3: h[r] = r % 2; break;            /* two hosts, ranks interleaved */
        case 4:                                 /* hosts of 1, 3, 2, 4, 1, ... ranks */
            if (used == sizes[g % 4]) {
                g++;
                used = 0;
            }
            h[r] = g;
            used++;
            break;
        default: h[r] = r < p / 2 ? 0 : 1; break; /* two hosts, halves */
        }
    }
    return 6;
}

static void mem_case(int p, const int32_t *host, int lay, weft_algo a, weft_dtype t, weft_op op,
                     uint64_t count, int inplace, uint64_t chunk)
{
    size_t es = weft_dtype_size(t);
    char *in[16], *out[16], why[160];
    for (int r = 0; r < p; r++) {
        in[r] = malloc(count * es + 1);
        out[r] = malloc(count * es + 1);
        for (uint64_t i = 0; i < count; i++)
            put(in[r], t, i, input(r, i, op));
    }
    int rc = mem_allreduce(p, host, a, t, op, count, inplace, chunk, in, out, why, sizeof why);
    CHECKF(rc == 0, "in memory: %s p=%d layout %d %s %s count=%llu inplace=%d chunk=%llu: %s",
           weft_algo_name(a), p, lay, weft_dtype_name(t), weft_op_name(op),
           (unsigned long long)count, inplace, (unsigned long long)chunk, why);
    for (int r = 0; r < p && rc == 0; r++) {
        uint64_t bad = count;
        double want = 0;
        for (uint64_t i = 0; i < count && bad == count; i++) {
            want = reduced(p, i, op);
            if (op == WEFT_AVG)
                want = t == WEFT_I32 ? (double)((int64_t)want / p)
                                     : t == WEFT_F32 ? (double)((float)want / (float)p)
                                                     : want / p;
            if (get(out[r], t, i) != want)
                bad = i;
        }
        CHECKF(bad == count,
               "in memory: %s p=%d layout %d %s %s count=%llu inplace=%d chunk=%llu: rank %d "
               "element %llu is %g, want %g",
               weft_algo_name(a), p, lay, weft_dtype_name(t), weft_op_name(op),
               (unsigned long long)count, inplace, (unsigned long long)chunk, r,
               (unsigned long long)bad, get(out[r], t, bad), want);
        if (bad != count)
            break;
    }
    for (int r = 0; r < p; r++) {
        free(in[r]);
        free(out[r]);
    }
}

/* Float sums whose bits depend on the order of additions: every rank must
 * end with the same bits. */
static void mem_same_bits(int p, const int32_t *host, int lay, uint64_t count, uint64_t chunk)
{
    char *in[16], *out[16], why[160];
    for (int r = 0; r < p; r++) {
        float *x = malloc(count * sizeof *x + 1);
        for (uint64_t i = 0; i < count; i++) {
            uint32_t h = (uint32_t)(r + 1) * 2654435761u ^ (uint32_t)i * 40503u;
            h ^= h >> 15;
            h *= 0x2c1b3c6du;
            x[i] = (float)(h % 1000003u) * 1e-4f + (float)(h % 5u) * 1e4f;
        }
        in[r] = (char *)x;
        out[r] = malloc(count * sizeof(float) + 1);
    }
    int rc = mem_allreduce(p, host, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, count, 0, chunk, in,
                           out, why, sizeof why);
    CHECKF(rc == 0, "in memory same bits p=%d layout %d: %s", p, lay, why);
    int differ = 0;
    for (int r = 1; r < p && rc == 0; r++)
        differ += memcmp(out[r], out[0], count * sizeof(float)) != 0;
    CHECKF(differ == 0, "in memory p=%d layout %d: %d ranks hold other bits than rank 0", p,
           lay, differ);
    for (int r = 0; r < p; r++) {
        free(in[r]);
        free(out[r]);
    }
}

/* The wavefront with small chunks (so that a few thousand elements make
 * many segments, sizes no multiple of anything), the segments of the
 * smaller sizes, and the default 64 KiB chunk at a size that pipelines. */
TEST(in_memory)
{
    static const struct { weft_dtype t; weft_op op; } kinds[] = {
        { WEFT_F32, WEFT_SUM }, { WEFT_F64, WEFT_AVG }, { WEFT_I32, WEFT_MAX }, { WEFT_I32, WEFT_AVG },
    };
    int32_t h[16];
    for (int p = 2; p <= 16; p++) {
        int nl = layout(0, p, h);
        for (int lay = 0; lay < nl; lay++) {
            layout(lay, p, h);
            uint64_t counts[] = { 0, 1, (uint64_t)p * 5 + 3, 4099, 12289 };
            for (unsigned ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                for (unsigned k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
                    mem_case(p, h, lay, WEFT_ALGO_HIER, kinds[k].t, kinds[k].op, counts[ci],
                             (int)(k + ci) % 2, ci >= 3 ? 40 + 8 * (uint64_t)(k % 2) : 0);
            mem_same_bits(p, h, lay, 9001, 64);
        }
    }
    /* the default chunk: 2 hosts of 2 ranks, 2 hosts of 3, 3 hosts of 1 (the
     * ring's wavefront there too) */
    static const struct { int p, lay; } big[] = { { 4, 1 }, { 6, 2 }, { 3, 0 } };
    for (unsigned i = 0; i < sizeof big / sizeof big[0]; i++) {
        layout(big[i].lay, big[i].p, h);
        uint64_t cnt = (uint64_t)big[i].p * (256u << 10) / 4 * 3 + 7;
        mem_case(big[i].p, h, big[i].lay, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, cnt, 1, 0);
        mem_case(big[i].p, h, big[i].lay, WEFT_ALGO_HIER, WEFT_I32, WEFT_MAX, cnt, 0, 0);
        if (big[i].lay == 0)
            mem_case(big[i].p, h, big[i].lay, WEFT_ALGO_RING, WEFT_F32, WEFT_SUM, cnt, 1, 0);
    }
}

/* The schedule really is the wavefront for large messages: many more
 * rounds than the three-stage pipeline's, each with both kinds of link. */
TEST(wavefront_shape)
{
    int32_t h[4] = { 0, 0, 1, 1 };
    weft_sched s;
    sched_init(&s);
    sched_params sp = { .kind = WEFT_COLL_ALLREDUCE, .rank = 1, .nranks = 4,
                        .count = (16u << 20) / 4, .esize = 4, .host = h };
    CHECK(sched_build(&s, WEFT_ALGO_HIER, &sp) == 0);
    /* 16 MiB in 256 KiB segments: 64 segments, 4 steps each */
    CHECKF(s.nrounds == 64 + 3, "rounds %u", s.nrounds);
    uint64_t most = 0;
    for (uint32_t i = 0; i < s.nops; i++)
        if (s.ops[i].len > most)
            most = s.ops[i].len;
    CHECKF(most <= (128u << 10), "largest message %llu", (unsigned long long)most);
    sp.count = (256u << 10) / 4; /* too small: the three-stage pipeline */
    CHECK(sched_build(&s, WEFT_ALGO_HIER, &sp) == 0);
    CHECKF(s.nrounds <= 10, "small: rounds %u", s.nrounds);
    sched_free(&s);
}

/* n ranks, per_host of them on each emulated host */
static void ranks(int n, int per_host)
{
    mp_ranks_per_host = per_host;
    CHECKF(mp_run(n, 60, cases, NULL) == 0,
           "hierarchical collectives at %d ranks, %d per host", n, per_host);
    mp_ranks_per_host = 0;
}

TEST(ranks_2_by_1) { ranks(2, 1); }
TEST(ranks_4_by_2) { ranks(4, 2); }
TEST(ranks_5_by_2) { ranks(5, 2); }
TEST(ranks_6_by_3) { ranks(6, 3); }
TEST(ranks_7_by_3) { ranks(7, 3); }
TEST(ranks_8_by_3) { ranks(8, 3); }
