/* What weft-train's files share: the few launch options the program reads
 * itself (everything else goes straight into the weft_run_config), its
 * messages and its progress line. */
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include "weft.h"

#include <stdio.h>

/* The options the program acts on before or beside the run. */
typedef struct {
    int elastic;      /* --elastic: WEFT_JOIN=1 joins a running job */
    double mem_limit; /* --mem-limit in bytes; 0: none */
} tool_opts;

/* options.c */
/* Fills cfg from argv; a bad argument ends the program as the run would. */
void parse_args(int argc, char **argv, weft_run_config *cfg, tool_opts *t);
/* Under --mem-limit, shared-memory rings sized to it (WEFT_SHM_RING, unless
 * set): the job's rings count in each rank's resident set. */
void fit_rings(const tool_opts *t);

/* inspect.c: --inspect CKPT */
int inspect_ckpt(const char *path);

/* report.c */
/* "weft-train: MESSAGE" on stderr, exit status 1. */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* weft_run_log_fn: reports to stdout, warnings and notes to stderr. */
void log_line(void *arg, int level, const char *line);

/* The mean loss since the line was last drawn, and when that was. */
typedef struct {
    int tty;
    double last_draw, loss_sum;
    long loss_n;
} progress;

void progress_start(progress *p);
/* After each step: the \r-redrawn line on a terminal, else a plain line
 * every log_every steps, both on stderr. */
void progress_step(progress *p, const weft_run_info *in);

#endif
