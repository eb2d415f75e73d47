/* weft_alltoallv / weft_ialltoallv with unequal (and empty) blocks against
 * a serial reference, and weft_comm_init_kv joining through a key-value
 * store of the caller's (here: files in a folder). */
#include "mp.h"

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

