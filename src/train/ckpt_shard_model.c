/* A rank's model part and optimiser state read from a sharded checkpoint
 * (train/ckpt_shard.h): each tensor's runs in the whole vector (a tensor
 * part's via train_part_runs) are read straight into the rank's buffers,
 * so loading holds no more than the rank's share. Parameters that a
 * data-parallel group holds alike are read a part by each of its ranks
 * and all-gathered, so the group reads them from disk once. */
#include "train/ckpt_shard.h"

#include "core/clock.h"
#include "train/part_runs.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    ckpt_shard_reader *r;
    int vec;
    uint64_t whole; /* the tensor's first element in the whole vector */
    size_t lo;      /* the part element dst holds first */
    float *dst;
} fill;

static int fill_run(void *arg, size_t e, size_t at, size_t len)
{
    fill *f = arg;
    return ckpt_shard_read(f->r, f->vec, f->whole + at, len, f->dst + (e - f->lo));
}

/* Part elements [lo, hi) of m's tensor i into dst (dst[0] being part
 * element lo), from vector vec. */
static int read_tensor(ckpt_shard_reader *r, int vec, const weft_model *m, int i, size_t lo,
                       size_t hi, float *dst)
{
    weft_tensor_info ti;
    int rc = weft_model_tensor_info(m, i, &ti);
    if (rc)
        return rc;
    ckpt_shard_reader_name(r, ti.name);
    if (ti.numel == ti.whole_numel)
        return ckpt_shard_read(r, vec, ti.whole_offset + lo, hi - lo, dst);
    /* the padding of a split has no place in the whole: zero */
    memset(dst, 0, (hi - lo) * sizeof *dst);
    fill f = { .r = r, .vec = vec, .whole = ti.whole_offset, .lo = lo, .dst = dst };
    return train_part_runs(m, i, lo, hi, fill_run, &f);
}

void ckpt_shard_prefetch_state(ckpt_shard_reader *r, int vec, const weft_model *m, size_t base,
                               size_t n)
{
    for (int i = 0; m && i < weft_model_tensor_count(m); i++) {
        weft_tensor_info t;
        if (weft_model_tensor_info(m, i, &t) != 0)
            return;
        size_t lo = t.offset > base ? t.offset : base;
        size_t hi = t.offset + t.numel < base + n ? t.offset + t.numel : base + n;
        /* a tensor part's runs are spread over the whole tensor: left to
         * the reads' own read-ahead */
        if (hi > lo && t.numel == t.whole_numel)
            ckpt_shard_prefetch(r, vec, t.whole_offset + (lo - t.offset), hi - lo);
    }
    if (!m)
        ckpt_shard_prefetch(r, vec, base, n);
}

int ckpt_shard_get_params(const weft_ckpt *c, weft_model *m)
{
    if (!c || !m)
        return WEFT_EINVAL;
    ckpt_shard_reader *r;
    int rc = ckpt_shard_reader_open(c, &r);
    if (rc)
        return rc;
    int vec = ckpt_shard_reader_vector(r, "param");
    size_t n;
    float *p = weft_model_params(m, &n);
    ckpt_shard_prefetch_state(r, vec, m, 0, n);
    for (int i = 0; rc == 0 && i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        if ((rc = weft_model_tensor_info(m, i, &ti)) == 0)
            rc = read_tensor(r, vec, m, i, 0, ti.numel, p + ti.offset);
    }
    ckpt_shard_reader_close(r);
    ckpt_shard_need(c, n * sizeof *p);
    return rc;
}

int ckpt_shard_read_state(ckpt_shard_reader *r, int vec, const weft_model *m, size_t base,
                          size_t n, float *dst)
{
    if (!m) /* the whole model's layout: one range */
        return ckpt_shard_read(r, vec, base, n, dst);
    int rc = 0;
    for (int i = 0; rc == 0 && i < weft_model_tensor_count(m); i++) {
        weft_tensor_info t;
        if ((rc = weft_model_tensor_info(m, i, &t)) != 0)
            break;
        size_t lo = t.offset > base ? t.offset : base;
        size_t hi = t.offset + t.numel < base + n ? t.offset + t.numel : base + n;
        if (hi > lo)
            rc = read_tensor(r, vec, m, i, lo - t.offset, hi - t.offset, dst + (lo - base));
    }
    return rc;
}

int ckpt_shard_get_params_group(const weft_ckpt *c, weft_model *m, weft_comm *g)
{
    int dp = g ? weft_comm_size(g) : 1;
    if (!c || !m || dp < 1)
        return WEFT_EINVAL;
    if (dp == 1)
        return ckpt_shard_get_params(c, m);
    /* the group starts together: the reader's time (the load's figure) is
     * the reads and the all-gather, not the wait for the group's last rank
     * to arrive from its set-up */
    int rc = weft_barrier(g);
    ckpt_shard_reader *r;
    if (rc == 0)
        rc = ckpt_shard_reader_open(c, &r);
    if (rc)
        return rc;
    int me = weft_comm_rank(g), vec = ckpt_shard_reader_vector(r, "param");
    size_t n;
    float *p = weft_model_params(m, &n);
    /* equal parts for the all-gather in place; the few elements past them
     * every rank reads */
    size_t each = n / (size_t)dp, tail = (size_t)dp * each;
    /* Each rank reading the whole part itself (one host's ranks share the
     * page cache, so the disk would read it once) was measured against
     * this, 4 ranks on one loaded 2-core host, six loads each: more CPU
     * (0.44-0.61 s against 0.34-0.48 s for the job) and no shorter: the
     * all-gather's one copy from rank to rank (process_vm_readv) costs
     * less than a copy out of the page cache and a CRC of the whole part
     * on every rank. */
    ckpt_shard_prefetch_state(r, vec, m, (size_t)me * each, each);
    if (each)
        rc = ckpt_shard_read_state(r, vec, m, (size_t)me * each, each, p + (size_t)me * each);
    if (rc == 0 && tail < n)
        rc = ckpt_shard_read_state(r, vec, m, tail, n - tail, p + tail);
    /* every rank learns whether all read their part before any trusts the
     * others' bytes; the failing rank's own account names the file */
    int32_t bad = rc != 0, any = 0;
    double t1 = clock_now();
    int crc = weft_allreduce(g, &bad, &any, 1, WEFT_I32, WEFT_MAX);
    if (crc == 0 && any)
        crc = rc ? rc : WEFT_EIO;
    if (crc == 0 && each)
        crc = weft_allgather(g, p + (size_t)me * each, p, each, WEFT_F32);
    double t2 = clock_now();
    ckpt_shard_reader_close(r);
    ckpt_shard_need(c, (each + (me == 0 ? n - tail : 0)) * sizeof *p);
    ckpt_shard_phase(c, CKPT_PH_GATHER, t2 - t1);
    return crc;
}

int ckpt_shard_get_optim_stage(const weft_ckpt *c, const weft_model *m, size_t base, size_t n,
                               weft_optim **out)
{
    *out = NULL;
    double t0 = clock_now();
    weft_optim_config oc;
    uint64_t steps;
    ckpt_shard_reader *r = NULL;
    weft_optim *o = NULL;
    int rc = weft_ckpt_optim_config(c, &oc);
    if (rc == 0)
        rc = weft_ckpt_get_u64(c, "optim/steps", &steps);
    if (rc == 0)
        rc = weft_optim_create(&o, &oc, base, n);
    int count = rc == 0 ? weft_optim_state_count(o) : 0;
    ckpt_shard_phase(c, CKPT_PH_INIT, clock_now() - t0);
    /* a ZeRO rank's own parameters come with its state, and both are read
     * by ckpt_shard_zero_finish, which has the buckets: the parameters
     * first, each bucket's all-gather going while the states are read */
    int own = rc == 0 && m && ckpt_shard_own_params(c) == CKPT_OWN_PENDING;
    if (rc == 0 && !own)
        rc = ckpt_shard_reader_open(c, &r);
    /* the disk reads ahead of the preads */
    for (int i = 0; r && i < count; i++) {
        const char *sname;
        weft_optim_state(o, i, &sname);
        ckpt_shard_prefetch_state(r, ckpt_shard_reader_vector(r, sname), m, base, n);
    }
    for (int i = 0; r && rc == 0 && i < count; i++) {
        const char *sname;
        float *s = weft_optim_state(o, i, &sname);
        rc = ckpt_shard_read_state(r, ckpt_shard_reader_vector(r, sname), m, base, n, s);
    }
    ckpt_shard_reader_close(r);
    ckpt_shard_need(c, (uint64_t)(count + own) * n * sizeof(float));
    if (rc == 0)
        rc = weft_optim_set_steps(o, (int64_t)steps);
    if (rc != 0) {
        weft_optim_destroy(o);
        return rc;
    }
    *out = o;
    return 0;
}
