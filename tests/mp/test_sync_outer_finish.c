/* The end of a streaming DiLoCo run (outer_finish, sync_outer.c), the
 * models moved by hand: streaming:6:3:T has its fragments' outer steps at
 * 2, 4 and 0 mod 6, so after 8 steps fragment 0's reduction taken at step
 * 8 is still in flight and fragments 1 and 2 have moved since theirs.
 *   the fragment taken at the last step lands as the blocking step (no
 *     second reduction of it) and the other two take their last outer
 *     step in one reduction: the bytes are exactly one sync of each
 *     fragment per start (fp32), and every rank ends with the same bits;
 *   the same over 2 clusters of 2 (hier) in fp32 and int4, where each
 *     rank sends its slice, and with PowerSGD (one reduction a fragment,
 *     its warm start kept) still one model. */
#include "mp.h"

#include <stdlib.h>
#include <string.h>

TEST_TIMEOUT(120);

static weft_model *make_model(const char *spec, size_t *n)
{
    weft_model_config cfg;
    weft_model *m;
    if (weft_model_config_parse(spec, &cfg) || weft_model_create(&m, &cfg, 3))
        return NULL;
    weft_model_params(m, n);
    return m;
}

/* An inner step moving who's model (the rank, or the cluster in hier) by
 * a step-dependent amount. */
static void inner_step(weft_model *m, int who, long step)
{
    size_t n;
    float *x = weft_model_params(m, &n);
    for (size_t i = 0; i < n; i++)
        x[i] -= 0.01f * (float)((who + 1) * (int)((i + (size_t)step) % 5) - 2);
}

static int same_everywhere(weft_comm *c, const float *x, size_t n)
{
    int p = weft_comm_size(c), same = 1;
    float *all = malloc((size_t)p * n * sizeof *all);
    if (!all || weft_allgather(c, x, all, n, WEFT_F32))
        same = 0;
    for (int q = 1; same && q < p; q++)
        same = memcmp(all, all + (size_t)q * n, n * sizeof *x) == 0;
    free(all);
    return same;
}

typedef struct {
    const char *sync, *compress;
    int L; /* ranks a cluster; 1: flat */
} finish_case;

static void finish_body(weft_comm *c, void *arg)
{
    const finish_case *k = arg;
    int r = weft_comm_rank(c);
    size_t n;
    weft_model *m = make_model("mlp:64-32-2", &n);
    weft_sync *s = NULL;
    weft_sync_config sc;
    CHECK(weft_sync_parse(k->sync, &sc) == 0 && sc.fragments == 3);
    if (k->compress[0]) {
        CHECK(weft_compress_parse(k->compress, &sc.compress) == 0);
        sc.compressed = 1;
    }
    CHECK(weft_sync_create(&s, c, m, &sc) == 0);
    if (!s)
        return;
    for (long t = 1; t <= 8; t++) {
        inner_step(m, r / k->L, t);
        CHECK(weft_sync_after_step(s) == 0);
    }
    CHECK(weft_sync_finish(s) == 0);
    float *x = weft_model_params(m, &n);
    CHECKF(same_everywhere(c, x, n), "%s %s: the ranks end with different models", k->sync,
           k->compress);
    uint64_t across = 0, inside = 0;
    weft_sync_bytes_split(s, &across, &inside);
    if (!k->compress[0]) {
        /* fragment 0 at 2 and 8, fragments 1 and 2 at 4 and 6 and at the
         * end: two syncs each, this rank's part of every fragment */
        size_t want = 0;
        for (int f = 0; f < 3; f++) {
            size_t len = n * (size_t)(f + 1) / 3 - n * (size_t)f / 3;
            size_t slice = (len + (size_t)k->L - 1) / (size_t)k->L, lo = slice * (size_t)(r % k->L);
            want += 2 * (lo >= len ? 0 : len - lo < slice ? len - lo : slice);
        }
        CHECKF(across == want * sizeof(float), "%s: rank %d sent %llu across, want %zu", k->sync,
               r, (unsigned long long)across, want * sizeof(float));
    } else {
        /* PowerSGD: rank 0 of the cluster carries the whole fragment */
        int leader_only = strncmp(k->compress, "powersgd", 8) == 0 && r % k->L;
        CHECKF(leader_only ? across == 0 : across > 0, "%s %s: rank %d sent %llu", k->sync,
               k->compress, r, (unsigned long long)across);
    }
    weft_sync_destroy(s);
    weft_model_destroy(m);
}

TEST(streaming_finish_flat)
{
    static const finish_case k = { "streaming:6:3:2", "", 1 };
    CHECK(mp_run(2, 30, finish_body, (void *)&k) == 0);
}

TEST(streaming_finish_hier)
{
    static const finish_case ks[] = {
        { "hier:full/streaming:6:3:1", "", 2 },
        { "hier:full/streaming:6:3:2", "int4", 2 },
        { "hier:full/streaming:6:3:2", "powersgd:2", 2 },
    };
    mp_ranks_per_cluster = 2;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        CHECK(mp_run(4, 60, finish_body, (void *)&ks[i]) == 0);
    mp_ranks_per_cluster = 0;
}
