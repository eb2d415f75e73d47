/* Large all-reduce on the flat algorithm: a copy-in, reduce, copy-out
 * pipeline through the pipe segment (coll/flat_board.h), in chunks of
 * FLAT_CHUNK bytes of every rank's input. Of all the bytes that move,
 * only the input read and the output written leave the cache: a chunk is
 * copied into the pipe, reduced and copied out while it is still there.
 *
 * For chunk j (parity j & 1) there are three acts per rank:
 *   I(j)  copy its input chunk into its in area of that parity;
 *   R(j)  once every rank has done I(j): reduce its sub-slice of the
 *         chunk from all p in areas, in rank order (so every rank gets
 *         the same bits), into the out area of that parity;
 *   O(j)  once every rank has done R(j): copy the whole out area to its
 *         output.
 * A rank does I(0) and posts the call on the board (step 0, which also
 * checks that all ranks are in the same call), then for each j:
 *   wait for all at step j (j > 0); O(j-1); R(j); I(j+1); step j+1
 * and at the end waits for step N (every R done) and does O(N-1). One
 * wait per chunk, and the copy-in of the next chunk overlaps the others'
 * reductions.
 *
 * Why two areas of each kind are enough. A rank publishes step j+1
 * after R(j) and I(j+1), and so after everything it did before them:
 * O(j-1), R(j-1). "All at step j" thus says every rank has done R(j-1),
 * I(j) and O(j-2).
 *   - I(j+1) overwrites the in area of chunk j-1, read only by the R(j-1)
 *     of every rank. Its rank has waited for step j, which every rank
 *     publishes after its R(j-1).
 *   - R(j) overwrites the out area of chunk j-2, read only by the O(j-2)
 *     of every rank. Its rank has waited for step j, which every rank
 *     publishes after its O(j-2).
 *   - Across calls, counting restarts at parity 0: I(0) of the next call
 *     comes after this rank saw step N (all R of this call done), and
 *     R(0) after the board post of the next call, which every rank makes
 *     after its last O of this one.
 * So no area is written while anyone may still read what it held, and a
 * reader never sees the next use land: that needs the reader's own step
 * first. */
#include "coll/flat_int.h"

#include "coll/reduce.h"
#include "core/log.h"

#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

static void publish(struct flat_state *fs, int me, uint64_t v)
{
    flat_ctr w = { (const char *)&fs->pipe.step[0].done, sizeof(flat_step), v, fs->pipe.nranks };
    atomic_store(&fs->pipe.step[me].done, v);
    /* as a board post: of ranks publishing at once, the last sees all */
    if (flat_reached(&w))
        flat_ring(fs);
}

static int wait_step(weft_comm *c, struct flat_state *fs, uint64_t v, const frame_hdr *fp)
{
    flat_ctr w = { (const char *)&fs->pipe.step[0].done, sizeof(flat_step), v, fs->pipe.nranks };
    return flat_wait(c, fs, &w, fp);
}

/* Copy a reduced chunk to the output. The output is read by nobody here,
 * and a plain store would first read each of its lines from memory:
 * streaming stores skip that, a third of the traffic the call makes. */
static void copy_out(char *dst, const char *src, size_t n)
{
#if defined(__x86_64__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (n < 4096 + head) {
        memcpy(dst, src, n);
        return;
    }
    memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    for (; n >= 64; dst += 64, src += 64, n -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + 48));
        _mm_stream_si128((__m128i *)(void *)dst, a);
        _mm_stream_si128((__m128i *)(void *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(void *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(void *)(dst + 48), d);
    }
    memcpy(dst, src, n);
#else
    memcpy(dst, src, n);
#endif
}

/* First element of rank r's sub-slice of an m-element chunk: cut on
 * cache lines, so no two ranks write one line. */
static size_t cut(size_t m, int r, int p, size_t es)
{
    size_t unit = es < 64 ? 64 / es : 1;
    size_t at = (size_t)((uint64_t)m * (uint64_t)r / (uint64_t)p) / unit * unit;
    return r == p ? m : at < m ? at : m;
}

/* Post the next call on the board with 16 bytes inline, wait for all
 * posts and check they are this call. */
static int board_round(weft_comm *c, struct flat_state *fs, const int64_t v[2],
                       const frame_hdr *fp, uint64_t *k)
{
    int rc;
    *k = ++fs->calls;
    memcpy(fs->b.ranks[c->rank].post[*k & 1].inl, v, 2 * sizeof *v);
    flat_post_call(fs, c->rank, *k, fp);
    flat_ctr posts = flat_posts(fs, *k);
    if ((rc = flat_wait(c, fs, &posts, fp)) || (rc = flat_check_posts(c, fs, *k, fp)))
        return rc;
    return 0;
}

static int64_t inline_of(const struct flat_state *fs, int r, uint64_t k, int i)
{
    int64_t v[2];
    memcpy(v, fs->b.ranks[r].post[k & 1].inl, sizeof v);
    return v[i];
}

/* Made on the board, not through schedules as the board itself: the call
 * is posted first, so a rank in another call (a smaller count, say) is
 * told of the mismatch before anything waits on a message. Rank 0 posts
 * whether it made the pipe and its pid; then every rank whether it
 * mapped it. */
int flat_pipe_setup(weft_comm *c, struct flat_state *fs, const frame_hdr *fp)
{
    int64_t v[2] = { 0, (int64_t)getpid() };
    char err[256] = "";
    uint64_t k;
    int rc, ok = 0, all = 1;
    if (c->rank == 0)
        v[0] = ok = flat_pipe_create(&fs->pipe, c->id, c->size, err, sizeof err) == 0;
    if ((rc = board_round(c, fs, v, fp, &k)))
        goto failed;
    int64_t made = inline_of(fs, 0, k, 0);
    if (c->rank != 0 && made)
        ok = flat_pipe_attach(&fs->pipe, c->id, c->size, (long)inline_of(fs, 0, k, 1), err,
                              sizeof err) == 0;
    v[0] = ok;
    if ((rc = board_round(c, fs, v, fp, &k)))
        goto failed;
    for (int r = 0; r < c->size; r++)
        all &= inline_of(fs, r, k, 0) != 0;
    if (!all) {
        if (!ok)
            log_sub(c->loglevel, LOG_WARN, LOG_SUB_COLL, c->rank,
                    "flat: no pipe for large all-reduce here (%s); every rank uses ordinary "
                    "algorithms for them instead",
                    made || c->rank == 0 ? err : "rank 0 could not make it");
        flat_pipe_close(&fs->pipe);
        fs->pipe_mode = FLAT_FALLBACK;
        return 0;
    }
    flat_pipe_unlink(&fs->pipe); /* everyone has it mapped */
    fs->pipe_mode = FLAT_ON;
    return 0;
failed:
    /* as the board's setup: rank 0 unlinks the name, the others reap it
     * if rank 0 died holding it */
    flat_pipe_close(&fs->pipe);
    if (c->rank != 0)
        flat_board_reap(c->id);
    return rc;
}

int flat_pipe_run(weft_comm *c, struct flat_state *fs, const weft_coll_args *a,
                  const frame_hdr *fp)
{
    const flat_pipe *x = &fs->pipe;
    int p = c->size, me = c->rank, rc;
    size_t es = weft_dtype_size(a->dtype), per = FLAT_CHUNK / es;
    size_t count = a->count, nchunks = (count + per - 1) / per;
    const char *src = a->send;
    char *dst = a->recv;
    uint64_t base = fs->steps, k = ++fs->calls;
#define CHUNK_N(j) ((j) + 1 < nchunks ? per : count - (j) * per)

    memcpy(flat_pipe_in(x, me, 0), src, CHUNK_N(0) * es);
    flat_post_call(fs, me, k, fp);
    flat_ctr posts = flat_posts(fs, k);
    if ((rc = flat_wait(c, fs, &posts, fp)) || (rc = flat_check_posts(c, fs, k, fp)))
        return rc;
    for (size_t j = 0; j < nchunks; j++) {
        int q = (int)(j & 1);
        size_t m = CHUNK_N(j);
        if (j > 0) {
            if ((rc = wait_step(c, fs, base + j, fp)))
                return rc;
            copy_out(dst + (j - 1) * per * es, x->out + (size_t)(q ^ 1) * FLAT_CHUNK, per * es);
        }
        size_t lo = cut(m, me, p, es), n = cut(m, me + 1, p, es) - lo, off = lo * es;
        char *res = x->out + (size_t)q * FLAT_CHUNK + off;
        rc = reduce_apply(res, flat_pipe_in(x, 0, q) + off, flat_pipe_in(x, 1, q) + off, n,
                          a->dtype, a->op);
        for (int r = 2; r < p && !rc; r++)
            rc = reduce_apply(res, res, flat_pipe_in(x, r, q) + off, n, a->dtype, a->op);
        if (rc)
            return comm_fail(c, rc, "bad reduction (dtype %d, op %d)", a->dtype, a->op);
        if (j + 1 < nchunks)
            memcpy(flat_pipe_in(x, me, q ^ 1), src + (j + 1) * per * es, CHUNK_N(j + 1) * es);
        publish(fs, me, base + j + 1);
    }
    if ((rc = wait_step(c, fs, base + nchunks, fp)))
        return rc;
    size_t last = nchunks - 1;
    copy_out(dst + last * per * es, x->out + (last & 1) * FLAT_CHUNK, CHUNK_N(last) * es);
#if defined(__x86_64__)
    _mm_sfence(); /* the streamed stores, ordered before whatever the caller does next */
#endif
    fs->steps = base + nchunks;
    return 0;
#undef CHUNK_N
}
