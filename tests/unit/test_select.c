/* The cost model and the automatic choice: regimes, hosts, determinism,
 * constants from the environment, and schedule walks against the closed
 * forms of docs/ALGORITHMS.md. */
#include "coll/tune/cost.h"
#include "coll/tune/tuner.h"
#include "core/log.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-15; }

static cost_params plain(int cores)
{
    cost_params c;
    cost_default(&c);
    c.cores = cores;
    return c;
}

static weft_algo pick(const cost_params *c, int p, const int32_t *host, weft_coll_kind k,
                      uint64_t bytes, double secs[WEFT_ALGO_COUNT])
{
    coll_tuner *t;
    double tmp[WEFT_ALGO_COUNT];
    if (coll_tuner_create_with(&t, p, host, c))
        return WEFT_ALGO_AUTO;
    weft_algo a = coll_tuner_predict(t, k, bytes, 4, secs ? secs : tmp);
    coll_tuner_destroy(t);
    return a;
}

TEST(regimes)
{
    for (int cores = 0; cores <= 2; cores += 2) {
        cost_params c = plain(cores);
        double s[WEFT_ALGO_COUNT];
        weft_algo a = pick(&c, 8, NULL, WEFT_COLL_ALLREDUCE, 8, s);
        /* tiny: few rounds win (flat: one shared board on one host); the
         * ring's 2(p-1) rounds lose */
        CHECKF(a == WEFT_ALGO_NAIVE || a == WEFT_ALGO_RD || a == WEFT_ALGO_RABENSEIFNER ||
                   a == WEFT_ALGO_TREE || a == WEFT_ALGO_FLAT,
               "cores %d: 8 B at p=8 chose %s", cores, weft_algo_name(a));
        CHECKF(s[a] * 2 < s[WEFT_ALGO_RING], "cores %d: %g vs ring %g", cores, s[a],
               s[WEFT_ALGO_RING]);
        a = pick(&c, 8, NULL, WEFT_COLL_ALLREDUCE, 64u << 20, s);
        /* large: the bandwidth-optimal ones (direct: single copy on one
         * host; flat: its pipeline through shared memory); naive and rd
         * move far more */
        CHECKF(a == WEFT_ALGO_RING || a == WEFT_ALGO_RABENSEIFNER || a == WEFT_ALGO_TREE ||
                   a == WEFT_ALGO_DIRECT || a == WEFT_ALGO_FLAT,
               "cores %d: 64 MiB at p=8 chose %s", cores, weft_algo_name(a));
        CHECK(s[WEFT_ALGO_NAIVE] > 2 * s[a] && s[WEFT_ALGO_RD] > 1.4 * s[a]);
        /* every algorithm with an all-reduce schedule was costed; hier not
         * on one host */
        for (int k = WEFT_ALGO_NAIVE; k < WEFT_ALGO_HIER; k++)
            CHECKF(s[k] > 0, "%s not costed", weft_algo_name((weft_algo)k));
        CHECK(s[WEFT_ALGO_HIER] < 0);
        /* a kind some algorithms lack: those are skipped, not chosen */
        a = pick(&c, 8, NULL, WEFT_COLL_ALLGATHER, 1u << 20, s);
        CHECK(s[WEFT_ALGO_TREE] < 0 && s[WEFT_ALGO_RD] < 0 && a != WEFT_ALGO_TREE &&
              a != WEFT_ALGO_RD && s[a] > 0);
        a = pick(&c, 8, NULL, WEFT_COLL_BARRIER, 0, s);
        CHECK(a == WEFT_ALGO_NAIVE || a == WEFT_ALGO_RING || a == WEFT_ALGO_FLAT);
    }
}

TEST(hosts)
{
    cost_params c = plain(0);
    int32_t two[8] = { 0, 0, 0, 0, 1, 1, 1, 1 }, mixed[8] = { 0, 1, 0, 1, 0, 1, 0, 1 };
    double s[WEFT_ALGO_COUNT];
    /* one host: never hier, at any size or kind */
    for (uint64_t b = 8; b <= (256u << 20); b *= 8) {
        CHECK(pick(&c, 8, NULL, WEFT_COLL_ALLREDUCE, b, NULL) != WEFT_ALGO_HIER);
        CHECK(pick(&c, 8, NULL, WEFT_COLL_BROADCAST, b, NULL) != WEFT_ALGO_HIER);
    }
    /* slow links between hosts, ranks interleaved: hier for large messages */
    c.beta_inter = 1e-8;
    c.alpha_inter = 200e-6;
    weft_algo a = pick(&c, 8, mixed, WEFT_COLL_ALLREDUCE, 64u << 20, s);
    /* Rabenseifner's partners at distance 4 and 2 share a host here, so it
     * sends as few bytes between hosts as hier does */
    CHECKF(a == WEFT_ALGO_HIER || a == WEFT_ALGO_RABENSEIFNER, "interleaved, 64 MiB: %s",
           weft_algo_name(a));
    CHECK(s[WEFT_ALGO_HIER] * 2 < s[WEFT_ALGO_RING]);
    a = pick(&c, 8, two, WEFT_COLL_ALLREDUCE, 64u << 20, s);
    CHECKF(a == WEFT_ALGO_HIER, "two hosts, 64 MiB: %s", weft_algo_name(a));
    /* the same ranks said to be on one host: hier is out */
    CHECK(pick(&c, 8, (int32_t[8]){ 0 }, WEFT_COLL_ALLREDUCE, 64u << 20, s) != WEFT_ALGO_HIER);
}

/* Across hosts over TCP a large message is pipelined in small chunks:
 * the model lets a pipelined round's latency overlap its transfer and
 * charges megabyte messages their trip through memory, so the wavefronts
 * (the ring with one rank per host, hier with several) win at large sizes
 * and the one-round-per-half algorithms do not. */
TEST(pipelines)
{
    cost_params c = plain(2);
    int32_t two[2] = { 0, 1 }, four[4] = { 0, 0, 1, 1 };
    double s[WEFT_ALGO_COUNT], n = 64.0 * (1 << 20);
    weft_algo a = pick(&c, 2, two, WEFT_COLL_ALLREDUCE, 64u << 20, s);
    /* hier with one rank per host is the ring's wavefront under its name */
    CHECKF(a == WEFT_ALGO_RING || a == WEFT_ALGO_HIER, "2 hosts, 64 MiB: %s", weft_algo_name(a));
    CHECKF(s[WEFT_ALGO_RABENSEIFNER] > 1.25 * s[WEFT_ALGO_RING], "rabenseifner %g ring %g",
           s[WEFT_ALGO_RABENSEIFNER], s[WEFT_ALGO_RING]);
    /* n bytes each way at the wire's speed, the ~500 rounds' latency hidden */
    CHECKF(s[WEFT_ALGO_RING] < 1.15 * n * c.beta_inter, "ring %g vs wire %g", s[WEFT_ALGO_RING],
           n * c.beta_inter);
    a = pick(&c, 4, four, WEFT_COLL_ALLREDUCE, 64u << 20, s);
    CHECKF(a == WEFT_ALGO_HIER, "2 hosts of 2, 64 MiB: %s", weft_algo_name(a));
    CHECKF(s[WEFT_ALGO_HIER] < 1.15 * n * c.beta_inter && 2 * s[WEFT_ALGO_HIER] < s[WEFT_ALGO_RING],
           "hier %g ring %g wire %g", s[WEFT_ALGO_HIER], s[WEFT_ALGO_RING], n * c.beta_inter);
    /* small messages still pay the latency of every round */
    a = pick(&c, 2, two, WEFT_COLL_ALLREDUCE, 64, s);
    CHECKF(a == WEFT_ALGO_NAIVE || a == WEFT_ALGO_RD, "2 hosts, 64 B: %s", weft_algo_name(a));
    CHECK(s[WEFT_ALGO_RING] >= 2 * c.alpha_inter && s[a] >= c.alpha_inter);
    /* one rank's walk: the stream's rounds cost their transfer, the
     * unpipelined halves their memory trip */
    cost_layout l = { 2, two, 2, NULL };
    weft_sched sc;
    cost_tally t;
    sched_init(&sc);
    sched_params sp = { .kind = WEFT_COLL_ALLREDUCE, .rank = 0, .nranks = 2,
                        .count = (64u << 20) / 4, .esize = 4, .host = two };
    CHECK(sched_build(&sc, WEFT_ALGO_RING, &sp) == 0);
    cost_walk(&sc, &c, &l, 0, 0, &t);
    CHECKF(t.rounds > 500 && t.time < t.rounds * c.alpha_inter + n * c.beta_inter,
           "ring walk: %u rounds, %g s", t.rounds, t.time);
    CHECK(sched_build(&sc, WEFT_ALGO_RABENSEIFNER, &sp) == 0);
    cost_walk(&sc, &c, &l, 0, 0, &t);
    CHECKF(t.rounds == 2 && t.time > 1.9 * n * c.beta_inter, "rabenseifner walk: %g s", t.time);
    sched_free(&sc);
}

TEST(deterministic)
{
    cost_params c = plain(2);
    int32_t host[6] = { 0, 0, 0, 1, 1, 1 };
    coll_tuner *t1, *t2;
    int same = 1, cached = 1, n = 0;
    CHECK(coll_tuner_create_with(&t1, 6, host, &c) == 0);
    CHECK(coll_tuner_create_with(&t2, 6, host, &c) == 0);
    for (int k = WEFT_COLL_BROADCAST; k < WEFT_COLL_KIND_COUNT; k++) {
        for (uint64_t b = 1; b <= (16u << 20); b = b * 3 + 1) {
            double s[WEFT_ALGO_COUNT];
            weft_algo a1 = coll_tuner_select(t1, (weft_coll_kind)k, b, 4);
            weft_algo a2 = coll_tuner_select(t2, (weft_coll_kind)k, b, 4);
            weft_algo a3 = coll_tuner_select(t1, (weft_coll_kind)k, b, 4); /* cached */
            weft_algo a4 = coll_tuner_predict(t2, (weft_coll_kind)k, b, 4, s);
            same &= a1 == a2;
            cached &= a1 == a3 && a1 == a4;
            CHECK(a1 > WEFT_ALGO_AUTO && a1 < WEFT_ALGO_COUNT);
            n++;
        }
    }
    CHECKF(same && cached && n > 50, "same %d cached %d n %d", same, cached, n);
    coll_tuner_destroy(t1);
    coll_tuner_destroy(t2);
    /* without a communicator: the closed forms, which agree with the
     * simulated schedules for the symmetric all-reduces */
    unsetenv("WEFT_TUNE");
    unsetenv("WEFT_TUNE_FILE");
    for (int cores = 0; cores <= 2; cores += 2) {
        cost_params d = plain(cores);
        for (int p = 2; p <= 16; p *= 2) {
            cost_layout l = { p, NULL, 1, NULL };
            for (uint64_t b = 64; b <= (8u << 20); b *= 8) {
                static const weft_algo sym[] = { WEFT_ALGO_NAIVE, WEFT_ALGO_RING, WEFT_ALGO_RD,
                                                 WEFT_ALGO_RABENSEIFNER };
                for (int i = 0; i < 4; i++) {
                    double sim = -1, cl = cost_closed(&d, sym[i], WEFT_COLL_ALLREDUCE, b, p);
                    CHECK(cost_predict(&d, &l, sym[i], WEFT_COLL_ALLREDUCE, b, 1, 256, &sim) == 0);
                    CHECKF(fabs(sim - cl) <= 1e-6 * cl, "%s p=%d b=%llu cores=%d: sim %g closed %g",
                           weft_algo_name(sym[i]), p, (unsigned long long)b, cores, sim, cl);
                }
            }
        }
    }
    /* and pick by regime like a selector */
    weft_algo tiny = coll_select(WEFT_COLL_ALLREDUCE, 8, 8), big = coll_select(WEFT_COLL_ALLREDUCE, 64u << 20, 8);
    CHECKF(tiny != WEFT_ALGO_RING, "tiny: %s", weft_algo_name(tiny));
    CHECKF(big == WEFT_ALGO_RING || big == WEFT_ALGO_RABENSEIFNER || big == WEFT_ALGO_TREE,
           "big: %s", weft_algo_name(big));
    CHECK(coll_select(WEFT_COLL_ALLREDUCE, 1000, 5) == coll_select(WEFT_COLL_ALLREDUCE, 1000, 5));
    CHECK(coll_select(WEFT_COLL_SEND, 8, 4) == WEFT_ALGO_RING);
    CHECK(coll_select(WEFT_COLL_ALLREDUCE, 1024, 1) == WEFT_ALGO_RING); /* one rank: anything */
}

TEST(environment)
{
    cost_params c;
    char err[256], line[512];
    const char *at = NULL;
    setenv("WEFT_TUNE", "alpha=1e-3,beta=2e-9, gamma=3e-10\tcores=3", 1);
    unsetenv("WEFT_TUNE_FILE");
    CHECK(cost_from_env(&c, err, sizeof err) == 0);
    CHECK(c.alpha == 1e-3 && c.beta == 2e-9 && c.gamma == 3e-10 && c.cores == 3);
    setenv("WEFT_TUNE", "alpha=1,alpha_over=1,msg=0,msg_over=0", 1);
    CHECK(coll_select(WEFT_COLL_ALLREDUCE, 1u << 20, 8) == WEFT_ALGO_NAIVE);
    /* a file, overridden key by key by WEFT_TUNE */
    char path[] = "/tmp/weft-tune-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        const char *text = "# measured\nalpha=4e-5 beta=1e-9\ngamma=2e-10  # reduce\n";
        CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
        setenv("WEFT_TUNE_FILE", path, 1);
        setenv("WEFT_TUNE", "beta=5e-10", 1);
        CHECK(cost_from_env(&c, err, sizeof err) == 0);
        CHECK(c.alpha == 4e-5 && c.beta == 5e-10 && c.gamma == 2e-10);
        unlink(path);
        CHECK(cost_from_env(&c, err, sizeof err) == WEFT_ECONFIG && strstr(err, path));
        unsetenv("WEFT_TUNE_FILE");
    }
    /* malformed: a clear error, and a communicator's selector refuses */
    coll_tuner *t = NULL;
    setenv("WEFT_TUNE", "alpha=30e-6,bogus=1", 1);
    CHECK(cost_from_env(&c, err, sizeof err) == WEFT_ECONFIG && strstr(err, "bogus"));
    CHECK(coll_tuner_create(&t, 4, NULL, err, sizeof err) == WEFT_ECONFIG && !t);
    cost_default(&c);
    CHECK(cost_parse(&c, "beta=-1", &at) == WEFT_ECONFIG && at && !strncmp(at, "beta", 4));
    CHECK(cost_parse(&c, "alpha", NULL) == WEFT_ECONFIG);
    CHECK(cost_parse(&c, "alpha=1x", NULL) == WEFT_ECONFIG);
    CHECK(cost_parse(&c, "cores=2.5", NULL) == WEFT_ECONFIG);
    CHECK(cost_parse(&c, "", NULL) == 0);
    /* what cost_format writes, cost_parse reads back */
    cost_params d, e;
    cost_default(&d);
    d.alpha = 1.25e-5;
    d.cores = 7;
    cost_format(&d, line, sizeof line);
    cost_default(&e);
    CHECK(cost_parse(&e, line, NULL) == 0 && e.alpha == d.alpha && e.cores == 7 &&
          fabs(e.beta - d.beta) < 1e-5 * d.beta);
    unsetenv("WEFT_TUNE");
}

TEST(closed_forms)
{
    cost_params c = plain(0);
    cost_layout l = { 0, NULL, 1, NULL };
    weft_sched s;
    sched_init(&s);
    c.alpha = 10e-6;
    c.beta = 1e-9;
    c.gamma = 2e-10;
    c.msg = 3e-6;
    for (int p = 2; p <= 8; p += 3) {
        l.nranks = p;
        for (uint64_t n = (uint64_t)p * 8; n <= (3u << 20); n = n * 16 + (uint64_t)p * 8) {
            n -= n % (uint64_t)p; /* equal ring blocks */
            sched_params sp = { .kind = WEFT_COLL_ALLREDUCE, .rank = 1, .nranks = p,
                                .count = n, .esize = 1 };
            cost_tally t;
            double b = (double)n / p;
            /* ring: 2(p-1) rounds of one block each way, p-1 of them reducing */
            CHECK(sched_build(&s, WEFT_ALGO_RING, &sp) == 0);
            cost_walk(&s, &c, &l, 1, 0, &t);
            double ring = 2.0 * (p - 1) * (c.alpha + b * c.beta) + (p - 1) * b * c.gamma;
            CHECKF(near(t.time, ring), "ring p=%d n=%llu: walk %g formula %g", p,
                   (unsigned long long)n, t.time, ring);
            CHECK(t.rounds == 2u * (p - 1) && t.sent == 2 * (uint64_t)(p - 1) * (n / p) &&
                  t.reduced == (uint64_t)(p - 1) * (n / p));
            /* the whole job run together: every rank the same, so the same */
            double sim;
            CHECK(cost_predict(&c, &l, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, n, 1, 256, &sim) == 0);
            CHECKF(near(sim, ring * 1.001), "ring p=%d: simulated %g formula %g", p, sim, ring);
            /* naive: ceil(n/C) rounds of p-1 messages each way; every
             * other rank's chunk reduced in */
            CHECK(sched_build(&s, WEFT_ALGO_NAIVE, &sp) == 0);
            cost_walk(&s, &c, &l, 1, 0, &t);
            uint64_t C = SCHED_DEFAULT_CHUNK, chunks = (n + C - 1) / C;
            double naive = (double)chunks * (c.alpha + (p - 2) * c.msg) +
                           (double)(p - 1) * (double)n * (c.beta + c.gamma);
            CHECKF(near(t.time, naive), "naive p=%d n=%llu: walk %g formula %g", p,
                   (unsigned long long)n, t.time, naive);
            CHECK(t.rounds == chunks && t.sent == (uint64_t)(p - 1) * n);
        }
    }
    sched_free(&s);
}

/* Jobs too large to run every rank at once: a few ranks walked alone,
 * which for the ring (every rank alike) gives the same time. */
TEST(large)
{
    cost_params c = plain(0);
    cost_layout l = { 1000, NULL, 1, NULL };
    double sim, walk;
    CHECK(cost_predict(&c, &l, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, 1000u * 1024, 1, 2000, &sim) == 0);
    CHECK(cost_predict(&c, &l, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, 1000u * 1024, 1, 16, &walk) == 0);
    CHECKF(fabs(sim - walk) <= 1e-9 * sim, "sim %g walk %g", sim, walk);
    c.cores = 4; /* oversubscribed: the work bound scaled up from the walked ranks */
    CHECK(cost_predict(&c, &l, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, 1000u * 1024, 1, 16, &walk) == 0);
    CHECK(cost_predict(&c, &l, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, 1000u * 1024, 1, 2000, &sim) == 0);
    CHECKF(fabs(sim - walk) <= 1e-6 * sim, "oversubscribed: sim %g walk %g", sim, walk);
    /* a selector over 1000 ranks answers (and hier is not tried) */
    coll_tuner *t;
    CHECK(coll_tuner_create_with(&t, 1000, NULL, &c) == 0);
    weft_algo a = coll_tuner_select(t, WEFT_COLL_ALLREDUCE, 8, 4);
    CHECK(a != WEFT_ALGO_RING && a != WEFT_ALGO_HIER && a != WEFT_ALGO_AUTO);
    coll_tuner_destroy(t);
}

/* What coll_tuner_log writes to stderr, or NULL on failure. */
static char *logged(const coll_tuner *t, int level, int rank, char *buf, size_t cap)
{
    FILE *f = tmpfile();
    int saved = dup(2);
    if (!f || saved < 0)
        return NULL;
    fflush(stderr);
    dup2(fileno(f), 2);
    coll_tuner_log(t, level, rank);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

TEST(debug_table)
{
    static char buf[1 << 16];
    cost_params c = plain(2);
    coll_tuner *t;
    CHECK(coll_tuner_create_with(&t, 4, NULL, &c) == 0);
    if (!t)
        return;
    int on = LOG_INFO | LOG_SUB_TUNING << 8;
    char *s = logged(t, on, 0, buf, sizeof buf);
    /* rank 0: the constants, then a row per size with every algorithm's
     * prediction and auto's choice */
    CHECKF(s && strstr(s, "cost model: alpha=") && strstr(s, "cores=2"), "%s", s ? s : "");
    CHECK(s && strstr(s, "predicted allreduce time (us), 4 ranks") && strstr(s, "rabenseifner") &&
          strstr(s, "67108864") == NULL && strstr(s, "33554432"));
    CHECK(s && strstr(s, "predicted broadcast time"));
    CHECK((s = logged(t, on, 1, buf, sizeof buf)) && !*s);                           /* rank 1 */
    CHECK((s = logged(t, LOG_WARN | LOG_SUB_ALL << 8, 0, buf, sizeof buf)) && !*s); /* quiet */
    CHECK((s = logged(t, LOG_INFO | LOG_SUB_COLL << 8, 0, buf, sizeof buf)) && !*s); /* other */
    coll_tuner_destroy(t);
}

TEST_INIT
{
    unsetenv("WEFT_TUNE");
    unsetenv("WEFT_TUNE_FILE");
}
