/* weft-train: train an MLP or a GPT, on one process or data-parallel on many.
 *
 *   weft-train --model mlp --data builtin                 (no download needed)
 *   weftrun -n 4 weft-train --model mlp --data builtin    (4 ranks, data parallel)
 *   weft-train --model mlp --data fashion-mnist --epochs 1 --batch 256
 *   weft-train --model gpt --data builtin --steps 2000
 *   weft-train --model gpt --data corpus.tok --seq 64     (from weft-tokenize)
 *   weft-train --resume run.ckpt --steps 4000             (continue a run)
 *
 * Every option that shapes the run (model, data, optimiser, schedule,
 * batch, seed, precision, steps) is saved in the checkpoint; --resume takes
 * them from there unless given again on the command line.
 *
 * Under a launcher (weftrun, torchrun, mpirun, srun) each rank takes its
 * part of every global batch, gradients are averaged over the ranks before
 * the optimiser step, and rank 0 reports, evaluates and saves. Checkpoints
 * do not depend on the number of ranks or the ZeRO stage.
 *
 *   weftrun -n 4 weft-train --zero 3 --accum 4      (sharded state, micro-steps)
 *   weftrun -n 4 weft-train --sync diloco:50 --straggle 1:20
 *   weftrun -n 4 weft-train --sync backup:1 --straggle 1:20   (drop the latest)
 *
 *   weftrun -n 4 --servers 2 weft-train --mode ps --consistency ssp:2
 *                                          (4 workers, 2 parameter servers)
 *
 * --zero, --accum, --sync and --straggle belong to the launch, not the
 * run: a checkpoint does not keep them (docs/TRAINING.md). */
#include "weft.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

/* ---- options ------------------------------------------------------------ */

typedef struct {
    char model[256], data[1024], optim[16], precision[16], schedule[16];
    long steps;
    double epochs;
    int batch;
    double lr, min_lr, momentum, weight_decay, clip;
    long warmup;
    unsigned long long seed, data_seed;
    int seq, digits, layers, heads, dim;
    long train_size;
    char format[64];
} run_opts;

typedef struct {
    run_opts r;
    char save[1024], resume[1024], metrics[1024];
    long save_every, log_every, stop_at;
    int threads, eval_prompts, no_eval, quiet;
    double bucket_mb;
    int zero, accum, straggle_rank, straggle_ms;
    char sync[64];
    int ps;               /* --mode ps: parameter server instead of data parallel */
    char consistency[32];
    unsigned set; /* bit per run option given on the command line */
} opts;

/* The run options, which checkpoints carry as "key=value" lines. */
enum { O_MODEL, O_DATA, O_OPTIM, O_PRECISION, O_SCHEDULE, O_STEPS, O_EPOCHS, O_BATCH, O_LR,
       O_MIN_LR, O_MOMENTUM, O_WD, O_CLIP, O_WARMUP, O_SEED, O_DATA_SEED, O_SEQ, O_DIGITS,
       O_LAYERS, O_HEADS, O_DIM, O_TRAIN_SIZE, O_FORMAT, O_COUNT };
static const char *const run_keys[O_COUNT] = {
    "model", "data", "optim", "precision", "schedule", "steps", "epochs", "batch", "lr",
    "min-lr", "momentum", "weight-decay", "clip", "warmup", "seed", "data-seed", "seq",
    "digits", "layers", "heads", "dim", "train-size", "format",
};

/* "plain" or a comma list of padded, reversed, answer-loss; -1 if bad. */
static int format_code(const char *f)
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

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("weft-train: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
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
        "  --bucket-mb MB           data parallel: gradient bucket size (25)\n"
        "  --zero 0|1|2|3           ZeRO stage: shard optimiser state (1), + gradients (2),\n"
        "                           + parameters (3) over the ranks (0)\n"
        "  --accum K                micro-steps per step; communicate only on the last (1)\n"
        "  --sync MODE              full (default), local:H, diloco:H, gossip, stale:S,\n"
        "                           backup:B (each step takes the first N-B gradients)\n"
        "                           (docs/TRAINING.md)\n"
        "  --mode dp|ps             data parallel (dp, default) or parameter server (ps: under\n"
        "                           weftrun -n W --servers K; workers push gradients, pull\n"
        "                           parameters; servers hold them and run the optimiser)\n"
        "  --consistency bsp|ssp:S|asp  parameter-server consistency (bsp)\n"
        "  --straggle RANK:MS       rank RANK sleeps MS ms every step (a slow device);\n"
        "                           any:MS: one rank a step, chosen at random (jitter)\n",
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
        if (format_code(v) < 0)
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

static int is_gpt(const run_opts *r)
{
    return strncmp(r->model, "gpt", 3) == 0;
}

static void run_opts_defaults(run_opts *r)
{
    int gpt = is_gpt(r);
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

/* "key=value" lines, the form checkpoints store. */
static void run_opts_format(const run_opts *r, char *buf, size_t cap)
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
static void run_opts_merge(run_opts *r, unsigned set, char *saved)
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

static void parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    run_opts_init(&o->r);
    o->eval_prompts = 500;
    o->accum = 1;
    o->straggle_rank = -1;
    strcpy(o->sync, "full");
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
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
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
        if (k < O_COUNT) {
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
            o->bucket_mb = parse_double(key, v, 0.001);
        } else if (strcmp(key, "zero") == 0) {
            o->zero = (int)parse_long(key, v, 0, 3);
        } else if (strcmp(key, "accum") == 0) {
            o->accum = (int)parse_long(key, v, 1, 1 << 16);
        } else if (strcmp(key, "sync") == 0) {
            weft_sync_config sc;
            if (weft_sync_parse(v, &sc) != 0)
                die("--sync: want full, local:H, diloco:H, gossip, stale:S or backup:B, not '%s'", v);
            copy_str(o->sync, sizeof o->sync, key, v);
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
        } else {
            usage(stderr);
            die("unknown option '%s'", a);
        }
    }
    if ((o->set & (1u << O_STEPS)) && (o->set & (1u << O_EPOCHS)))
        die("give --steps or --epochs, not both");
    if (o->set & (1u << O_STEPS))
        o->r.epochs = -1;
}

/* ---- data ----------------------------------------------------------------- */

typedef struct {
    weft_dataset *train, *eval;
    weft_dataset_info ti, ei;
    double mean, std; /* pixel statistics used to standardise images */
} data_sets;

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void open_data(const run_opts *r, data_sets *d)
{
    int rc, gpt = is_gpt(r);
    const char *what = r->data;
    if (strcmp(what, "builtin") == 0) {
        if (gpt) {
            int f = format_code(r->format);
            rc = weft_dataset_addition(&d->train, r->data_seed, 0, r->digits, f, r->seq,
                                       (uint64_t)r->train_size);
            if (rc == 0)
                rc = weft_dataset_addition(&d->eval, r->data_seed, 1, r->digits, f, r->seq, 2000);
        } else {
            rc = weft_dataset_synth_images(&d->train, r->data_seed, 0, (uint64_t)r->train_size);
            if (rc == 0)
                rc = weft_dataset_synth_images(&d->eval, r->data_seed, 1, 10000);
        }
    } else if (!gpt && (strcmp(what, "fashion-mnist") == 0 || strcmp(what, "mnist") == 0 ||
                        is_dir(what))) {
        const char *dir = is_dir(what) ? what : NULL;
        if (strcmp(what, "mnist") == 0)
            die("--data mnist: give the directory that holds the MNIST idx files instead");
        rc = weft_dataset_open_mnist_dir(&d->train, dir, "train");
        if (rc == 0)
            rc = weft_dataset_open_mnist_dir(&d->eval, dir, "test");
        if (rc != 0)
            die("cannot read %s idx files from %s: %s%s", what,
                dir ? dir : (getenv("WEFT_FASHION_MNIST") ? getenv("WEFT_FASHION_MNIST")
                                                          : WEFT_FASHION_MNIST_DIR),
                weft_strerror(rc),
                dir ? "" : " (Debian: apt-get install dataset-fashion-mnist)");
    } else if (gpt) {
        rc = weft_dataset_open_tokens(&d->train, what, r->seq, 0, 0.9);
        if (rc == 0)
            rc = weft_dataset_open_tokens(&d->eval, what, r->seq, 0.9, 1);
        if (rc != 0)
            die("cannot use token shard %s with --seq %d: %s (make one with weft-tokenize; "
                "the last 10%% must hold more than one window)",
                what, r->seq, weft_strerror(rc));
    } else {
        die("--data %s: not builtin, fashion-mnist or a directory of idx files", what);
        return;
    }
    if (rc != 0)
        die("cannot build the %s data: %s", what, weft_strerror(rc));
    weft_dataset_info_get(d->train, &d->ti);
    weft_dataset_info_get(d->eval, &d->ei);
    if (d->ti.kind == WEFT_DATA_IMAGE) {
        /* standardise both splits with the training pixels' statistics */
        rc = weft_dataset_pixel_stats(d->train, 10000, &d->mean, &d->std);
        if (rc == 0 && d->std > 0) {
            weft_dataset_normalize(d->train, (float)d->mean, (float)d->std);
            weft_dataset_normalize(d->eval, (float)d->mean, (float)d->std);
        }
    }
    if (gpt != (d->ti.kind == WEFT_DATA_SEQ))
        die("--model %s does not fit the data %s", r->model, d->ti.name);
}

/* ---- model -------------------------------------------------------------- */

static void model_config(const run_opts *r, const data_sets *d, weft_model_config *cfg)
{
    char spec[512];
    if (strcmp(r->model, "mlp") == 0)
        snprintf(spec, sizeof spec, "mlp:%d-512-512-%d", d->ti.x_dim, d->ti.n_classes);
    else if (strcmp(r->model, "gpt") == 0)
        snprintf(spec, sizeof spec, "gpt:vocab=%d,ctx=%d,layers=%d,heads=%d,dim=%d",
                 d->ti.n_classes, r->seq, r->layers, r->heads, r->dim);
    else
        snprintf(spec, sizeof spec, "%s", r->model);
    int rc = weft_model_config_parse(spec, cfg);
    if (rc == 0)
        rc = weft_model_config_check(cfg);
    if (rc != 0)
        die("--model %s: %s", spec, weft_strerror(rc));
    if (cfg->type == WEFT_MODEL_MLP &&
        (cfg->widths[0] != d->ti.x_dim || cfg->widths[cfg->n_widths - 1] < d->ti.n_classes))
        die("--model %s: the data has %d inputs and %d classes", spec, d->ti.x_dim,
            d->ti.n_classes);
    if (cfg->type == WEFT_MODEL_GPT && (cfg->vocab < d->ti.n_classes || cfg->ctx < r->seq))
        die("--model %s: the data needs vocab >= %d and ctx >= %d", spec, d->ti.n_classes,
            r->seq);
}

/* ---- progress and metrics ------------------------------------------------------ */

/* CPU seconds of this process (all threads) and of the calling thread. */
static void cpu_s(double *process, double *thread)
{
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_THREAD, &b);
    *process = (double)a.ru_utime.tv_sec + 1e-6 * (double)a.ru_utime.tv_usec +
               (double)a.ru_stime.tv_sec + 1e-6 * (double)a.ru_stime.tv_usec;
    *thread = (double)b.ru_utime.tv_sec + 1e-6 * (double)b.ru_utime.tv_usec +
              (double)b.ru_stime.tv_sec + 1e-6 * (double)b.ru_stime.tv_usec;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fmt_duration(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e8)
        snprintf(buf, cap, "?");
    else if (s >= 3600)
        snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else if (s >= 60)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, cap, "%.1fs", s);
}

typedef struct {
    int tty, quiet;
    long log_every, total, first_step;
    double start, last_draw, loss_sum;
    long loss_n;
    FILE *csv;
} progress;

static void progress_update(progress *p, long step, double loss, double rate, int done)
{
    p->loss_sum += loss;
    p->loss_n++;
    if (p->quiet)
        return;
    double t = now_s();
    long left = p->total - step;
    char eta[32], el[32];
    fmt_duration(eta, sizeof eta, rate > 0 ? (double)left * ((t - p->start) /
                                                            (double)(step - p->first_step))
                                           : -1);
    fmt_duration(el, sizeof el, t - p->start);
    double mean = p->loss_sum / (double)p->loss_n;
    if (p->tty) {
        if (!done && t - p->last_draw < 0.1)
            return;
        int width = 24, filled = p->total ? (int)((double)width * (double)step / (double)p->total)
                                          : width;
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r[%s] step %ld/%ld  loss %.4f  %.0f samples/s  %s  ETA %s \x1b[K", bar,
                step, p->total, mean, rate, el, eta);
        if (done)
            fputc('\n', stderr);
        fflush(stderr);
    } else {
        if (!done && step % p->log_every != 0)
            return;
        fprintf(stderr, "step %ld/%ld loss %.4f samples/s %.0f elapsed %s eta %s\n", step,
                p->total, mean, rate, el, eta);
    }
    p->last_draw = t;
    p->loss_sum = 0;
    p->loss_n = 0;
}

static void csv_row(FILE *f, long step, double epoch, const char *split, double loss, double acc,
                    double lr, double gnorm, double rate, double elapsed)
{
    if (!f)
        return;
    fprintf(f, "%ld,%.6f,%s,%.6f,", step, epoch, split, loss);
    if (acc >= 0)
        fprintf(f, "%.6f", acc);
    fprintf(f, ",%.6g,", lr);
    if (gnorm >= 0)
        fprintf(f, "%.6g", gnorm);
    fprintf(f, ",%.1f,%.3f\n", rate, elapsed);
}

/* ---- checkpoints ------------------------------------------------------------ */

/* Collective when z spans the job (full sync): a sharded optimiser is
 * gathered to rank 0, which writes. */
static void save_ckpt(const char *path, const run_opts *r, const data_sets *d, weft_model *m,
                      weft_zero *z, int rank, int shared, const weft_loader *l, long step,
                      const weft_rng *rng)
{
    weft_ckpt *c = NULL;
    char args[4096];
    int rc = weft_zero_gather_params(z);
    if (rc == 0 && rank != 0 && shared)
        rc = weft_zero_put_optim(z, NULL);
    if (rc != 0)
        die("cannot gather the training state for %s: %s", path, weft_strerror(rc));
    if (rank != 0)
        return;
    run_opts_format(r, args, sizeof args);
    rc = weft_ckpt_new(&c);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "format", "weft-train 1");
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "train/args", args);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "train/step", (uint64_t)step);
    if (rc == 0)
        rc = weft_ckpt_put_model(c, m);
    if (rc == 0)
        rc = weft_zero_put_optim(z, c);
    if (rc == 0)
        rc = weft_ckpt_put_rng(c, "rng", rng);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/position", weft_loader_position(l));
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/global_batch", (uint64_t)r->batch);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/seed", r->seed);
    if (rc == 0)
        rc = weft_ckpt_put_str(c, "data/name", d->ti.name);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "data/samples", d->ti.n);
    if (rc == 0)
        rc = weft_ckpt_save(c, path);
    weft_ckpt_free(c);
    if (rc != 0)
        die("cannot save checkpoint %s: %s", path, weft_strerror(rc));
}

/* ---- evaluation ---------------------------------------------------------------- */

static void eval_mlp(weft_model *m, const data_sets *d, FILE *csv, long step, double epoch)
{
    enum { CHUNK = 500 };
    int dim = d->ei.x_dim;
    float *x = malloc((size_t)CHUNK * (size_t)dim * sizeof *x);
    int32_t *y = malloc(CHUNK * sizeof *y);
    if (!x || !y)
        die("out of memory");
    double loss_sum = 0;
    long correct = 0;
    for (uint64_t i = 0; i < d->ei.n; i += CHUNK) {
        int n = (int)(d->ei.n - i < CHUNK ? d->ei.n - i : CHUNK);
        for (int k = 0; k < n; k++)
            weft_dataset_get(d->eval, i + (uint64_t)k, x + (size_t)k * (size_t)dim, NULL, y + k);
        float loss;
        int rc = weft_model_forward(m, x, y, n, 1, &loss);
        if (rc != 0)
            die("evaluation forward: %s", weft_strerror(rc));
        loss_sum += (double)loss * n;
        correct += weft_model_count_correct(m, y);
    }
    double acc = (double)correct / (double)d->ei.n, loss = loss_sum / (double)d->ei.n;
    printf("test: %s, %llu samples: accuracy %.4f (%ld correct), loss %.4f\n", d->ei.name,
           (unsigned long long)d->ei.n, acc, correct, loss);
    csv_row(csv, step, epoch, "test", loss, acc, 0, -1, 0, 0);
    free(x);
    free(y);
}

static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c >= 32 && c < 127)
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

static void eval_gpt(weft_model *m, const data_sets *d, const opts *o, FILE *csv, long step,
                     double epoch)
{
    int T = d->ei.x_dim, B = 32;
    uint64_t windows = d->ei.n < 4096 ? d->ei.n : 4096;
    int32_t *x = malloc((size_t)B * (size_t)T * sizeof *x);
    int32_t *y = malloc((size_t)B * (size_t)T * sizeof *y);
    if (!x || !y)
        die("out of memory");
    double loss_sum = 0;
    for (uint64_t i = 0; i < windows; i += (uint64_t)B) {
        int n = (int)(windows - i < (uint64_t)B ? windows - i : (uint64_t)B);
        for (int k = 0; k < n; k++)
            weft_dataset_get(d->eval, i + (uint64_t)k, NULL, x + (size_t)k * (size_t)T,
                             y + (size_t)k * (size_t)T);
        float loss;
        int rc = weft_model_forward(m, x, y, n, T, &loss);
        if (rc != 0)
            die("evaluation forward: %s", weft_strerror(rc));
        loss_sum += (double)loss * n;
    }
    double vloss = loss_sum / (double)windows;
    printf("validation: %s, %llu windows of %d tokens: loss %.4f\n", d->ei.name,
           (unsigned long long)windows, T, vloss);

    weft_rng rng;
    weft_rng_seed(&rng, 1234);
    char prompt[64], answer[64];
    double acc = -1;
    int shown_prompts = 0;
    if (o->eval_prompts > 0 &&
        weft_dataset_prompt(d->eval, 0, prompt, sizeof prompt, answer, sizeof answer) == 0) {
        int right = 0, shown = 0;
        int32_t toks[160];
        char out[160];
        for (int i = 0; i < o->eval_prompts; i++) {
            weft_dataset_prompt(d->eval, (uint64_t)i, prompt, sizeof prompt, answer,
                                sizeof answer);
            int np = (int)strlen(prompt), na = (int)strlen(answer);
            weft_bytes_encode(prompt, (size_t)np, toks);
            int rc = weft_model_generate(m, toks, np, np + na, 0, 0, &rng);
            if (rc != 0)
                die("generate: %s", weft_strerror(rc));
            weft_bytes_decode(toks, (size_t)(np + na), out);
            int ok = memcmp(out + np, answer, (size_t)na) == 0;
            right += ok;
            if (shown < 5) {
                printf("  %s", prompt);
                print_escaped(out + np, (size_t)na);
                printf("   %s\n", ok ? "right" : "wrong");
                shown++;
            }
        }
        acc = (double)right / o->eval_prompts;
        printf("exact match: %d of %d held-out problems (%.4f)%s\n", right, o->eval_prompts, acc,
               strstr(o->r.format, "reversed") ? "; sums are written least significant digit first"
                                               : "");
        shown_prompts = 1;
    }
    csv_row(csv, step, epoch, "val", vloss, acc, 0, -1, 0, 0);

    /* a sample: continue the start of a validation window (the answers
     * above already are samples of a prompted task) */
    int np = T < 8 ? T : 8, total = shown_prompts ? 0 : np + 64;
    int32_t *toks = malloc((size_t)(total + 1) * sizeof *toks);
    char *text = malloc((size_t)total + 1);
    if (total && toks && text) {
        weft_dataset_get(d->eval, 0, NULL, x, y);
        memcpy(toks, x, (size_t)np * sizeof *toks);
        if (weft_model_generate(m, toks, np, total, 0.8f, 40, &rng) == 0 &&
            d->ei.n_classes <= WEFT_BYTE_VOCAB) {
            weft_bytes_decode(toks, (size_t)total, text);
            printf("sample (temperature 0.8, top-k 40): \"");
            print_escaped(text, (size_t)np);
            printf("|");
            print_escaped(text + np, (size_t)(total - np));
            printf("\"\n");
        }
    }
    free(toks);
    free(text);
    free(x);
    free(y);
}

/* ---- main ----------------------------------------------------------------------- */

/* weft-train --inspect CKPT: the records of a checkpoint. */
static int inspect(const char *path)
{
    weft_ckpt *c;
    int rc = weft_ckpt_load(&c, path);
    if (rc != 0)
        die("cannot load checkpoint %s: %s", path, weft_strerror(rc));
    printf("%s: checkpoint version %d, %d records, checksums ok\n", path, WEFT_CKPT_VERSION,
           weft_ckpt_count(c));
    for (int i = 0; i < weft_ckpt_count(c); i++) {
        weft_ckpt_entry e;
        weft_ckpt_entry_at(c, i, &e);
        printf("  %-28s ", e.name);
        if (e.kind == WEFT_CKPT_TENSOR) {
            const char *dt = weft_dtype_name(e.dtype);
            printf("%-4s [", dt ? dt : "?");
            for (int d = 0; d < e.ndim; d++)
                printf("%s%lld", d ? ", " : "", (long long)e.shape[d]);
            printf("]\n");
        } else if (e.nbytes == 8 && strncmp(e.name, "model/", 6) != 0 &&
                   (strstr(e.name, "step") || strstr(e.name, "position") ||
                    strstr(e.name, "batch") || strstr(e.name, "seed") ||
                    strstr(e.name, "base") || strstr(e.name, "samples"))) {
            uint64_t v = 0;
            weft_ckpt_get_u64(c, e.name, &v);
            printf("%llu\n", (unsigned long long)v);
        } else {
            const char *p = e.data;
            printf("\"");
            for (size_t k = 0; k < e.nbytes && k < 100; k++)
                putchar(p[k] == '\n' ? ' ' : (p[k] >= 32 && p[k] < 127) ? p[k] : '.');
            printf("%s\"\n", e.nbytes > 100 ? "..." : "");
        }
    }
    weft_ckpt_free(c);
    return 0;
}

/* SIGUSR1 (weftrun forwards it): write the flight recorder to stderr. The
 * dump takes no lock and allocates nothing, so a handler may call it. */
/* ---- parameter server ------------------------------------------------------ */

/* --mode ps (docs/TRAINING.md): the world is W workers and K servers
 * (weftrun --servers K sets each rank's role). Servers hold the parameters
 * in chunks and run the optimiser; each worker computes the gradient of its
 * part of every global batch, pushes it, ends its step (clock) and pulls
 * the parameters, which the consistency model (BSP, SSP:S, ASP) lets it see.
 * Worker 0 reports its own loss (a collective would undo SSP and ASP) and
 * evaluates the servers' final parameters. Returns the exit status. */
static int run_ps(opts *o, data_sets *d, long steps, weft_comm *world)
{
    run_opts *r = &o->r;
    weft_ps_config pc;
    weft_ps *ps;
    weft_comm *workers = NULL;
    int rc, adamw = strcmp(r->optim, "adamw") == 0;
    weft_ps_config_default(&pc);
    weft_ps_consistency_parse(o->consistency, &pc);
    weft_optim_config_default(&pc.optim, adamw ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_SGD);
    pc.optim.momentum = (float)r->momentum;
    pc.optim.weight_decay = (float)r->weight_decay;
    pc.lr = (weft_lr_schedule){ strcmp(r->schedule, "cosine") == 0 ? WEFT_LR_COSINE
                                                                  : WEFT_LR_CONSTANT,
                                (float)r->lr, (float)r->min_lr, (int32_t)r->warmup,
                                (int32_t)(steps < INT32_MAX ? steps : INT32_MAX) };
    if ((rc = weft_ps_init(&ps, world, &pc)) != 0)
        die("parameter server set-up: %s: %s", weft_strerror(rc), weft_comm_error(world));
    int worker = weft_ps_role(ps) == WEFT_PS_ROLE_WORKER;
    /* every rank, servers included, before anyone serves */
    if ((rc = weft_comm_split(world, worker ? 0 : -1, weft_comm_rank(world), &workers)) != 0)
        die("parameter server set-up: %s: %s", weft_strerror(rc), weft_comm_error(world));
    if (!worker) {
        if ((rc = weft_ps_serve(ps)) != 0)
            die("server %d: %s: %s", weft_ps_rank(ps), weft_strerror(rc), weft_ps_error(ps));
        weft_ps_destroy(ps);
        return 0;
    }
    int me = weft_ps_rank(ps), nw = weft_ps_num_workers(ps);
    weft_model_config cfg;
    weft_model *m;
    model_config(r, d, &cfg);
    if ((rc = weft_model_create(&m, &cfg, r->seed)) != 0)
        die("cannot create the model: %s", weft_strerror(rc));
    weft_model_set_precision(m, strcmp(r->precision, "bf16") == 0 ? WEFT_PREC_BF16
                                                                  : WEFT_PREC_FP32);
    if (o->threads > 0)
        weft_model_set_threads(m, o->threads);
    weft_loader_config lc;
    weft_loader *loader;
    weft_loader_config_default(&lc);
    lc.global_batch = r->batch;
    lc.seed = r->seed;
    lc.rank = me;
    lc.world_size = nw;
    if (nw > r->batch)
        die("%d workers cannot share a batch of %d", nw, r->batch);
    if ((rc = weft_loader_create(&loader, d->train, &lc)) != 0)
        die("cannot create the data loader: %s", weft_strerror(rc));
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    weft_ps_request *a, *b;
    if ((rc = weft_ps_register(ps, 0, p, n)) != 0 || (rc = weft_ps_pull(ps, 0, p, &b)) != 0 ||
        (rc = weft_ps_wait(b)) != 0)
        die("worker %d: registering the parameters: %s: %s", me, weft_strerror(rc),
            weft_ps_error(ps));
    char spec[512];
    weft_model_config_format(weft_model_config_of(m), spec, sizeof spec);
    if (!o->quiet) {
        printf("model %s (%zu parameters, %s, %s matmul, %d threads)\n", spec, n, r->precision,
               weft_model_matmul_name(m), weft_model_threads(m));
        printf("parameter server: %d workers, %d servers, consistency %s\n", nw,
               weft_ps_num_servers(ps), o->consistency);
        printf("data %s: %llu samples; optim %s lr %g (%s) on the servers; batch %d, steps %ld\n",
               d->ti.name, (unsigned long long)d->ti.n, r->optim, r->lr, r->schedule, r->batch,
               steps);
        fflush(stdout);
    }
    FILE *csv = NULL;
    if (o->metrics[0] && me == 0) {
        if (!(csv = fopen(o->metrics, "w")))
            die("cannot write %s: %s", o->metrics, strerror(errno));
        fprintf(csv, "step,epoch,split,loss,accuracy,lr,grad_norm,samples_per_s,elapsed_s\n");
    }
    progress pg = { 0 };
    pg.tty = isatty(2);
    pg.quiet = o->quiet;
    pg.total = steps;
    pg.log_every = o->log_every > 0 ? o->log_every : (steps / 20 > 0 ? steps / 20 : 1);
    pg.start = now_s();
    int image = d->ti.kind == WEFT_DATA_IMAGE;
    for (long step = 0; step < steps; step++) {
        weft_batch bt;
        float loss = 0, gnorm = -1;
        if ((rc = weft_loader_next(loader, &bt)) != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        int slow = o->straggle_rank;
        if (slow == -2)
            slow = (int)(((uint64_t)step * 0x9e3779b97f4a7c15ull >> 33) % (uint64_t)nw);
        if (me == slow && o->straggle_ms > 0)
            usleep((useconds_t)o->straggle_ms * 1000);
        const void *x = image ? (const void *)bt.x : (const void *)bt.tokens;
        if ((rc = weft_model_zero_grad(m)) != 0 ||
            (rc = weft_model_forward(m, x, bt.y, bt.n, bt.x_dim, &loss)) != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        int correct = weft_model_count_correct(m, bt.y);
        if ((rc = weft_model_backward(m)) != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        /* servers average over workers: weight this part by its share */
        weft_scale(g, n, (float)nw * (float)bt.n / (float)bt.global_n);
        if (r->clip > 0) /* each worker clips its own gradient */
            weft_clip_grad_norm(g, n, (float)r->clip, &gnorm);
        if ((rc = weft_ps_push(ps, 0, g, &a)) != 0 || (rc = weft_ps_clock(ps)) != 0 ||
            (rc = weft_ps_pull(ps, 0, p, &b)) != 0)
            die("step %ld: %s: %s", step, weft_strerror(rc), weft_ps_error(ps));
        int ra = weft_ps_wait(a), rb = weft_ps_wait(b);
        if (ra || rb)
            die("step %ld: %s: %s", step, weft_strerror(ra ? ra : rb), weft_ps_error(ps));
        if (!isfinite(loss))
            die("step %ld: loss is %f; lower --lr or use --clip", step, (double)loss);
        double elapsed = now_s() - pg.start;
        double rate = (double)(step + 1) * r->batch / (elapsed > 0 ? elapsed : 1e-9);
        int rows = image ? bt.n : bt.n * bt.x_dim;
        csv_row(csv, step + 1, (double)weft_loader_position(loader) / (double)d->ti.n, "train",
                loss, (double)correct / rows, weft_lr_at(&pc.lr, step), gnorm, rate, elapsed);
        progress_update(&pg, step + 1, loss, rate, step + 1 == steps);
    }
    double train_s = now_s() - pg.start;
    uint64_t sent = 0, recvd = 0;
    weft_ps_bytes(ps, &sent, &recvd);
    if ((rc = weft_ps_shutdown(ps)) != 0)
        die("shutdown: %s: %s", weft_strerror(rc), weft_ps_error(ps));
    if (!o->quiet)
        printf("training took %.2f s on %d workers and %d servers (consistency %s); worker 0 "
               "sent %.1f MB, received %.1f MB\n",
               train_s, nw, weft_ps_num_servers(ps), o->consistency, (double)sent / 1e6,
               (double)recvd / 1e6);
    if (!o->no_eval && me == 0) {
        double epoch = (double)weft_loader_position(loader) / (double)d->ti.n;
        if (image)
            eval_mlp(m, d, csv, steps, epoch);
        else
            eval_gpt(m, d, o, csv, steps, epoch);
    }
    if (csv)
        fclose(csv);
    weft_ps_destroy(ps);
    weft_comm_destroy(workers);
    weft_loader_free(loader);
    weft_model_destroy(m);
    return 0;
}

static weft_comm *dump_comm;

static void on_sigusr1(int sig)
{
    (void)sig;
    if (dump_comm)
        weft_comm_dump(dump_comm, 2);
}

int main(int argc, char **argv)
{
    opts o;
    if (argc == 3 && strcmp(argv[1], "--inspect") == 0)
        return inspect(argv[2]);
    parse_args(&o, argc, argv);
    run_opts *r = &o.r;

    /* A job of several ranks trains data-parallel; a lone process as before. */
    weft_config jc;
    weft_comm *comm = NULL;
    int rank = 0, world = 1;
    weft_config_default(&jc);
    if (weft_config_from_env(&jc) == 0 && jc.world_size > 1) {
        signal(SIGUSR1, on_sigusr1);
        int jrc = weft_comm_init(&comm, &jc);
        if (jrc != 0)
            die("cannot join the job: %s", weft_strerror(jrc));
        dump_comm = comm;
        rank = weft_comm_rank(comm);
        world = weft_comm_size(comm);
        if (rank != 0)
            o.quiet = 1; /* rank 0 speaks for the job */
    }

    weft_ckpt *ck = NULL;
    long start_step = 0;
    if (o.resume[0]) {
        int rc = weft_ckpt_load(&ck, o.resume);
        if (rc != 0)
            die("cannot load checkpoint %s: %s", o.resume, weft_strerror(rc));
        char args[4096];
        uint64_t s = 0;
        if (weft_ckpt_get_str(ck, "train/args", args, sizeof args) != 0 ||
            weft_ckpt_get_u64(ck, "train/step", &s) != 0)
            die("%s: not a weft-train checkpoint", o.resume);
        unsigned fixed = 1u << O_MODEL | 1u << O_OPTIM | 1u << O_MOMENTUM | 1u << O_WD |
                         1u << O_LAYERS | 1u << O_HEADS | 1u << O_DIM;
        if (o.set & fixed)
            fprintf(stderr, "weft-train: warning: the model and optimiser come from %s; "
                            "--model/--optim/--momentum/--weight-decay/--layers/--heads/--dim "
                            "are ignored\n", o.resume);
        run_opts_merge(r, o.set & ~fixed, args);
        start_step = (long)s;
    }
    run_opts_defaults(r);

    data_sets d = { 0 };
    open_data(r, &d);
    long steps = r->steps;
    if (steps < 0)
        steps = (long)ceil(r->epochs * (double)d.ti.n / (double)r->batch);
    if (o.ps) {
        if (!comm)
            die("--mode ps needs workers and servers: weftrun -n W --servers K weft-train ...");
        if (o.resume[0] || o.save[0] || o.zero || o.accum > 1 || strcmp(o.sync, "full") != 0)
            die("--mode ps does not take --resume, --save, --zero, --accum or --sync");
        int prc = run_ps(&o, &d, steps, comm);
        dump_comm = NULL;
        if (prc == 0 && (prc = weft_comm_destroy(comm)) != 0)
            die("leaving the job: %s", weft_strerror(prc));
        weft_dataset_free(d.train);
        weft_dataset_free(d.eval);
        return 0;
    }

    weft_sync_config scfg;
    weft_sync_parse(o.sync, &scfg);
    int full_sync = scfg.mode == WEFT_SYNC_FULL;
    int stale = scfg.mode == WEFT_SYNC_STALE;
    int backup = scfg.mode == WEFT_SYNC_BACKUP;
    if (!full_sync && o.zero)
        die("--zero shards a full-sync run; --sync %s keeps whole models per rank", o.sync);
    if ((stale || backup) && o.accum > 1)
        die("--accum with --sync %s is not supported", o.sync);
    if (scfg.mode == WEFT_SYNC_DILOCO && !(o.set & (1u << O_OPTIM)) && !o.resume[0]) {
        strcpy(r->optim, "adamw"); /* DiLoCo's inner optimiser */
        if (!(o.set & (1u << O_LR)))
            r->lr = 3e-3;
        if (!(o.set & (1u << O_WD)))
            r->weight_decay = 0.01;
        if (!(o.set & (1u << O_MIN_LR)))
            r->min_lr = r->lr / 10;
    }

    weft_model *m = NULL;
    weft_optim_config oc;
    weft_rng rng;
    weft_rng_seed(&rng, r->seed);
    int rc;
    if (ck) {
        rc = weft_ckpt_get_model(ck, &m);
        if (rc == 0)
            rc = weft_ckpt_optim_config(ck, &oc);
        if (rc == 0)
            rc = weft_ckpt_get_rng(ck, "rng", &rng);
        if (rc != 0)
            die("%s: %s", o.resume, weft_strerror(rc));
    } else {
        weft_model_config cfg;
        model_config(r, &d, &cfg);
        rc = weft_model_create(&m, &cfg, r->seed);
        if (rc != 0)
            die("cannot create the model: %s", weft_strerror(rc));
        weft_optim_config_default(&oc, strcmp(r->optim, "adamw") == 0 ? WEFT_OPTIM_ADAMW
                                                                      : WEFT_OPTIM_SGD);
        oc.momentum = (float)r->momentum;
        oc.weight_decay = (float)r->weight_decay;
    }
    weft_model_set_precision(m, strcmp(r->precision, "bf16") == 0 ? WEFT_PREC_BF16
                                                                  : WEFT_PREC_FP32);
    if (o.threads > 0)
        weft_model_set_threads(m, o.threads);

    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = r->batch;
    lc.seed = r->seed;
    lc.rank = rank;
    lc.world_size = world;
    if (world > r->batch)
        die("%d ranks cannot share a batch of %d", world, r->batch);
    if (o.accum * world > r->batch)
        die("--accum %d on %d ranks: micro-batches of a batch of %d would be empty", o.accum,
            world, r->batch);
    weft_loader *loader;
    rc = weft_loader_create(&loader, d.train, &lc);
    if (rc != 0)
        die("cannot create the data loader: %s", weft_strerror(rc));
    /* Full sync: one weft_zero over the job (stage 0 is plain DP). Other
     * modes: each rank steps alone and weft_sync exchanges parameters. */
    weft_zero *z = NULL;
    weft_sync *sy = NULL;
    rc = weft_zero_create(&z, full_sync ? comm : NULL, m, &oc, o.zero,
                          (size_t)(o.bucket_mb > 0 ? o.bucket_mb * 1048576 : 0));
    if (rc == 0 && ck)
        rc = weft_zero_load_optim(z, ck);
    if (rc == 0 && comm && full_sync)
        rc = weft_zero_broadcast_params(z); /* one starting point for every rank */
    if (rc == 0 && comm && !full_sync)
        rc = weft_sync_create(&sy, comm, m, &scfg);
    if (rc != 0)
        die("data parallel set-up: %s%s%s", weft_strerror(rc), comm ? ": " : "",
            comm ? weft_comm_error(comm) : "");
    weft_optim *opt = weft_zero_optim(z);
    if (ck) {
        uint64_t pos;
        if (weft_ckpt_get_u64(ck, "data/position", &pos) != 0)
            die("%s: no data position", o.resume);
        weft_loader_seek(loader, pos);
        char name[sizeof d.ti.name];
        uint64_t samples;
        if (weft_ckpt_get_str(ck, "data/name", name, sizeof name) == 0 &&
            weft_ckpt_get_u64(ck, "data/samples", &samples) == 0 &&
            (strcmp(name, d.ti.name) != 0 || samples != d.ti.n))
            fprintf(stderr, "weft-train: warning: the checkpoint was trained on %s (%llu "
                            "samples), this run reads %s (%llu)\n",
                    name, (unsigned long long)samples, d.ti.name, (unsigned long long)d.ti.n);
        weft_ckpt_free(ck);
    }

    weft_lr_schedule sched = { strcmp(r->schedule, "cosine") == 0 ? WEFT_LR_COSINE
                                                                  : WEFT_LR_CONSTANT,
                               (float)r->lr, (float)r->min_lr, (int32_t)r->warmup,
                               (int32_t)(steps < INT32_MAX ? steps : INT32_MAX) };
    const weft_model_config *mc = weft_model_config_of(m);
    char spec[512];
    weft_model_config_format(mc, spec, sizeof spec);
    size_t nparams;
    weft_model_params(m, &nparams);
    if (!o.quiet) {
        printf("model %s (%zu parameters, %s, %s matmul, %d threads)\n", spec, nparams,
               r->precision, weft_model_matmul_name(m), weft_model_threads(m));
        if (comm && full_sync) {
            weft_zero_mem zm;
            weft_zero_memory(z, &zm);
            printf("data parallel: %d ranks, full sync, ZeRO stage %d, %d buckets", world, o.zero,
                   weft_zero_bucket_count(z));
            if (o.accum > 1)
                printf(", %d micro-steps per step", o.accum);
            printf("\n  per rank (rank 0): params %zu B, grads %zu B, optimiser %zu B = %zu B; "
                   "ZeRO formula %.0f B; engine work buffers +%zu B\n",
                   zm.param_bytes, zm.grad_bytes, zm.optim_bytes,
                   zm.param_bytes + zm.grad_bytes + zm.optim_bytes, zm.formula_bytes,
                   zm.work_bytes);
        } else if (comm) {
            printf("data parallel: %d ranks, sync %s\n", world, o.sync);
        }
        if (o.straggle_rank >= 0)
            printf("straggler: rank %d sleeps %d ms per step\n", o.straggle_rank, o.straggle_ms);
        else if (o.straggle_rank == -2)
            printf("straggler: one random rank sleeps %d ms per step\n", o.straggle_ms);
        printf("data %s: %llu samples; eval %s: %llu", d.ti.name, (unsigned long long)d.ti.n,
               d.ei.name, (unsigned long long)d.ei.n);
        if (d.ti.kind == WEFT_DATA_IMAGE)
            printf("; pixels standardised (mean %.4f, std %.4f)", d.mean, d.std);
        printf("\n");
        printf("optim %s lr %g (%s", r->optim, r->lr, r->schedule);
        if (sched.kind == WEFT_LR_COSINE)
            printf(" to %g, warm-up %ld", r->min_lr, r->warmup);
        printf(")");
        if (strcmp(r->optim, "sgd") == 0)
            printf(" momentum %g", r->momentum);
        printf(" weight decay %g, clip %g; batch %d, steps %ld", r->weight_decay, r->clip,
               r->batch, steps);
        if (start_step)
            printf(", resuming at step %ld", start_step);
        printf("\n");
        fflush(stdout);
    }

    FILE *csv = NULL;
    if (o.metrics[0] && rank == 0) {
        struct stat st;
        int fresh = stat(o.metrics, &st) != 0 || st.st_size == 0 || !start_step;
        csv = fopen(o.metrics, fresh ? "w" : "a");
        if (!csv)
            die("cannot write %s: %s", o.metrics, strerror(errno));
        if (fresh)
            fprintf(csv, "step,epoch,split,loss,accuracy,lr,grad_norm,samples_per_s,elapsed_s\n");
    }

    progress pg = { 0 };
    pg.tty = isatty(2);
    pg.quiet = o.quiet;
    pg.total = steps;
    pg.first_step = start_step;
    pg.log_every = o.log_every > 0 ? o.log_every : (steps / 20 > 0 ? steps / 20 : 1);
    pg.start = now_s();
    double cpu0_all, cpu0_main;
    cpu_s(&cpu0_all, &cpu0_main);
    int image = d.ti.kind == WEFT_DATA_IMAGE;
    long end = o.stop_at > 0 && o.stop_at < steps ? o.stop_at : steps;
    if (end < start_step)
        end = start_step;
    pg.total = end;
    uint64_t grad_bytes = 0; /* full sync: gradient bytes handed to collectives */
    double compute_s = 0;    /* forward + backward (the hooks' launches included) */
    double load_s = 0;       /* the data loader */
    weft_batch b;
    int prefetched = 0; /* b already holds this step's batch */
    for (long step = start_step; step < end; step++) {
        double t_ld = now_s();
        rc = prefetched ? 0 : weft_loader_next(loader, &b);
        prefetched = 0;
        load_s += now_s() - t_ld;
        if (rc != 0)
            die("step %ld: %s", step, weft_strerror(rc));
        int slow = o.straggle_rank, skip = 0;
        if (slow == -2) /* the same pseudo-random pick on every rank */
            slow = (int)(((uint64_t)step * 0x9e3779b97f4a7c15ull >> 33) % (uint64_t)world);
        /* backup workers: a late rank skips a step already decided without it */
        if (backup && sy && (rc = weft_sync_backup_begin(sy, &skip)) != 0)
            die("step %ld: %s: %s", step, weft_strerror(rc), weft_comm_error(comm));
        if (rank == slow && o.straggle_ms > 0 && !skip) /* the slow device's compute */
            usleep((useconds_t)o.straggle_ms * 1000);
        /* Full sync weighs this rank's gradient by its share of the global
         * batch; the other modes step on the local mean. */
        int global_n = full_sync ? b.global_n : b.n;
        float loss = 0, gnorm = -1;
        int correct = 0, seen = full_sync ? b.global_n : b.n;
        double t_fb = now_s();
        for (int k = 0; k < o.accum && rc == 0 && !skip; k++) {
            int lo = (int)((long)k * b.n / o.accum), hi = (int)((long)(k + 1) * b.n / o.accum);
            size_t xo = (size_t)lo * (size_t)b.x_dim;
            const void *x = image ? (const void *)(b.x + xo) : (const void *)(b.tokens + xo);
            const int32_t *y = b.y + (image ? (size_t)lo : xo);
            float l = 0;
            rc = weft_zero_micro(z, hi - lo, global_n, k == o.accum - 1);
            if (rc == 0)
                rc = weft_model_forward(m, x, y, hi - lo, b.x_dim, &l);
            if (rc == 0)
                correct += weft_model_count_correct(m, y);
            if (rc == 0)
                rc = weft_model_backward(m);
            loss += l * (float)(hi - lo) / (float)global_n;
        }
        compute_s += now_s() - t_fb;
        if (rc != 0)
            die("step %ld: %s%s%s", step, weft_strerror(rc), comm ? ": " : "",
                comm ? weft_comm_error(comm) : "");
        /* The job's loss and accuracy: queued behind the gradient buckets,
         * collected after the optimiser step (the other modes report rank
         * 0's own: a collective would wait for stragglers). */
        float metrics[2] = { loss, (float)correct };
        weft_request *mreq = NULL;
        if (comm && full_sync &&
            (rc = weft_iallreduce(comm, metrics, metrics, 2, WEFT_F32, WEFT_SUM, &mreq)) != 0)
            die("step %ld: %s: %s", step, weft_strerror(rc), weft_comm_error(comm));
        /* What is needed of this batch after backward, then (full sync) the
         * next batch is made while the gradients are being reduced: the
         * loader is the one piece of the next step that does not depend on
         * them. Not before a checkpoint, which records the loader's place. */
        double epoch = (double)weft_loader_position(loader) / (double)d.ti.n;
        int bn = b.n, bgn = b.global_n, bxd = b.x_dim;
        int saving = o.save[0] && o.save_every > 0 && (step + 1) % o.save_every == 0;
        if (comm && full_sync && step + 1 < end && !saving) {
            t_ld = now_s();
            if ((rc = weft_loader_next(loader, &b)) != 0)
                die("step %ld: %s", step + 1, weft_strerror(rc));
            load_s += now_s() - t_ld;
            prefetched = 1;
        }
        float lr = weft_lr_at(&sched, weft_optim_steps(opt));
        int ready = 1;
        if (backup && sy) { /* the step's gradient: the first N - b ranks' */
            float in[2] = { loss, (float)correct }, out[3];
            rc = weft_sync_backup_grads(sy, skip ? 0 : bn, in, out);
            loss = out[0];
            correct = (int)lrintf(out[1]);
            seen = (int)lrintf(out[2]);
        }
        if (rc == 0 && stale && sy) /* applies the average of s steps ago, if any is due */
            rc = weft_sync_push_grads(sy, (float)world * (float)bn / (float)bgn, &ready);
        if (rc == 0 && ready)
            rc = weft_zero_step(z, lr, (float)r->clip, r->clip > 0 ? &gnorm : NULL);
        if (rc == 0 && sy)
            rc = weft_sync_after_step(sy);
        if (mreq) {
            int mrc = weft_wait(mreq);
            if (rc == 0)
                rc = mrc;
            loss = metrics[0];
            correct = (int)lrintf(metrics[1]);
            grad_bytes += nparams * sizeof(float);
        }
        if (rc != 0)
            die("step %ld: %s%s%s", step, weft_strerror(rc), comm ? ": " : "",
                comm ? weft_comm_error(comm) : "");
        if (!isfinite(loss))
            die("step %ld: loss is %f; lower --lr or use --clip", step, (double)loss);
        double elapsed = now_s() - pg.start;
        double rate = (double)(step + 1 - start_step) * r->batch / (elapsed > 0 ? elapsed : 1e-9);
        int rows = image ? seen : seen * bxd;
        csv_row(csv, step + 1, epoch, "train", loss, (double)correct / rows, lr, gnorm, rate,
                elapsed);
        progress_update(&pg, step + 1, loss, rate, step + 1 == end);
        if (o.save[0] && o.save_every > 0 && (step + 1) % o.save_every == 0)
            save_ckpt(o.save, r, &d, m, z, rank, comm && full_sync, loader, step + 1, &rng);
    }
    for (int ready = 1; sy && stale && ready;) { /* the averages still in flight */
        rc = weft_sync_pop_grads(sy, &ready);
        if (rc == 0 && ready)
            rc = weft_zero_step(z, weft_lr_at(&sched, weft_optim_steps(opt)), (float)r->clip,
                                NULL);
        if (rc != 0)
            die("last gradients: %s: %s", weft_strerror(rc), weft_comm_error(comm));
    }
    if (sy && (rc = weft_sync_finish(sy)) != 0)
        die("final parameter average: %s: %s", weft_strerror(rc), weft_comm_error(comm));
    double train_s = now_s() - pg.start, cpu1_all, cpu1_main;
    cpu_s(&cpu1_all, &cpu1_main);
    if (comm && full_sync && !o.quiet && end > start_step) {
        weft_zero_mem zm;
        weft_zero_memory(z, &zm);
        printf("between steps (rank 0): params + grads + optimiser resident %zu B; "
               "ZeRO formula %.0f B\n", zm.resident_bytes, zm.formula_bytes);
    }
    if (o.save[0]) {
        save_ckpt(o.save, r, &d, m, z, rank, comm && full_sync, loader, end, &rng);
        if (!o.quiet)
            printf("saved %s\n", o.save);
    }
    if ((rc = weft_zero_gather_params(z)) != 0)
        die("gathering parameters: %s", weft_strerror(rc));
    if (comm && !o.quiet) {
        printf("training took %.2f s on %d ranks (sync %s); parameter/gradient bytes handed to "
               "the network per rank: %.1f MB\n",
               train_s, world, o.sync,
               (double)(sy ? weft_sync_bytes(sy) : grad_bytes) / 1e6);
        long ns = end - start_step > 0 ? end - start_step : 1;
        double wait_s = weft_zero_wait_s(z);
        printf("rank 0 per step: %.2f ms data, %.2f ms forward+backward, %.2f ms waiting for "
               "gradient communication, %.2f ms the rest (optimiser, metrics)\n",
               1e3 * load_s / ns, 1e3 * compute_s / ns, 1e3 * wait_s / ns,
               1e3 * (train_s - load_s - compute_s - wait_s) / ns);
        printf("rank 0 CPU per step: %.2f ms training thread, %.2f ms communication threads\n",
               1e3 * (cpu1_main - cpu0_main) / ns,
               1e3 * ((cpu1_all - cpu0_all) - (cpu1_main - cpu0_main)) / ns);
    }
    if (!o.no_eval && rank == 0) {
        double epoch = (double)weft_loader_position(loader) / (double)d.ti.n;
        if (image)
            eval_mlp(m, &d, csv, end, epoch);
        else
            eval_gpt(m, &d, &o, csv, end, epoch);
    }
    if (csv)
        fclose(csv);
    weft_sync_destroy(sy);
    weft_zero_destroy(z);
    dump_comm = NULL;
    if (comm && (rc = weft_comm_destroy(comm)) != 0)
        die("leaving the job: %s", weft_strerror(rc));
    weft_loader_free(loader);
    weft_model_destroy(m);
    weft_dataset_free(d.train);
    weft_dataset_free(d.eval);
    return 0;
}
