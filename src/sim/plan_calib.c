/* The planner's calibration: the host's cores, weft-tune's constants and
 * measured block costs, kept in a per-host text file (plan_calib.h). */
#include "sim/plan_calib.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "train/host_cache.h"

static int say(char *err, size_t len, int rc, const char *what, const char *path, int line)
{
    if (err && len)
        snprintf(err, len, "%s:%d: %s", path, line, what);
    return rc;
}

int sim_calib_default_path(char *buf, size_t len)
{
    char paths[2][300];
    int n = 0, rc = host_cache_paths("plan", paths, &n);
    if (rc)
        return rc;
    /* the first that exists, else the first (where a save goes) */
    for (int i = 0; i < n; i++)
        if (access(paths[i], R_OK) == 0) {
            snprintf(buf, len, "%s", paths[i]);
            return 0;
        }
    snprintf(buf, len, "%s", n ? paths[0] : "");
    return 0;
}

void sim_calib_model_key(const weft_model_config *m, char *buf, size_t len)
{
    /* experts: the picks a token runs and their widths change a block's
     * time as much as its own width does */
    if (m->type == WEFT_MODEL_LLAMA && m->experts > 0)
        snprintf(buf, len, "llama:v%d,t%d,h%d,kv%d,d%d,f%d,tied%d,e%d,k%d,mf%d,s%d", m->vocab,
                 m->ctx, m->n_head, m->n_kv_head, m->d_model, m->ffn, m->tied, m->experts,
                 m->topk, m->moe_ffn, m->shared);
    else if (m->type == WEFT_MODEL_LLAMA)
        snprintf(buf, len, "llama:v%d,t%d,h%d,kv%d,d%d,f%d,tied%d,e%d", m->vocab, m->ctx,
                 m->n_head, m->n_kv_head, m->d_model, m->ffn, m->tied, m->experts);
    else
        snprintf(buf, len, "gpt:v%d,t%d,h%d,d%d", m->vocab, m->ctx, m->n_head, m->d_model);
}

static int add_block(sim_calib *c, const sim_calib_block *b)
{
    /* a later line for the same shape at the same rank count replaces the
     * earlier; those of other rank counts are kept beside it */
    for (int i = 0; i < c->nb; i++) {
        sim_calib_block *h = &c->b[i];
        if (h->rows == b->rows && h->seq == b->seq && h->kind == b->kind && h->tp == b->tp &&
            h->sp == b->sp && h->ranks == b->ranks && !strcmp(h->model, b->model)) {
            *h = *b;
            return 0;
        }
    }
    if (c->nb == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        sim_calib_block *nb = realloc(c->b, (size_t)cap * sizeof *nb);
        if (!nb)
            return WEFT_ENOMEM;
        c->b = nb;
        c->cap = cap;
    }
    c->b[c->nb++] = *b;
    return 0;
}

static int parse_line(sim_calib *c, char *s, const char *path, int line, char *err, size_t len)
{
    char *hash = strchr(s, '#');
    if (hash)
        *hash = 0;
    char word[16];
    int at = 0;
    if (sscanf(s, "%15s %n", word, &at) != 1)
        return 0;
    if (!strcmp(word, "cores")) {
        if (sscanf(s + at, "%d", &c->cores) != 1 || c->cores < 1)
            return say(err, len, WEFT_ECONFIG, "cores: want a count >= 1", path, line);
    } else if (!strcmp(word, "tune")) {
        cost_default(&c->coll);
        const char *where = NULL;
        if (cost_parse(&c->coll, s + at, &where))
            return say(err, len, WEFT_ECONFIG, "tune: not weft-tune's key=value list", path,
                       line);
        c->have_coll = 1;
        snprintf(c->coll_from, sizeof c->coll_from, "%.299s", path);
    } else if (!strcmp(word, "block")) {
        sim_calib_block b = { .tp = 1 };
        if (sscanf(s + at, "%95s %d %d %d %lf %lf %lf", b.model, &b.rows, &b.seq, &b.kind, &b.fwd,
                   &b.bwd_i, &b.bwd_w) != 7 ||
            b.rows < 1 || b.kind < 0 || b.kind > 2 || b.fwd < 0 || b.bwd_i < 0 || b.bwd_w < 0)
            return say(err, len, WEFT_ECONFIG,
                       "block: want MODEL ROWS SEQ KIND(0-2) FWD_S BWD_INPUT_S BWD_WEIGHT_S",
                       path, line);
        return add_block(c, &b);
    } else if (!strcmp(word, "tpblock")) {
        sim_calib_block b = { 0 };
        /* RANKS, the node's ranks at the probe, may be left out (0) */
        int got = sscanf(s + at, "%95s %d %d %d %d %d %lf %lf %lf %d", b.model, &b.tp, &b.sp,
                         &b.rows, &b.seq, &b.kind, &b.fwd, &b.bwd_i, &b.bwd_w, &b.ranks);
        /* TP 1: a whole block, each rank its own, every rank of the node at
         * once (so RANKS must say how many, and SP is 0) */
        if ((got != 9 && got != 10) || b.tp < 1 || (b.sp != 0 && b.sp != 1) || b.rows < 1 ||
            b.kind < 0 || b.kind > 2 || b.fwd < 0 || b.bwd_i < 0 || b.bwd_w < 0 ||
            (got == 10 && b.ranks < b.tp) ||
            (b.tp == 1 && (got != 10 || b.ranks < 2 || b.sp)))
            return say(err, len, WEFT_ECONFIG,
                       "tpblock: want MODEL TP SP(0-1) ROWS SEQ KIND(0-2) FWD_S "
                       "BWD_INPUT_S BWD_WEIGHT_S [RANKS(>= TP)]; TP 1 with SP 0 and RANKS >= 2",
                       path, line);
        /* weft-sim sync names the model as weft-train does: its key here */
        weft_model_config m;
        if (strchr(b.model, '=')) {
            if (weft_model_config_parse(b.model, &m))
                return say(err, len, WEFT_ECONFIG, "tpblock: not a model", path, line);
            sim_calib_model_key(&m, b.model, sizeof b.model);
        }
        return add_block(c, &b);
    } else if (!strcmp(word, "sync") || !strcmp(word, "msgcpu")) {
        int n;
        double sec, per = 0;
        int sync = word[0] == 's';
        /* msgcpu: a third number, the part a second of the piece waited
         * for, which older files leave out */
        int got = sscanf(s + at, "%d %lf %lf", &n, &sec, &per);
        if (got < 2 || (sync && got != 2) || n < 2 || n > 64 || sec < 0 || per < 0)
            return say(err, len, WEFT_ECONFIG, sync ? "sync: want RANKS(2-64) SECONDS"
                                                    : "msgcpu: want RANKS(2-64) SECONDS "
                                                      "[PER_SECOND_WAITED]",
                       path, line);
        (sync ? c->sync_s : c->msg_cpu)[n] = sec;
        if (!sync)
            c->msg_per[n] = per;
    } else if (!strcmp(word, "arcpu")) {
        int n, dp;
        double floats, sec;
        if (sscanf(s + at, "%d %d %lf %lf", &n, &dp, &floats, &sec) != 4 || n < 2 || n > 64 ||
            dp < 2 || dp > n || !(floats > 0) || sec < 0)
            return say(err, len, WEFT_ECONFIG,
                       "arcpu: want RANKS(2-64) DP(2-RANKS) FLOATS(> 0) SECONDS", path, line);
        int i = 0;
        while (i < c->nar && !(c->ar[i].n == n && c->ar[i].dp == dp && c->ar[i].floats == floats))
            i++;
        if (i == SIM_CALIB_AR_MAX)
            return say(err, len, WEFT_ECONFIG, "arcpu: too many sizes", path, line);
        c->ar[i].n = n, c->ar[i].dp = dp, c->ar[i].floats = floats, c->ar[i].s = sec;
        c->nar += i == c->nar;
    } else if (!strcmp(word, "chain")) {
        int n;
        double cores;
        if (sscanf(s + at, "%d %lf", &n, &cores) != 2 || n < 2 || n > 64 || !(cores > 0))
            return say(err, len, WEFT_ECONFIG, "chain: want RANKS(2-64) CORES(> 0)", path, line);
        c->chain[n] = cores;
    } else if (!strcmp(word, "update")) {
        int k;
        double sec;
        if (sscanf(s + at, "%d %lf", &k, &sec) != 2 || (k != 0 && k != 4 && k != 8) || sec < 0)
            return say(err, len, WEFT_ECONFIG, "update: want K(0, 4 or 8) SECONDS_A_PARAMETER",
                       path, line);
        c->update_s[k / 4] = sec;
    } else {
        return say(err, len, WEFT_ECONFIG,
                   "unknown line (cores, tune, block, tpblock, update, sync, chain, msgcpu or "
                   "arcpu)", path,
                   line);
    }
    return 0;
}

int sim_calib_load(sim_calib *c, const char *path, int *found, char *err, size_t len)
{
    memset(c, 0, sizeof *c);
    *found = 0;
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f)
        return path && *path && errno != ENOENT
                   ? say(err, len, WEFT_EIO, strerror(errno), path, 0)
                   : 0;
    *found = 1;
    char s[512];
    int line = 0, rc = 0;
    while (!rc && fgets(s, sizeof s, f)) {
        line++;
        rc = parse_line(c, s, path, line, err, len);
    }
    fclose(f);
    if (rc)
        sim_calib_free(c);
    return rc;
}

/* weft-tune's file: WEFT_TUNE_FILE, else the host's tune cache. */
static void load_tune(sim_calib *c)
{
    char paths[3][300];
    int n = 0;
    const char *env = getenv("WEFT_TUNE_FILE");
    if (env && *env)
        snprintf(paths[n++], sizeof paths[0], "%s", env);
    char cache[2][300];
    int nc = 0;
    if (host_cache_paths("tune", cache, &nc) == 0)
        for (int i = 0; i < nc && n < 3; i++)
            memcpy(paths[n++], cache[i], sizeof cache[i]);
    for (int i = 0; i < n; i++) {
        char text[4096];
        FILE *f = fopen(paths[i], "r");
        if (!f)
            continue;
        size_t got = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[got] = 0;
        cost_params p;
        cost_default(&p);
        if (cost_parse(&p, text, NULL) == 0) {
            c->coll = p;
            c->have_coll = 1;
            snprintf(c->coll_from, sizeof c->coll_from, "%.299s", paths[i]);
            return;
        }
    }
}

void sim_calib_measure_host(sim_calib *c)
{
    if (c->cores < 1) {
        /* the cores this process may run on (taskset, a container's
         * cpuset), which its ranks inherit; else the online ones */
        cpu_set_t set;
        CPU_ZERO(&set);
        c->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        if (c->cores < 1)
            c->cores = n > 0 && n < 1 << 20 ? (int)n : 0;
    }
    if (!c->have_coll)
        load_tune(c);
}

int sim_calib_save(const sim_calib *c, const char *path, char *err, size_t len)
{
    if (host_cache_mkdirs(path))
        return say(err, len, WEFT_EIO, "cannot make its folder", path, 0);
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%.300s.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return say(err, len, WEFT_EIO, strerror(errno), tmp, 0);
    fprintf(f, "# weft-sim plan calibration: block MODEL ROWS SEQ KIND(0 embedding, 1 block, "
               "2 head) fwd_s bwd_input_s bwd_weight_s, one thread\n");
    if (c->cores > 0)
        fprintf(f, "cores %d\n", c->cores);
    for (int n = 2; n <= 64; n++) {
        if (c->sync_s[n] > 0)
            fprintf(f, "sync %d %.9g\n", n, c->sync_s[n]);
        if (c->chain[n] > 0)
            fprintf(f, "chain %d %.9g\n", n, c->chain[n]);
        if (c->msg_cpu[n] > 0 || c->msg_per[n] > 0)
            fprintf(f, "msgcpu %d %.9g %.9g\n", n, c->msg_cpu[n], c->msg_per[n]);
    }
    for (int i = 0; i < c->nar; i++)
        fprintf(f, "arcpu %d %d %.9g %.9g\n", c->ar[i].n, c->ar[i].dp, c->ar[i].floats,
                c->ar[i].s);
    for (int k = 0; k < 3; k++)
        if (c->update_s[k] > 0)
            fprintf(f, "update %d %.9g\n", 4 * k, c->update_s[k]);
    for (int i = 0; i < c->nb; i++) {
        const sim_calib_block *b = &c->b[i];
        if (b->ranks > 0)
            fprintf(f, "tpblock %s %d %d %d %d %d %.9g %.9g %.9g %d\n", b->model, b->tp, b->sp,
                    b->rows, b->seq, b->kind, b->fwd, b->bwd_i, b->bwd_w, b->ranks);
        else if (b->tp > 1)
            fprintf(f, "tpblock %s %d %d %d %d %d %.9g %.9g %.9g\n", b->model, b->tp, b->sp,
                    b->rows, b->seq, b->kind, b->fwd, b->bwd_i, b->bwd_w);
        else
            fprintf(f, "block %s %d %d %d %.9g %.9g %.9g\n", b->model, b->rows, b->seq, b->kind,
                    b->fwd, b->bwd_i, b->bwd_w);
    }
    /* a whole file or none: another planner may be reading it */
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return say(err, len, WEFT_EIO, "cannot write", path, 0);
    }
    return 0;
}

void sim_calib_free(sim_calib *c)
{
    if (c) {
        free(c->b);
        c->b = NULL;
        c->nb = c->cap = 0;
    }
}

/* The fastest of four passes of m's one chunk, after one to warm up (as
 * weft-train times its blocks). */
static int time_chunk(weft_model *m, const void *x, const int32_t *y, const float *g, int B,
                      int T, double best[3])
{
    return weft_model_time_chunk(m, x, y, g, B, T, 5, best);
}

/* Block kind of m alone (the embedding, the first transformer block or
 * the head) on one thread, over rows sequences of seq tokens. */
static int probe(const weft_model_config *cfg, int rows, int seq, int kind, double out[3])
{
    int nb = weft_model_block_count(cfg);
    weft_block_range one = { kind == 0 ? 0 : kind == 1 ? 1 : nb - 1, 1 };
    weft_model *m;
    int rc = weft_model_create_stage(&m, cfg, 1, &one, 1, WEFT_STAGE_SPLIT_BACKWARD);
    if (rc)
        return rc;
    rc = weft_model_set_threads(m, 1);
    size_t in_n = 0, out_n = 0, toks = (size_t)rows * (size_t)seq;
    if (!rc)
        rc = weft_model_chunk_io(m, 0, rows, seq, &in_n, &out_n);
    size_t xin = kind == 0 ? toks : in_n;
    float *x = calloc(xin ? xin : 1, sizeof(float)), *g = calloc(out_n ? out_n : 1, sizeof(float));
    int32_t *y = calloc(toks ? toks : 1, sizeof(int32_t));
    double best_cc = 0;
    if (!rc && (!x || !g || !y))
        rc = WEFT_ENOMEM;
    if (!rc) {
        for (size_t i = 0; i < toks; i++)
            y[i] = (int32_t)((i * 2654435761u) % (unsigned)cfg->vocab);
        if (kind == 0)
            memcpy(x, y, toks * sizeof(int32_t)); /* tokens: any valid ones */
        else
            for (size_t i = 0; i < xin; i++)
                x[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < out_n; i++)
            g[i] = 1e-4f * (float)((i * 7919u) % 100);
        rc = time_chunk(m, x, y, out_n ? g : NULL, rows, seq, out);
    }
    /* the head's forward is followed by the count of right answers a
     * micro-batch (weft-train's accuracy): an argmax over the logits */
    for (int r = 0; !rc && kind == 2 && r < 5; r++) {
        double t0 = clock_now();
        int ok = weft_model_count_correct(m, y);
        double t = clock_now() - t0;
        rc = ok < 0 ? ok : 0;
        if (r == 0 || t < best_cc)
            best_cc = t;
    }
    if (!rc && kind == 2)
        out[0] += best_cc;
    free(x);
    free(g);
    free(y);
    weft_model_destroy(m);
    return rc;
}

int sim_calib_block_get(sim_calib *c, const weft_model_config *m, int rows, int seq, int kind,
                        double out[3])
{
    sim_calib_block b = { .rows = rows, .seq = seq, .kind = kind, .tp = 1 };
    sim_calib_model_key(m, b.model, sizeof b.model);
    for (int i = 0; i < c->nb; i++) {
        const sim_calib_block *h = &c->b[i];
        if (h->tp <= 1 && !h->ranks && h->rows == rows && h->seq == seq && h->kind == kind &&
            !strcmp(h->model, b.model)) {
            out[0] = h->fwd, out[1] = h->bwd_i, out[2] = h->bwd_w;
            c->hits++;
            return 1;
        }
    }
    if (!c->probe || m->type == WEFT_MODEL_MLP || (kind == 1 && m->n_layer < 1)) {
        c->missed++;
        return 0;
    }
    double t[3];
    int rc = probe(m, rows, seq, kind, t);
    if (rc)
        return -rc;
    b.fwd = t[0], b.bwd_i = t[1], b.bwd_w = t[2];
    if ((rc = add_block(c, &b)))
        return -rc;
    c->probed++;
    c->hits++;
    out[0] = t[0], out[1] = t[1], out[2] = t[2];
    return 1;
}

int sim_calib_tp_block_get(const sim_calib *c, const weft_model_config *m, int rows, int seq,
                           int kind, int tp, int sp, int ranks, double out[3])
{
    char key[96];
    sim_calib_model_key(m, key, sizeof key);
    const sim_calib_block *best = NULL;
    long best_d = 0;
    for (int i = 0; i < c->nb; i++) {
        const sim_calib_block *h = &c->b[i];
        if (h->tp != tp || h->sp != sp || h->rows != rows || h->seq != seq ||
            h->kind != kind || strcmp(h->model, key) || (tp == 1 && !h->ranks))
            continue;
        /* the slice's CPU grows with the ranks sharing the cores (their
         * caches, switches and waits): the nearest count measured; a line
         * that does not say comes last */
        long d = h->ranks > 0 ? labs((long)h->ranks - ranks) : 1L << 30;
        if (!best || d < best_d) {
            best = h;
            best_d = d;
        }
    }
    if (!best)
        return 0;
    out[0] = best->fwd, out[1] = best->bwd_i, out[2] = best->bwd_w;
    return 1;
}

/* Other work on the machine only lengthens a pass, and a burst of it
 * can cover a few in a row: the fastest of five read 1.31-1.97 ns a
 * parameter in calibrations minutes apart (loaded), which moved dp 8's
 * price at 8 ranks on 2 cores by 1.4 ms. A pass is 0.3 ms for the test
 * GPT; a model whose passes pass a second in all stops after five. */
#define UPDATE_PASSES 20

/* The fastest of UPDATE_PASSES steps' work after backward on n
 * parameters, after one to warm up, one thread, as weft-train runs it a
 * rank (weft_zero_step with its default clip): the squares of the
 * gradients for the norm, the gradients scaled by the clip, the
 * optimiser's update, and the gradients zeroed before the next step's
 * backward adds into them. */
static int probe_update(int optim_bytes, size_t n, double *sec)
{
    weft_optim_config oc;
    weft_optim_config_default(&oc, optim_bytes == 8 ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_SGD);
    if (optim_bytes == 0)
        oc.momentum = 0;
    weft_optim *o;
    int rc = weft_optim_create(&o, &oc, 0, n);
    if (rc)
        return rc;
    float *p = calloc(n, sizeof *p), *g = calloc(n, sizeof *g);
    rc = p && g ? weft_optim_set_threads(o, 1) : WEFT_ENOMEM;
    double best = -1, spent = 0;
    /* a large model's passes stop at about a second after the first five */
    for (int r = 0; !rc && r <= UPDATE_PASSES && (r <= 5 || spent < 1.0); r++) {
        for (size_t i = 0; i < n; i++)
            g[i] = 1e-3f * (float)(i % 97) - 0.05f;
        double t0 = clock_now();
        double ss = weft_sumsq(g, n);
        /* a norm above the clip, as early steps have: the scaling runs */
        weft_scale(g, n, weft_clip_scale(sqrt(ss) + 2, 1.0f));
        rc = weft_optim_step(o, p, g, 1e-3f);
        memset(g, 0, n * sizeof *g);
        double t = clock_now() - t0;
        spent += t;
        if (r && (best < 0 || t < best))
            best = t;
    }
    *sec = best / (double)n;
    free(p);
    free(g);
    weft_optim_destroy(o);
    return rc;
}

int sim_calib_update_get(sim_calib *c, int optim_bytes, double n, double *sec)
{
    int k = optim_bytes >= 8 ? 2 : optim_bytes >= 4 ? 1 : 0;
    *sec = c->update_s[k];
    if (*sec > 0)
        return 1;
    if (!c->probe || n < 1)
        return 0;
    int rc = probe_update(4 * k, (size_t)n, sec);
    if (rc)
        return -rc;
    c->update_s[k] = *sec;
    return 1;
}

/* v[n] where measured, else at the nearest count measured; 0: none. */
static double nearest(const double *v, int n)
{
    int best = 0;
    for (int k = 2; k <= 64; k++)
        if (v[k] > 0 && (!best || abs(k - n) < abs(best - n)))
            best = k;
    return best ? v[best] : 0;
}

double sim_calib_sync(const sim_calib *c, int n)
{
    return nearest(c->sync_s, n);
}

double sim_calib_chain(const sim_calib *c, int n)
{
    return nearest(c->chain, n);
}

/* The count nearest n with a msgcpu line (either part); 0: none. */
static int msg_at(const sim_calib *c, int n)
{
    int best = 0;
    for (int k = 2; k <= 64; k++)
        if ((c->msg_cpu[k] > 0 || c->msg_per[k] > 0) && (!best || abs(k - n) < abs(best - n)))
            best = k;
    return best;
}

double sim_calib_msg_cpu(const sim_calib *c, int n)
{
    int k = msg_at(c, n);
    return k ? c->msg_cpu[k] : 0;
}

double sim_calib_msg_cpu_per(const sim_calib *c, int n)
{
    int k = msg_at(c, n);
    return k ? c->msg_per[k] : 0;
}

double sim_calib_ar_cpu(const sim_calib *c, int n, int dp, double floats)
{
    int near = 0;
    for (int i = 0; i < c->nar; i++)
        if (c->ar[i].dp == dp && (!near || abs(c->ar[i].n - n) < abs(near - n)))
            near = c->ar[i].n;
    if (!near || floats <= 0)
        return 0;
    /* the sizes measured at that count, with nothing at 0 floats: the
     * stretch holding floats, else the last one extended */
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    for (;;) {
        int next = -1;
        for (int i = 0; i < c->nar; i++)
            if (c->ar[i].n == near && c->ar[i].dp == dp && c->ar[i].floats > x1 &&
                (next < 0 || c->ar[i].floats < c->ar[next].floats))
                next = i;
        if (next < 0)
            break;
        x0 = x1, y0 = y1;
        x1 = c->ar[next].floats, y1 = c->ar[next].s;
        if (x1 >= floats)
            break;
    }
    double s = y0 + (y1 - y0) * (floats - x0) / (x1 - x0);
    return s > 0 ? s : 0;
}

int sim_calib_describe(const sim_calib *c, char *buf, size_t len)
{
    char coll[360], blocks[200], gf[48] = "";
    if (c->have_coll)
        snprintf(coll, sizeof coll, "measured (weft-tune's constants, %s)", c->coll_from);
    else
        snprintf(coll, sizeof coll, "assumed (the topology's links; no weft-tune file: "
                                    "WEFT_TUNE_FILE or the host's tune cache)");
    if (c->gflops > 0)
        snprintf(gf, sizeof gf, ", %.3g GFLOP/s a core", c->gflops);
    if (c->hits && !c->missed)
        snprintf(blocks, sizeof blocks, "measured (%d shapes kept, %d probed now%s)", c->nb,
                 c->probed, gf);
    else if (c->hits)
        snprintf(blocks, sizeof blocks, "measured for some shapes, assumed (FLOPs at --gflops) "
                 "for others: --calibrate measures them");
    else
        snprintf(blocks, sizeof blocks, "assumed (FLOPs at --gflops; --calibrate measures them)");
    char cores[96];
    if (c->cores > 0)
        snprintf(cores, sizeof cores, "%d measured", c->cores);
    else
        snprintf(cores, sizeof cores, "assumed (the topology's)");
    char upd[96] = "";
    for (int k = 0; k < 3; k++)
        if (c->update_s[k] > 0) {
            size_t at = strlen(upd);
            snprintf(upd + at, sizeof upd - at, "%s%s %.3g ns", at ? ", " : "",
                     k == 2 ? "adamw" : k ? "sgd+momentum" : "sgd", 1e9 * c->update_s[k]);
        }
    char syn[400] = "";
    for (int n = 2; n <= 64; n++)
        if (c->sync_s[n] > 0 || c->chain[n] > 0 || c->msg_cpu[n] > 0 || c->msg_per[n] > 0) {
            size_t at = strlen(syn);
            snprintf(syn + at, sizeof syn - at, "%s%.3g ms, a chain %.3g cores at %d ranks",
                     at ? "; " : "", 1e3 * c->sync_s[n], c->chain[n], n);
            at = strlen(syn);
            if (c->msg_cpu[n] > 0)
                snprintf(syn + at, sizeof syn - at, ", %.3g us of CPU a message's end",
                         1e6 * c->msg_cpu[n]);
        }
    int ntp = 0, nsh = 0;
    for (int i = 0; i < c->nb; i++) {
        ntp += c->b[i].tp > 1;
        nsh += c->b[i].tp == 1 && c->b[i].ranks > 0;
    }
    char tps[120] = "not measured (weft-sim sync --model)";
    if (ntp || nsh)
        snprintf(tps, sizeof tps, "%d shapes measured; whole blocks on the shared cores: %d "
                 "shapes measured", ntp, nsh);
    char ars[160] = "";
    if (c->nar)
        snprintf(ars, sizeof ars, "; a data-parallel all-reduce's CPU: %d sizes measured",
                 c->nar);
    for (int n = 2; n <= 64; n++)
        if (c->msg_per[n] > 0) {
            size_t at = strlen(ars);
            snprintf(ars + at, sizeof ars - at, "; a message's end also %.3g of its wait at %d "
                     "ranks", c->msg_per[n], n);
        }
    return snprintf(buf, len, "block costs: %s; collectives: %s; cores: %s; update a "
                    "parameter: %s; sync on shared cores: %s; tensor-parallel slices: %s%s",
                    blocks, coll, cores, upd[0] ? upd : "not measured",
                    syn[0] ? syn : "not measured (weft-sim sync)", tps, ars);
}
