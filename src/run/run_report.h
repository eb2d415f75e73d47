/* The run's report (run_report.c): the metrics CSV, the lines that open
 * and close a run, MFU, and the CPU time the closing lines read (wall time
 * is core/clock.h's). The progress line is the caller's, drawn from
 * weft_run_info. */
#ifndef WEFT_RUN_RUN_REPORT_H
#define WEFT_RUN_RUN_REPORT_H

#include "run/run_int.h"

/* CPU seconds of this process (all threads) and of the calling thread. */
void cpu_s(double *process, double *thread);

/* steps: the planned run; the launch runs first_step..end. */
void progress_start(progress *p, const opts *o, long steps, long first_step, long end,
                    FILE *csv);
/* Model-FLOPs utilisation from here on, against ranks x threads x one
 * thread's measured matmul peak; lead: the rank that reports (the others
 * neither measure nor print it). */
int progress_model(weft_run *t, progress *p, const weft_model *m, int ranks, int lead);
/* Fails the run on a loss that is not finite, else a CSV row and the
 * step's figures for weft_run_info. */
int report_step(weft_run *t, progress *p, long step, const train_step *st, double lr);
/* append: a resumed run continues the file it finds (if it has rows). */
int csv_open(weft_run *t, const char *path, int append, FILE **out);
void csv_row(FILE *f, long step, double epoch, const char *split, double loss, double acc,
             double lr, double gnorm, double rate, double elapsed);
/* A membership change: a row of split kind ("shrink", "grow") whose last
 * column says what happened. */
void csv_event(FILE *f, long step, double epoch, const char *kind, double elapsed,
               const char *what);
void report_model(const weft_run *t, const weft_model *m, const run_opts *r, size_t nparams);
/* The lines before a data-parallel run's first step (rank 0, not quiet). */
void report_run(const weft_run *t);
/* Where a job's time and bytes went: cpu_* are the process's and the
 * training thread's CPU seconds now. */
void report_end(const weft_run *t, double train_s, double cpu_all, double cpu_main);

#endif
