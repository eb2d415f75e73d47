/* weft-tune: measures the cost model's constants (docs/TUNING.md) on this
 * machine within a time budget and writes the file WEFT_TUNE_FILE loads.
 *
 *   weftrun -n 2xCORES weft-tune [-t SECONDS] [-r REPS] [-o FILE] [-v]
 *
 * Every constant is read off the simplest call whose cost the model
 * reduces to it, on a sub-communicator of the right size, with an explicit
 * algorithm (so the constants being measured never steer the measurement):
 *   alpha       2 ranks, 8-byte all-reduce by recursive doubling: one round
 *   alpha_over  2xcores ranks (or every rank, if more than cores), 8-byte
 *               ring: 2(p-1) rounds, each a wake-up
 *   msg_over    the same ranks, 8-byte naive: one round of p-1 messages
 *   msg         cores ranks (at least 3 cores), 8-byte naive
 *   beta        2 ranks, ring at 256 KiB and 2 MiB: the slope is beta +
 *               gamma/2 (the sizes where the regimes meet; far larger
 *               messages leave the caches)
 *   gamma       the reduction kernel, f32 sum in place over 16 MiB, the
 *               fastest MiB
 *   alpha_wan   when the ranks span clusters (WEFT_CLUSTER, weftrun
 *               --clusters): rank 0 and the first rank of another cluster,
 *               8-byte all-reduce by recursive doubling: one round across
 *   beta_wan    the same pair, recursive doubling at 256 KiB and 2 MiB:
 *               the slope is beta_wan + gamma (one exchange of n bytes)
 * Each is the fastest of REPS batches, since a shared machine only ever
 * adds time; a batch's length comes from a short probe so that the whole
 * run fits the budget. Constants that need more ranks than were started
 * are left out of the file (the library's defaults then apply). */
#include "cli_args.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    weft_comm *world;
    int rank, size, reps, verbose;
    double deadline, weight_left;
} tuner_run;

static void usage(void)
{
    fprintf(stderr,
            "usage: weftrun -n P weft-tune [-t SECONDS] [-r REPS] [-o FILE] [-v]\n"
            "  Measures the cost model's constants (alpha alpha_over msg msg_over beta\n"
            "  gamma cores, and alpha_wan beta_wan when the ranks span clusters) and\n"
            "  prints the WEFT_TUNE line; -o FILE also writes it for\n"
            "  WEFT_TUNE_FILE. P = 2 x cores measures everything but msg (which needs\n"
            "  at least 3 cores); P = 2 measures alpha, beta and gamma only.\n"
            "  -t SECONDS  time budget for the measurements (default 5)\n"
            "  -r REPS     batches per measurement, the fastest kept (default 3)\n"
            "  -v          also print the predicted all-reduce table for P ranks\n"
            "  Measures the transport in use: shared memory, or TCP with WEFT_SHM=0.\n");
}

/* Control traffic by the ring so that no cost model is consulted. */
static int ctl(weft_comm *c, weft_coll_kind k, void *send, void *recv, size_t n, weft_op op)
{
    weft_coll_args a = { .kind = k, .send = send, .recv = recv, .count = n,
                         .dtype = WEFT_F64, .op = op, .root = 0, .algo = WEFT_ALGO_RING };
    return weft_collective(c, &a);
}

static int allreduce(weft_comm *c, weft_algo algo, const void *send, void *recv, size_t n)
{
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = send, .recv = recv, .count = n,
                         .dtype = WEFT_F32, .op = WEFT_SUM, .algo = algo };
    return weft_collective(c, &a);
}

/* World-wide: the seconds this step may take, from rank 0's clock, so that
 * every rank sizes its batches alike. 0 when the budget is spent. */
static int share(tuner_run *t, double weight, double *secs)
{
    double s = 0;
    if (t->rank == 0) {
        double left = t->deadline - cli_now();
        s = left > 0 && t->weight_left > 0 ? left * weight / t->weight_left : 0;
    }
    t->weight_left -= weight;
    int rc = ctl(t->world, WEFT_COLL_BROADCAST, &s, &s, 1, WEFT_SUM);
    *secs = s;
    return rc;
}

/* Fastest seconds per call of algo on bytes (f32 sum, out of place) over
 * c, the slowest rank's; every rank of c calls it. */
static int time_allreduce(weft_comm *c, weft_algo algo, size_t bytes, double secs, int reps,
                          double *best)
{
    size_t n = bytes / 4;
    float *in = malloc(bytes), *out = malloc(bytes);
    double dt, slowest;
    long iters = 0;
    int rc = in && out ? 0 : WEFT_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++)
        in[i] = (float)(i % 13);
    for (int i = 0; !rc && i < 2; i++) /* warm-up: connections, shared rings */
        rc = allreduce(c, algo, in, out, n);
    /* probe: how long a call takes, agreed by all (the slowest rank's
     * median of five, so that one stall does not shrink the batches) */
    if (!rc && !(rc = ctl(c, WEFT_COLL_BARRIER, NULL, NULL, 0, WEFT_SUM))) {
        double t[5] = { 0 };
        for (int i = 0; !rc && i < 5; i++) {
            double t0 = cli_now();
            rc = allreduce(c, algo, in, out, n);
            t[i] = cli_now() - t0;
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        }
        dt = t[2];
        if (!rc && !(rc = ctl(c, WEFT_COLL_ALLREDUCE, &dt, &slowest, 1, WEFT_MAX))) {
            double k = slowest > 0 ? secs / reps / slowest : 1;
            iters = k < 1 ? 1 : k > 100000 ? 100000 : (long)k;
            *best = slowest;
        }
    }
    for (int r = 0; !rc && r < reps; r++) {
        if ((rc = ctl(c, WEFT_COLL_BARRIER, NULL, NULL, 0, WEFT_SUM)))
            break;
        double t0 = cli_now();
        for (long i = 0; !rc && i < iters; i++)
            rc = allreduce(c, algo, in, out, n);
        dt = (cli_now() - t0) / (double)iters;
        if (!rc && !(rc = ctl(c, WEFT_COLL_ALLREDUCE, &dt, &slowest, 1, WEFT_MAX)) &&
            slowest < *best)
            *best = slowest;
    }
    free(in);
    free(out);
    return rc;
}

/* One step: members of c (NULL elsewhere) time the call; world rank 0
 * (a member of every sub-communicator: rank 0 in each) gets the result. */
static int step(tuner_run *t, weft_comm *c, double weight, weft_algo algo, size_t bytes,
                double *result)
{
    double secs;
    int rc = share(t, weight, &secs);
    *result = -1;
    if (rc || !c)
        return rc;
    /* a spent budget still gets batches of one call: every constant is measured */
    rc = time_allreduce(c, algo, bytes, secs, t->reps, result);
    if (rc)
        fprintf(stderr, "weft-tune: rank %d: %s all-reduce of %zu B on %d ranks: %s\n", t->rank,
                weft_algo_name(algo), bytes, weft_comm_size(c), weft_comm_error(c));
    return rc;
}

/* Seconds per byte of the reduction kernel, rank 0 only. */
static int time_gamma(tuner_run *t, double weight, double *result)
{
    double secs;
    int rc = share(t, weight, &secs);
    *result = -1;
    if (rc || t->rank != 0)
        return rc;
    size_t n = 4u << 20; /* 16 MiB of f32 */
    float *a = malloc(n * 4), *b = malloc(n * 4);
    if (!a || !b) {
        free(a);
        free(b);
        return WEFT_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 7);
        b[i] = 1.0f;
    }
    /* timed a MiB at a time, the fastest kept: a pass over 16 MiB is long
     * enough to be preempted on a busy machine, a piece mostly is not, and
     * the pieces still stream from beyond the caches */
    size_t piece = (1u << 20) / 4;
    double end = cli_now() + secs, best = -1;
    for (int r = 0; r < 100 && (r < 2 || cli_now() < end); r++) {
        for (size_t off = 0; off < n; off += piece) {
            double s = cli_now();
            weft_reduce_local(a + off, a + off, b + off, piece, WEFT_F32, WEFT_SUM);
            s = cli_now() - s;
            if (r > 0 && (best < 0 || s < best)) /* the first pass touches the pages */
                best = s;
        }
    }
    free(a);
    free(b);
    *result = best / (double)(piece * 4);
    return 0;
}

/* The first n ranks of world (all of it when n is its size); NULL for the
 * others and when n is 0. Collective over world. */
static int sub(tuner_run *t, int n, weft_comm **out)
{
    *out = NULL;
    if (n <= 0)
        return 0;
    if (n == t->size) {
        *out = t->world;
        return 0;
    }
    return weft_comm_split(t->world, t->rank < n ? 0 : -1, t->rank, out);
}

/* Rank 0 and the first rank of another cluster than 0's (NULL elsewhere,
 * and for everyone when the ranks are one cluster). Collective over world. */
static int wan_pair(tuner_run *t, weft_comm **out)
{
    int other = -1;
    *out = NULL;
    for (int q = 1; q < t->size && other < 0; q++)
        if (weft_comm_cluster_of(t->world, q) != weft_comm_cluster_of(t->world, 0))
            other = q;
    if (other < 0)
        return 0;
    return weft_comm_split(t->world, t->rank == 0 || t->rank == other ? 0 : -1, t->rank, out);
}

static void load_average(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double l1, l5, l15;
    if (f && fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3)
        snprintf(buf, cap, "%.2f %.2f %.2f", l1, l5, l15);
    else
        snprintf(buf, cap, "unknown");
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    const char *outfile = NULL;
    double budget = 5;
    int reps = 3, verbose = 0, ch;
    while ((ch = getopt(argc, argv, "t:r:o:vh")) != -1) {
        switch (ch) {
        case 't':
            if (cli_double("weft-tune", "-t", optarg, 0.001, 86400, &budget))
                return 2;
            break;
        case 'r':
            if (cli_int("weft-tune", "-r", optarg, 1, 1000, &reps))
                return 2;
            break;
        case 'o': outfile = optarg; break;
        case 'v': verbose = 1; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "weft-tune: unexpected argument '%s'\n", argv[optind]);
        usage();
        return 2;
    }
    /* the constants under measurement must not come from an older file */
    unsetenv("WEFT_TUNE");
    unsetenv("WEFT_TUNE_FILE");

    tuner_run t = { .reps = reps, .verbose = verbose };
    double start = cli_now();
    int rc = weft_comm_init_env(&t.world);
    if (rc) {
        fprintf(stderr, "weft-tune: %s (run it under weftrun: weftrun -n 4 weft-tune)\n",
                weft_strerror(rc));
        return 1;
    }
    t.rank = weft_comm_rank(t.world);
    t.size = weft_comm_size(t.world);
    /* -o is checked before the measuring, and every rank stops with rank 0 */
    double out_ok = 1;
    char why[4200];
    if (t.rank == 0 && outfile && cli_path_problem(outfile, 0, 1, why, sizeof why)) {
        fprintf(stderr, "weft-tune: -o %s: %s\n", outfile, why);
        out_ok = 0;
    }
    if ((rc = ctl(t.world, WEFT_COLL_BROADCAST, &out_ok, &out_ok, 1, WEFT_SUM)) || !out_ok) {
        weft_comm_destroy(t.world);
        return 1;
    }
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = nc > 0 && nc < 1 << 20 ? (int)nc : 1;
    /* the budget covers the measurements; setting up the sub-communicators
     * and their connections comes before it */
    /* the constants of links inside a cluster from ranks of rank 0's
     * cluster only (the first ones, as weftrun --clusters places them) */
    int near = 1;
    while (near < t.size && weft_comm_cluster_of(t.world, near) == weft_comm_cluster_of(t.world, 0))
        near++;
    int p_over = near >= 2 * cores ? 2 * cores : near > cores ? near : 0;
    int p_msg = cores >= 3 && near >= cores ? cores : 0;
    weft_comm *c2 = NULL, *cover = NULL, *cmsg = NULL, *cwan = NULL;
    if (near < 2) {
        if (t.rank == 0)
            fprintf(stderr, "weft-tune: needs at least 2 ranks%s (weftrun -n %d weft-tune)\n",
                    t.size > 1 ? " in rank 0's cluster" : "", 2 * cores);
        weft_comm_destroy(t.world);
        return 2;
    }
    if ((rc = sub(&t, 2, &c2)) || (rc = sub(&t, p_over, &cover)) ||
        (rc = sub(&t, p_msg, &cmsg)) || (rc = wan_pair(&t, &cwan)))
        goto fail;
    int wan = weft_comm_cluster_count(t.world) > 1;
    t.deadline = cli_now() + budget;
    /* shares of the budget: 8-byte steps need many calls to average out a
     * scheduler's tick; the large ones few */
    t.weight_left = 2 + (p_over ? 2 + 2 : 0) + (p_msg ? 2 : 0) + 1 + 1 + 0.5 + (wan ? 3 : 0);
    double alpha, ring_over = -1, naive_over = -1, naive_msg = -1, r256, r2m, gamma;
    if ((rc = step(&t, c2, 2, WEFT_ALGO_RD, 8, &alpha)))
        goto fail;
    if (p_over && ((rc = step(&t, cover, 2, WEFT_ALGO_RING, 8, &ring_over)) ||
                   (rc = step(&t, cover, 2, WEFT_ALGO_NAIVE, 8, &naive_over))))
        goto fail;
    if (p_msg && (rc = step(&t, cmsg, 2, WEFT_ALGO_NAIVE, 8, &naive_msg)))
        goto fail;
    if ((rc = step(&t, c2, 1, WEFT_ALGO_RING, 256u << 10, &r256)) ||
        (rc = step(&t, c2, 1, WEFT_ALGO_RING, 2u << 20, &r2m)) ||
        (rc = time_gamma(&t, 0.5, &gamma)))
        goto fail;
    double w8 = -1, w256 = -1, w2m = -1;
    if (wan && ((rc = step(&t, cwan, 1, WEFT_ALGO_RD, 8, &w8)) ||
                (rc = step(&t, cwan, 1, WEFT_ALGO_RD, 256u << 10, &w256)) ||
                (rc = step(&t, cwan, 1, WEFT_ALGO_RD, 2u << 20, &w2m))))
        goto fail;
    double took = cli_now() - start;
    if (t.rank == 0) {
        weft_cost_params cp;
        char line[512], text[1024], load[64], skipped[128] = "", when[32] = "?";
        size_t len = 0;
        /* the constants not measured stay those of this kind of link
         * (WEFT_SHM's) */
        if ((rc = weft_cost_default(&cp, -1)))
            goto fail;
        int shm = cp.shm;
        cp.cores = cores;
        load_average(load, sizeof load);
        /* a constant this many ranks cannot measure reads negative: the default stays */
#define KEY(name, v)                                                                      \
    do {                                                                                  \
        if ((v) >= 0) {                                                                   \
            cp.name = (v);                                                                \
            len += (size_t)snprintf(line + len, sizeof line - len, "%s=%.4g,", #name, cp.name); \
        } else {                                                                          \
            strncat(skipped, " " #name, sizeof skipped - strlen(skipped) - 1);            \
        }                                                                                 \
    } while (0)
        KEY(alpha, alpha);
        KEY(alpha_over, ring_over >= 0 ? ring_over / (2.0 * (p_over - 1)) : -1);
        double m = naive_over >= 0 && ring_over >= 0
                       ? (naive_over - cp.alpha_over) / (p_over > 2 ? p_over - 2 : 1) : -1;
        KEY(msg_over, m >= 0 || naive_over < 0 ? m : 0);
        m = naive_msg >= 0 && alpha >= 0 ? (naive_msg - cp.alpha) / (p_msg - 2) : -1;
        KEY(msg, m >= 0 || naive_msg < 0 ? m : 0);
        double slope = r256 >= 0 && r2m >= 0 ? (r2m - r256) / (double)((2u << 20) - (256u << 10))
                                             : -1;
        double g = gamma >= 0 ? gamma : cp.gamma, b = slope - g / 2;
        /* a busy machine can make 2 MiB look no slower than 256 KiB: then
         * the 2 MiB call alone, 2 alpha + n beta + n gamma / 2 */
        if (r2m >= 0 && !(b > 1e-13))
            b = (r2m - 2 * cp.alpha) / (double)(2u << 20) - g / 2;
        KEY(beta, r2m < 0 ? -1 : b > 1e-13 ? b : 1e-13);
        KEY(gamma, gamma);
        KEY(alpha_wan, w8);
        /* one exchange each way: n bytes on the wire, n reduced */
        double bw = w2m >= 0 ? (w2m - w256) / (double)((2u << 20) - (256u << 10)) - g : -1;
        if (w2m >= 0 && !(bw > 1e-13)) /* noise: the 2 MiB call alone */
            bw = (w2m - w8) / (double)(2u << 20) - g;
        KEY(beta_wan, w2m < 0 ? -1 : bw > 1e-13 ? bw : 1e-13);
#undef KEY
        snprintf(line + len, sizeof line - len, "cores=%d", cores);
        time_t now = time(NULL);
        struct tm tm;
        if (gmtime_r(&now, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
        snprintf(text, sizeof text,
                 "# weft-tune %s: %d ranks, %d cores, %s, %.1f s, load average %s\n"
                 "# not measured (library defaults):%s alpha_inter beta_inter\n%s\n",
                 when, t.size, cores, shm ? "shared memory" : "TCP (WEFT_SHM=0)",
                 took, load, skipped, line);
        weft_cost_params back;
        const char *bad = NULL;
        weft_cost_default(&back, 1);
        if (weft_cost_parse(&back, text, &bad)) { /* cannot happen: the format is the parser's */
            fprintf(stderr, "weft-tune: wrote an unreadable line at '%s'\n", bad ? bad : "");
            rc = WEFT_EINVAL;
            goto fail;
        }
        fprintf(stderr, "weft-tune: 2 ranks rd 8 B %.3g us; ", alpha * 1e6);
        if (p_over)
            fprintf(stderr, "%d ranks ring 8 B %.3g us, naive 8 B %.3g us; ", p_over,
                    ring_over * 1e6, naive_over * 1e6);
        if (p_msg)
            fprintf(stderr, "%d ranks naive 8 B %.3g us; ", p_msg, naive_msg * 1e6);
        fprintf(stderr, "2 ranks ring 256 KiB %.4g us, 2 MiB %.4g us\n", r256 * 1e6, r2m * 1e6);
        if (wan)
            fprintf(stderr, "weft-tune: across clusters rd 8 B %.4g us, 256 KiB %.4g us, 2 MiB "
                            "%.4g us\n", w8 * 1e6, w256 * 1e6, w2m * 1e6);
        fprintf(stderr, "weft-tune: %.1f s (budget %.1f s for measuring), load average %s%s%s\n",
                took, budget, load, *skipped ? "; not measured:" : "", skipped);
        if (!p_over)
            fprintf(stderr, "weft-tune: alpha_over and msg_over need more ranks than cores: "
                            "weftrun -n %d weft-tune\n", 2 * cores);
        printf("WEFT_TUNE=\"%s\"\n", line);
        fflush(stdout);
        if (outfile) {
            FILE *f = fopen(outfile, "w");
            if (!f || fputs(text, f) < 0 || fclose(f)) {
                fprintf(stderr, "weft-tune: cannot write %s\n", outfile);
                rc = WEFT_EINVAL;
                goto fail;
            }
        }
        if (t.verbose) {
            weft_cost_print(&back, t.size, WEFT_COLL_ALLREDUCE, 64u << 20, stdout);
        }
    }
fail:
    if (rc && t.rank == 0)
        fprintf(stderr, "weft-tune: %s: %s\n", weft_strerror(rc), weft_comm_error(t.world));
    int left = 0; /* a failed leave is a failed run too */
    if (cwan)
        left |= weft_comm_destroy(cwan);
    if (cmsg && cmsg != t.world)
        left |= weft_comm_destroy(cmsg);
    if (cover && cover != t.world)
        left |= weft_comm_destroy(cover);
    if (c2 && c2 != t.world)
        left |= weft_comm_destroy(c2);
    left |= weft_comm_destroy(t.world);
    if (left && !rc)
        fprintf(stderr, "weft-tune: rank %d: leaving the job failed\n", t.rank);
    return rc || left ? 1 : 0;
}
