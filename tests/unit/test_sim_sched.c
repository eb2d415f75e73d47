/* Schedules checked by running all ranks in the virtual executor: the
 * tree and recursive doubling generators (and ring and naive, which the
 * simulator runs too) must produce the right all-reduce on every rank, with
 * no racing ops, under eager and rendezvous sends; and the executor itself
 * must catch broken schedules. */
#include "test.h"
#include "coll/sched/tree.h"
#include "sim/sim.h"
#include "coll/sched/vexec.h"

#include <string.h>

static float val(int r, uint64_t i) { return (float)((r * 7 + (int)(i % 101) * 3) % 11) - 5.0f; }

/* Builds and runs one collective; 0 when every rank's result is right. */
static int run_coll(int algo, weft_coll_kind kind, int p, uint64_t count,
                    int root, int inplace, uint64_t chunk, int mode, char *why)
{
    weft_sched *s = calloc((size_t)p, sizeof *s);
    vexec_mem *m = calloc((size_t)p, sizeof *m);
    int rc = 0;
    uint64_t nb = count * 4;
    for (int r = 0; r < p && !rc; r++) {
        sched_params sp = { .kind = kind, .rank = r, .nranks = p, .root = root,
                            .count = count, .esize = 4, .inplace = inplace,
                            .chunk_bytes = chunk };
        sched_init(&s[r]);
        sched_reset(&s[r]);
        switch (algo) {
        case WEFT_ALGO_TREE: rc = sched_tree(&s[r], &sp); break;
        case WEFT_ALGO_RD: rc = sched_rd(&s[r], &sp); break;
        case WEFT_ALGO_RING: rc = sched_ring(&s[r], &sp); break;
        case SIM_ALGO_PS: rc = sim_sched_ps(&s[r], &sp, 1 + p % 3); break;
        default: rc = sched_naive(&s[r], &sp); break;
        }
        sched_end_round(&s[r]);
        m[r].size[SB_SEND] = m[r].size[SB_RECV] = nb;
        m[r].size[SB_TMP] = s[r].tmp_bytes;
        for (int b = 0; b < SB_COUNT; b++)
            m[r].buf[b] = malloc(m[r].size[b] + 1);
        if (inplace) { /* the caller passes one buffer as both */
            free(m[r].buf[SB_SEND]);
            m[r].buf[SB_SEND] = m[r].buf[SB_RECV];
        }
        for (uint64_t i = 0; i < count; i++) {
            float v = val(r, i);
            if (kind == WEFT_COLL_BROADCAST) /* broadcast works on SB_RECV */
                v = r == root ? v : 1e9f;
            memcpy(m[r].buf[inplace || kind == WEFT_COLL_BROADCAST ? SB_RECV : SB_SEND]
                   + i * 4, &v, 4);
            if (!inplace && kind != WEFT_COLL_BROADCAST) {
                float junk = -1e9f;
                memcpy(m[r].buf[SB_RECV] + i * 4, &junk, 4);
            }
        }
    }
    if (rc) {
        sprintf(why, "generator returned %d", rc);
        goto out;
    }
    vexec_opts o = { .mode = mode, .check_hazards = 1 };
    vexec_stats st;
    if ((rc = vexec_run(p, s, m, &o, &st))) {
        snprintf(why, 300, "vexec: %s", st.err);
        goto out;
    }
    for (int r = 0; r < p && !rc; r++) {
        if (kind == WEFT_COLL_REDUCE && r != root)
            continue;
        for (uint64_t i = 0; i < count && !rc; i++) {
            float want = 0, got;
            if (kind == WEFT_COLL_BROADCAST)
                want = val(root, i);
            else
                for (int q = 0; q < p; q++)
                    want += val(q, i);
            memcpy(&got, m[r].buf[SB_RECV] + i * 4, 4);
            if (got != want) {
                sprintf(why, "rank %d element %llu: got %g want %g", r,
                        (unsigned long long)i, got, want);
                rc = -1;
            }
        }
    }
out:
    for (int r = 0; r < p; r++) {
        sched_free(&s[r]);
        if (m[r].buf[SB_SEND] == m[r].buf[SB_RECV])
            m[r].buf[SB_SEND] = NULL;
        for (int b = 0; b < SB_COUNT; b++)
            free(m[r].buf[b]);
    }
    free(s);
    free(m);
    return rc;
}

TEST(allreduce)
{
    static const uint64_t counts[] = { 0, 1, 2, 3, 7, 13, 64, 101, 1031 };
    static const int algos[] = { WEFT_ALGO_TREE, WEFT_ALGO_RD, WEFT_ALGO_RING,
                                 WEFT_ALGO_NAIVE, SIM_ALGO_PS };
    char why[320];
    for (unsigned a = 0; a < sizeof algos / sizeof *algos; a++)
        for (int p = 1; p <= 16; p++)
            for (unsigned c = 0; c < sizeof counts / sizeof *counts; c++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    /* small chunks: many in flight through the pipeline */
                    uint64_t chunk = (c + (unsigned)p) % 2 ? 16 : 0;
                    int mode = (int)((c + (unsigned)inplace) % 2);
                    why[0] = 0;
                    int rc = run_coll(algos[a], WEFT_COLL_ALLREDUCE, p, counts[c], 0,
                                      inplace, chunk, mode, why);
                    CHECKF(rc == 0, "%s allreduce p=%d count=%llu inplace=%d chunk=%llu: %s",
                           sim_algo_name(algos[a]), p, (unsigned long long)counts[c],
                           inplace, (unsigned long long)chunk, why);
                }
}

TEST(tree_rooted)
{
    char why[320];
    for (int p = 1; p <= 13; p++)
        for (int root = 0; root < p; root += (p > 6 ? 3 : 1))
            for (int k = 0; k < 2; k++) {
                weft_coll_kind kind = k ? WEFT_COLL_REDUCE : WEFT_COLL_BROADCAST;
                uint64_t count = (uint64_t)(p * 5 + root);
                why[0] = 0;
                int rc = run_coll(WEFT_ALGO_TREE, kind, p, count, root, root % 2, 16,
                                  root % 2 ? VEXEC_RENDEZVOUS : VEXEC_EAGER, why);
                CHECKF(rc == 0, "tree %s p=%d root=%d: %s", k ? "reduce" : "broadcast",
                       p, root, why);
            }
}

/* Both trees span all ranks, parent and child agree, no rank is interior
 * in both, and the depth stays logarithmic. */
TEST(tree_shape)
{
    int bad_link = 0, bad_interior = 0, bad_depth = 0, bad_span = 0;
    for (int p = 1; p <= 600; p++) {
        int logp = 0;
        while ((1 << (logp + 1)) <= p)
            logp++;
        for (int t = 0; t < 2; t++) {
            int nroot = 0;
            for (int pos = 0; pos < p; pos++) {
                int par = sched_tree_parent(pos, p), l, r;
                if (par < 0)
                    nroot++;
                else {
                    sched_tree_children(par, p, &l, &r);
                    bad_link += l != pos && r != pos;
                }
                sched_tree_children(pos, p, &l, &r);
                bad_link += (l >= 0 && sched_tree_parent(l, p) != pos) ||
                            (r >= 0 && sched_tree_parent(r, p) != pos);
                bad_depth += sched_tree_depth(pos, p) > 2 * logp + 1;
            }
            bad_span += nroot != 1;
        }
        for (int r = 0; r < p; r++) {
            int in = 0;
            for (int t = 0; t < 2; t++) {
                int l, rr;
                sched_tree_children(sched_dbtree_pos(r, t, p), p, &l, &rr);
                in += l >= 0;
                bad_link += sched_dbtree_rank(sched_dbtree_pos(r, t, p), t, p) != r;
            }
            bad_interior += in > 1;
        }
    }
    CHECKF(bad_link == 0, "%d inconsistent parent/child links", bad_link);
    CHECKF(bad_span == 0, "%d trees without exactly one root", bad_span);
    CHECKF(bad_interior == 0, "%d ranks interior in both trees", bad_interior);
    CHECKF(bad_depth == 0, "%d positions deeper than 2 log2 p + 1", bad_depth);
    int d = 0;
    for (int pos = 0; pos < 24576; pos++)
        if (sched_tree_depth(pos, 24576) > d)
            d = sched_tree_depth(pos, 24576);
    CHECKF(d >= 14 && d <= 16, "depth of the 24576-rank tree is %d", d);
}

/* Hand-built schedules the executor must reject. */
static int run_hand(int p, weft_sched *s, int mode, char *err)
{
    unsigned char bufs[4][3][64];
    vexec_mem m[4];
    for (int r = 0; r < p; r++)
        for (int b = 0; b < SB_COUNT; b++) {
            m[r].buf[b] = bufs[r][b];
            m[r].size[b] = 64;
        }
    vexec_opts o = { .mode = mode, .check_hazards = 1 };
    vexec_stats st;
    int rc = vexec_run(p, s, m, &o, &st);
    strcpy(err, st.err);
    for (int r = 0; r < p; r++)
        sched_free(&s[r]);
    return rc;
}

TEST(broken)
{
    weft_sched s[4];
    char err[256];
    /* both receive first: deadlock whatever the transport */
    for (int r = 0; r < 2; r++) {
        sched_init(&s[r]);
        sched_recv(&s[r], 1 - r, SB_RECV, 0, 8);
        sched_end_round(&s[r]);
        sched_send(&s[r], 1 - r, SB_SEND, 0, 8);
        sched_end_round(&s[r]);
    }
    CHECK(run_hand(2, s, VEXEC_EAGER, err) == WEFT_EINVAL && strstr(err, "deadlock"));
    /* both send first in a round of their own: fine buffered, deadlock
     * when a send waits for its receive */
    for (int mode = 0; mode < 2; mode++) {
        for (int r = 0; r < 2; r++) {
            sched_init(&s[r]);
            sched_send(&s[r], 1 - r, SB_SEND, 0, 8);
            sched_end_round(&s[r]);
            sched_recv(&s[r], 1 - r, SB_RECV, 0, 8);
            sched_end_round(&s[r]);
        }
        int rc = run_hand(2, s, mode, err);
        CHECKF(mode == VEXEC_EAGER ? rc == 0 : rc == WEFT_EINVAL, "mode %d rc %d %s",
               mode, rc, err);
    }
    /* lengths differ */
    for (int r = 0; r < 2; r++)
        sched_init(&s[r]);
    sched_send(&s[0], 1, SB_SEND, 0, 8);
    sched_recv(&s[1], 0, SB_RECV, 0, 12);
    sched_end_round(&s[0]);
    sched_end_round(&s[1]);
    CHECK(run_hand(2, s, VEXEC_EAGER, err) == WEFT_EINVAL && strstr(err, "sent 8"));
    /* a send nobody receives */
    for (int r = 0; r < 2; r++)
        sched_init(&s[r]);
    sched_send(&s[0], 1, SB_SEND, 0, 8);
    sched_end_round(&s[0]);
    CHECK(run_hand(2, s, VEXEC_EAGER, err) == WEFT_EINVAL && strstr(err, "never received"));
    /* a receive racing a send over the same bytes */
    for (int r = 0; r < 2; r++) {
        sched_init(&s[r]);
        sched_send(&s[r], 1 - r, SB_RECV, 0, 16);
        sched_recv(&s[r], 1 - r, SB_RECV, 8, 16);
        sched_end_round(&s[r]);
    }
    CHECK(run_hand(2, s, VEXEC_EAGER, err) == WEFT_EINVAL && strstr(err, "race"));
    /* out of bounds */
    for (int r = 0; r < 2; r++)
        sched_init(&s[r]);
    sched_copy(&s[0], SB_RECV, 60, SB_SEND, 0, 8);
    sched_end_round(&s[0]);
    CHECK(run_hand(2, s, VEXEC_EAGER, err) == WEFT_EINVAL && strstr(err, "bounds"));
    /* FIFO per pair: two messages of different lengths arrive in order */
    for (int r = 0; r < 2; r++)
        sched_init(&s[r]);
    sched_send(&s[0], 1, SB_SEND, 0, 4);
    sched_send(&s[0], 1, SB_SEND, 4, 8);
    sched_end_round(&s[0]);
    sched_recv(&s[1], 0, SB_RECV, 0, 4);
    sched_recv(&s[1], 0, SB_RECV, 4, 8);
    sched_end_round(&s[1]);
    CHECK(run_hand(2, s, VEXEC_RENDEZVOUS, err) == 0);
}

