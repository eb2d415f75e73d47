/* The run's configuration: the table of run options (the ones a checkpoint
 * keeps), their parsing and defaults, the launch options, and the checks
 * that read them together. Keys are weft-train's long options. */
#include "run/run_config.h"

#include "run/run_cp.h"
#include "run/run_elastic_hooks.h"

#include "core/size.h"
#include "train/pipe_sched.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
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

/* A bad value: its message in err, WEFT_EINVAL. */
static int bad(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return WEFT_EINVAL;
}

static int parse_long(const char *key, const char *v, long lo, long hi, long *out, char *err,
                      size_t cap)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return bad(err, cap, "--%s: bad value '%s' (want an integer in %ld..%ld)", key, v, lo,
                   hi);
    *out = x;
    return 0;
}

static int parse_int(const char *key, const char *v, long lo, long hi, int *out, char *err,
                     size_t cap)
{
    long x;
    int rc = parse_long(key, v, lo, hi, &x, err, cap);
    if (rc == 0)
        *out = (int)x;
    return rc;
}

static int parse_double(const char *key, const char *v, double lo, double *out, char *err,
                        size_t cap)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo) || !isfinite(x))
        return bad(err, cap, "--%s: bad value '%s'", key, v);
    *out = x;
    return 0;
}

/* --mem-limit: bytes, in the grammar of core/size.h (64M, 2GiB, 1.5G). */
static int parse_bytes(const char *key, const char *v, uint64_t lo, double *out, char *err,
                       size_t cap)
{
    uint64_t x;
    char why[200];
    if (size_parse(v, lo, UINT64_MAX, &x, why, sizeof why) != 0)
        return bad(err, cap, "--%s: %s", key, why);
    *out = (double)x;
    return 0;
}

/* --bucket-mb, --pp-memory: a bare number counts MiB, as these options
 * always have (0.001 included); one with a unit is a size like any other
 * (512K, 2G), so nobody has to work out 2G in MiB. */
static int parse_mib(const char *key, const char *v, double lo, double *out, char *err,
                     size_t cap)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end != v && !*end && !errno && isfinite(x) && x >= lo) {
        *out = x;
        return 0;
    }
    if (end != v && !*end) /* a number, but negative, too small or not finite */
        return bad(err, cap, "--%s: bad value '%s' (want MiB, at least %g)", key, v, lo);
    uint64_t b;
    if (size_parse(v, 0, UINT64_MAX, &b, NULL, 0) != 0 || (double)b / 1048576.0 < lo)
        return bad(err, cap,
                   "--%s: bad size '%s' (want MiB as a bare number, e.g. 25, or a size: bytes "
                   "or a number with K, M, G or T (powers of 1024), e.g. 64M)", key, v);
    *out = (double)b / 1048576.0;
    return 0;
}

static int copy_str(char *dst, size_t dcap, const char *key, const char *v, char *err,
                    size_t cap)
{
    if (strlen(v) >= dcap)
        return bad(err, cap, "--%s: value too long", key);
    strcpy(dst, v);
    return 0;
}

/* A value that must be one of two words. */
static int pick2(const char *key, const char *v, const char *a, const char *b, char *dst,
                 size_t dcap, char *err, size_t cap)
{
    if (strcmp(v, a) && strcmp(v, b))
        return bad(err, cap, "--%s: want %s or %s, not '%s'", key, a, b, v);
    return copy_str(dst, dcap, key, v, err, cap);
}

static int set_run_opt(run_opts *r, int k, const char *v, char *err, size_t cap)
{
    const char *key = run_keys[k];
    long x = 0;
    int rc = 0;
    switch (k) {
    case O_MODEL: return copy_str(r->model, sizeof r->model, key, v, err, cap);
    case O_DATA: return copy_str(r->data, sizeof r->data, key, v, err, cap);
    case O_OPTIM: return pick2(key, v, "sgd", "adamw", r->optim, sizeof r->optim, err, cap);
    case O_PRECISION:
        return pick2(key, v, "fp32", "bf16", r->precision, sizeof r->precision, err, cap);
    case O_SCHEDULE:
        return pick2(key, v, "constant", "cosine", r->schedule, sizeof r->schedule, err, cap);
    case O_STEPS: return parse_long(key, v, 0, 1L << 40, &r->steps, err, cap);
    case O_EPOCHS: return parse_double(key, v, 0, &r->epochs, err, cap);
    case O_BATCH: return parse_int(key, v, 1, 1 << 20, &r->batch, err, cap);
    case O_LR: return parse_double(key, v, 0, &r->lr, err, cap);
    case O_MIN_LR: return parse_double(key, v, 0, &r->min_lr, err, cap);
    case O_MOMENTUM: return parse_double(key, v, 0, &r->momentum, err, cap);
    case O_WD: return parse_double(key, v, 0, &r->weight_decay, err, cap);
    case O_CLIP: return parse_double(key, v, 0, &r->clip, err, cap);
    case O_WARMUP: return parse_long(key, v, 0, 1L << 30, &r->warmup, err, cap);
    case O_SEED:
    case O_DATA_SEED:
        rc = parse_long(key, v, 0, 0x7fffffffffffffffL, &x, err, cap);
        if (rc == 0)
            *(k == O_SEED ? &r->seed : &r->data_seed) = (unsigned long long)x;
        return rc;
    case O_SEQ: return parse_int(key, v, 1, 1 << 16, &r->seq, err, cap);
    case O_DIGITS: return parse_int(key, v, 1, 9, &r->digits, err, cap);
    case O_LAYERS: return parse_int(key, v, 1, 256, &r->layers, err, cap);
    case O_HEADS: return parse_int(key, v, 1, 256, &r->heads, err, cap);
    case O_DIM: return parse_int(key, v, 1, 1 << 16, &r->dim, err, cap);
    case O_TRAIN_SIZE: return parse_long(key, v, 1, 1L << 32, &r->train_size, err, cap);
    case O_FORMAT:
        if (run_opts_format_code(v) < 0)
            return bad(err, cap,
                       "--format: want plain or a list of padded,reversed,answer-loss, not '%s'",
                       v);
        return copy_str(r->format, sizeof r->format, key, v, err, cap);
    }
    return bad(err, cap, "unknown option '--%s'", key);
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
    /* a Llama reads token windows as a GPT does */
    return strncmp(r->model, "gpt", 3) == 0 || strncmp(r->model, "llama:", 6) == 0;
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

int run_opts_merge(weft_run *t, run_opts *r, unsigned set, char *saved)
{
    char err[512];
    char *save_ptr = NULL;
    for (char *line = strtok_r(saved, "\n", &save_ptr); line;
         line = strtok_r(NULL, "\n", &save_ptr)) {
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
            else if (set_run_opt(r, k, eq + 1, err, sizeof err) != 0)
                return run_fail(t, WEFT_EIO, "%s", err);
        }
    }
    /* a new length on the command line replaces the saved one entirely */
    if (set & (1u << O_STEPS))
        r->epochs = -1;
    if (set & (1u << O_EPOCHS))
        r->steps = -1;
    return 0;
}

/* gpipe, 1f1b, interleaved:V, zb: the pipeline's schedules, which
 * --schedule takes beside the learning-rate ones. */
static int is_pp_schedule(const char *v)
{
    return strcmp(v, "gpipe") == 0 || strcmp(v, "1f1b") == 0 || strcmp(v, "zb") == 0 ||
           strncmp(v, "interleaved", 11) == 0;
}

static int set_pp_schedule(opts *o, const char *v, char *err, size_t cap)
{
    pipe_spec sp;
    if (!is_pp_schedule(v) || pipe_spec_parse(v, 2, 2, &sp) != 0)
        return bad(err, cap,
                   "--pp-schedule: want gpipe, 1f1b, interleaved:V (V >= 2) or zb, not '%s'", v);
    return copy_str(o->pp_schedule, sizeof o->pp_schedule, "pp-schedule", v, err, cap);
}

void run_config_init(opts *o)
{
    memset(o, 0, sizeof *o);
    run_opts_init(&o->r);
    o->eval_prompts = 500;
    o->accum = 1;
    o->straggle_rank = -1;
    strcpy(o->sync, "full");
    o->outer_lr = o->outer_momentum = -1;
    o->speed = 1;
    strcpy(o->consistency, "bsp");
}

/* The flags: keys without a value. */
static int *flag_of(opts *o, const char *key)
{
    return strcmp(key, "no-eval") == 0       ? &o->no_eval
           : strcmp(key, "eval-only") == 0   ? &o->eval_only
           : strcmp(key, "sp") == 0          ? &o->sp
           : strcmp(key, "recompute") == 0   ? &o->recompute
           : strcmp(key, "quiet") == 0       ? &o->quiet
           : strcmp(key, "elastic") == 0     ? &o->elastic
           : strcmp(key, "save-cached") == 0 ? &o->save_cached
                                             : NULL;
}

static int set_straggle(opts *o, const char *v, char *err, size_t cap)
{
    char *end;
    long r = strtol(v, &end, 10), ms = -1;
    if (strncmp(v, "any:", 4) == 0) { /* -2: a different rank every step */
        r = -2;
        end = (char *)v + 3;
    }
    if (end != v && *end == ':')
        ms = strtol(end + 1, &end, 10);
    if (r < -2 || r == -1 || ms < 0 || ms > 600000 || *end)
        return bad(err, cap, "--straggle: want RANK:MS, not '%s'", v);
    o->straggle_rank = (int)r;
    o->straggle_ms = (int)ms;
    return 0;
}

/* The options parsed by a library of their own: sync modes, compressors,
 * consistency models, rank orders. */
static int set_checked(opts *o, const char *key, const char *v, char *err, size_t cap)
{
    if (strcmp(key, "sync") == 0) {
        weft_sync_config sc;
        if (weft_sync_parse(v, &sc) != 0)
            return bad(err, cap, "--sync: want full, local:H, diloco:H, gossip, stale:S, "
                       "backup:B, streaming:H:F[:T] or hier:full/diloco:H, not '%s'", v);
        return copy_str(o->sync, sizeof o->sync, key, v, err, cap);
    }
    if (strcmp(key, "compress") == 0) {
        weft_compress_spec cs;
        if (weft_compress_parse(v, &cs) != 0)
            return bad(err, cap,
                       "--compress: want fp16, bf16, int8, int4, topk:K or powersgd:R, not '%s'",
                       v);
        return copy_str(o->compress, sizeof o->compress, key, v, err, cap);
    }
    if (strcmp(key, "consistency") == 0) {
        weft_ps_config pc;
        weft_ps_config_default(&pc);
        if (weft_ps_consistency_parse(v, &pc) != 0)
            return bad(err, cap, "--consistency: want bsp, ssp:S or asp, not '%s'", v);
        return copy_str(o->consistency, sizeof o->consistency, key, v, err, cap);
    }
    if (strcmp(key, "order") == 0) {
        weft_layout l;
        if (weft_layout_init(&l, 1, 1, 1, v) != 0)
            return bad(err, cap, "--order: want tp, dp and pp in some order, fastest first "
                       "(tp-dp-pp), not '%s'", v);
        return copy_str(o->order, sizeof o->order, key, v, err, cap);
    }
    return 1;
}

/* The words and numbers of the launch; 1: not one of them. */
static int set_launch(opts *o, const char *key, const char *v, char *err, size_t cap)
{
    double x;
    int rc;
    if (strcmp(key, "save") == 0)
        return copy_str(o->save, sizeof o->save, key, v, err, cap);
    if (strcmp(key, "resume") == 0)
        return copy_str(o->resume, sizeof o->resume, key, v, err, cap);
    if (strcmp(key, "metrics") == 0)
        return copy_str(o->metrics, sizeof o->metrics, key, v, err, cap);
    if (strcmp(key, "init-from") == 0)
        return copy_str(o->init_from, sizeof o->init_from, key, v, err, cap);
    if (strcmp(key, "export") == 0)
        return copy_str(o->export_dir, sizeof o->export_dir, key, v, err, cap);
    if (strcmp(key, "pp-partition") == 0)
        return copy_str(o->pp_partition, sizeof o->pp_partition, key, v, err, cap);
    if (strcmp(key, "pp-costs") == 0)
        return copy_str(o->pp_costs, sizeof o->pp_costs, key, v, err, cap);
    if (strcmp(key, "pp-schedule") == 0)
        return set_pp_schedule(o, v, err, cap);
    if (strcmp(key, "straggle") == 0)
        return set_straggle(o, v, err, cap);
    if (strcmp(key, "progress") == 0)
        return copy_str(o->progress, sizeof o->progress, key, v, err, cap);
    if (strcmp(key, "batch-shares") == 0)
        return copy_str(o->batch_shares, sizeof o->batch_shares, key, v, err, cap);
    if (strcmp(key, "speed") == 0) {
        if ((rc = parse_double(key, v, 1e-6, &x, err, cap)) != 0 || x > 1)
            return rc ? rc : bad(err, cap, "--speed: want a fraction in (0, 1], not '%s'", v);
        o->speed = x;
        return 0;
    }
    if (strcmp(key, "outer-lr") == 0 || strcmp(key, "outer-momentum") == 0) {
        int lr = strcmp(key, "outer-lr") == 0;
        if ((rc = parse_double(key, v, -1e30, &x, err, cap)) != 0)
            return rc;
        if (lr && !(x > 0 && x <= 10))
            return bad(err, cap, "--outer-lr: want a learning rate in (0, 10], not '%s'", v);
        if (!lr && !(x >= 0 && x < 1))
            return bad(err, cap, "--outer-momentum: want a momentum in [0, 1), not '%s'", v);
        *(lr ? &o->outer_lr : &o->outer_momentum) = x;
        return 0;
    }
    if (strcmp(key, "mode") == 0) {
        if (strcmp(v, "dp") && strcmp(v, "ps"))
            return bad(err, cap, "--mode: want dp or ps, not '%s'", v);
        o->ps = strcmp(v, "ps") == 0;
        return 0;
    }
    if (strcmp(key, "layout") == 0) {
        if (strcmp(v, "auto") != 0)
            return bad(err, cap, "--layout: want auto (or give --tp/--pp/--zero), not '%s'", v);
        o->layout_auto = 1;
        return 0;
    }
    if (strcmp(key, "bucket-mb") == 0)
        return parse_mib(key, v, 0.001, &o->bucket_mb, err, cap);
    if (strcmp(key, "pp-memory") == 0)
        return parse_mib(key, v, 0, &o->pp_memory_mb, err, cap);
    if (strcmp(key, "mem-limit") == 0)
        return parse_bytes(key, v, 1, &o->mem_limit, err, cap);
    return set_checked(o, key, v, err, cap);
}

/* The integer launch options: key, field, range. */
static int set_count(opts *o, const char *key, const char *v, char *err, size_t cap)
{
    static const struct {
        const char *key;
        long lo, hi;
    } longs[] = { { "save-every", 0, 1L << 40 }, { "stop-at", 1, 1L << 40 },
                  { "log-every", 0, 1L << 40 } },
      ints[] = { { "threads", 0, 4096 }, { "eval-prompts", 0, 1 << 24 }, { "zero", 0, 3 },
                 { "accum", 1, 1 << 16 }, { "pp", 1, 1024 }, { "tp", 1, 1024 },
                 { "micro-batches", 1, 1 << 16 }, { "keep", 0, 1 << 20 }, { "ep", 1, 4096 },
                 { "cp", 1, 4096 } };
    long *lp[] = { &o->save_every, &o->stop_at, &o->log_every };
    int *ip[] = { &o->threads, &o->eval_prompts, &o->zero, &o->accum, &o->pp, &o->tp, &o->micro,
                  &o->keep, &o->ep, &o->cp };
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
        if (strcmp(key, longs[i].key) == 0)
            return parse_long(key, v, longs[i].lo, longs[i].hi, lp[i], err, cap);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(key, ints[i].key) == 0)
            return parse_int(key, v, ints[i].lo, ints[i].hi, ip[i], err, cap);
    return 1;
}

static int unknown(const char *key, char *err, size_t cap)
{
    snprintf(err, cap, "unknown option '--%s'", key);
    return WEFT_ENOTSUP;
}

/* Whether a launch key is one (tried on a scratch copy with an empty
 * value, which every one of them either takes or refuses). */
static int known_key(const char *key)
{
    static const opts none;
    opts scratch = none;
    char err[256];
    return set_count(&scratch, key, "", err, sizeof err) <= 0 ||
           set_launch(&scratch, key, "", err, sizeof err) <= 0 ||
           elastic_option(&scratch, key, "", err, sizeof err) != 0;
}

int run_config_key(opts *o, const char *key, const char *v, char *err, size_t cap)
{
    if (!key)
        return bad(err, cap, "no option named");
    int *flag = flag_of(o, key);
    if (flag) {
        if (v)
            return bad(err, cap, "--%s: a flag, it takes no value", key);
        *flag = 1;
        return 0;
    }
    int k = 0;
    while (k < O_COUNT && strcmp(key, run_keys[k]) != 0)
        k++;
    if (!v)
        return k < O_COUNT || known_key(key) ? bad(err, cap, "bad argument '--%s'", key)
                                             : unknown(key, err, cap);
    if (k == O_SCHEDULE && is_pp_schedule(v))
        return set_pp_schedule(o, v, err, cap); /* --schedule names a pipeline schedule too */
    if (k < O_COUNT) {
        int rc = set_run_opt(&o->r, k, v, err, cap);
        if (rc == 0)
            o->set |= 1u << k;
        return rc;
    }
    int rc = set_count(o, key, v, err, cap);
    if (rc <= 0)
        return rc;
    rc = set_launch(o, key, v, err, cap);
    if (rc <= 0)
        return rc;
    rc = elastic_option(o, key, v, err, cap);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    return unknown(key, err, cap);
}

/* An option that contradicts another: its message in err, WEFT_ECONFIG. */
static int refuse(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return WEFT_ECONFIG;
}

/* The model-parallel options against the rest. */
static int check_layout(const opts *o, char *err, size_t cap)
{
    int model_par = o->pp > 1 || o->tp > 1;
    if (model_par && o->ps)
        return refuse(err, cap, "--pp and --tp split the model; --mode ps keeps it whole on "
                      "the servers");
    if (model_par && strcmp(o->sync, "full") != 0)
        return refuse(err, cap, "--pp/--tp: the model's parts take --sync full, not --sync %s",
                      o->sync);
    if (model_par && o->accum > 1)
        return refuse(err, cap, "--pp/--tp: micro-batches are --micro-batches, not --accum");
    if (o->pp <= 1 && (o->pp_schedule[0] || o->pp_partition[0]))
        return refuse(err, cap, "--schedule %s and --pp-partition need --pp 2 or more",
                      o->pp_schedule[0] ? o->pp_schedule : "...");
    if (!model_par && (o->micro || o->order[0]))
        return refuse(err, cap, "--micro-batches and --order need --pp or --tp");
    if (o->sp && o->tp <= 1)
        return refuse(err, cap, "--sp splits the sequence over the tensor group: it needs --tp "
                      "2 or more");
    return run_cp_check(o, err, cap);
}

int run_config_check(const opts *o, int joining, char *err, size_t cap)
{
    if ((o->set & (1u << O_STEPS)) && (o->set & (1u << O_EPOCHS)))
        return refuse(err, cap, "give --steps or --epochs, not both");
    if (o->init_from[0] && o->resume[0])
        return refuse(err, cap, "--init-from starts a run from weights, --resume continues "
                      "one: give one of them");
    if ((o->init_from[0] || o->export_dir[0]) && o->ps)
        return refuse(err, cap, "--init-from and --export: not with --mode ps");
    if (o->eval_only && (o->no_eval || o->save[0] || o->save_every || o->ps))
        return refuse(err, cap, "--eval-only evaluates the model it starts from: it takes "
                      "no --no-eval, --save, --save-every or --ps");
    if (o->layout_auto && (o->pp || o->tp || o->zero || o->micro || o->pp_schedule[0] || o->sp))
        return refuse(err, cap, "--layout auto chooses --tp, --pp, --zero, --micro-batches, "
                      "--schedule and --sp: give it none of them");
    if ((o->outer_lr >= 0 || o->outer_momentum >= 0) && !strstr(o->sync, "diloco:") &&
        !strstr(o->sync, "streaming:"))
        return refuse(err, cap, "--outer-lr and --outer-momentum are DiLoCo's outer step's: "
                      "they need --sync diloco:H, streaming:H:F[:T] or hier:full/..., not "
                      "--sync %s", o->sync);
    /* a joiner would need a whole replica's worth of ranks at once */
    if (joining && o->elastic && (o->pp > 1 || o->tp > 1))
        return refuse(err, cap, "elastic: joining a --pp/--tp job is not supported: a joiner "
                      "would need a whole replica's worth of ranks at once");
    return check_layout(o, err, cap);
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

/* ---- the public configuration --------------------------------------------------- */

int weft_run_config_new(weft_run_config **out)
{
    if (!out)
        return WEFT_EINVAL;
    *out = calloc(1, sizeof **out);
    if (!*out)
        return WEFT_ENOMEM;
    run_config_init(&(*out)->o);
    return 0;
}

int weft_run_config_set(weft_run_config *cfg, const char *key, const char *value)
{
    if (!cfg)
        return WEFT_EINVAL;
    cfg->err[0] = 0;
    return run_config_key(&cfg->o, key, value, cfg->err, sizeof cfg->err);
}

int weft_run_config_check(weft_run_config *cfg, int joining)
{
    if (!cfg)
        return WEFT_EINVAL;
    cfg->err[0] = 0;
    return run_config_check(&cfg->o, joining, cfg->err, sizeof cfg->err);
}

const char *weft_run_config_error(const weft_run_config *cfg)
{
    return cfg ? cfg->err : "no configuration";
}

void weft_run_config_log(weft_run_config *cfg, weft_run_log_fn fn, void *arg)
{
    if (!cfg)
        return;
    cfg->log = fn;
    cfg->log_arg = arg;
}

void weft_run_config_free(weft_run_config *cfg)
{
    free(cfg);
}
