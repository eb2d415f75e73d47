/* Large all-reduce on the flat algorithm: a copy-in, reduce, copy-out
 * pipeline through the pipe segment (coll/local/flat_board.h), in chunks of
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
 *   wait for all at step j (j > 0); O(j-1) and I(j+1); R(j); step j+1
 * and at the end waits for step N (every R done) and does O(N-1). One
 * wait per chunk. O(j-1) and I(j+1) run as one loop (move): a core
 * streams from memory and to memory at once far faster than it does one
 * after the other (the input read and the output written are the only
 * bytes that leave the cache, and each alone leaves the core waiting on
 * memory).
 *
 * Why two areas of each kind are enough. A rank publishes step j+1
 * after O(j-1), I(j+1) and R(j), and so after everything it did before
 * them. "All at step j" thus says every rank has done R(j-1), I(j) and
 * O(j-2).
 *   - I(j+1) overwrites the in area of chunk j-1, read only by the R(j-1)
 *     of every rank. Its rank has waited for step j, which every rank
 *     publishes after its R(j-1). (I(1), at j = 0, overwrites what the
 *     previous call's last R read: every rank posted this call after it.)
 *   - R(j) overwrites the out area of chunk j-2, read only by the O(j-2)
 *     of every rank. Its rank has waited for step j, which every rank
 *     publishes after its O(j-2).
 *   - Across calls, counting restarts at parity 0: I(0) of the next call
 *     comes after this rank saw step N (all R of this call done), and
 *     R(0) after the board post of the next call, which every rank makes
 *     after its last O of this one.
 * So no area is written while anyone may still read what it held, and a
 * reader never sees the next use land: that needs the reader's own step
 * first. In place, O(j-1) writes chunk j-1 of the buffer that I(j+1)
 * reads chunk j+1 of, and R reads only the in areas. */
#include "coll/local/flat_int.h"

#include "coll/reduce.h"
#include "core/log.h"

#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
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

#if defined(__x86_64__)
/* One 64-byte line from src to dst (16-byte aligned) with streaming
 * stores, which skip reading the line first. */
static inline void stream_line(char *dst, const char *src)
{
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)src);
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + 48));
    _mm_stream_si128((__m128i *)(void *)dst, a);
    _mm_stream_si128((__m128i *)(void *)(dst + 16), b);
    _mm_stream_si128((__m128i *)(void *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(void *)(dst + 48), d);
}
#endif

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
    for (; n >= 64; dst += 64, src += 64, n -= 64)
        stream_line(dst, src);
    memcpy(dst, src, n);
#else
    memcpy(dst, src, n);
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
/* move's loop a line per instruction: a whole line streamed at once also
 * leaves the write-combining buffers nothing to merge. dst is 64-byte
 * aligned; returns the bytes done (of n, in both streams). */
__attribute__((target("avx512f"))) static size_t move_lines(char *dst, const char *src,
                                                             char *idst, const char *isrc,
                                                             size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i a = _mm512_loadu_si512((const void *)(src + i));
        __m512i b = _mm512_loadu_si512((const void *)(isrc + i));
        _mm512_stream_si512((void *)(dst + i), a);
        _mm512_storeu_si512((void *)(idst + i), b);
    }
    return i;
}
#endif

/* O and I at once: n bytes from src to dst as copy_out does, and m
 * bytes from isrc to idst (the in area, which stays in the cache: plain
 * stores), a line of each per turn. */
static void move(char *dst, const char *src, size_t n, char *idst, const char *isrc, size_t m)
{
#if defined(__x86_64__)
    size_t head = (64 - ((uintptr_t)dst & 63)) & 63;
    if (n >= 4096 + head && m >= 4096) {
        memcpy(dst, src, head);
        dst += head, src += head, n -= head;
#if defined(__GNUC__)
        if (__builtin_cpu_supports("avx512f")) {
            size_t k = move_lines(dst, src, idst, isrc, n < m ? n : m);
            dst += k, src += k, n -= k, idst += k, isrc += k, m -= k;
        }
#endif
        for (; n >= 64 && m >= 64; dst += 64, src += 64, n -= 64, idst += 64, isrc += 64, m -= 64) {
            stream_line(dst, src);
            memcpy(idst, isrc, 64);
        }
    }
#endif
    copy_out(dst, src, n);
    memcpy(idst, isrc, m);
}

#define FOLD_MAX 16 /* sources reduced in one pass */

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
    /* as the board's setup: a rank that mapped it unlinks the name, the
     * others reap it if rank 0 died holding it */
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
    const void *from[FOLD_MAX];
#define CHUNK_N(j) ((j) + 1 < nchunks ? per : count - (j) * per)

    memcpy(flat_pipe_in(x, me, 0), src, CHUNK_N(0) * es);
    flat_post_call(fs, me, k, fp);
    flat_ctr posts = flat_posts(fs, k);
    if ((rc = flat_wait(c, fs, &posts, fp)) || (rc = flat_check_posts(c, fs, k, fp)))
        return rc;
    for (size_t j = 0; j < nchunks; j++) {
        int q = (int)(j & 1);
        size_t m = CHUNK_N(j), next = j + 1 < nchunks ? CHUNK_N(j + 1) * es : 0;
        if (j > 0 && (rc = wait_step(c, fs, base + j, fp)))
            return rc;
        move(dst + (j - !!j) * per * es, x->out + (size_t)(q ^ 1) * FLAT_CHUNK, j ? per * es : 0,
             flat_pipe_in(x, me, q ^ 1), next ? src + (j + 1) * per * es : src, next);
        size_t lo = cut(m, me, p, es), n = cut(m, me + 1, p, es) - lo, off = lo * es;
        char *res = x->out + (size_t)q * FLAT_CHUNK + off;
        /* in rank order, up to FOLD_MAX sources a pass */
        rc = 0;
        for (int r = 0; r < p && !rc;) {
            int nf = 0;
            if (r)
                from[nf++] = res;
            while (r < p && nf < FOLD_MAX)
                from[nf++] = flat_pipe_in(x, r++, q) + off;
            rc = reduce_apply_many(res, from, nf, n, a->dtype, a->op);
        }
        if (rc)
            return comm_fail(c, rc, "bad reduction (dtype %d, op %d)", a->dtype, a->op);
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
