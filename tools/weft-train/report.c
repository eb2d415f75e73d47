/* weft-train's output: errors, the run's lines and the progress line. The
 * run writes its metrics CSV itself; what reaches the terminal is here. */
#include "train.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout); /* what was reported comes before the reason it stopped */
    fputs("weft-train: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Warnings carry the program's name, as its errors do; notes and reports
 * are the run's own lines. */
void log_line(void *arg, int level, const char *line)
{
    (void)arg;
    FILE *f = level == WEFT_RUN_OUT ? stdout : stderr;
    size_t n = strlen(line);
    if (level == WEFT_RUN_WARN && strncmp(line, "weft-train: ", 12) != 0)
        fputs("weft-train: ", f);
    fputs(line, f);
    if (n == 0 || line[n - 1] != '\n')
        fputc('\n', f);
    fflush(f);
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

void progress_start(progress *p)
{
    memset(p, 0, sizeof *p);
    p->tty = isatty(2);
    p->last_draw = -1;
}

/* The run measures the rate and the time; the line is drawn here. */
void progress_step(progress *p, const weft_run_info *in)
{
    long step = in->step, total = in->end;
    int done = step == total;
    double t = in->elapsed, rate = in->rate;
    p->loss_sum += in->loss;
    p->loss_n++;
    if (in->quiet)
        return;
    long left = total - step;
    char eta[32], el[32];
    fmt_duration(eta, sizeof eta,
                 rate > 0 ? (double)left * (t / (double)(step - in->first_step)) : -1);
    fmt_duration(el, sizeof el, t);
    double mean = p->loss_sum / (double)p->loss_n;
    char bub[32] = "";
    if (in->bubble >= 0)
        snprintf(bub, sizeof bub, "  bubble %.2f", in->bubble);
    char mf[32] = "";
    if (in->mfu >= 0)
        snprintf(mf, sizeof mf, "  mfu %.1f%%", 100.0 * in->mfu);
    if (p->tty) {
        if (!done && p->last_draw >= 0 && t - p->last_draw < 0.1)
            return;
        int width = 24, filled = total ? (int)((double)width * (double)step / (double)total)
                                       : width;
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r[%s] step %ld/%ld  loss %.4f  %.0f samples/s%s%s  %s  ETA %s \x1b[K",
                bar, step, total, mean, rate, mf, bub, el, eta);
        if (done)
            fputc('\n', stderr);
        fflush(stderr);
    } else {
        if (!done && in->log_every > 0 && step % in->log_every != 0)
            return;
        fprintf(stderr, "step %ld/%ld loss %.4f samples/s %.0f%s%s elapsed %s eta %s\n", step,
                total, mean, rate, mf[0] ? mf + 1 : "", bub, el, eta);
    }
    p->last_draw = t;
    p->loss_sum = 0;
    p->loss_n = 0;
}
