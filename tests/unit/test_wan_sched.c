/* hier's all-reduce when the ranks span clusters (sched_params.cluster),
 * run on the virtual executor in rendezvous mode (so it runs on any
 * transport) with hazard checks: the sums are exact on every rank, and
 * the bytes the schedules send between clusters are each rank's least,
 * 2(C-1)/C of its 1/L slice, in one segment and in several (chunk_bytes
 * sets the segment size across clusters). Clusters of several hosts and
 * uneven clusters too. */
#include "test.h"

#include "coll/sched/sched.h"
#include "coll/sched/vexec.h"

#include <stdlib.h>
#include <string.h>

#define MAXP 8

typedef struct {
    int p;
    int32_t cluster[MAXP], host[MAXP];
    uint64_t count, chunk; /* floats; chunk_bytes (0: the default) */
    int even;              /* every cluster the same size: check the least */
} wcase;

static float val(int r, uint64_t i) { return (float)((int)(i % 7) - 3 + r); }

static void run(const wcase *c)
{
    weft_sched s[MAXP];
    vexec_mem m[MAXP];
    uint64_t n = c->count * 4, wan[MAXP] = { 0 };
    memset(m, 0, sizeof m);
    for (int r = 0; r < c->p; r++) {
        sched_params sp = { .kind = WEFT_COLL_ALLREDUCE, .rank = r, .nranks = c->p,
                            .count = c->count, .esize = 4, .chunk_bytes = c->chunk,
                            .host = c->host, .cluster = c->cluster };
        sched_init(&s[r]);
        CHECK(sched_build(&s[r], WEFT_ALGO_HIER, &sp) == 0);
        for (uint32_t i = 0; i < s[r].nops; i++) {
            const sched_op *o = &s[r].ops[i];
            if (o->kind == SOP_SEND && c->cluster[o->peer] != c->cluster[r])
                wan[r] += o->len;
        }
        m[r].size[SB_SEND] = m[r].size[SB_RECV] = n;
        m[r].size[SB_TMP] = s[r].tmp_bytes;
        for (int b = 0; b < SB_COUNT; b++)
            m[r].buf[b] = malloc(m[r].size[b] + 1);
        for (uint64_t i = 0; i < c->count; i++) {
            float v = val(r, i);
            memcpy(m[r].buf[SB_SEND] + 4 * i, &v, 4);
        }
    }
    vexec_opts o = { .mode = VEXEC_RENDEZVOUS, .check_hazards = 1 };
    vexec_stats st;
    int rc = vexec_run(c->p, s, m, &o, &st);
    CHECKF(rc == 0, "%d ranks, %llu floats: %s", c->p, (unsigned long long)c->count, st.err);
    size_t wrong = 0;
    for (int r = 0; r < c->p && rc == 0; r++)
        for (uint64_t i = 0; i < c->count; i++) {
            float got, want = 0;
            memcpy(&got, m[r].buf[SB_RECV] + 4 * i, 4);
            for (int q = 0; q < c->p; q++)
                want += val(q, i);
            wrong += got != want;
        }
    CHECKF(wrong == 0, "%zu wrong", wrong);
    int C = 0, L = 0;
    for (int r = 0; r < c->p; r++) {
        C = c->cluster[r] + 1 > C ? c->cluster[r] + 1 : C;
        L += c->cluster[r] == 0;
    }
    for (int r = 0; r < c->p && c->even; r++) {
        double least = 2.0 * (C - 1) / C * (double)n / L;
        CHECKF(wan[r] >= least * 0.999 && wan[r] <= least * 1.001,
               "rank %d: %llu bytes across, least %.0f", r, (unsigned long long)wan[r], least);
    }
    printf("%d ranks in %d clusters, %llu B, chunk %llu: %u rounds, rank 0 sends %llu B across\n",
           c->p, C, (unsigned long long)n, (unsigned long long)c->chunk, s[0].nrounds,
           (unsigned long long)wan[0]);
    for (int r = 0; r < c->p; r++) {
        sched_free(&s[r]);
        for (int b = 0; b < SB_COUNT; b++)
            free(m[r].buf[b]);
    }
}

TEST(two_by_two_one_and_more_segments)
{
    /* one host a cluster; 1 segment, then 4 (the most) and 2 */
    wcase c = { 4, { 0, 0, 1, 1 }, { 0, 0, 1, 1 }, 1 << 16, 0, 1 };
    run(&c);
    c.chunk = 16 << 10; /* 256 KiB in segments of 16 KiB: capped at 4 */
    run(&c);
    c.chunk = 128 << 10;
    run(&c);
}

TEST(clusters_of_several_hosts)
{
    /* 3 clusters of 2 hosts each: the upper level is the cluster */
    wcase c = { 6, { 0, 0, 1, 1, 2, 2 }, { 0, 1, 2, 3, 4, 5 }, 3 * 4096 + 6, 0, 1 };
    run(&c);
    c.chunk = 8 << 10;
    run(&c);
}

TEST(uneven_clusters)
{
    wcase c = { 5, { 0, 0, 0, 1, 1 }, { 0, 0, 0, 1, 1 }, 10007, 0, 0 };
    run(&c);
    c.chunk = 4 << 10;
    run(&c);
    wcase d = { 7, { 0, 0, 0, 0, 1, 2, 2 }, { 0, 0, 1, 1, 2, 3, 3 }, 999, 1024, 0 };
    run(&d);
}
