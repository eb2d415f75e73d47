/* Pipeline schedules: every generator's lists pass the checker at every
 * size; the replay gives the textbook bubbles and stashes; the checker
 * catches broken lists and says where. */
#include "test.h"
#include "train/pipe_gen.h"
#include "train/pipe_sched.h"
#include "weft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double fwd[64], bi[64], bw[64], act[64];
    pipe_costs c;
    double busy[8], bubble[8];
    int peak[8];
    pipe_result r;
} replay_buf;

/* Replays spec with the same costs on every chunk; 0 on success. */
static int replay(const pipe_spec *sp, double f, double bi, double bw, double lat,
                  replay_buf *b)
{
    int K = sp->p * sp->v;
    for (int i = 0; i < K; i++) {
        b->fwd[i] = f;
        b->bi[i] = bi;
        b->bw[i] = bw;
        b->act[i] = 0;
    }
    b->c = (pipe_costs){ b->fwd, b->bi, b->bw, b->act, lat, 0 };
    b->r = (pipe_result){ 0, b->busy, b->bubble, b->peak };
    pipe_sched s;
    int rc = pipe_sched_build(&s, sp);
    if (rc)
        return rc;
    rc = pipe_sched_replay(&s, &b->c, &b->r);
    pipe_sched_free(&s);
    return rc;
}

static pipe_spec spec(int kind, int p, int m, int v)
{
    return (pipe_spec){ .kind = kind, .p = p, .m = m, .v = v };
}

static int min_i(int a, int b) { return a < b ? a : b; }

TEST(parse_and_name)
{
    static const char *const good[] = { "gpipe", "1f1b", "interleaved:2", "interleaved:4", "zb" };
    for (unsigned i = 0; i < sizeof good / sizeof *good; i++) {
        pipe_spec s;
        char buf[32];
        CHECKF(pipe_spec_parse(good[i], 4, 8, &s) == 0, "%s", good[i]);
        pipe_spec_name(&s, buf, sizeof buf);
        CHECKF(!strcmp(buf, good[i]), "%s came back as %s", good[i], buf);
        CHECK(s.p == 4 && s.m == 8);
    }
    pipe_spec s;
    CHECK(pipe_spec_parse("interleaved:3", 2, 4, &s) == 0 && s.v == 3 && s.kind == PIPE_INTERLEAVED);
    static const char *const bad[] = { "", "GPipe", "interleaved", "interleaved:", "interleaved:1",
                                       "interleaved:2x", "zb:2", "1f1b:1", "pipedream" };
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(pipe_spec_parse(bad[i], 4, 8, &s) == WEFT_EINVAL, "%s", bad[i]);
    CHECK(pipe_spec_parse(NULL, 4, 8, &s) == WEFT_EINVAL);
}

TEST(build_refuses)
{
    pipe_sched s;
    pipe_spec bad[] = { spec(PIPE_INTERLEAVED, 4, 6, 2), spec(PIPE_INTERLEAVED, 1, 4, 2),
                        spec(PIPE_INTERLEAVED, 4, 8, 1), spec(PIPE_1F1B, 4, 8, 2),
                        spec(PIPE_1F1B, 0, 8, 1), spec(PIPE_GPIPE, 4, 0, 1), spec(9, 4, 8, 1) };
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(pipe_sched_build(&s, &bad[i]) == WEFT_EINVAL, "case %u", i);
}

/* Every generator, p <= 8, m <= 32, v <= 4 where the schedule takes them. */
TEST(all_pass_checker)
{
    static const int kinds[] = { PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_ZB };
    int built = 0, fails = 0;
    for (int k = 0; k < 4; k++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 32; m++)
                for (int v = 1; v <= 4; v++) {
                    int inter = kinds[k] == PIPE_INTERLEAVED;
                    if ((inter && (v < 2 || p < 2 || m % p)) || (!inter && v != 1))
                        continue;
                    pipe_spec sp = spec(kinds[k], p, m, v);
                    pipe_sched s;
                    char why[256];
                    if (pipe_sched_build(&s, &sp)) {
                        CHECKF(0, "build kind %d p %d m %d v %d", kinds[k], p, m, v);
                        continue;
                    }
                    int rc = pipe_sched_check(&s, why, sizeof why);
                    if (rc && fails++ < 5)
                        CHECKF(rc == 0, "kind %d p %d m %d v %d: %s", kinds[k], p, m, v, why);
                    built++;
                    pipe_sched_free(&s);
                }
    CHECK(fails == 0);
    printf("  %d schedules built and checked\n", built);
}

/* Chunk 0 receives no activation, the last chunk no gradient, chunk 0
 * sends no gradient; every send's tag equals its receive's. */
TEST(ends_and_tags)
{
    pipe_spec sp = spec(PIPE_INTERLEAVED, 4, 8, 2);
    pipe_sched s;
    CHECK(pipe_sched_build(&s, &sp) == 0);
    int K = 8, bad = 0, nsend = 0;
    char *seen = calloc(4096, 1);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < s.rank[r].n; i++) {
            pipe_action a = s.rank[r].a[i];
            bad += a.op == PIPE_RECV_ACT && a.chunk == 0;
            bad += a.op == PIPE_RECV_GRAD && a.chunk == K - 1;
            bad += a.op == PIPE_SEND_GRAD && a.chunk == 0;
            bad += a.op == PIPE_SEND_ACT && a.chunk == K - 1;
            if (a.op == PIPE_SEND_ACT || a.op == PIPE_SEND_GRAD) {
                int t = pipe_tag(&sp, a.op, a.chunk, a.mb);
                bad += t < 0 || t >= 4096 || seen[t]++;
                nsend++;
            }
        }
    CHECK(bad == 0);
    CHECK(nsend == 2 * (K - 1) * 8);
    CHECK(pipe_tag(&sp, PIPE_SEND_ACT, 3, 5) == pipe_tag(&sp, PIPE_RECV_ACT, 4, 5));
    CHECK(pipe_tag(&sp, PIPE_SEND_GRAD, 4, 5) == pipe_tag(&sp, PIPE_RECV_GRAD, 3, 5));
    CHECK(pipe_tag(&sp, PIPE_SEND_ACT, 3, 5) != pipe_tag(&sp, PIPE_SEND_GRAD, 4, 5));
    CHECK(pipe_tag(&sp, PIPE_RECV_ACT, 0, 0) < 0);
    CHECK(pipe_tag(&sp, PIPE_SEND_ACT, K - 1, 0) < 0);
    CHECK(pipe_tag(&sp, PIPE_FWD, 1, 0) < 0);
    CHECK(pipe_chunk_rank(&sp, 5) == 1 && pipe_chunk_rank(&sp, 8) < 0);
    free(seen);
    pipe_sched_free(&s);
}

TEST(stash_1f1b_gpipe_zb)
{
    replay_buf b;
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 32; m++) {
            pipe_spec a = spec(PIPE_1F1B, p, m, 1), g = spec(PIPE_GPIPE, p, m, 1),
                      z = spec(PIPE_ZB, p, m, 1);
            CHECK(replay(&a, 1, 1, 1, 0, &b) == 0);
            for (int r = 0; r < p; r++)
                CHECKF(b.peak[r] == min_i(p - r, m), "1f1b p %d m %d rank %d: %d", p, m, r,
                       b.peak[r]);
            CHECK(replay(&g, 1, 1, 1, 0, &b) == 0);
            for (int r = 0; r < p; r++)
                CHECKF(b.peak[r] == m, "gpipe p %d m %d rank %d: %d", p, m, r, b.peak[r]);
            CHECK(replay(&z, 1, 1, 1, 0, &b) == 0);
            int most = 0;
            for (int r = 0; r < p; r++)
                most = b.peak[r] > most ? b.peak[r] : most;
            CHECKF(most == min_i(p, m), "zb p %d m %d: peak %d", p, m, most);
        }
}

/* Equal unit costs, free links: the closed forms, on every rank. */
TEST(bubble_formulas)
{
    replay_buf b;
    static const double costs[][3] = { { 1, 1, 1 }, { 1, 2, 0 }, { 0.5, 0.25, 0.75 } };
    int n = 0;
    for (int c = 0; c < 3; c++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 32; m++)
                for (int k = 0; k < 2; k++) {
                    pipe_spec sp = spec(k ? PIPE_1F1B : PIPE_GPIPE, p, m, 1);
                    CHECK(replay(&sp, costs[c][0], costs[c][1], costs[c][2], 0, &b) == 0);
                    double want = (double)(p - 1) / (m + p - 1);
                    for (int r = 0; r < p; r++, n++)
                        if (fabs(b.bubble[r] - want) > 1e-9)
                            CHECKF(0, "kind %d p %d m %d rank %d: %.12f, want %.12f", sp.kind,
                                   p, m, r, b.bubble[r], want);
                }
    for (int p = 2; p <= 8; p++)
        for (int v = 2; v <= 4; v++)
            for (int m = p; m <= 32; m += p) {
                pipe_spec sp = spec(PIPE_INTERLEAVED, p, m, v);
                /* a chunk is 1/v of a stage */
                CHECK(replay(&sp, 1.0 / v, 1.0 / v, 1.0 / v, 0, &b) == 0);
                double want = (double)(p - 1) / (v * m + p - 1);
                for (int r = 0; r < p; r++, n++)
                    if (fabs(b.bubble[r] - want) > 1e-9)
                        CHECKF(0, "interleaved:%d p %d m %d rank %d: %.12f, want %.12f", v, p,
                               m, r, b.bubble[r], want);
            }
    CHECK(n > 0);
}

/* ZB-H1 with F = B = W: bubble time (p-1)(F+B-W) against 1F1B's
 * (p-1)(F+B+W), a third; the test allows 0.4. */
TEST(zb_third_of_1f1b)
{
    replay_buf b;
    pipe_spec z = spec(PIPE_ZB, 4, 8, 1), a = spec(PIPE_1F1B, 4, 8, 1);
    CHECK(replay(&a, 1, 1, 1, 0, &b) == 0);
    double idle_1f1b = b.r.step - b.busy[0];
    CHECK(fabs(idle_1f1b - 9) < 1e-9);
    CHECK(replay(&z, 1, 1, 1, 0, &b) == 0);
    for (int r = 0; r < 4; r++) {
        double idle = b.r.step - b.busy[r];
        CHECKF(idle <= 0.4 * idle_1f1b + 1e-9, "rank %d idle %g vs 1f1b %g", r, idle, idle_1f1b);
    }
    printf("  p=4 m=8 F=B=W=1: 1f1b step %g, zb step %g (idle %g, formula %g)\n",
           idle_1f1b + 24, b.r.step, b.r.step - b.busy[0], 3.0);
    CHECK(b.r.step <= 27 + 1e-9);
}

/* GPipe over links of latency L: each of the 2(p-1) hops adds L. */
TEST(replay_latency)
{
    replay_buf b;
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 8; m++) {
            pipe_spec g = spec(PIPE_GPIPE, p, m, 1);
            CHECK(replay(&g, 1, 2, 0, 0.25, &b) == 0);
            double want = (m + p - 1) * 3.0 + 2 * (p - 1) * 0.25;
            CHECKF(fabs(b.r.step - want) < 1e-9, "p %d m %d: %g want %g", p, m, b.r.step, want);
        }
    /* bytes over bandwidth count as latency does */
    pipe_spec g = spec(PIPE_GPIPE, 3, 4, 1);
    double f[3] = { 1, 1, 1 }, bi[3] = { 1, 1, 1 }, bw[3] = { 0, 0, 0 }, act[3] = { 100, 100, 0 };
    double busy[3], bub[3];
    int peak[3];
    pipe_costs c = { f, bi, bw, act, 0.5, 200 };
    pipe_result r = { 0, busy, bub, peak };
    pipe_sched s;
    CHECK(pipe_sched_build(&s, &g) == 0);
    CHECK(pipe_sched_replay(&s, &c, &r) == 0);
    CHECK(fabs(r.step - (6 * 2.0 + 4 * 1.0)) < 1e-9);
    CHECK(fabs(busy[1] - 8) < 1e-9 && fabs(bub[1] - 0.5) < 1e-9);
    pipe_sched_free(&s);
}

/* Lists by hand, one string per rank: "F0/1" forward of chunk 0 mb 1,
 * "B" backward, "I" and "W" its halves, "sa0/1>1" send the activation to
 * rank 1, "ra1/1<0" receive it from rank 0, "sg"/"rg" the gradients. */
static int hand(pipe_sched *s, int p, int m, const char *const *ranks)
{
    memset(s, 0, sizeof *s);
    s->spec = spec(PIPE_1F1B, p, m, 1);
    s->rank = calloc((size_t)p, sizeof *s->rank);
    for (int r = 0; r < p; r++) {
        const char *t = ranks[r];
        while (*t) {
            static const char ops[] = " FBIWSRGH";
            int op = 0, chunk, mb, peer = -1, n = 0;
            if (t[0] == 's' || t[0] == 'r') {
                op = t[0] == 's' ? (t[1] == 'a' ? PIPE_SEND_ACT : PIPE_SEND_GRAD)
                                 : (t[1] == 'a' ? PIPE_RECV_ACT : PIPE_RECV_GRAD);
                if (sscanf(t + 2, "%d/%d%*c%d%n", &chunk, &mb, &peer, &n) != 3)
                    return -1;
                n += 2;
            } else {
                op = (int)(strchr(ops, t[0]) - ops);
                if (sscanf(t + 1, "%d/%d%n", &chunk, &mb, &n) != 2)
                    return -1;
                n += 1;
            }
            if (pipe_list_push(&s->rank[r], op, chunk, mb, peer))
                return -1;
            t += n;
            while (*t == ' ')
                t++;
        }
    }
    return 0;
}

static void expect_fault(int p, int m, const char *const *ranks, const char *want)
{
    pipe_sched s;
    char why[256] = "";
    CHECK(hand(&s, p, m, ranks) == 0);
    int rc = pipe_sched_check(&s, why, sizeof why);
    CHECKF(rc == WEFT_EINVAL && strstr(why, want), "got %d \"%s\", want \"%s\"", rc, why, want);
    pipe_sched_free(&s);
}

TEST(checker_accepts_hand_made)
{
    pipe_sched s;
    char why[128];
    const char *ok[] = { "F0/0 sa0/0>1 rg0/0<1 B0/0", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    CHECK(hand(&s, 2, 1, ok) == 0);
    CHECKF(pipe_sched_check(&s, why, sizeof why) == 0, "%s", why);
    pipe_sched_free(&s);
    /* split backward too */
    const char *split[] = { "F0/0 sa0/0>1 rg0/0<1 I0/0 W0/0", "ra1/0<0 F1/0 I1/0 sg1/0>0 W1/0" };
    CHECK(hand(&s, 2, 1, split) == 0);
    CHECKF(pipe_sched_check(&s, why, sizeof why) == 0, "%s", why);
    pipe_sched_free(&s);
}

TEST(checker_rejects)
{
    const char *missing[] = { "F0/0 sa0/0>1 rg0/0<1", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, missing, "rank 0: no backward of chunk 0 mb 0");
    const char *swapped[] = { "F0/0 sa0/0>1 rg0/0<1 B0/0", "ra1/0<0 B1/0 F1/0 sg1/0>0" };
    expect_fault(2, 1, swapped, "rank 1 action 1: BWD chunk 1 mb 0 before its FWD");
    const char *w_first[] = { "F0/0 sa0/0>1 rg0/0<1 W0/0 I0/0", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, w_first, "rank 0 action 3: BWD_W chunk 0 mb 0 before its BWD_I");
    const char *no_w[] = { "F0/0 sa0/0>1 rg0/0<1 I0/0", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, no_w, "rank 0: BWD_I of chunk 0 mb 0 without its BWD_W");
    const char *unmatched[] = { "F0/0 sa0/0>1 rg0/0<1 B0/0", "ra1/0<0 F1/0 B1/0" };
    expect_fault(2, 1, unmatched, "rank 0: RECV_GRAD chunk 0 mb 0 from rank 1 has no SEND_GRAD");
    const char *no_recv[] = { "F0/0 sa0/0>1 rg0/0<1 B0/0", "F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, no_recv, "rank 1 action 0: FWD chunk 1 mb 0 before its RECV_ACT");
    const char *peer[] = { "F0/0 sa0/0>2 rg0/0<1 B0/0", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, peer, "rank 0 action 1: SEND_ACT chunk 0 mb 0 to rank 2, but chunk 0's "
                             "peer is rank 1");
    const char *early[] = { "sa0/0>1 F0/0 rg0/0<1 B0/0", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, early, "rank 0 action 0: SEND_ACT chunk 0 mb 0 to rank 1 before its FWD");
    const char *twice[] = { "F0/0 sa0/0>1 sa0/0>1 rg0/0<1 B0/0", "ra1/0<0 F1/0 B1/0 sg1/0>0" };
    expect_fault(2, 1, twice, "rank 0 action 2: SEND_ACT chunk 0 mb 0 to rank 1 sent twice");
    const char *foreign[] = { "F1/0", "" };
    expect_fault(2, 1, foreign, "rank 0 action 0: FWD chunk 1 mb 0, a chunk of rank 1");
    const char *range[] = { "F0/3", "" };
    expect_fault(2, 1, range, "rank 0 action 0: FWD chunk 0 mb 3 out of range");
    /* statically fine, but rank 1 runs mb 1 first, whose activation rank 0
     * sends only after mb 0's backward, which needs rank 1's mb 0 */
    const char *cycle[] = {
        "F0/0 sa0/0>1 rg0/0<1 B0/0 F0/1 sa0/1>1 rg0/1<1 B0/1",
        "ra1/0<0 ra1/1<0 F1/1 B1/1 sg1/1>0 F1/0 B1/0 sg1/0>0",
    };
    expect_fault(2, 2, cycle, "deadlock: rank 0 action 3 (BWD chunk 0 mb 0) waits; rank 1 "
                              "action 2 (FWD chunk 1 mb 1) waits;");
}

/* The lists' stash per chunk: interleaved chunks share a rank's memory. */
TEST(chunk_stash)
{
    pipe_spec sp = spec(PIPE_1F1B, 4, 8, 1);
    pipe_sched s;
    int peak[8];
    CHECK(pipe_sched_build(&s, &sp) == 0);
    CHECK(pipe_sched_chunk_stash(&s, peak) == 0);
    for (int c = 0; c < 4; c++)
        CHECK(peak[c] == 4 - c);
    pipe_sched_free(&s);
    sp = spec(PIPE_INTERLEAVED, 4, 8, 2);
    CHECK(pipe_sched_build(&s, &sp) == 0);
    CHECK(pipe_sched_chunk_stash(&s, peak) == 0);
    int sum0 = peak[0] + peak[4];
    CHECK(sum0 >= 4 && sum0 <= 16);
    pipe_sched_free(&s);
}
