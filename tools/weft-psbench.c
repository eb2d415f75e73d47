/* weft-psbench: push + pull time per step of one tensor through the
 * parameter server, against ring all-reduce of the same tensor among the
 * same workers, in the same run.
 *
 *   weftrun -n 4 --servers 2 build/weft-psbench -s 4M -n 5 [-B 100]
 *
 * Each step every worker pushes a gradient of s bytes and pulls the
 * parameters back (BSP: the pull waits for every worker's push); the time
 * of a step is the slowest worker's. With -B MBIT (the link rate of every
 * host, when each process is its own host), it also prints the lower
 * bounds M/B (a worker's own link) and BytePS's 2n(n-1)M/((n^2+kn-2k)B).
 * -c sets the chunk size in elements (default: the library's). Worker 0
 * prints one line:
 *   ps  workers servers bytes  ps_ms  allreduce_ms  ps_MBps  bound_ms  byteps_bound_ms */
#include "cli_args.h"
#include "weft.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, int rc, const char *msg)
{
    fprintf(stderr, "weft-psbench: %s: %s%s%s\n", what, weft_strerror(rc), msg && *msg ? ": " : "",
            msg ? msg : "");
    exit(1);
}

int main(int argc, char **argv)
{
    size_t bytes = 4u << 20;
    int iters = 5, warmup = 1, opt, skip_ar = 0;
    double mbit = 0;
    weft_comm *world, *workers = NULL;
    weft_ps_config pc;
    weft_ps *ps;
    int rc;
    int chunk = 0;
    const char *tool = "weft-psbench";
    uint64_t size = bytes;
    while ((opt = getopt(argc, argv, "s:n:w:B:c:Ah")) != -1) {
        int bad = 0;
        switch (opt) {
        case 's': bad = cli_size(tool, "-s", optarg, (uint64_t)1 << 36, &size); break;
        case 'n': bad = cli_int(tool, "-n", optarg, 1, 1000000, &iters); break;
        case 'w': bad = cli_int(tool, "-w", optarg, 0, 1000000, &warmup); break;
        case 'B': bad = cli_double(tool, "-B", optarg, 0, 1e9, &mbit); break;
        case 'A': skip_ar = 1; break;
        case 'c': bad = cli_int(tool, "-c", optarg, 0, INT32_MAX, &chunk); break;
        default:
            fprintf(opt == 'h' ? stdout : stderr,
                    "usage: weftrun -n W --servers K weft-psbench [-s BYTES] [-n ITERS] "
                    "[-w WARMUP] [-B LINK_MBIT] [-c CHUNK_ELEMS] [-A (no all-reduce)]\n"
                    "  BYTES: a byte count or a number with K, M, G or T, with or without iB "
                    "(powers of 1024): 4M, 2MiB\n");
            return opt == 'h' ? 0 : 2;
        }
        if (bad)
            return 2;
    }
    bytes = (size_t)size;
    if (optind < argc) {
        fprintf(stderr, "weft-psbench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (bytes < 4) {
        fprintf(stderr, "weft-psbench: -s %zu: at least 4 bytes (one float)\n", bytes);
        return 2;
    }
    if ((rc = weft_comm_init_env(&world)))
        die("init", rc, NULL);
    weft_ps_config_default(&pc);
    pc.optim.momentum = 0;
    pc.lr.lr = 0.001f;
    pc.chunk_max = chunk; /* 0: the default */
    if ((rc = weft_ps_init(&ps, world, &pc)))
        die("weft_ps_init", rc, NULL);
    int worker = weft_ps_role(ps) == WEFT_PS_ROLE_WORKER;
    /* every rank takes part in the split, servers too (before serving) */
    if ((rc = weft_comm_split(world, worker ? 0 : -1, weft_comm_rank(world), &workers)))
        die("split", rc, weft_comm_error(world));
    if (!worker) {
        if ((rc = weft_ps_serve(ps)))
            die("serve", rc, weft_ps_error(ps));
        weft_ps_destroy(ps);
        if ((rc = weft_comm_destroy(world)))
            die("leaving the job", rc, NULL);
        return 0;
    }
    size_t count = bytes / 4;
    float *p = calloc(count, sizeof(float)), *g = calloc(count, sizeof(float));
    float *ar = calloc(count, sizeof(float));
    int n = weft_ps_num_workers(ps), k = weft_ps_num_servers(ps), me = weft_comm_rank(workers);
    if (!p || !g || !ar)
        die("memory", WEFT_ENOMEM, NULL);
    for (size_t i = 0; i < count; i++)
        g[i] = 1e-3f * (float)(i % 7);
    if ((rc = weft_ps_register(ps, 0, p, count)))
        die("register", rc, weft_ps_error(ps));
    double t_ps = 0, t_ar = 0;
    for (int it = 0; it < warmup + iters; it++) {
        weft_ps_request *a, *b;
        double t0, dt;
        if ((rc = weft_barrier(workers)))
            die("barrier", rc, weft_comm_error(workers));
        t0 = cli_now();
        if ((rc = weft_ps_push(ps, 0, g, &a)) || (rc = weft_ps_clock(ps)) ||
            (rc = weft_ps_pull(ps, 0, p, &b)) || (rc = weft_ps_wait(a)) || (rc = weft_ps_wait(b)))
            die("push/pull", rc, weft_ps_error(ps));
        dt = cli_now() - t0;
        if ((rc = weft_allreduce(workers, &dt, &dt, 1, WEFT_F64, WEFT_MAX)))
            die("allreduce", rc, weft_comm_error(workers));
        if (it >= warmup)
            t_ps += dt;
    }
    for (int it = 0; !skip_ar && n > 1 && it < warmup + iters; it++) {
        weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = g, .recv = ar, .count = count,
                             .dtype = WEFT_F32, .op = WEFT_SUM, .algo = WEFT_ALGO_RING };
        double t0, dt;
        if ((rc = weft_barrier(workers)))
            die("barrier", rc, weft_comm_error(workers));
        t0 = cli_now();
        if ((rc = weft_collective(workers, &a)))
            die("ring all-reduce", rc, weft_comm_error(workers));
        dt = cli_now() - t0;
        if ((rc = weft_allreduce(workers, &dt, &dt, 1, WEFT_F64, WEFT_MAX)))
            die("allreduce", rc, weft_comm_error(workers));
        if (it >= warmup)
            t_ar += dt;
    }
    t_ps /= iters;
    t_ar /= iters;
    uint64_t sent, recvd;
    weft_ps_bytes(ps, &sent, &recvd);
    if ((rc = weft_ps_shutdown(ps)))
        die("shutdown", rc, weft_ps_error(ps));
    if (me == 0) {
        double B = mbit * 1e6 / 8, M = (double)bytes;
        double bound = B > 0 ? M / B : 0;
        /* BytePS's bound needs aggregation: none with one worker (0: n/a) */
        double byteps = B > 0 && n > 1 ? 2.0 * n * (n - 1) * M /
                                             (((double)n * n + (double)k * n - 2.0 * k) * B)
                                       : 0;
        printf("# ps workers servers bytes ps_ms allreduce_ms ps_MBps M/B_ms byteps_bound_ms "
               "worker0_sent worker0_recvd\n");
        printf("ps %d %d %zu %.2f %.2f %.2f %.2f %.2f %llu %llu\n", n, k, bytes, t_ps * 1e3,
               n > 1 && !skip_ar ? t_ar * 1e3 : 0.0, M / t_ps / 1e6, bound * 1e3, byteps * 1e3,
               (unsigned long long)sent, (unsigned long long)recvd);
        fflush(stdout);
    }
    weft_ps_destroy(ps);
    free(p);
    free(g);
    free(ar);
    if ((rc = weft_comm_destroy(workers)) || (rc = weft_comm_destroy(world)))
        die("leaving the job", rc, NULL);
    return 0;
}
