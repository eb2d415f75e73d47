/* The run's report: the metrics CSV, MFU, and the lines that open and
 * close a data-parallel run, through the run's log. The progress line is
 * the caller's: report_step leaves the figures it shows for weft_run_info. */
#include "run/run_report.h"

#include "run/run_cp.h"
#include "run/run_ep.h"
#include "run/run_sync.h"
#include "run/run_sync_time.h"

#include "core/clock.h"
#include "train/flops.h"
#include "train/mm_auto.h"
#include "train/model.h"
#include "train/peak.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* CPU seconds of this process (all threads) and of the calling thread. */
void cpu_s(double *process, double *thread)
{
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_THREAD, &b);
    *process = (double)a.ru_utime.tv_sec + 1e-6 * (double)a.ru_utime.tv_usec +
               (double)a.ru_stime.tv_sec + 1e-6 * (double)a.ru_stime.tv_usec;
    *thread = (double)b.ru_utime.tv_sec + 1e-6 * (double)b.ru_utime.tv_usec +
              (double)b.ru_stime.tv_sec + 1e-6 * (double)b.ru_stime.tv_usec;
}

/* mfu < 0: the column left empty (evaluation rows, no peak). */
static void csv_line(FILE *f, long step, double epoch, const char *split, double loss,
                     double acc, double lr, double gnorm, double rate, double elapsed, double mfu)
{
    if (!f)
        return;
    fprintf(f, "%ld,%.6f,%s,%.6f,", step, epoch, split, loss);
    if (acc >= 0)
        fprintf(f, "%.6f", acc);
    fprintf(f, ",%.6g,", lr);
    if (gnorm >= 0)
        fprintf(f, "%.6g", gnorm);
    fprintf(f, ",%.1f,%.3f,", rate, elapsed);
    if (mfu >= 0)
        fprintf(f, "%.4f", mfu);
    fputc('\n', f);
}

void csv_row(FILE *f, long step, double epoch, const char *split, double loss, double acc,
             double lr, double gnorm, double rate, double elapsed)
{
    csv_line(f, step, epoch, split, loss, acc, lr, gnorm, rate, elapsed, -1);
}

/* steps sets the plain line's period; end is where this launch stops. */
void progress_start(progress *p, const opts *o, long steps, long first_step, long end, FILE *csv)
{
    memset(p, 0, sizeof *p);
    p->quiet = o->quiet;
    p->batch = o->r.batch;
    p->first_step = first_step;
    p->total = end;
    p->log_every = o->log_every > 0 ? o->log_every : (steps / 20 > 0 ? steps / 20 : 1);
    p->csv = csv;
    p->start = clock_now();
}

int progress_model(weft_run *t, progress *p, const weft_model *m, int ranks, int lead)
{
    p->cfg = *weft_model_config_of(m);
    p->has_cfg = 1;
    p->peak = 0;
    p->tell_choice = lead && !p->quiet && train_mm_provisional(m->mm);
    if (!lead || (p->quiet && !p->csv))
        return 0;
    train_peak pk;
    int rc = train_peak_get(&pk);
    if (rc)
        return run_fail(t, rc, "the matmul peak for MFU: %s", weft_strerror(rc));
    int threads = weft_model_threads(m);
    /* against the ceiling of the precision the products run in */
    int bf16 = weft_model_precision(m) == WEFT_PREC_BF16;
    const char *kernel;
    double peak = train_peak_for(&pk, bf16, &kernel);
    p->peak = peak * 1e9 * threads * (ranks > 0 ? ranks : 1);
    if (!p->quiet) {
        char fp32[64] = "";
        if (bf16)
            snprintf(fp32, sizeof fp32, "; fp32's: %.1f", pk.gflops);
        run_say(t, WEFT_RUN_OUT,
                "MFU against %d rank%s x %d thread%s x %.1f GFLOP/s (one thread's %s %s%s, "
                "%s)\n", ranks, ranks == 1 ? "" : "s", threads, threads == 1 ? "" : "s",
                peak, kernel, bf16 && pk.bf16_gflops > 0 ? "bf16 product" : "sgemm", fp32,
                pk.source);
    }
    return 0;
}

int report_step(weft_run *t, progress *p, long step, const train_step *st, double lr)
{
    if (!isfinite(st->loss))
        return run_fail(t, WEFT_EINVAL, "step %ld: loss is %f; lower --lr or use --clip", step,
                        (double)st->loss);
    double elapsed = clock_now() - p->start;
    double rate = (double)(step + 1 - p->first_step) * p->batch / (elapsed > 0 ? elapsed : 1e-9);
    /* --cp: a rank's samples are 1/cp of each sequence */
    int width = st->width * (t->o->cp > 1 ? t->o->cp : 1), rows = st->seen * width;
    /* a GPT sample is width tokens; an MLP's width is 1 */
    double mfu = p->peak > 0 && p->has_cfg
                     ? rate * train_model_flops(&p->cfg, 1, width) / p->peak : -1;
    csv_line(p->csv, step + 1, st->epoch, "train", st->loss, (double)st->correct / rows, lr,
             st->gnorm, rate, elapsed, mfu);
    weft_moe_stats ms; /* a mixture of experts: its balance, at the progress line's pace */
    if (t->m && (step + 1) % p->log_every == 0 && weft_model_moe_stats(t->m, &ms) == 0)
        run_say(t, WEFT_RUN_NOTE, "experts at step %ld: tokens per expert max/mean %.3f, "
                "dropped %lld of %lld\n", step + 1, ms.load_mean > 0 ? ms.load_max / ms.load_mean
                : 0.0, (long long)ms.dropped, (long long)ms.routed);
    char epl[256]; /* expert parallelism: its all-to-all, at the same pace */
    if (t->m && (step + 1) % p->log_every == 0 && run_ep_line(t, step + 1 - p->first_step, epl,
                                                             sizeof epl))
        run_say(t, WEFT_RUN_NOTE, "experts at step %ld: %s\n", step + 1, epl);
    if (t->m && t->lead && (step + 1) % p->log_every == 0 &&
        run_cp_line(t, step + 1 - p->first_step, epl, sizeof epl))
        run_say(t, WEFT_RUN_NOTE, "step %ld: %s\n", step + 1, epl);
    /* the auto choice is made on the first step's own products */
    const mm_choice *ch = p->tell_choice && t->m ? train_mm_choice(t->m->mm) : NULL;
    if (ch) {
        char text[512];
        train_mm_choice_text(ch, text, sizeof text);
        run_say(t, WEFT_RUN_OUT, "matmul auto after step %ld: %s\n", step + 1, text);
        p->tell_choice = 0;
    }
    p->rate = rate;
    p->elapsed = elapsed;
    p->mfu = mfu;
    return 0;
}

void csv_event(FILE *f, long step, double epoch, const char *kind, double elapsed,
               const char *what)
{
    if (!f)
        return;
    fprintf(f, "%ld,%.6f,%s,,,,,,%.3f,,", step, epoch, kind, elapsed);
    for (const char *c = what; *c; c++) /* one field: no commas, quotes or line ends */
        fputc(*c == ',' ? ';' : *c == '"' || *c == '\n' ? ' ' : *c, f);
    fputc('\n', f);
    fflush(f);
}

/* append: a resumed run continues the file it finds (if it has rows). */
int csv_open(weft_run *t, const char *path, int append, FILE **out)
{
    struct stat st;
    int fresh = stat(path, &st) != 0 || st.st_size == 0 || !append;
    FILE *f = fopen(path, fresh ? "w" : "a");
    *out = f;
    if (!f)
        return run_fail(t, WEFT_EIO, "cannot write %s: %s", path, strerror(errno));
    if (fresh)
        fprintf(f, "step,epoch,split,loss,accuracy,lr,grad_norm,samples_per_s,elapsed_s,mfu,"
                   "event\n");
    return 0;
}

void report_model(const weft_run *t, const weft_model *m, const run_opts *r, size_t nparams)
{
    char spec[512];
    weft_model_config_format(weft_model_config_of(m), spec, sizeof spec);
    /* under the auto choice the name is the peak probe's kernel until the
     * first step has timed the model's own products (report_step) */
    run_say(t, WEFT_RUN_OUT, "model %s (%zu parameters, %s, matmul %s%s%s, %d threads)\n", spec,
            nparams, r->precision, train_mm_provisional(m->mm) ? "auto (provisional: " : "",
            weft_model_matmul_name(m), train_mm_provisional(m->mm) ? ")" : "",
            weft_model_threads(m));
}

/* The lines before a data-parallel run's first step (rank 0, not quiet). */
void report_run(const weft_run *t)
{
    const opts *o = t->o;
    const run_opts *r = &o->r;
    const data_sets *d = t->d;
    char line[1024];
    size_t n = 0;
    report_model(t, t->m, r, t->nparams);
    sync_describe(&t->sync);
    if (o->straggle_rank >= 0)
        run_say(t, WEFT_RUN_OUT, "straggler: rank %d sleeps %d ms per step\n", o->straggle_rank,
                o->straggle_ms);
    else if (o->straggle_rank == -2)
        run_say(t, WEFT_RUN_OUT, "straggler: one random rank sleeps %d ms per step\n",
                o->straggle_ms);
    n = (size_t)snprintf(line, sizeof line, "data %s: %llu samples; eval %s: %llu", d->ti.name,
                         (unsigned long long)d->ti.n, d->ei.name, (unsigned long long)d->ei.n);
    if (d->ti.kind == WEFT_DATA_IMAGE && n < sizeof line)
        snprintf(line + n, sizeof line - n, "; pixels standardised (mean %.4f, std %.4f)",
                 d->mean, d->std);
    run_say(t, WEFT_RUN_OUT, "%s\n", line);
    n = (size_t)snprintf(line, sizeof line, "optim %s lr %g (%s", r->optim, r->lr, r->schedule);
    if (t->sched.kind == WEFT_LR_COSINE && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, " to %g, warm-up %ld", r->min_lr,
                              r->warmup);
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, ")");
    if (strcmp(r->optim, "sgd") == 0 && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, " momentum %g", r->momentum);
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n,
                              " weight decay %g, clip %g; batch %d, steps %ld", r->weight_decay,
                              r->clip, r->batch, t->steps);
    if (t->start_step && n < sizeof line)
        snprintf(line + n, sizeof line - n, ", resuming at step %ld", t->start_step);
    run_say(t, WEFT_RUN_OUT, "%s\n", line);
}

/* Where a job's time and bytes went (rank 0 of several, not quiet):
 * cpu_* are the process's and the training thread's CPU seconds now. */
void report_end(const weft_run *t, double train_s, double cpu_all, double cpu_main)
{
    run_say(t, WEFT_RUN_OUT,
            "training took %.2f s on %d ranks (sync %s); parameter/gradient bytes handed to "
            "the network per rank: %.1f MB\n",
            train_s, t->world, t->o->sync, (double)sync_bytes(&t->sync) / 1e6);
    const train_sync *sy = &t->sync;
    run_say(t, WEFT_RUN_OUT,
            "bytes per rank (mean over ranks): wan %.0f B sent after the start (measured under "
            "WEFT_WAN); "
            "the sync's own count: job or across clusters %.0f B, inside clusters %.0f B\n",
            sy->wan_mean, sy->across_mean, sy->inside_mean);
    run_say(t, WEFT_RUN_OUT,
            "compute utilisation (rank 0): %.1f%% (forward+backward %.2f s of %.2f s)\n",
            train_s > 0 ? 100 * t->compute_s / train_s : 0, t->compute_s, train_s);
    sync_time_report(t, train_s);
    long ns = t->end - t->start_step > 0 ? t->end - t->start_step : 1;
    double wait_s = weft_zero_wait_s(t->sync.z);
    run_say(t, WEFT_RUN_OUT,
            "rank 0 per step: %.2f ms data, %.2f ms forward+backward, %.2f ms waiting for "
            "gradient communication, %.2f ms the rest (optimiser, metrics)\n",
            1e3 * t->load_s / ns, 1e3 * t->compute_s / ns, 1e3 * wait_s / ns,
            1e3 * (train_s - t->load_s - t->compute_s - wait_s) / ns);
    run_say(t, WEFT_RUN_OUT,
            "rank 0 CPU per step: %.2f ms training thread, %.2f ms communication threads\n",
            1e3 * (cpu_main - t->cpu0_main) / ns,
            1e3 * ((cpu_all - t->cpu0_all) - (cpu_main - t->cpu0_main)) / ns);
}
