/* weft_alltoallv / weft_ialltoallv with unequal (and empty) blocks against
 * a serial reference, and weft_comm_init_kv joining through a key-value
 * store of the caller's (here: files in a folder). */
#include "mp.h"

#include "coll/local/direct.h"
#include "coll/local/direct_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

TEST_TIMEOUT(240);

/* Rank i sends (i + 2*j) % 5 elements to rank j, valued 1000*i + 10*j + k. */
static size_t cnt(int i, int j) { return (size_t)((i + 2 * j) % 5); }

static int exchange(weft_comm *c, int nonblocking)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), ok = 1;
    size_t sc[64], sd[64], rc[64], rd[64], st = 0, rt = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = cnt(r, j), sd[j] = st, st += sc[j] + 1; /* gaps between blocks */
        rc[j] = cnt(j, r), rd[j] = rt, rt += rc[j] + 2;
    }
    int32_t *s = malloc((st + 1) * sizeof *s), *d = malloc((rt + 1) * sizeof *d);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            s[sd[j] + k] = 1000 * r + 10 * j + (int32_t)k;
    for (size_t k = 0; k < rt + 1; k++)
        d[k] = -1;
    if (nonblocking) {
        weft_request *q;
        ok &= weft_ialltoallv(c, s, sc, sd, d, rc, rd, WEFT_I32, &q) == 0;
        memset(sc, 0, sizeof sc); /* copied at the call */
        ok &= weft_wait(q) == 0;
    } else {
        ok &= weft_alltoallv(c, s, sc, sd, d, rc, rd, WEFT_I32) == 0;
    }
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < rc[i]; k++)
            ok &= d[rd[i] + k] == 1000 * i + 10 * r + (int32_t)k;
        ok &= d[rd[i] + rc[i]] == -1; /* the gap untouched */
    }
    free(s);
    free(d);
    return ok;
}

static void body(weft_comm *c, void *arg)
{
    (void)arg;
    CHECK(exchange(c, 0));
    CHECK(exchange(c, 1));
    /* in the stream behind other collectives, and again blocking */
    int32_t one = 1, sum = 0;
    weft_request *q;
    CHECK(weft_iallreduce(c, &one, &sum, 1, WEFT_I32, WEFT_SUM, &q) == 0);
    CHECK(exchange(c, 1));
    CHECK(weft_wait(q) == 0 && sum == weft_comm_size(c));
    CHECK(exchange(c, 0));
}

/* Blocks of up to about 1 MiB (some empty), so that single copy reads
 * whole pages and the schedule's messages go by its own single copy. */
static size_t big(int i, int j) { return (size_t)((i * 7 + j * 3) % 4) * 65537; }

static void large(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t sc[8], sd[8], rc[8], rd[8], st = 0, rt = 0;
    (void)arg;
    for (int j = 0; j < n; j++) {
        sc[j] = big(r, j), sd[j] = st, st += sc[j];
        rc[j] = big(j, r), rd[j] = rt, rt += rc[j] + 1;
    }
    uint32_t *s = malloc((st + 1) * sizeof *s), *d = malloc((rt + 1) * sizeof *d);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            s[sd[j] + k] = (uint32_t)(r << 28) ^ (uint32_t)(j << 24) ^ (uint32_t)k;
    memset(d, 0xff, (rt + 1) * sizeof *d);
    CHECK(weft_alltoallv(c, s, sc, sd, d, rc, rd, WEFT_I32) == 0);
    size_t wrong = 0;
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < rc[i]; k++)
            wrong += d[rd[i] + k] != ((uint32_t)(i << 28) ^ (uint32_t)(r << 24) ^ (uint32_t)k);
        wrong += d[rd[i] + rc[i]] != UINT32_MAX;
    }
    CHECK(wrong == 0);
    free(s);
    free(d);
}

/* big()'s blocks from send buffer s (registered or not) into a fresh
 * receive buffer, checked. */
static int large_from(weft_comm *c, uint32_t *s)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t sc[8], sd[8], rc[8], rd[8], st = 0, rt = 0, wrong = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = big(r, j), sd[j] = st, st += sc[j];
        rc[j] = big(j, r), rd[j] = rt, rt += rc[j] + 1;
    }
    uint32_t *d = malloc((rt + 1) * sizeof *d);
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            s[sd[j] + k] = (uint32_t)(r << 28) ^ (uint32_t)(j << 24) ^ (uint32_t)k ^ 0x5a5a;
    memset(d, 0xff, (rt + 1) * sizeof *d);
    int rc0 = weft_alltoallv(c, s, sc, sd, d, rc, rd, WEFT_I32);
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < rc[i]; k++)
            wrong += d[rd[i] + k] != ((uint32_t)(i << 28) ^ (uint32_t)(r << 24) ^ (uint32_t)k ^
                                      0x5a5a);
        wrong += d[rd[i] + rc[i]] != UINT32_MAX;
    }
    free(d);
    return rc0 == 0 && wrong == 0;
}

/* What auto last decided (coll/local/direct_av.c): 1 every rank's send
 * buffer registered, -1 not; 0 never looked. */
static int av_reg(const weft_comm *c) { return c->direct ? c->direct->av_reg : 0; }

/* Send buffers from weft_mem_alloc (regions of 256 KiB and more): each
 * rank maps its peers' and copies out with memcpy; under auto only while
 * every rank's is registered, looked at again 64 calls after one was
 * not. arg non-NULL: under auto, whose choices are checked where the
 * ranks may read each other (else every call runs the schedule). */
static void registered(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t st = 0;
    for (int j = 0; j < n; j++)
        st += big(r, j);
    size_t bytes = (st + 1) * sizeof(uint32_t);
    void *reg = NULL, *reg2 = NULL;
    uint32_t *plain = malloc(bytes);
    CHECK(weft_mem_alloc(c, bytes, &reg) == 0 && reg);
    CHECK(large_from(c, reg));
    if (!c->shm_on || !c->params.shm_cma || (c->direct && c->direct->verdict < 0))
        arg = NULL;
    if (arg)
        CHECK(av_reg(c) == 1 && c->direct->maps);
    /* rank 1's plain memory: the schedule under auto, its block read
     * with process_vm_readv under direct */
    CHECK(large_from(c, r == 1 ? plain : reg));
    if (arg)
        CHECK(av_reg(c) == -1);
    /* a region freed and another made (its fd number likely reused, at a
     * new generation): the readers' old mapping is not used */
    CHECK(weft_mem_free(c, reg) == 0 && weft_mem_alloc(c, bytes, &reg2) == 0);
    for (int i = 0; arg && i < 63; i++)
        CHECK(exchange(c, 0)); /* auto looks no more until the 64th call */
    CHECK(large_from(c, reg2));
    if (arg)
        CHECK(av_reg(c) == 1);
    CHECK(weft_mem_free(c, reg2) == 0);
    free(plain);
}

/* Each rank's receive blocks inside its own send buffer (after the
 * blocks it sends): the others still read those while it receives. */
static void overlapping(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t sc[8], sd[8], rc[8], rd[8], m = 1000;
    int32_t *buf = malloc((size_t)(2 * n + 1) * m * sizeof *buf);
    (void)arg;
    for (int j = 0; j < n; j++) {
        sc[j] = rc[j] = m;
        sd[j] = (size_t)j * m;
        rd[j] = (size_t)(n - 1 + j) * m; /* the last send block is the first receive block */
        for (size_t k = 0; k < m; k++)
            buf[sd[j] + k] = 100000 * r + 1000 * j + (int32_t)k;
    }
    CHECK(weft_alltoallv(c, buf, sc, sd, buf + 1, rc, rd, WEFT_I32) == 0);
    int ok = 1;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < m; k++)
            ok &= buf[1 + rd[i] + k] == 100000 * i + 1000 * r + (int32_t)k;
    CHECK(ok);
    free(buf);
}

/* Rank 1 expects one element more from rank 0 than rank 0 sends it:
 * every rank fails the call, naming both, and none waits for ever. */
static void counts_disagree(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t sc[64], sd[64], rc[64], rd[64];
    int32_t s[200] = { 0 }, d[200];
    (void)arg;
    for (int j = 0; j < n; j++) {
        sc[j] = rc[j] = 2;
        sd[j] = rd[j] = (size_t)(3 * j);
    }
    if (r == 1)
        rc[0] = 3;
    CHECK(weft_alltoallv(c, s, sc, sd, d, rc, rd, WEFT_I32) == WEFT_EMISMATCH);
    const char *e = weft_comm_error(c);
    CHECK(strstr(e, "rank 0") && strstr(e, "rank 1") && strstr(e, "8 bytes") &&
          strstr(e, "12"));
}

/* Beyond DIRECT_MESH_MAX ranks the pairs are read out of the peers'
 * memory rather than sent with the descriptors: the same results, and
 * the same error for counts that disagree. */
static void beyond_mesh(weft_comm *c, void *arg)
{
    body(c, arg);
    counts_disagree(c, arg);
}

static void alltoallv_only(weft_comm *c, void *arg)
{
    (void)arg;
    CHECK(exchange(c, 0));
    CHECK(exchange(c, 1));
}

static void with_env(const char *k, const char *v, int n, mp_fn fn)
{
    setenv(k, v, 1);
    CHECK(mp_run(n, 60, fn, NULL) == 0);
    unsetenv(k);
}

TEST(large) { CHECK(mp_run(3, 60, large, NULL) == 0); }
/* single copy, where asked for (coll/local/direct_av.c) */
TEST(direct) { with_env("WEFT_ALGO", "direct", 3, body); }
TEST(direct_large) { with_env("WEFT_ALGO", "direct", 3, large); }
TEST(direct_overlapping) { with_env("WEFT_ALGO", "direct", 3, overlapping); }
TEST(direct_counts_disagree) { with_env("WEFT_ALGO", "direct", 3, counts_disagree); }
TEST(direct_beyond_mesh) { with_env("WEFT_ALGO", "direct", DIRECT_MESH_MAX + 2, beyond_mesh); }
TEST(registered) { CHECK(mp_run(3, 60, registered, "auto") == 0); }
TEST(direct_registered) { with_env("WEFT_ALGO", "direct", 3, registered); }
/* asked for, but not possible: the schedule runs */
TEST(direct_two_hosts)
{
    mp_ranks_per_host = 2;
    setenv("WEFT_ALGO", "direct", 1); /* which no other collective here can take */
    CHECK(mp_run(4, 60, alltoallv_only, NULL) == 0);
    CHECK(mp_run(4, 60, large, NULL) == 0);
    unsetenv("WEFT_ALGO");
    mp_ranks_per_host = 0;
}
TEST(direct_no_cma)
{
    setenv("WEFT_SHM_CMA", "0", 1);
    with_env("WEFT_ALGO", "direct", 3, large);
    unsetenv("WEFT_SHM_CMA");
}

TEST(ranks_1) { CHECK(mp_run(1, 60, body, NULL) == 0); }
TEST(ranks_2) { CHECK(mp_run(2, 60, body, NULL) == 0); }
TEST(ranks_3) { CHECK(mp_run(3, 60, body, NULL) == 0); }
TEST(ranks_5) { CHECK(mp_run(5, 60, body, NULL) == 0); }

static void bad_args(weft_comm *c, void *arg)
{
    size_t z[64] = { 0 }, big[64];
    int32_t x = 0;
    (void)arg;
    for (int i = 0; i < 64; i++)
        big[i] = SIZE_MAX / 2;
    CHECK(weft_alltoallv(c, &x, z, z, &x, z, z, WEFT_I32) == WEFT_EINVAL); /* same buffer */
    CHECK(weft_alltoallv(c, &x, NULL, z, &x + 1, z, z, WEFT_I32) == WEFT_EINVAL);
    CHECK(weft_alltoallv(c, &x, big, z, &x + 1, z, z, WEFT_I32) == WEFT_EINVAL);
    CHECK(weft_alltoallv(c, &x, z, z, &x + 1, z, z, (weft_dtype)99) == WEFT_EINVAL);
    /* still usable */
    CHECK(exchange(c, 0));
}
TEST(bad_args) { CHECK(mp_run(2, 60, bad_args, NULL) == 0); }

/* ---- weft_comm_init_kv over a folder of files ---- */

static int dir_set(void *arg, const char *key, const void *val, size_t len)
{
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/%s", (const char *)arg, key);
    for (char *p = path + strlen(arg) + 1; *p; p++)
        if (*p == '/')
            *p = '_';
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(val, 1, len, f) != len || fclose(f))
        return WEFT_EIO;
    return rename(tmp, path) ? WEFT_EIO : 0;
}

static int dir_get(void *arg, const char *key, void **val, size_t *len, double timeout_s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", (const char *)arg, key);
    for (char *p = path + strlen(arg) + 1; *p; p++)
        if (*p == '/')
            *p = '_';
    for (int waited_ms = 0; waited_ms < timeout_s * 1000; waited_ms += 10) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char *b = calloc(1, 4096);
            *len = fread(b, 1, 4095, f);
            fclose(f);
            *val = b;
            return 0;
        }
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return WEFT_ETIMEDOUT;
}

static int kv_job(int n, const char *dir)
{
    pid_t pids[8];
    int bad = 0;
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        if ((pids[r] = fork()) == 0) {
            weft_config cfg;
            weft_comm *c;
            weft_kv kv = { (void *)dir, dir_set, dir_get };
            weft_config_default(&cfg);
            cfg.rank = r;
            cfg.world_size = n;
            cfg.timeout_s = 30;
            cfg.connect_timeout_s = 30;
            alarm(120);
            if (weft_comm_init_kv(&c, &cfg, &kv))
                _exit(3);
            int32_t v = r + 1, s = 0;
            int ok = weft_allreduce(c, &v, &s, 1, WEFT_I32, WEFT_SUM) == 0 &&
                     s == n * (n + 1) / 2 && exchange(c, 0);
            weft_comm *half = NULL;
            ok &= weft_comm_split(c, r % 2, r, &half) == 0 && exchange(half, 1);
            ok &= weft_comm_destroy(half) == 0;
            ok &= weft_comm_destroy(c) == 0;
            _exit(ok ? 0 : 1);
        }
    }
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad;
}

TEST(init_kv)
{
    char dir[] = "/tmp/weft-kv-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(kv_job(3, dir) == 0);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    weft_comm *c = (weft_comm *)1;
    weft_config cfg;
    weft_config_default(&cfg);
    CHECK(weft_comm_init_kv(&c, &cfg, NULL) == WEFT_EINVAL && c == (weft_comm *)1);
}

