/* weft-train's options: the table of run options (the ones a checkpoint
 * keeps), their parsing and defaults, the launch options, and --help. */
#include "train_tool.h"

#include "core/size.h"
#include "train/pipe_sched.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The run options' names (--KEY and the checkpoint's key=value), in O_ order. */
static const char *const run_keys[O_COUNT] = {
    "model", "data", "optim", "precision", "schedule", "steps", "epochs", "batch", "lr",
    "min-lr", "momentum", "weight-decay", "clip", "warmup", "seed", "data-seed", "seq",
    "digits", "layers", "heads", "dim", "train-size", "format",
};

/* "plain" or a comma list of padded, reversed, answer-loss; -1 if bad. */
int run_opts_format_code(const char *f)
{
    static const char *const words[3] = { "padded", "reversed", "answer-loss" };
    static const int bits[3] = { WEFT_ADDITION_PADDED, WEFT_ADDITION_REVERSED,
                                 WEFT_ADDITION_ANSWER_LOSS };
    if (strcmp(f, "plain") == 0)
        return 0;
    int code = 0;
    while (*f) {
        size_t n = strcspn(f, ",");
        int k = 0;
        while (k < 3 && !(strlen(words[k]) == n && strncmp(f, words[k], n) == 0))
            k++;
        if (k == 3)
            return -1;
        code |= bits[k];
        f += n;
        if (*f == ',')
            f++;
    }
    return code;
}

static void usage(FILE *f)
{
    fputs(
        "usage: weft-train [options]\n"
        "  --model mlp|gpt|SPEC     mlp: IN-512-512-CLASSES; gpt: see --layers/--heads/--dim;\n"
        "                           SPEC: \"mlp:784-128-10\", \"gpt:vocab=256,ctx=32,...\"\n"
        "  --data builtin|fashion-mnist|mnist|PATH\n"
        "                           builtin: generated images (mlp) or additions (gpt);\n"
        "                           PATH: an idx directory (mlp) or a token shard (gpt)\n"
        "  --steps N | --epochs E   length (mlp default: 1 epoch; gpt: 1500 steps)\n"
        "  --batch B                global batch (mlp 256, gpt 32)\n"
        "  --optim sgd|adamw        (mlp sgd, gpt adamw)\n"
        "  --lr LR                  (sgd 0.1, adamw 3e-3)\n"
        "  --momentum M             sgd momentum (0.9)\n"
        "  --weight-decay WD        (sgd 0, adamw 0.01)\n"
        "  --schedule cosine|constant  cosine decays to --min-lr (lr/10) at the last step\n"
        "  --warmup N               linear warm-up steps (gpt 50)\n"
        "  --clip NORM              gradient norm clipping, 0 off (gpt 1)\n"
        "  --precision fp32|bf16    matmul precision\n"
        "  --seed S                 weights and data order (1)\n"
        "  --data-seed S            generator seed of the builtin data (1)\n"
        "  --seq T                  gpt tokens per sample (32)\n"
        "  --digits D               builtin addition operand digits (2; 3 needs more steps)\n"
        "  --format F               builtin addition lines: plain (12+345=357) or a list of\n"
        "                           padded (012+345=0357), reversed (12+345=753) and\n"
        "                           answer-loss (train on the answers only);\n"
        "                           default padded,reversed,answer-loss\n"
        "  --layers L --heads H --dim D   gpt shape (2, 4, 64)\n"
        "  --train-size N           builtin training samples (mlp 60000, gpt 100000)\n"
        "  --save CKPT              checkpoint at the end (and every --save-every N steps)\n"
        "  --stop-at N              stop (and save) after step N of the planned run\n"
        "  --resume CKPT            continue a run (its options unless given again)\n"
        "  --inspect CKPT           list a checkpoint's records and exit\n"
        "  --metrics FILE           CSV, one row per step and per evaluation\n"
        "  --log-every N            plain progress line period when not on a terminal\n"
        "  --threads N              matmul threads\n"
        "  --eval-prompts N         gpt exact-match problems (500)\n"
        "  --no-eval                skip the final evaluation\n"
        "  --quiet                  no progress output\n"
        "  --bucket-mb MB           data parallel: gradient bucket size in MiB (25), or a\n"
        "                           size with its unit (512K)\n"
        "  --zero 0|1|2|3           ZeRO stage: shard optimiser state (1), + gradients (2),\n"
        "                           + parameters (3) over the ranks (0)\n"
        "  --accum K                micro-steps per step; communicate only on the last (1)\n"
        "  --pp P                   pipeline of P stages; data parallelism over the rest of\n"
        "                           the ranks (job rank = replica * P + stage)\n"
        "  --tp T                   tensor parallelism over T ranks (Megatron's layers);\n"
        "                           with --pp the job is tp x dp x pp\n"
        "  --order tp-dp-pp         the ranks' order of the three, fastest first\n"
        "  --sp                     sequence parallelism over the tensor group (GPT, fp32)\n"
        "  --recompute              keep only each block's input; backward recomputes the\n"
        "                           rest (GPT: activations of one block, one more forward)\n"
        "  --micro-batches M        pipeline micro-batches per step (P)\n"
        "  --schedule gpipe|1f1b|interleaved:V|zb  the pipeline's schedule (1f1b); also\n"
        "                           --pp-schedule\n"
        "  --pp-partition auto|uniform|N,N,..  blocks per stage: auto balances measured\n"
        "                           block times under --pp-memory MB per stage (auto;\n"
        "                           MiB, or a size with its unit: 2G)\n"
        "  --layout auto            tp, pp, schedule, micro-batches, ZeRO and sp chosen by\n"
        "                           the planner (weft-sim plan) for this job's ranks\n"
        "  --mem-limit SIZE         a rank's memory budget: a layout whose training state\n"
        "                           does not fit is refused (naming one that would), and\n"
        "                           the peak resident memory is checked after step one\n"
        "                           SIZE: bytes, or a number with K, M, G or T, with or\n"
        "                           without iB (powers of 1024): 64M, 2GiB, 1.5G\n"
        "  --pp-costs FILE          write the block costs, measured and then scaled to the\n"
        "                           run's own chunk times (for weft-sim pipeline)\n"
        "  --sync MODE              full (default), local:H, diloco:H, gossip, stale:S,\n"
        "                           backup:B (each step takes the first N-B gradients)\n"
        "                           (docs/TRAINING.md); across clusters (docs/WAN.md):\n"
        "                           streaming:H:F[:T], hier:full/diloco:H,\n"
        "                           hier:full/streaming:H:F[:T]\n"
        "  --compress SPEC          fp16, bf16, int8, int4, topk:K or powersgd:R: the\n"
        "                           gradients (full sync) or the outer gradient (DiLoCo,\n"
        "                           streaming, hier) travel compressed\n"
        "  --outer-lr X             DiLoCo's and streaming's outer learning rate, in (0, 10]\n"
        "                           (0.7)\n"
        "  --outer-momentum X       their outer Nesterov momentum, in [0, 1) (0.9)\n"
        "  --mode dp|ps             data parallel (dp, default) or parameter server (ps: under\n"
        "                           weftrun -n W --servers K; workers push gradients, pull\n"
        "                           parameters; servers hold them and run the optimiser)\n"
        "  --consistency bsp|ssp:S|asp  parameter-server consistency (bsp)\n"
        "  --straggle RANK:MS       rank RANK sleeps MS ms every step (a slow device);\n"
        "                           any:MS: one rank a step, chosen at random (jitter)\n"
        "  --elastic                (under weftrun --elastic) a rank that dies costs the step\n"
        "                           it was in, not the job; ranks that join are admitted at\n"
        "                           the next step (docs/TRAINING.md, \"Elastic training\");\n"
        "                           with diloco:H or hier:full/diloco:H a lost cluster is\n"
        "                           dropped at the outer step and rejoins at an outer-step\n"
        "                           boundary (docs/WAN.md, \"Churn\")\n"
        "  --kill-at RANK:STEP[:recover][,...]  tests: launch rank RANK kills itself (SIGKILL)\n"
        "                           as step STEP starts, or in the recovery from a failure there\n"
        "  --trace-samples PATH     tests: each rank appends the sample ids of every committed\n"
        "                           step to PATH.RANK (\"step id view\" lines)\n",
        f);
}

static long parse_long(const char *key, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        die("--%s: bad value '%s' (want an integer in %ld..%ld)", key, v, lo, hi);
    return x;
}

static double parse_double(const char *key, const char *v, double lo)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo) || !isfinite(x))
        die("--%s: bad value '%s'", key, v);
    return x;
}

/* --mem-limit: bytes, in the grammar of core/size.h (64M, 2GiB, 1.5G). */
static double parse_bytes(const char *key, const char *v, uint64_t lo)
{
    uint64_t x;
    char why[200];
    if (size_parse(v, lo, UINT64_MAX, &x, why, sizeof why) != 0)
        die("--%s: %s", key, why);
    return (double)x;
}

/* --bucket-mb, --pp-memory: a bare number counts MiB, as these options
 * always have (0.001 included); one with a unit is a size like any other
 * (512K, 2G), so nobody has to work out 2G in MiB. */
static double parse_mib(const char *key, const char *v, double lo)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end != v && !*end && !errno && isfinite(x) && x >= lo)
        return x;
    if (end != v && !*end) /* a number, but negative, too small or not finite */
        die("--%s: bad value '%s' (want MiB, at least %g)", key, v, lo);
    uint64_t b;
    if (size_parse(v, 0, UINT64_MAX, &b, NULL, 0) != 0 || (double)b / 1048576.0 < lo)
        die("--%s: bad size '%s' (want MiB as a bare number, e.g. 25, or a size: bytes or a "
            "number with K, M, G or T (powers of 1024), e.g. 64M)", key, v);
    return (double)b / 1048576.0;
}

static void copy_str(char *dst, size_t cap, const char *key, const char *v)
{
    if (strlen(v) >= cap)
        die("--%s: value too long", key);
    strcpy(dst, v);
}

static void set_run_opt(run_opts *r, int k, const char *v)
{
    const char *key = run_keys[k];
    switch (k) {
    case O_MODEL: copy_str(r->model, sizeof r->model, key, v); break;
    case O_DATA: copy_str(r->data, sizeof r->data, key, v); break;
    case O_OPTIM:
        if (strcmp(v, "sgd") && strcmp(v, "adamw"))
            die("--optim: want sgd or adamw, not '%s'", v);
        copy_str(r->optim, sizeof r->optim, key, v);
        break;
    case O_PRECISION:
        if (strcmp(v, "fp32") && strcmp(v, "bf16"))
            die("--precision: want fp32 or bf16, not '%s'", v);
        copy_str(r->precision, sizeof r->precision, key, v);
        break;
    case O_SCHEDULE:
        if (strcmp(v, "constant") && strcmp(v, "cosine"))
            die("--schedule: want constant or cosine, not '%s'", v);
        copy_str(r->schedule, sizeof r->schedule, key, v);
        break;
    case O_STEPS: r->steps = parse_long(key, v, 0, 1L << 40); break;
    case O_EPOCHS: r->epochs = parse_double(key, v, 0); break;
    case O_BATCH: r->batch = (int)parse_long(key, v, 1, 1 << 20); break;
    case O_LR: r->lr = parse_double(key, v, 0); break;
    case O_MIN_LR: r->min_lr = parse_double(key, v, 0); break;
    case O_MOMENTUM: r->momentum = parse_double(key, v, 0); break;
    case O_WD: r->weight_decay = parse_double(key, v, 0); break;
    case O_CLIP: r->clip = parse_double(key, v, 0); break;
    case O_WARMUP: r->warmup = parse_long(key, v, 0, 1L << 30); break;
    case O_SEED: r->seed = (unsigned long long)parse_long(key, v, 0, 0x7fffffffffffffffL); break;
    case O_DATA_SEED:
        r->data_seed = (unsigned long long)parse_long(key, v, 0, 0x7fffffffffffffffL);
        break;
    case O_SEQ: r->seq = (int)parse_long(key, v, 1, 1 << 16); break;
    case O_DIGITS: r->digits = (int)parse_long(key, v, 1, 9); break;
    case O_LAYERS: r->layers = (int)parse_long(key, v, 1, 256); break;
    case O_HEADS: r->heads = (int)parse_long(key, v, 1, 256); break;
    case O_DIM: r->dim = (int)parse_long(key, v, 1, 1 << 16); break;
    case O_TRAIN_SIZE: r->train_size = parse_long(key, v, 1, 1L << 32); break;
    case O_FORMAT:
        if (run_opts_format_code(v) < 0)
            die("--format: want plain or a list of padded,reversed,answer-loss, not '%s'", v);
        copy_str(r->format, sizeof r->format, key, v);
        break;
    }
}

/* Negative values mean "not chosen yet": the model kind picks defaults. */
static void run_opts_init(run_opts *r)
{
    memset(r, 0, sizeof *r);
    strcpy(r->model, "mlp");
    strcpy(r->data, "builtin");
    strcpy(r->precision, "fp32");
    r->steps = -1;
    r->epochs = -1;
    r->batch = -1;
    r->lr = r->min_lr = r->weight_decay = r->clip = -1;
    r->momentum = 0.9;
    r->warmup = -1;
    r->seed = 1;
    r->data_seed = 1;
    r->seq = 32;
    r->digits = 2;
    r->layers = 2;
    r->heads = 4;
    r->dim = 64;
    r->train_size = -1;
    strcpy(r->format, "padded,reversed,answer-loss");
}

int run_opts_is_gpt(const run_opts *r)
{
    return strncmp(r->model, "gpt", 3) == 0;
}

void run_opts_defaults(run_opts *r)
{
    int gpt = run_opts_is_gpt(r);
    if (!r->optim[0])
        strcpy(r->optim, gpt ? "adamw" : "sgd");
    int adamw = strcmp(r->optim, "adamw") == 0;
    if (!r->schedule[0])
        strcpy(r->schedule, "cosine");
    if (r->batch < 0)
        r->batch = gpt ? 32 : 256;
    if (r->lr < 0)
        r->lr = adamw ? 3e-3 : 0.1;
    if (r->min_lr < 0)
        r->min_lr = r->lr / 10;
    if (r->weight_decay < 0)
        r->weight_decay = adamw ? 0.01 : 0;
    if (r->clip < 0)
        r->clip = gpt ? 1.0 : 0;
    if (r->warmup < 0)
        r->warmup = gpt ? 50 : 0;
    if (r->train_size < 0)
        r->train_size = gpt ? 100000 : 60000;
    if (r->steps < 0 && r->epochs < 0) {
        if (gpt)
            r->steps = 1500;
        else
            r->epochs = 1;
    }
}

/* Every option's value, settled in one place before any check reads one:
 * a checkpoint's saved run options (--resume; those given on the command
 * line win), then the defaults of what is still unset. Returns the
 * checkpoint (NULL without --resume). */
weft_ckpt *resolve_options(opts *o, long *start_step)
{
    *start_step = 0;
    weft_ckpt *ck = ckpt_resume(o, start_step);
    run_opts_defaults(&o->r);
    return ck;
}

/* "key=value" lines, the form checkpoints store. */
void run_opts_format(const run_opts *r, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "model=%s\ndata=%s\noptim=%s\nprecision=%s\nschedule=%s\nsteps=%ld\n"
             "epochs=%.17g\nbatch=%d\nlr=%.17g\nmin-lr=%.17g\nmomentum=%.17g\n"
             "weight-decay=%.17g\nclip=%.17g\nwarmup=%ld\nseed=%llu\ndata-seed=%llu\nseq=%d\n"
             "digits=%d\nlayers=%d\nheads=%d\ndim=%d\ntrain-size=%ld\nformat=%s\n",
             r->model, r->data, r->optim, r->precision, r->schedule, r->steps, r->epochs,
             r->batch, r->lr, r->min_lr, r->momentum, r->weight_decay, r->clip, r->warmup,
             r->seed, r->data_seed, r->seq, r->digits, r->layers, r->heads, r->dim,
             r->train_size, r->format);
}

/* Applies saved options except those given on the command line. */
void run_opts_merge(run_opts *r, unsigned set, char *saved)
{
    for (char *line = strtok(saved, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = 0;
        for (int k = 0; k < O_COUNT; k++) {
            if (strcmp(line, run_keys[k]) != 0 || (set & (1u << k)))
                continue;
            /* -1 marks the length option that was not used */
            if (k == O_STEPS && eq[1] == '-')
                r->steps = -1;
            else if (k == O_EPOCHS && eq[1] == '-')
                r->epochs = -1;
            else
                set_run_opt(r, k, eq + 1);
        }
    }
    /* a new length on the command line replaces the saved one entirely */
    if (set & (1u << O_STEPS))
        r->epochs = -1;
    if (set & (1u << O_EPOCHS))
        r->steps = -1;
}

/* gpipe, 1f1b, interleaved:V, zb: the pipeline's schedules, which
 * --schedule takes beside the learning-rate ones. */
static int is_pp_schedule(const char *v)
{
    return strcmp(v, "gpipe") == 0 || strcmp(v, "1f1b") == 0 || strcmp(v, "zb") == 0 ||
           strncmp(v, "interleaved", 11) == 0;
}

static void set_pp_schedule(opts *o, const char *v)
{
    pipe_spec sp;
    if (!is_pp_schedule(v) || pipe_spec_parse(v, 2, 2, &sp) != 0)
        die("--pp-schedule: want gpipe, 1f1b, interleaved:V (V >= 2) or zb, not '%s'", v);
    copy_str(o->pp_schedule, sizeof o->pp_schedule, "pp-schedule", v);
}

void parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    run_opts_init(&o->r);
    o->eval_prompts = 500;
    o->accum = 1;
    o->straggle_rank = -1;
    strcpy(o->sync, "full");
    o->outer_lr = o->outer_momentum = -1;
    strcpy(o->consistency, "bsp");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--no-eval") == 0) {
            o->no_eval = 1;
            continue;
        }
        if (strcmp(a, "--sp") == 0) {
            o->sp = 1;
            continue;
        }
        if (strcmp(a, "--recompute") == 0) {
            o->recompute = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--elastic") == 0) {
            o->elastic = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || i + 1 >= argc) {
            usage(stderr);
            die("bad argument '%s'", a);
        }
        const char *key = a + 2, *v = argv[++i];
        int k = 0;
        while (k < O_COUNT && strcmp(key, run_keys[k]) != 0)
            k++;
        if (k == O_SCHEDULE && is_pp_schedule(v)) {
            set_pp_schedule(o, v); /* --schedule names a pipeline schedule too */
        } else if (k < O_COUNT) {
            set_run_opt(&o->r, k, v);
            o->set |= 1u << k;
        } else if (strcmp(key, "save") == 0) {
            copy_str(o->save, sizeof o->save, key, v);
        } else if (strcmp(key, "resume") == 0) {
            copy_str(o->resume, sizeof o->resume, key, v);
        } else if (strcmp(key, "metrics") == 0) {
            copy_str(o->metrics, sizeof o->metrics, key, v);
        } else if (strcmp(key, "save-every") == 0) {
            o->save_every = parse_long(key, v, 0, 1L << 40);
        } else if (strcmp(key, "stop-at") == 0) {
            o->stop_at = parse_long(key, v, 1, 1L << 40);
        } else if (strcmp(key, "log-every") == 0) {
            o->log_every = parse_long(key, v, 0, 1L << 40);
        } else if (strcmp(key, "threads") == 0) {
            o->threads = (int)parse_long(key, v, 0, 4096);
        } else if (strcmp(key, "eval-prompts") == 0) {
            o->eval_prompts = (int)parse_long(key, v, 0, 1 << 24);
        } else if (strcmp(key, "bucket-mb") == 0) {
            o->bucket_mb = parse_mib(key, v, 0.001);
        } else if (strcmp(key, "zero") == 0) {
            o->zero = (int)parse_long(key, v, 0, 3);
        } else if (strcmp(key, "accum") == 0) {
            o->accum = (int)parse_long(key, v, 1, 1 << 16);
        } else if (strcmp(key, "sync") == 0) {
            weft_sync_config sc;
            if (weft_sync_parse(v, &sc) != 0)
                die("--sync: want full, local:H, diloco:H, gossip, stale:S, backup:B, "
                    "streaming:H:F[:T] or hier:full/diloco:H, not '%s'", v);
            copy_str(o->sync, sizeof o->sync, key, v);
        } else if (strcmp(key, "compress") == 0) {
            weft_compress_spec cs;
            if (weft_compress_parse(v, &cs) != 0)
                die("--compress: want fp16, bf16, int8, int4, topk:K or powersgd:R, not '%s'", v);
            copy_str(o->compress, sizeof o->compress, key, v);
        } else if (strcmp(key, "outer-lr") == 0) {
            o->outer_lr = parse_double(key, v, -1e30);
            if (!(o->outer_lr > 0 && o->outer_lr <= 10))
                die("--outer-lr: want a learning rate in (0, 10], not '%s'", v);
        } else if (strcmp(key, "outer-momentum") == 0) {
            o->outer_momentum = parse_double(key, v, -1e30);
            if (!(o->outer_momentum >= 0 && o->outer_momentum < 1))
                die("--outer-momentum: want a momentum in [0, 1), not '%s'", v);
        } else if (strcmp(key, "mode") == 0) {
            if (strcmp(v, "dp") && strcmp(v, "ps"))
                die("--mode: want dp or ps, not '%s'", v);
            o->ps = strcmp(v, "ps") == 0;
        } else if (strcmp(key, "consistency") == 0) {
            weft_ps_config pc;
            weft_ps_config_default(&pc);
            if (weft_ps_consistency_parse(v, &pc) != 0)
                die("--consistency: want bsp, ssp:S or asp, not '%s'", v);
            copy_str(o->consistency, sizeof o->consistency, key, v);
        } else if (strcmp(key, "pp") == 0) {
            o->pp = (int)parse_long(key, v, 1, 1024);
        } else if (strcmp(key, "tp") == 0) {
            o->tp = (int)parse_long(key, v, 1, 1024);
        } else if (strcmp(key, "order") == 0) {
            weft_layout l;
            if (weft_layout_init(&l, 1, 1, 1, v) != 0)
                die("--order: want tp, dp and pp in some order, fastest first (tp-dp-pp), not '%s'", v);
            copy_str(o->order, sizeof o->order, key, v);
        } else if (strcmp(key, "micro-batches") == 0) {
            o->micro = (int)parse_long(key, v, 1, 1 << 16);
        } else if (strcmp(key, "pp-schedule") == 0) {
            set_pp_schedule(o, v);
        } else if (strcmp(key, "pp-partition") == 0) {
            copy_str(o->pp_partition, sizeof o->pp_partition, key, v);
        } else if (strcmp(key, "pp-memory") == 0) {
            o->pp_memory_mb = parse_mib(key, v, 0);
        } else if (strcmp(key, "layout") == 0) {
            if (strcmp(v, "auto") != 0)
                die("--layout: want auto (or give --tp/--pp/--zero), not '%s'", v);
            o->layout_auto = 1;
        } else if (strcmp(key, "mem-limit") == 0) {
            o->mem_limit = parse_bytes(key, v, 1);
        } else if (strcmp(key, "pp-costs") == 0) {
            copy_str(o->pp_costs, sizeof o->pp_costs, key, v);
        } else if (strcmp(key, "straggle") == 0) {
            char *end;
            long r = strtol(v, &end, 10), ms = -1;
            if (strncmp(v, "any:", 4) == 0) { /* -2: a different rank every step */
                r = -2;
                end = (char *)v + 3;
            }
            if (end != v && *end == ':')
                ms = strtol(end + 1, &end, 10);
            if (r < -2 || r == -1 || ms < 0 || ms > 600000 || *end)
                die("--straggle: want RANK:MS, not '%s'", v);
            o->straggle_rank = (int)r;
            o->straggle_ms = (int)ms;
        } else if (elastic_option(o, key, v)) {
            continue;
        } else {
            usage(stderr);
            die("unknown option '%s'", a);
        }
    }
    if ((o->set & (1u << O_STEPS)) && (o->set & (1u << O_EPOCHS)))
        die("give --steps or --epochs, not both");
    if (o->set & (1u << O_STEPS))
        o->r.epochs = -1;
    if (o->layout_auto && (o->pp || o->tp || o->zero || o->micro || o->pp_schedule[0] || o->sp))
        die("--layout auto chooses --tp, --pp, --zero, --micro-batches, --schedule and --sp: "
            "give it none of them");
    if ((o->outer_lr >= 0 || o->outer_momentum >= 0) && !strstr(o->sync, "diloco:") &&
        !strstr(o->sync, "streaming:"))
        die("--outer-lr and --outer-momentum are DiLoCo's outer step's: they need --sync "
            "diloco:H, streaming:H:F[:T] or hier:full/..., not --sync %s", o->sync);
    int model_par = o->pp > 1 || o->tp > 1;
    if (model_par && o->ps)
        die("--pp and --tp split the model; --mode ps keeps it whole on the servers");
    if (model_par && strcmp(o->sync, "full") != 0)
        die("--pp/--tp: the model's parts take --sync full, not --sync %s", o->sync);
    if (model_par && o->accum > 1)
        die("--pp/--tp: micro-batches are --micro-batches, not --accum");
    if (o->pp <= 1 && (o->pp_schedule[0] || o->pp_partition[0]))
        die("--schedule %s and --pp-partition need --pp 2 or more",
            o->pp_schedule[0] ? o->pp_schedule : "...");
    if (!model_par && (o->micro || o->order[0]))
        die("--micro-batches and --order need --pp or --tp");
    if (o->sp && o->tp <= 1)
        die("--sp splits the sequence over the tensor group: it needs --tp 2 or more");
}

/* A slow device: its compute takes straggle_ms longer. any:MS (-2) picks
 * the same pseudo-random rank on every rank, so all agree who is late. */
void straggle(const opts *o, long step, int me, int n)
{
    int slow = o->straggle_rank;
    if (slow == -2)
        slow = (int)(((uint64_t)step * 0x9e3779b97f4a7c15ull >> 33) % (uint64_t)n);
    if (me == slow && o->straggle_ms > 0)
        usleep((useconds_t)o->straggle_ms * 1000);
}
