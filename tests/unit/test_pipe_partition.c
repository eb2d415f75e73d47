/* Stage partitions: the dynamic programme against brute force over every
 * contiguous partition, memory caps, the uniform and listed ones, and the
 * errors. */
#include "test.h"
#include "train/pipe_partition.h"
#include "weft.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static double next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

typedef struct {
    double max, ss;
    int first[17];
    int found;
} brute;

static void eval(const pipe_part_problem *pb, const int *first, double *max, double *ss, int *fit)
{
    *max = 0, *ss = 0, *fit = 1;
    for (int j = 0; j < pb->k; j++) {
        double t = pipe_stage_time(pb, first, j);
        *max = t > *max ? t : *max;
        *ss += t * t;
        if (pb->mem_cap > 0 && pipe_stage_bytes(pb, first, j) > pb->mem_cap)
            *fit = 0;
    }
}

/* Every partition: stage j ends at first[j+1], chosen in turn. */
static void enumerate(const pipe_part_problem *pb, int *first, int j, brute *b)
{
    if (j == pb->k) {
        double max, ss;
        int fit;
        eval(pb, first, &max, &ss, &fit);
        if (fit && (!b->found || max < b->max || (max == b->max && ss < b->ss - 1e-12))) {
            b->max = max, b->ss = ss, b->found = 1;
            memcpy(b->first, first, (size_t)(pb->k + 1) * sizeof *first);
        }
        return;
    }
    for (int e = first[j] + 1; e <= pb->n - (pb->k - 1 - j); e++) {
        if (j == pb->k - 1 && e != pb->n)
            continue;
        first[j + 1] = e;
        enumerate(pb, first, j + 1, b);
    }
}

TEST(dp_equals_brute_force)
{
    uint64_t seed = 12345;
    int cases = 0, same = 0, infeasible = 0;
    static const int shapes[][2] = { { 8, 4 }, { 8, 2 }, { 8, 8 }, { 10, 3 }, { 12, 5 },
                                     { 6, 1 }, { 9, 4 }, { 16, 4 } };
    for (unsigned sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
        for (int trial = 0; trial < 40; trial++) {
            int n = shapes[sh][0], k = shapes[sh][1];
            pipe_block_cost bl[16];
            int stash[16];
            for (int i = 0; i < n; i++)
                bl[i] = (pipe_block_cost){ 0.1 + next(&seed), 1e6 * next(&seed),
                                           1e6 * (1 + 4 * next(&seed)) };
            for (int j = 0; j < k; j++)
                stash[j] = k - j;
            /* no cap, a loose cap and a tight one */
            double caps[3] = { 0, 2.5e7, 9e6 };
            for (int c = 0; c < 3; c++) {
                pipe_part_problem pb = { bl, n, k, stash, caps[c] };
                brute b = { .first = { 0 } };
                int first[17] = { 0 }, got[17];
                enumerate(&pb, first, 0, &b);
                char why[256];
                int rc = pipe_partition_auto(&pb, got, why, sizeof why);
                cases++;
                if (!b.found) {
                    infeasible++;
                    CHECKF(rc == WEFT_EINVAL && strstr(why, "needs at least"), "rc %d %s", rc,
                           why);
                    continue;
                }
                CHECKF(rc == 0, "n %d k %d cap %g: %s", n, k, caps[c], why);
                if (rc)
                    continue;
                double max, ss;
                int fit;
                eval(&pb, got, &max, &ss, &fit);
                CHECK(got[0] == 0 && got[k] == n && fit);
                CHECKF(max == b.max, "n %d k %d: max %.17g brute %.17g", n, k, max, b.max);
                CHECKF(fabs(ss - b.ss) <= 1e-9 * b.ss, "ss %.17g brute %.17g", ss, b.ss);
                same += !memcmp(got, b.first, (size_t)(k + 1) * sizeof *got);
            }
        }
    printf("  %d problems, %d without a fitting partition, %d identical partitions\n", cases,
           infeasible, same);
    CHECK(infeasible > 0 && infeasible < cases);
    CHECK(same == cases - infeasible);
}

/* Equal blocks: the tie goes to the earliest cuts, extra blocks last. */
TEST(ties_and_uniform)
{
    pipe_block_cost bl[8];
    for (int i = 0; i < 8; i++)
        bl[i] = (pipe_block_cost){ 1, 0, 0 };
    pipe_part_problem pb = { bl, 8, 3, NULL, 0 };
    int f[4], u[4];
    CHECK(pipe_partition_auto(&pb, f, NULL, 0) == 0);
    CHECK(f[0] == 0 && f[1] == 2 && f[2] == 5 && f[3] == 8);
    CHECK(pipe_partition_uniform(8, 3, u, NULL, 0) == 0);
    CHECK(!memcmp(f, u, sizeof f));
    int v[6];
    CHECK(pipe_partition_uniform(10, 5, v, NULL, 0) == 0 && v[5] == 10 && v[1] == 2);
    CHECK(pipe_partition_uniform(11, 4, v, NULL, 0) == 0);
    CHECK(v[1] == 2 && v[2] == 5 && v[3] == 8 && v[4] == 11);
    char why[128];
    CHECK(pipe_partition_uniform(3, 4, v, why, sizeof why) == WEFT_EINVAL);
    CHECK(strstr(why, "3 blocks cannot fill 4 stages") != NULL);
    /* the slow block alone: one heavy block makes its own stage */
    bl[5].time = 10;
    CHECK(pipe_partition_auto(&pb, f, NULL, 0) == 0);
    CHECK(f[1] == 5 && f[2] == 6 && pipe_stage_time(&pb, f, 1) == 10);
}

TEST(caps)
{
    /* block 3 carries 10 bytes of state; stage 0 stashes 4 mbs, stage 3 one */
    pipe_block_cost bl[6] = { { 1, 1, 1 }, { 1, 1, 1 }, { 1, 1, 1 }, { 1, 1, 10 },
                              { 1, 1, 1 }, { 1, 1, 1 } };
    int stash[4] = { 4, 3, 2, 1 }, f[5];
    pipe_part_problem pb = { bl, 6, 4, stash, 12 };
    char why[256];
    CHECKF(pipe_partition_auto(&pb, f, why, sizeof why) == 0, "%s", why);
    for (int j = 0; j < 4; j++)
        CHECK(pipe_stage_bytes(&pb, f, j) <= 12);
    /* block 3 needs 10 + stash bytes wherever it goes: in stage 0 or 1 it
     * cannot fit 11 bytes */
    pb.mem_cap = 10.5;
    CHECK(pipe_partition_auto(&pb, f, why, sizeof why) == WEFT_EINVAL);
    CHECKF(strstr(why, "fits 10 bytes a stage") || strstr(why, "needs at least"), "%s", why);
    printf("  %s\n", why);
    pb.mem_cap = 3;
    CHECK(pipe_partition_auto(&pb, f, why, sizeof why) == WEFT_EINVAL);
    CHECKF(strstr(why, "stage 0 needs at least 5 bytes (blocks 0..0, 4 micro-batches stashed)"),
           "%s", why);
}

TEST(lists_and_errors)
{
    int f[5];
    char why[256];
    CHECK(pipe_partition_list("3,3,2", 8, 3, f, why, sizeof why) == 0);
    CHECK(f[0] == 0 && f[1] == 3 && f[2] == 6 && f[3] == 8);
    static const struct { const char *s; const char *err; } bad[] = {
        { "3,3", "2 stages, the schedule has 3" },
        { "3,3,1", "7 blocks, the model has 8" },
        { "3,0,5", "stage 1's count is not a number >= 1" },
        { "3,x,5", "stage 1's count" },
        { "3;3;2", "';' where a comma should be" },
        { "2,2,2,2", "more than 3 stages" },
        { "", "stage 0's count" },
    };
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = 0;
        CHECKF(pipe_partition_list(bad[i].s, 8, 3, f, why, sizeof why) == WEFT_EINVAL, "%s",
               bad[i].s);
        CHECKF(strstr(why, bad[i].err) != NULL, "%s: %s", bad[i].s, why);
    }
    pipe_block_cost bl[4] = { { 1, 0, 0 }, { 2, 0, 0 }, { 3, 0, 0 }, { 4, 0, 0 } };
    pipe_part_problem pb = { bl, 4, 2, NULL, 0 };
    CHECK(pipe_partition_parse("auto", &pb, f, why, sizeof why) == 0 && f[1] == 3);
    CHECK(pipe_partition_parse("uniform", &pb, f, why, sizeof why) == 0 && f[1] == 2);
    CHECK(pipe_partition_parse("1,3", &pb, f, why, sizeof why) == 0 && f[1] == 1);
    pb.k = 5;
    CHECK(pipe_partition_auto(&pb, f, why, sizeof why) == WEFT_EINVAL);
    CHECK(pipe_partition_auto(NULL, f, why, sizeof why) == WEFT_EINVAL);
}
