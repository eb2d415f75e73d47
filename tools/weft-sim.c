/* weft-sim: predict how long weft's collectives take on machines this one
 * is not, by running the library's own schedules over a topology model.
 *
 *   weft-sim allreduce --topo summit --ranks 96..24576 --algo ring,tree --size 8 --size 64M
 *   weft-sim figure summit        data for docs/SIMULATION.md, figure 1
 *   weft-sim figure gpt3          the GPT-3 table
 *   weft-sim validate [--set S]   predicted against published and measured figures
 *   weft-sim topo summit          print a topology in the text format
 *   weft-sim pipeline --p 4 --m 8 --schedule 1f1b --model gpt:... --gflops 50
 *                                 a pipeline schedule's step, bubble and stash
 *   weft-sim plan --model gpt:... --batch 32 --ranks 8 --topo host --mem 1G
 *                                 every tp x pp x dp layout, fastest first
 *   weftrun -n 4 weft-sim sync    what ranks sharing the cores wait at an
 *                                 exchange and the cores a chain of them
 *                                 gets: lines for plan's calibration file
 *                                 (with --model, a tensor group's slices)
 */
#include "weft.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weft-sim COLLECTIVE [options]   (allreduce broadcast reduce allgather\n"
        "                                        reduce_scatter alltoall)\n"
        "       weft-sim figure summit|gpt3 [--out FILE]\n"
        "       weft-sim validate [--set summit|dgx-h100|host]\n"
        "                                       predictions against published and measured\n"
        "                                       figures, with the error of each\n"
        "       weft-sim topo NAME|FILE         print a topology in the text format\n"
        "       weft-sim list                   the built-in topologies\n"
        "       weft-sim pipeline [options]     a pipeline schedule's step time, bubble\n"
        "                                       and stash (weft-sim pipeline --help)\n"
        "       weft-sim plan [options]         tp x pp x dp layouts of a GPT or Llama,\n"
        "                                       predicted and ranked (weft-sim plan --help)\n"
        "       weftrun -n N weft-sim sync      what a synchronisation waits on shared\n"
        "                                       cores, for plan's calibration (--help)\n"
        "options:\n"
        "  --topo NAME|FILE   topology (default summit); presets: see `weft-sim list`\n"
        "  --ranks LIST       ranks: N, A,B,C or A..B (doubling); default 8\n"
        "  --nodes LIST       the same in nodes (ranks = nodes * ranks_per_node)\n"
        "  --algo LIST        naive,ring,tree,rd,rabenseifner,hier,ps, and NCCL's\n"
        "                     nccl-ring,nccl-tree (default ring,tree)\n"
        "  --proto P          ll, ll128, simple or auto (default): NCCL's protocol, for\n"
        "                     algorithms with hop lines in the topology\n"
        "  --channels N       channels of the NCCL schedules (default: as NCCL, no more\n"
        "                     than chunks, at most the topology's)\n"
        "  --size S           bytes, repeatable: 8, 64K, 64MiB, 700G (K, M, G, T: powers\n"
        "                     of 1024, with or without iB); the whole\n"
        "                     buffer of all ranks' blocks for allgather, reduce_scatter\n"
        "                     and alltoall, as in nccl-tests\n"
        "  --dtype T          element type (default f32)\n"
        "  --chunk S          pipelining chunk in bytes, as --size (default the generators')\n"
        "  --servers N        parameter servers for --algo ps (default 1)\n"
        "  --no-fold          simulate every rank even when the schedule is symmetric\n"
        "  --budget N         ops simulated before extrapolating in the size (1000000)\n"
        "  --calls N          N calls back to back, time per call (as weft-bench's mean)\n");
}

/* A size in weft_size_parse's grammar (64M, 2MiB, 1.5G); on a bad one says
 * so, naming the option, and returns -1. */
static int parse_size(const char *opt, const char *s, uint64_t *out)
{
    char why[200];
    if (weft_size_parse(s, 0, UINT64_MAX, out, why, sizeof why) == 0)
        return 0;
    fprintf(stderr, "weft-sim: %s: %s\n", opt, why);
    return -1;
}

/* "96..24576" doubles; "8,16,24" lists; "12" is one value. */
static int parse_list(const char *s, int *v, int max)
{
    int n = 0;
    const char *dots = strstr(s, "..");
    if (dots) {
        long a = atol(s), b = atol(dots + 2);
        for (long x = a; x >= 1 && x <= b && n < max; x *= 2)
            v[n++] = (int)x;
        return n;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t && n < max; t = strtok(NULL, ","))
        if ((v[n] = atoi(t)) >= 1)
            n++;
    return n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmd_coll(weft_coll_kind kind, int argc, char **argv)
{
    const char *topo_name = "summit";
    int ranks[64], nranks = 0, nodes = 0, algos[8], nalgo = 0, servers = 1, no_fold = 0;
    int proto = WEFT_SIM_PROTO_AUTO, channels = 0, calls = 0;
    uint64_t sizes[32], chunk = 0, budget = 0;
    int nsizes = 0;
    weft_dtype dt = WEFT_F32;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-fold")) {
            no_fold = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "weft-sim: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--topo"))
            topo_name = v;
        else if (!strcmp(a, "--ranks") || !strcmp(a, "--nodes")) {
            nranks = parse_list(v, ranks, 64);
            nodes = a[2] == 'n';
        } else if (!strcmp(a, "--algo")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t && nalgo < 8; t = strtok(NULL, ","))
                if (weft_sim_algo_parse(t, &algos[nalgo++])) {
                    fprintf(stderr, "weft-sim: unknown algorithm %s\n", t);
                    return 2;
                }
        } else if (!strcmp(a, "--size") && nsizes < 32) {
            if (parse_size(a, v, &sizes[nsizes++]))
                return 2;
        } else if (!strcmp(a, "--chunk")) {
            if (parse_size(a, v, &chunk))
                return 2;
        } else if (!strcmp(a, "--dtype")) {
            if (weft_dtype_parse(v, &dt)) {
                fprintf(stderr, "weft-sim: unknown dtype %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--servers"))
            servers = atoi(v);
        else if (!strcmp(a, "--budget"))
            budget = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--calls")) {
            if ((calls = atoi(v)) < 1 || calls > 100000) {
                fprintf(stderr, "weft-sim: --calls takes 1..100000\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--proto")) {
            if (weft_sim_protocol_parse(v, &proto)) {
                fprintf(stderr, "weft-sim: unknown protocol %s (ll, ll128, simple, auto)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--channels")) {
            if ((channels = atoi(v)) < 1 || channels > 64) {
                fprintf(stderr, "weft-sim: --channels takes 1..64\n");
                return 2;
            }
        }
        else {
            usage(stderr);
            return 2;
        }
    }
    weft_sim_topo *t;
    char err[256];
    if (weft_sim_topo_load(&t, topo_name, err, sizeof err)) {
        fprintf(stderr, "weft-sim: %s\n", err);
        return 1;
    }
    const char *note = weft_sim_topo_note(t);
    if (!nranks)
        ranks[nranks++] = 8;
    if (!nalgo) {
        algos[nalgo++] = WEFT_ALGO_RING;
        algos[nalgo++] = WEFT_ALGO_TREE;
    }
    if (!nsizes)
        sizes[nsizes++] = 8;
    size_t es = weft_dtype_size(dt);
    int blocks = kind == WEFT_COLL_ALLGATHER || kind == WEFT_COLL_REDUCE_SCATTER ||
                 kind == WEFT_COLL_ALLTOALL;
    printf("# weft-sim %s on %s%s%s\n", weft_coll_name(kind), weft_sim_topo_name(t),
           note[0] ? " -- " : "", note);
    printf("# %12s %12s %7s %9s %6s %13s %9s %9s  %5s %5s %5s %5s %5s  %-10s %8s\n", "size",
           "count", "ranks", "algo", "proto", "time_us", "algbw", "busbw", "intra", "nic", "pod",
           "wan", "cpu", "fold", "sim_s");
    for (int si = 0; si < nsizes; si++)
        for (int ri = 0; ri < nranks; ri++)
            for (int ai = 0; ai < nalgo; ai++) {
                int p = nodes ? ranks[ri] * weft_sim_topo_ranks_per_node(t) : ranks[ri];
                /* as weft-bench and nccl-tests: the size is the whole buffer */
                uint64_t per = blocks ? (uint64_t)p : 1;
                weft_sim_job j = { .topo = t, .algo = algos[ai], .kind = kind, .nranks = p,
                                   .count = sizes[si] / es / per, .esize = (uint32_t)es,
                                   .chunk_bytes = chunk, .ps_servers = servers,
                                   .no_fold = no_fold, .op_budget = budget, .proto = proto,
                                   .channels = channels, .calls = calls };
                weft_sim_result r;
                double t0 = now_s();
                int rc = weft_sim_run(&j, &r, err, sizeof err);
                double wall = now_s() - t0;
                if (rc) {
                    printf("  %12llu %12llu %7d %6s  error: %s\n",
                           (unsigned long long)(j.count * es * per), (unsigned long long)j.count,
                           p, weft_sim_algo_name(j.algo), err);
                    continue;
                }
                char fold[32] = "-", u[WEFT_SIM_LINK_CLASSES][8];
                if (r.fold)
                    snprintf(fold, sizeof fold, "%d%s", r.fold, r.fold_exact ? "" : "~");
                if (r.extrapolated)
                    strncat(fold, "+x", sizeof fold - strlen(fold) - 1);
                if (getenv("WEFT_SIM_DEBUG"))
                    fprintf(stderr, "ops %llu events %llu rounds %u fold_err %.3g us\n",
                            (unsigned long long)r.ops, (unsigned long long)r.events,
                            r.max_rounds, r.fold_err_us);
                for (int c = 0; c < WEFT_SIM_LINK_CLASSES; c++) {
                    if (r.util[c] < 0)
                        snprintf(u[c], sizeof u[c], "%5s", "-");
                    else
                        snprintf(u[c], sizeof u[c], "%4.0f%%", 100 * r.util[c]);
                    if (getenv("WEFT_SIM_DEBUG"))
                        fprintf(stderr, "%s mean %.3f max %.3f bytes %.3g\n", weft_sim_link_name(c),
                                r.util[c], r.util_max[c], r.bytes[c]);
                }
                printf("  %12llu %12llu %7d %9s %6s %13.2f %9.3f %9.3f  %s %s %s %s %s  %-10s "
                       "%8.2f\n",
                       (unsigned long long)(j.count * es * per), (unsigned long long)j.count, p,
                       weft_sim_algo_name(j.algo), r.proto ? weft_sim_protocol_name(r.proto) : "-",
                       r.time_us, r.algbw_GBps, r.busbw_GBps, u[0], u[1], u[2], u[3], u[4], fold,
                       wall);
                fflush(stdout);
            }
    printf("# algbw = size/time, busbw = algbw * nccl-tests' bus factor (GB/s, 1e9 bytes);\n"
           "# intra..cpu: mean link utilisation per class; fold: ranks simulated\n"
           "# (~: symmetric up to one element per op), +x: extrapolated in size\n");
    weft_sim_topo_free(t);
    return 0;
}

/* The value of option argv[*i] (advancing *i): 0; or 1 when it asked for
 * help (printed), 2 when the value is missing (said). */
static int option_value(int argc, char **argv, int *i, void (*help)(FILE *), const char **v)
{
    const char *a = argv[*i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        help(stdout);
        return 1;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "weft-sim: %s needs a value\n", a);
        return 2;
    }
    *v = argv[++*i];
    return 0;
}

static void pipeline_usage(FILE *f)
{
    fprintf(f,
        "usage: weft-sim pipeline --p P --m M [--schedule S] COSTS [options]\n"
        "  --p P              ranks in the pipeline\n"
        "  --m M              micro-batches a step\n"
        "  --schedule S       gpipe | 1f1b | interleaved:V | zb (default 1f1b)\n"
        "COSTS, one of:\n"
        "  --costs FILE       per block: name fwd_s bwd_input_s bwd_weight_s act_bytes\n"
        "                     state_bytes [out_bytes]  ('#' comments; weft-train writes it)\n"
        "  --model SPEC       mlp:784-512-10 or gpt:vocab=..,ctx=..,layers=..,heads=..,dim=..,\n"
        "                     costs from FLOPs with --batch B (samples a micro-batch,\n"
        "                     default 8), --seq T (GPT tokens, default ctx), --gflops G\n"
        "                     (sustained GFLOP/s of one rank, default 100)\n"
        "options:\n"
        "  --partition P      auto (balanced, exact) | uniform | 3,3,2 (blocks a chunk)\n"
        "  --mem-cap B        bytes a chunk may hold, K/M/G/T (with or without iB) powers\n"
        "                     of 1024 (auto honours it; all report it)\n"
        "  --bandwidth B      link bytes/s, a rate: k/M/G = 1e3/1e6/1e9 (default: free)\n"
        "  --latency S        link seconds a message (default 0)\n");
}

static int parse_si(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end), m = 1;
    switch (*end) {
    case 'k': case 'K': m = 1e3; end++; break;
    case 'M': m = 1e6; end++; break;
    case 'G': m = 1e9; end++; break;
    case 'T': m = 1e12; end++; break;
    }
    if (end == s || *end || v < 0)
        return -1;
    *out = v * m;
    return 0;
}

static int cmd_pipeline(int argc, char **argv)
{
    int p = 0, m = 0, batch = 8, seq = 0;
    const char *sched = "1f1b", *costs = NULL, *model = NULL, *partition = "auto";
    double gflops = 100, bw = 0, lat = 0, cap = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        int got = option_value(argc, argv, &i, pipeline_usage, &v);
        if (got)
            return got == 1 ? 0 : 2;
        int bad = 0;
        if (!strcmp(a, "--p"))
            bad = (p = atoi(v)) < 1;
        else if (!strcmp(a, "--m"))
            bad = (m = atoi(v)) < 1;
        else if (!strcmp(a, "--schedule"))
            sched = v;
        else if (!strcmp(a, "--costs"))
            costs = v;
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--batch"))
            bad = (batch = atoi(v)) < 1;
        else if (!strcmp(a, "--seq"))
            bad = (seq = atoi(v)) < 1;
        else if (!strcmp(a, "--gflops"))
            bad = parse_si(v, &gflops) || gflops <= 0;
        else if (!strcmp(a, "--partition"))
            partition = v;
        else if (!strcmp(a, "--mem-cap")) {
            uint64_t sz;
            if (parse_size(a, v, &sz))
                return 2;
            cap = (double)sz;
        } else if (!strcmp(a, "--bandwidth"))
            bad = parse_si(v, &bw);
        else if (!strcmp(a, "--latency"))
            bad = parse_si(v, &lat);
        else {
            pipeline_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "weft-sim: bad value %s for %s\n", v, a);
            return 2;
        }
    }
    if (!p || !m || weft_sim_schedule_check(sched, p, m)) {
        fprintf(stderr, "weft-sim: pipeline needs --p, --m and a known --schedule "
                        "(gpipe, 1f1b, interleaved:V, zb)\n");
        return 2;
    }
    if (!costs == !model) {
        fprintf(stderr, "weft-sim: pipeline needs one of --costs FILE and --model SPEC\n");
        return 2;
    }
    char err[512] = "";
    weft_model_config cfg;
    if (model && weft_model_config_parse(model, &cfg)) {
        fprintf(stderr, "weft-sim: bad model %s\n", model);
        return 1;
    }
    weft_sim_pipe_query q = { .schedule = sched, .p = p, .m = m, .costs = costs,
                              .model = costs ? NULL : &cfg, .batch = batch, .seq = seq,
                              .gflops = gflops, .partition = partition, .mem_cap = cap,
                              .latency = lat, .bandwidth = bw };
    weft_sim_pipeline *pl;
    if (weft_sim_pipeline_run(&q, &pl, err, sizeof err)) {
        fprintf(stderr, "weft-sim: %s\n", err);
        return 1;
    }
    weft_sim_pipe_summary sum;
    weft_sim_pipeline_summary(pl, &sum);
    printf("# weft-sim pipeline %s p=%d m=%d: %d blocks from %s, partition %s\n", sum.schedule,
           p, m, sum.blocks, costs ? costs : model, partition);
    printf("# %5s %4s %-24s %10s %10s %10s %6s %12s\n", "chunk", "rank", "blocks", "fwd_ms",
           "bwd_i_ms", "bwd_w_ms", "stash", "mem_bytes");
    for (int j = 0; j < sum.chunks; j++) {
        char blocks[64];
        weft_sim_pipe_chunk c;
        weft_sim_pipeline_chunk(pl, j, &c);
        int a = c.first_block, b = c.last_block;
        if (a == b)
            snprintf(blocks, sizeof blocks, "%d (%.16s)", a, weft_sim_pipeline_block_name(pl, a));
        else
            snprintf(blocks, sizeof blocks, "%d..%d (%.8s..%.8s)", a, b,
                     weft_sim_pipeline_block_name(pl, a), weft_sim_pipeline_block_name(pl, b));
        printf("  %5d %4d %-24s %10.3f %10.3f %10.3f %6d %12.0f\n", j, c.rank, blocks,
               1e3 * c.fwd_s, 1e3 * c.bwd_input_s, 1e3 * c.bwd_weight_s, c.stash, c.mem_bytes);
    }
    printf("# %4s %12s %8s %10s\n", "rank", "busy_ms", "bubble", "peak_stash");
    double mean = 0;
    for (int r = 0; r < p; r++) {
        weft_sim_pipe_rank rk;
        weft_sim_pipeline_rank(pl, r, &rk);
        printf("  %4d %12.3f %8.4f %10d\n", r, 1e3 * rk.busy_s, rk.bubble, rk.peak_stash);
        mean += rk.bubble / p;
    }
    printf("step_ms %.3f  bubble_mean %.4f  formula %.4f\n", 1e3 * sum.step_s, mean,
           sum.formula_bubble);
    weft_sim_pipeline_free(pl);
    return 0;
}

static void plan_usage(FILE *f)
{
    fprintf(f,
        "usage: weft-sim plan --model gpt:vocab=V,ctx=T,layers=L,heads=H,dim=C --batch B\n"
        "                     --ranks N [options]\n"
        "  --model SPEC       the GPT or Llama (weft-train's syntax)\n"
        "  --batch B          global sequences a step (weft-train --batch)\n"
        "  --seq T            tokens a sequence (default the model's ctx)\n"
        "  --ranks N          ranks of the job\n"
        "  --topo NAME|FILE   the machine (default host); see `weft-sim list`\n"
        "  --gflops G         sustained GFLOP/s of a rank, of a core on a topology with a\n"
        "                     cpu line (its ranks share the cores); default 20\n"
        "  --mem BYTES        a rank's memory (K/M/G/T, with or without iB: powers of 1024);\n"
        "                     layouts above it are\n"
        "                     marked and never chosen (default: no limit)\n"
        "  --optim adamw|sgd  optimiser state: 8 or 4 bytes a parameter (adamw)\n"
        "  --ep E             expert parallelism of E (a Llama or GPT with experts); 0\n"
        "                     none; default every degree weft-train can run (E dividing\n"
        "                     the experts and dp; with --tp, a tensor rank's group)\n"
        "  --cp C             context parallelism of C; 0 none; default every C whose\n"
        "                     2C chunks cut the sequence (not with experts)\n"
        "  --top N            print only the N fastest (default all)\n"
        "  --calib FILE       calibration file (default: this host's cache, used when it\n"
        "                     exists and --topo is host)\n"
        "  --calibrate        measure what the calibration lacks on this machine (its\n"
        "                     cores, weft-tune's file, each block shape the plan needs,\n"
        "                     a short probe of the engine) and save it\n"
        "  --no-calib         assume every input (FLOPs at --gflops, the topology's links)\n"
        "The line \"# inputs:\" says which inputs were measured and which assumed.\n"
        "Prints every layout sorted by predicted step; the last line names the fastest\n"
        "that fits: best tp=.. pp=.. dp=.. sp=.. schedule=.. m=.. zero=.. step_ms=..\n"
        "mem_bytes=.. [ep=..] [cp=..] (best none when nothing fits; exit status 1).\n"
        "Ranks are tp x cp x dp x pp; an expert group is ep of the dp ranks.\n");
}

static const char *link_name(int c)
{
    return c < 0 ? "-" : weft_sim_link_name(c);
}

static int cmd_plan(int argc, char **argv)
{
    weft_sim_plan_query q = { .gflops = 20, .optim_bytes = 8, .ep = -1, .cp = -1 };
    const char *topo_name = "host", *model = NULL;
    int top = 0, no_calib = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--calibrate") || !strcmp(a, "--no-calib")) {
            *(a[2] == 'c' ? &q.calibrate : &no_calib) = 1;
            continue;
        }
        int got = option_value(argc, argv, &i, plan_usage, &v);
        if (got)
            return got == 1 ? 0 : 2;
        int bad = 0;
        uint64_t sz;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--batch"))
            bad = (q.batch = atoi(v)) < 1;
        else if (!strcmp(a, "--seq"))
            bad = (q.seq = atoi(v)) < 1;
        else if (!strcmp(a, "--ranks"))
            bad = (q.ranks = atoi(v)) < 1;
        else if (!strcmp(a, "--topo"))
            topo_name = v;
        else if (!strcmp(a, "--gflops"))
            bad = parse_si(v, &q.gflops) || q.gflops <= 0;
        else if (!strcmp(a, "--mem")) {
            if (parse_size(a, v, &sz))
                return 2;
            q.mem = (double)sz;
        } else if (!strcmp(a, "--optim")) {
            bad = strcmp(v, "adamw") && strcmp(v, "sgd");
            q.optim_bytes = !strcmp(v, "sgd") ? 4 : 8;
        } else if (!strcmp(a, "--ep") || !strcmp(a, "--cp"))
            bad = (*(a[2] == 'e' ? &q.ep : &q.cp) = atoi(v)) < 0;
        else if (!strcmp(a, "--top"))
            bad = (top = atoi(v)) < 1;
        else if (!strcmp(a, "--calib"))
            q.calib = v;
        else {
            plan_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "weft-sim: bad value %s for %s\n", v, a);
            return 2;
        }
    }
    if (!model || !q.batch || !q.ranks) {
        fprintf(stderr, "weft-sim: plan needs --model, --batch and --ranks\n");
        return 2;
    }
    char err[512];
    weft_sim_topo *t;
    if (weft_model_config_parse(model, &q.model)) {
        fprintf(stderr, "weft-sim: bad model %s\n", model);
        return 2;
    }
    if (weft_sim_topo_load(&t, topo_name, err, sizeof err)) {
        fprintf(stderr, "weft-sim: %s\n", err);
        return 1;
    }
    q.topo = t;
    char calib[320];
    if (no_calib) {
        q.calib = NULL;
        q.calibrate = 0;
    } else if (!q.calib && (q.calibrate || !strcmp(topo_name, "host")) &&
               weft_sim_plan_calib_path(calib, sizeof calib) == 0 && calib[0])
        q.calib = calib;
    weft_sim_plan *pl;
    if (weft_sim_plan_run(&q, &pl, err, sizeof err)) {
        fprintf(stderr, "weft-sim: %s\n", err);
        weft_sim_topo_free(t);
        return 1;
    }
    printf("# weft-sim plan %s batch %d seq %d on %d ranks of %s, %.3g GFLOP/s, mem %s\n",
           model, q.batch, q.seq > 0 ? q.seq : q.model.ctx, q.ranks, weft_sim_topo_name(t),
           q.gflops,
           q.mem > 0 ? "limited" : "unlimited");
    if (q.mem > 0)
        printf("# memory limit %.0f bytes a rank\n", q.mem);
    weft_sim_plan_inputs(pl, err, sizeof err);
    printf("# inputs: %s\n", err);
    printf("# %3s %3s %3s %2s %-13s %4s %4s %10s %9s %9s %9s %6s %13s %12s %12s %12s %2s %2s "
           "%9s %9s %12s %12s %-24s %s\n",
           "tp", "pp", "dp", "sp", "schedule", "m", "zero", "step_ms", "pipe_ms", "tp_ms",
           "dp_ms", "bubble", "mem_bytes", "tp_bytes", "pp_bytes", "dp_bytes", "ep", "cp",
           "ep_ms", "cp_ms", "ep_bytes", "cp_bytes", "links(tp/pp/dp/ep/cp)", "fits");
    int shown = 0, n = weft_sim_plan_count(pl), best = weft_sim_plan_best(pl);
    for (int i = 0; i < n; i++) {
        weft_sim_layout l, *e = &l;
        weft_sim_plan_layout(pl, i, &l);
        if (top && shown >= top && i != best)
            continue;
        shown++;
        char links[80];
        snprintf(links, sizeof links, "%s/%s/%s/%s/%s", link_name(e->link[WEFT_SIM_PLAN_TP]),
                 link_name(e->link[WEFT_SIM_PLAN_PP]), link_name(e->link[WEFT_SIM_PLAN_DP]),
                 link_name(e->link[WEFT_SIM_PLAN_EP]), link_name(e->link[WEFT_SIM_PLAN_CP]));
        printf("  %3d %3d %3d %2d %-13s %4d %4d %10.3f %9.3f %9.3f %9.3f %6.3f %13.0f %12.0f "
               "%12.0f %12.0f %2d %2d %9.3f %9.3f %12.0f %12.0f %-24s %s\n",
               e->tp, e->pp, e->dp, e->sp, e->schedule, e->m, e->zero, 1e3 * e->step_s,
               1e3 * e->pipe_s, 1e3 * e->tp_s, 1e3 * e->dp_s, e->bubble, e->mem_bytes,
               e->bytes[WEFT_SIM_PLAN_TP], e->bytes[WEFT_SIM_PLAN_PP], e->bytes[WEFT_SIM_PLAN_DP],
               e->ep, e->cp, 1e3 * e->ep_s, 1e3 * e->cp_s, e->bytes[WEFT_SIM_PLAN_EP],
               e->bytes[WEFT_SIM_PLAN_CP], links, e->fits ? "yes" : "NO (over --mem)");
    }
    if (top && shown < n)
        printf("# %d more layouts not shown (--top %d)\n", n - shown, top);
    int fit = 0;
    for (int i = 0; i < n; i++) {
        weft_sim_layout l;
        weft_sim_plan_layout(pl, i, &l);
        fit += l.fits;
    }
    printf("# %d layouts, %d fit\n", n, fit);
    char line[256];
    int rc = 0, smallest = weft_sim_plan_smallest(pl);
    if (best >= 0) {
        weft_sim_plan_format(pl, best, line, sizeof line);
        printf("best %s\n", line);
    } else {
        if (smallest >= 0) {
            weft_sim_plan_format(pl, smallest, line, sizeof line);
            printf("# nothing fits %.0f bytes a rank; the smallest: %s\n", q.mem, line);
        }
        printf("best none\n");
        rc = 1;
    }
    weft_sim_plan_free(pl);
    weft_sim_topo_free(t);
    return rc;
}

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* sec of this thread's CPU: a stage's compute, whatever share of a core
 * the thread gets meanwhile (the result kept so it is not optimised out) */
static volatile double burned;

static void burn(double sec)
{
    double end = clock_s(CLOCK_THREAD_CPUTIME_ID) + sec, x = 1;
    while (clock_s(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 256; i++)
            x = x * 1.0000001 + 1e-9;
    burned = x;
}

static void sync_usage(FILE *f)
{
    fprintf(f,
        "usage: weftrun -n N weft-sim sync [--work-us W] [--iters K] [--model SPEC\n"
        "                                  --batch B [--seq T]]\n"
        "  Each rank computes W us of its own CPU (default 500), then swaps 4 KiB\n"
        "  with its pair (ranks 2i and 2i+1), K times (default 40), in 5 blocks.\n"
        "  With more ranks than cores, a pair's exchange waits while the other\n"
        "  ranks compute on the cores its members share: rank 0 prints what a\n"
        "  round costs above the same work without the exchange (fastest blocks),\n"
        "  as the calibration line \"sync N SECONDS\" that weft-sim plan --calib\n"
        "  reads (docs/SIMULATION.md). Then the ranks as one chain, each piece of\n"
        "  work handed on from rank to rank as a pipeline's stages do: the cores\n"
        "  its work got (the cores times its time on its own over its time in the\n"
        "  chain), as the line \"chain N CORES\", and the CPU a message's end costs\n"
        "  all threads, a fixed part and a part a second of the piece it waits\n"
        "  for (from pieces of W and 4 W: \"msgcpu N SECONDS PER_SECOND\"); each\n"
        "  the median of 7 blocks, each block judged against its own work without\n"
        "  messages.\n"
        "  --model SPEC --batch B [--seq T]: then each tensor-parallel degree tp\n"
        "  that divides N and the model, the ranks in groups of tp, all at once:\n"
        "  a rank's CPU seconds for its slice of the embedding, a block and the\n"
        "  head, collectives included, at each micro-batch size the plan's layouts\n"
        "  of B sequences use, with and without sequence parallelism (SP 1, 0), as\n"
        "  lines \"tpblock SPEC TP SP ROWS SEQ KIND FWD BWD_I BWD_W N\" (the median\n"
        "  of 8 passes after one to warm up, the ranks' mean); where the ranks\n"
        "  outnumber the cores, also TP 1: each rank's whole blocks, all at once,\n"
        "  and for each data-parallel group size DP a rank's CPU (all threads) in\n"
        "  the gradients' all-reduce of FLOATS, every rank in one at once, at a\n"
        "  rank's share of the model and a quarter of it: \"arcpu N DP FLOATS S\".\n");
}

/* One block of rounds: *t the slowest rank's wall time, *waited the ranks'
 * mean time in the exchange. */
static int sync_block(weft_comm *c, double work_us, int iters, double *t, double *waited)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), peer = r ^ 1;
    float out[1024] = { 0 }, in[1024];
    *waited = 0;
    int rc = weft_barrier(c);
    double t0 = clock_s(CLOCK_MONOTONIC);
    for (int k = 0; !rc && k < iters; k++) {
        burn(1e-6 * work_us);
        if (peer >= n)
            continue;
        double w0 = clock_s(CLOCK_MONOTONIC);
        weft_request *sq = NULL, *rq = NULL;
        rc = weft_irecv(c, in, 1024, WEFT_F32, peer, &rq);
        if (!rc)
            rc = weft_isend(c, out, 1024, WEFT_F32, peer, &sq);
        int r1 = rq ? weft_wait(rq) : 0, r2 = sq ? weft_wait(sq) : 0;
        rc = rc ? rc : r1 ? r1 : r2;
        *waited += clock_s(CLOCK_MONOTONIC) - w0;
    }
    *t = clock_s(CLOCK_MONOTONIC) - t0;
    if (!rc)
        rc = weft_allreduce(c, t, t, 1, WEFT_F64, WEFT_MAX);
    if (!rc)
        rc = weft_allreduce(c, waited, waited, 1, WEFT_F64, WEFT_SUM);
    *waited /= n;
    return rc;
}

/* One chain: rank 0 computes rounds pieces of work_us, handing each on to
 * rank 1, which computes it and hands it on, and so on to the last rank,
 * as a pipeline's stages hand on micro-batches; without chain, every rank
 * computes its pieces on its own. *t the slowest rank's wall time. */
static int chain_block(weft_comm *c, double work_us, int rounds, int chain, double *t,
                       double *cpu)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    float buf[2][1024] = { { 0 } };
    weft_request *next = NULL;
    weft_request **sent = calloc((size_t)rounds, sizeof *sent);
    if (!sent)
        return WEFT_ENOMEM;
    int rc = weft_barrier(c), ns = 0;
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int k = 0; !rc && k < rounds; k++) {
        if (!chain) {
            burn(1e-6 * work_us);
            continue;
        }
        /* the next piece's receive is posted before this one's work, as a
         * pipeline's stage posts its next micro-batch's (pipe_exec.c), so
         * that the library's progress thread looks for it meanwhile */
        if (r > 0 && k == 0)
            rc = weft_irecv(c, buf[0], 1024, WEFT_F32, r - 1, &next);
        if (!rc && r > 0) {
            rc = weft_wait(next);
            next = NULL;
            if (!rc && k + 1 < rounds)
                rc = weft_irecv(c, buf[(k + 1) % 2], 1024, WEFT_F32, r - 1, &next);
        }
        burn(1e-6 * work_us);
        if (!rc && r + 1 < n)
            rc = weft_isend(c, buf[k % 2], 1024, WEFT_F32, r + 1, &sent[ns++]);
    }
    if (next) {
        int w = weft_wait(next);
        rc = rc ? rc : w;
    }
    for (int i = 0; i < ns; i++) {
        int w = sent[i] ? weft_wait(sent[i]) : 0;
        rc = rc ? rc : w;
    }
    free(sent);
    *t = clock_s(CLOCK_MONOTONIC) - t0;
    *cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (!rc)
        rc = weft_allreduce(c, cpu, cpu, 1, WEFT_F64, WEFT_SUM);
    return rc ? rc : weft_allreduce(c, t, t, 1, WEFT_F64, WEFT_MAX);
}

/* The blocks weft-sim sync judges its measurements on (after one to warm
 * up): an odd count, so that the median is one block's. */
#define SYNC_BLOCKS 7
/* The timed passes of a slice, after one to warm up. */
#define TP_PASSES 8
/* The all-reduces timed a size in dp_probe, after one to warm up. */
#define DP_CALLS 8
/* The most values median() takes: every count above. */
#define MEDIAN_MAX 16
_Static_assert(SYNC_BLOCKS <= MEDIAN_MAX && TP_PASSES <= MEDIAN_MAX && DP_CALLS <= MEDIAN_MAX,
               "median() holds its values on the stack");

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MEDIAN_MAX];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, by_value);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static double lowest(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double highest(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* One rank's median forward, input backward and weight backward of its
 * slice of block kind (0 the embedding, 1 a transformer block, 2 the head
 * with its count of right answers) as tensor group g runs it (a group of
 * one: the whole block), on rows sequences of seq tokens, over TP_PASSES
 * passes after one to warm up: seconds of this thread's CPU, its share of
 * the group's collectives with it, so that what other ranks run on the
 * cores meanwhile does not count. The median pass, not the fastest: with
 * more ranks than cores, what a collective's member spends waiting for
 * the others to get a core (its polls and yields) differs from pass to
 * pass, and training pays it on every one; the fastest is the pass where
 * the group happened to run side by side (at 8 ranks on 2 cores, tp 2's
 * block at 4 sequences: the fastest 409 us, the mean 517). The median
 * rather than the mean, so that one pass that another job's burst
 * slowed (its caches emptied) does not move a calibration. */
static int tp_block(weft_comm *g, const weft_model_config *cfg, int kind, int rows, int seq,
                    int sp, double mid[3])
{
    int nb = weft_model_block_count(cfg);
    weft_block_range one = { kind == 0 ? 0 : kind == 1 ? 1 : nb - 1, 1 };
    weft_model *m;
    unsigned flags = WEFT_STAGE_SPLIT_BACKWARD | (sp ? WEFT_STAGE_SEQUENCE_PARALLEL : 0);
    int rc = weft_model_create_tp(&m, cfg, 1, &one, 1, flags, g, 0, 0);
    if (rc)
        return rc;
    rc = weft_model_set_threads(m, 1);
    size_t in_n = 0, out_n = 0, toks = (size_t)rows * (size_t)seq;
    if (!rc)
        rc = weft_model_chunk_io(m, 0, rows, seq, &in_n, &out_n);
    size_t xin = kind == 0 ? toks : in_n;
    float *x = calloc(xin ? xin : 1, sizeof *x), *d = calloc(out_n ? out_n : 1, sizeof *d);
    int32_t *y = calloc(toks ? toks : 1, sizeof *y);
    if (!rc && (!x || !d || !y))
        rc = WEFT_ENOMEM;
    for (size_t i = 0; !rc && i < toks; i++)
        y[i] = (int32_t)((i * 2654435761u) % (unsigned)cfg->vocab);
    if (!rc && kind == 0)
        memcpy(x, y, toks * sizeof *y);
    for (size_t i = 0; !rc && kind && i < xin; i++)
        x[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; !rc && i < out_n; i++)
        d[i] = 1e-4f * (float)((i * 7919u) % 100);
    mid[0] = mid[1] = mid[2] = 0;
    double pass[3][TP_PASSES];
    for (int rep = 0; !rc && rep <= TP_PASSES; rep++) {
        double t[4];
        t[0] = clock_s(CLOCK_THREAD_CPUTIME_ID);
        rc = weft_model_chunk_forward(m, 0, 0, x, y, rows, seq, NULL);
        if (!rc && kind == 2) {
            int ok = weft_model_count_correct(m, y);
            rc = ok < 0 ? ok : 0;
        }
        t[1] = clock_s(CLOCK_THREAD_CPUTIME_ID);
        if (!rc)
            rc = weft_model_chunk_backward(m, 0, 0, out_n ? d : NULL, 1.0f, WEFT_BACKWARD_INPUT,
                                           0);
        t[2] = clock_s(CLOCK_THREAD_CPUTIME_ID);
        if (!rc)
            rc = weft_model_chunk_backward(m, 0, 0, NULL, 1.0f, WEFT_BACKWARD_WEIGHT, 0);
        t[3] = clock_s(CLOCK_THREAD_CPUTIME_ID);
        for (int j = 0; rep > 0 && j < 3; j++)
            pass[j][rep - 1] = t[j + 1] - t[j];
    }
    for (int j = 0; !rc && j < 3; j++)
        mid[j] = median(pass[j], TP_PASSES);
    free(x);
    free(d);
    free(y);
    weft_model_destroy(m);
    return rc;
}

/* The micro-batch sizes (sequences) a tensor group of tp ranks runs in the
 * layouts weft-sim plan lists for n ranks and a batch of batch: dp =
 * n / (tp pp), a rank's ceil(batch / dp) sequences cut into m = pp, 2 pp
 * or 4 pp micro-batches (1 without a pipeline). rows[] gets each once;
 * returns how many. */
static int tp_rows(int n, int tp, int batch, int blocks, int rows[16])
{
    int k = 0;
    for (int pp = 1; pp <= n / tp; pp++) {
        if ((n / tp) % pp || pp > blocks)
            continue;
        int dp = n / (tp * pp), b = (batch + dp - 1) / dp;
        for (int m = pp; m <= 4 * pp && m <= b; m *= 2) {
            int mb = (b + m - 1) / m, seen = 0;
            for (int i = 0; i < k; i++)
                seen |= rows[i] == mb;
            if (!seen && k < 16)
                rows[k++] = mb;
            if (pp == 1)
                break;
        }
    }
    return k;
}

/* weft-sim sync --model: for each tensor-parallel degree tp > 1 that
 * divides the ranks and the model (and tp 1, each rank its whole blocks,
 * where the ranks outnumber the cores), the ranks in groups of tp neighbours
 * (weft_layout's tensor-fastest order), every group at once as a layout's
 * run them, each block kind timed at each micro-batch size; rank 0 prints
 * the ranks' mean as "tpblock SPEC TP SP ROWS SEQ KIND FWD BWD_I BWD_W N"
 * lines for the plan's calibration, without and with sequence
 * parallelism (SP 0, 1). */
static int tp_probe(weft_comm *c, const char *spec, int batch, int seq, int cores)
{
    weft_model_config cfg;
    if (weft_model_config_parse(spec, &cfg))
        return WEFT_EINVAL;
    if (seq <= 0)
        seq = cfg.ctx;
    int n = weft_comm_size(c), r = weft_comm_rank(c), rc = 0;
    int blocks = weft_model_block_count(&cfg);
    /* tp 1 too where the ranks outnumber the cores: each rank's whole
     * block, every rank at once (sharing a core's caches with the others
     * between its turns), which the plan's probe of one process alone
     * does not see */
    int many = cores < n;
    rc = weft_allreduce(c, &many, &many, 1, WEFT_I32, WEFT_MAX);
    for (int tp = many ? 1 : 2; tp <= n && !rc; tp++) {
        if (n % tp || (cfg.type == WEFT_MODEL_GPT && cfg.n_head % tp))
            continue;
        weft_comm *g;
        if ((rc = weft_comm_split(c, r / tp, r, &g)))
            break;
        int rows[16], nr = tp_rows(n, tp, batch, blocks, rows);
        for (int i = 0; i < 2 * nr && !rc; i++)
            for (int kind = 0, sp = i % 2; kind < 3 && !rc; kind++) {
                double best[3];
                if (sp && (tp == 1 || ((long)rows[i / 2] * seq) % tp))
                    break;
                rc = tp_block(g, &cfg, kind, rows[i / 2], seq, sp, best);
                /* a model the group cannot split (a Llama's widths): none */
                int ok = !rc;
                if (rc == WEFT_EINVAL)
                    rc = 0;
                int all = ok;
                if (!rc)
                    rc = weft_allreduce(c, &all, &all, 1, WEFT_I32, WEFT_MIN);
                if (!rc && !all)
                    break;
                if (!rc)
                    rc = weft_allreduce(c, best, best, 3, WEFT_F64, WEFT_SUM);
                if (!rc && r == 0)
                    printf("tpblock %s %d %d %d %d %d %.6g %.6g %.6g %d # weft-sim sync: a "
                           "rank's CPU, the mean of %d ranks in groups of %d\n", spec, tp, sp,
                           rows[i / 2], seq, kind, best[0] / n, best[1] / n, best[2] / n, n, n,
                           tp);
            }
        weft_comm_destroy(g);
    }
    fflush(stdout);
    return rc;
}

/* weft-sim sync --model, where the ranks outnumber the cores: what a
 * data-parallel gradient all-reduce costs a rank's CPU, every thread (the
 * library's progress thread included), with every rank of the node in such
 * a group at once, as weft-train's ranks sum their gradients together
 * after backward. For each group size dp > 1 dividing the ranks, groups of
 * dp ranks N/dp apart, at two sizes: the model's parameters over N/dp (a
 * rank's share at tp x pp = N/dp) and a quarter of that; each call
 * weft_iallreduce then weft_wait (weft-train's bucket), the median of
 * DP_CALLS calls' process CPU, the ranks' mean: "arcpu N DP FLOATS
 * SECONDS". The planner's closed forms price the all-reduce's wall time
 * on an idle node; this is the work its rounds take the shared cores
 * (copies, sums, polls and yields of all dp ranks, N at once), which
 * weft-train's comm threads showed at 0.35-0.6 ms a step at dp 4 on 2
 * cores. */
static int dp_probe(weft_comm *c, const char *spec, int cores)
{
    weft_model_config cfg;
    if (weft_model_config_parse(spec, &cfg))
        return WEFT_EINVAL;
    int n = weft_comm_size(c), r = weft_comm_rank(c), many = cores < n;
    int rc = weft_allreduce(c, &many, &many, 1, WEFT_I32, WEFT_MAX);
    if (rc || !many)
        return rc;
    weft_model *m;
    if ((rc = weft_model_create(&m, &cfg, 1)))
        return rc;
    size_t params = 0;
    weft_model_params(m, &params);
    weft_model_destroy(m);
    for (int dp = 2; dp <= n && !rc; dp++) {
        if (n % dp)
            continue;
        weft_comm *g;
        if ((rc = weft_comm_split(c, r % (n / dp), r, &g)))
            break;
        for (int q = 1; q <= 4 && !rc; q += 3) {
            size_t count = params / (size_t)(n / dp) / (size_t)q;
            float *buf = calloc(count ? count : 1, sizeof *buf);
            double cpu[DP_CALLS];
            if (!buf)
                rc = WEFT_ENOMEM;
            for (int k = -1; !rc && k < DP_CALLS; k++) {
                weft_request *rq = NULL;
                rc = weft_barrier(c);
                double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
                if (!rc)
                    rc = weft_iallreduce(g, buf, buf, count, WEFT_F32, WEFT_AVG, &rq);
                if (!rc)
                    rc = weft_wait(rq);
                if (k >= 0)
                    cpu[k] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
            }
            free(buf);
            double mine = rc ? 0 : median(cpu, DP_CALLS), sum = mine;
            if (!rc)
                rc = weft_allreduce(c, &sum, &sum, 1, WEFT_F64, WEFT_SUM);
            if (!rc && r == 0)
                printf("arcpu %d %d %zu %.6g # weft-sim sync: a rank's CPU, all threads, in a "
                       "gradient all-reduce of %zu floats over %d ranks, every rank in one at "
                       "once (the median of %d calls, the ranks' mean)\n", n, dp, count,
                       sum / n, count, dp, DP_CALLS);
        }
        weft_comm_destroy(g);
    }
    fflush(stdout);
    return rc;
}

/* weft-sim sync: the delay of a synchronisation between two ranks of an
 * oversubscribed host while the others compute, measured with the
 * library's own point-to-point: a block's wall time over its rounds
 * against the same block's work without the exchange, as an idle machine
 * would take it; the median of SYNC_BLOCKS blocks (cmd_sync says why). */
static int cmd_sync(int argc, char **argv)
{
    double work_us = 500;
    int iters = 40, batch = 0, seq = 0;
    const char *model = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        int got = option_value(argc, argv, &i, sync_usage, &v);
        if (got)
            return got == 1 ? 0 : 2;
        if (!strcmp(a, "--work-us") && (work_us = atof(v)) > 0)
            continue;
        if (!strcmp(a, "--iters") && (iters = atoi(v)) > 0)
            continue;
        if (!strcmp(a, "--model")) {
            weft_model_config cfg;
            model = v;
            if (!weft_model_config_parse(v, &cfg) &&
                (cfg.type == WEFT_MODEL_GPT || cfg.type == WEFT_MODEL_LLAMA))
                continue;
        }
        if (!strcmp(a, "--batch") && (batch = atoi(v)) > 0)
            continue;
        if (!strcmp(a, "--seq") && (seq = atoi(v)) > 0)
            continue;
        sync_usage(stderr);
        return 2;
    }
    weft_comm *c;
    int rc = weft_comm_init_env(&c);
    if (rc) {
        fprintf(stderr, "weft-sim sync: %s (run it under weftrun)\n", weft_strerror(rc));
        return 1;
    }
    int n = weft_comm_size(c);
    if (n < 2) {
        fprintf(stderr, "weft-sim sync: one rank has no pair: run it under weftrun -n N\n");
        weft_comm_destroy(c);
        return 2;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    /* Each block runs the three measurements back to back and is judged
     * on its own: the exchange's and the chain's against the same block's
     * work alone, so that a change of the machine's load between blocks
     * falls on both sides of each difference. The median of the blocks,
     * after one to warm up: the fastest of each kind taken from different
     * blocks made the sync swing from 0 to 1.2 ms between calibrations a
     * minute apart (4 ranks on 2 cores, loaded). */
    double sync_b[SYNC_BLOCKS], chain_b[SYNC_BLOCKS], msg_b[SYNC_BLOCKS], wait_b[SYNC_BLOCKS];
    double round_b[SYNC_BLOCKS], alone_b[SYNC_BLOCKS], tchain_b[SYNC_BLOCKS];
    double cpu_chain_b[SYNC_BLOCKS], cpu_alone_b[SYNC_BLOCKS];
    /* the chain again with pieces 4 times as long (a quarter as many): a
     * receive posted ahead is polled for, yielding, while its sender
     * computes, so a message's CPU grows with the piece it waits for */
    double msg4_b[SYNC_BLOCKS];
    int iters4 = iters / 4 > 2 ? iters / 4 : 2;
    double ends = 2.0 * (n - 1) * iters, ends4 = 2.0 * (n - 1) * iters4;
    double ideal = 1e-6 * work_us * (n > cores ? (double)n / cores : 1);
    for (int b = -1; !rc && b < SYNC_BLOCKS; b++) {
        double t, waited, tc = 0, ta = 0, cc = 0, ca = 0, t4, c4 = 0, a4 = 0;
        rc = sync_block(c, work_us, iters, &t, &waited);
        if (!rc)
            rc = chain_block(c, work_us, iters, 1, &tc, &cc);
        if (!rc)
            rc = chain_block(c, work_us, iters, 0, &ta, &ca);
        if (!rc)
            rc = chain_block(c, 4 * work_us, iters4, 1, &t4, &c4);
        if (!rc)
            rc = chain_block(c, 4 * work_us, iters4, 0, &t4, &a4);
        if (rc || b < 0)
            continue;
        msg4_b[b] = (c4 - a4) / ends4;
        /* other work on the machine stretches the round with the
         * exchange and the one without alike (one probe read 1.0 ms
         * rounds without it, the next 2.0 ms): the block's ratio of the
         * two, times the round the work takes on the node's cores alone,
         * is the wait an idle machine would add. The difference itself
         * read 0.51-1.21 ms in five probes in a row where it read
         * 0.56-0.61 ms in those whose rounds were the idle 1.0 ms */
        sync_b[b] = ta > 0 ? (t / ta - 1) * ideal : 0;
        wait_b[b] = waited / iters;
        round_b[b] = t / iters;
        alone_b[b] = ta / iters;
        tchain_b[b] = tc;
        chain_b[b] = cores * ta / tc;
        msg_b[b] = (cc - ca) / ends;
        cpu_chain_b[b] = cc;
        cpu_alone_b[b] = ca;
    }
    if (rc) {
        fprintf(stderr, "weft-sim sync: rank %d: %s: %s\n", weft_comm_rank(c),
                weft_strerror(rc), weft_comm_error(c));
        weft_comm_abort(c);
        weft_comm_destroy(c);
        return 1;
    }
    /* the round above the same work done on its own (which is the work
     * at the cores' share on an idle machine; other work slows both) */
    double sync = median(sync_b, SYNC_BLOCKS);
    if (weft_comm_rank(c) == 0)
        printf("sync %d %.6g # weft-sim sync: %d cores, %.0f us of work, the median of %d blocks "
               "of %d rounds, each's ratio to its round without the exchange times the idle "
               "round (%.3f ms): %.3f ms a round (%.3f ms without the exchange), %.3f ms a rank's "
               "wait at the exchange; the blocks' %.3f-%.3f ms\n", n, sync > 0 ? sync : 0, cores,
               work_us, SYNC_BLOCKS, iters, 1e3 * ideal, 1e3 * median(round_b, SYNC_BLOCKS),
               1e3 * median(alone_b, SYNC_BLOCKS), 1e3 * median(wait_b, SYNC_BLOCKS),
               1e3 * lowest(sync_b, SYNC_BLOCKS), 1e3 * highest(sync_b, SYNC_BLOCKS));
    /* the cores the chain's work got, as a share of what the same work
     * got with no hand-offs (so that other work on the machine, which
     * slows both, does not count) */
    double got = median(chain_b, SYNC_BLOCKS);
    if (weft_comm_rank(c) == 0)
        printf("chain %d %.4g # weft-sim sync: %d ranks handing on %d pieces of %.0f us took "
               "%.3f ms, on their own %.3f ms (medians of %d blocks); the blocks' %.3g-%.3g "
               "cores\n", n, got < cores ? got : cores, n, iters, work_us,
               1e3 * median(tchain_b, SYNC_BLOCKS), 1e3 * iters * median(alone_b, SYNC_BLOCKS),
               SYNC_BLOCKS, lowest(chain_b, SYNC_BLOCKS), highest(chain_b, SYNC_BLOCKS));
    /* what a hand-off costs the ranks' CPU beyond the work, all threads
     * (the receiver's polls and yields while it waits, the copies, the
     * wake-ups): the chain's CPU less the same work's alone, over the
     * messages' ends (each sent and received once), the blocks' median */
    double msg = median(msg_b, SYNC_BLOCKS), msg4 = median(msg4_b, SYNC_BLOCKS);
    /* an end's CPU as a fixed part and a part a second of the piece it
     * waits for, through the two lengths of piece */
    double per = (msg4 - msg) / (3e-6 * work_us);
    per = per > 0 ? per : 0;
    double fixed = msg - per * 1e-6 * work_us;
    fixed = fixed > 0 ? fixed : 0;
    if (weft_comm_rank(c) == 0)
        printf("msgcpu %d %.6g %.6g # weft-sim sync: %d ranks' CPU in the chain %.3f ms, the same "
               "work alone %.3f ms, over %.0f message ends: %.3g us an end (the blocks' "
               "%.3g-%.3g us), %.3g us with pieces of %.0f us (medians of %d blocks)\n", n, fixed,
               per, n, 1e3 * median(cpu_chain_b, SYNC_BLOCKS),
               1e3 * median(cpu_alone_b, SYNC_BLOCKS), ends, 1e6 * msg,
               1e6 * lowest(msg_b, SYNC_BLOCKS), 1e6 * highest(msg_b, SYNC_BLOCKS), 1e6 * msg4,
               4 * work_us, SYNC_BLOCKS);
    fflush(stdout);
    if (model && !(rc = tp_probe(c, model, batch > 0 ? batch : n, seq, cores)))
        rc = dp_probe(c, model, cores);
    if (rc) {
        fprintf(stderr, "weft-sim sync: rank %d: the model's probes: %s: %s\n",
                weft_comm_rank(c), weft_strerror(rc), weft_comm_error(c));
        weft_comm_abort(c);
        weft_comm_destroy(c);
        return 1;
    }
    weft_comm_destroy(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "list")) {
        for (int i = 0; weft_sim_topo_preset(i); i++)
            printf("%s\n", weft_sim_topo_preset(i));
        return 0;
    }
    if (!strcmp(cmd, "pipeline"))
        return cmd_pipeline(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan"))
        return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "sync"))
        return cmd_sync(argc - 2, argv + 2);
    if (!strcmp(cmd, "validate")) {
        const char *set = NULL;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--set") && i + 1 < argc)
                set = argv[++i];
            else {
                fprintf(stderr, "usage: weft-sim validate [--set summit|dgx-h100|host]\n");
                return 2;
            }
        }
        return weft_sim_validate(stdout, set) ? 1 : 0;
    }
    if (!strcmp(cmd, "topo")) {
        weft_sim_topo *t;
        char err[256];
        if (argc < 3 || weft_sim_topo_load(&t, argv[2], err, sizeof err)) {
            fprintf(stderr, "weft-sim: %s\n", argc < 3 ? "topo needs a name" : err);
            return 1;
        }
        weft_sim_topo_write(t, stdout);
        weft_sim_topo_free(t);
        return 0;
    }
    if (!strcmp(cmd, "figure")) {
        const char *out = NULL;
        for (int i = 3; i + 1 < argc; i++)
            if (!strcmp(argv[i], "--out"))
                out = argv[i + 1];
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) {
            perror(out);
            return 1;
        }
        int rc = argc < 3 ? -1
               : !strcmp(argv[2], "summit") ? weft_sim_figure_summit(f)
               : !strcmp(argv[2], "gpt3") ? weft_sim_figure_gpt3(f) : -1;
        if (out)
            fclose(f);
        if (rc == -1)
            usage(stderr);
        return rc ? 1 : 0;
    }
    static const struct { const char *name; weft_coll_kind k; } colls[] = {
        { "allreduce", WEFT_COLL_ALLREDUCE }, { "broadcast", WEFT_COLL_BROADCAST },
        { "reduce", WEFT_COLL_REDUCE }, { "allgather", WEFT_COLL_ALLGATHER },
        { "reduce_scatter", WEFT_COLL_REDUCE_SCATTER }, { "alltoall", WEFT_COLL_ALLTOALL },
    };
    for (unsigned i = 0; i < sizeof colls / sizeof *colls; i++)
        if (!strcmp(cmd, colls[i].name))
            return cmd_coll(colls[i].k, argc - 2, argv + 2);
    usage(stderr);
    return 2;
}
