/* The run's options (run_config.c): the keys weft_run_config_set takes, the
 * run options a checkpoint keeps, their defaults, and the checks that need
 * every option at once. */
#ifndef WEFT_RUN_RUN_CONFIG_H
#define WEFT_RUN_RUN_CONFIG_H

#include "run/run_int.h"

/* The options before any key is set. */
void run_config_init(opts *o);
/* One key (a long option without its dashes; a flag takes NULL). On a bad
 * key or value: WEFT_EINVAL and the message, naming the option, in err. */
int run_config_key(opts *o, const char *key, const char *v, char *err, size_t cap);
/* The checks of options against each other (weft_run_config_check and
 * weft_run_open); joining: what a process joining a running job cannot
 * carry too. WEFT_ECONFIG with the message in err. */
int run_config_check(const opts *o, int joining, char *err, size_t cap);

int run_opts_is_gpt(const run_opts *r);
/* "plain" or a comma list of padded, reversed, answer-loss; -1 if bad. */
int run_opts_format_code(const char *f);
void run_opts_defaults(run_opts *r);
/* "key=value" lines, the form checkpoints store. */
void run_opts_format(const run_opts *r, char *buf, size_t cap);
/* Applies saved options except those given (set). */
int run_opts_merge(weft_run *t, run_opts *r, unsigned set, char *saved);
/* --straggle: sleeps when this rank (of n) is the slow one at this step. */
void straggle(const opts *o, long step, int me, int n);

#endif
