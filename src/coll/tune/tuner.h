/* Picks an algorithm when the caller asks for WEFT_ALGO_AUTO: the one whose
 * schedule the cost model (coll/tune/cost.h) predicts fastest. */
#ifndef WEFT_COLL_SELECT_H
#define WEFT_COLL_SELECT_H

#include "coll/tune/cost.h"
#include "coll/tune/select.h"
#include "coll/tune/trial.h"
#include "weft.h"

#include <stdio.h>

/* A communicator's selector: its constants (read from its parameter set
 * once), its layout, and the choices made so far, per collective, dtype
 * size and size bucket (eight per octave; all sizes in a bucket are costed
 * at its lower end, so the cost of walking schedules is paid once per
 * bucket). Not thread-safe: one per communicator, used by whichever thread
 * runs its collectives. */
typedef struct coll_tuner coll_tuner;

/* host: host index of every rank, numbered from 0 in order of first
 * appearance (NULL: one host); copied. Constants, WEFT_AUTOTUNE and
 * WEFT_AUTO_FASTEST from the parameter set p (core/param.h). WEFT_ECONFIG when WEFT_TUNE or
 * WEFT_TUNE_FILE is malformed: err (cap bytes) says why. */
int coll_tuner_create_for(coll_tuner **out, const param_set *p, int nranks,
                          const int32_t *host, char *err, size_t cap);
/* The same with those variables read from the environment now. */
int coll_tuner_create(coll_tuner **out, int nranks, const int32_t *host, char *err,
                      size_t cap);
/* The same with explicit constants (tests, the simulator, weft-bench). */
int coll_tuner_create_with(coll_tuner **out, int nranks, const int32_t *host,
                           const cost_params *c);
void coll_tuner_destroy(coll_tuner *t);
const cost_params *coll_tuner_params(const coll_tuner *t);
/* The ranks span clusters (cluster of every rank, copied; NULL or all
 * alike: one): links between them are priced with alpha_wan and beta_wan,
 * and the constants not set by WEFT_TUNE or WEFT_TUNE_FILE take the values
 * given (the emulated WAN's delay and rate, or a default). Forgets the
 * choices made so far. */
int coll_tuner_set_clusters(coll_tuner *t, const int32_t *cluster, double alpha_wan,
                            double beta_wan);

/* bytes: count * esize, count as the API takes it (per rank where the API
 * says so). Deterministic in (kind, bytes, esize, nranks, host, constants),
 * so every rank that sees the same constants picks the same. Never
 * WEFT_ALGO_AUTO; hier only when the ranks span several hosts. */
weft_algo coll_tuner_select(coll_tuner *t, weft_coll_kind kind, uint64_t bytes,
                            uint32_t esize);
/* The algorithm a communicator runs a call with under WEFT_ALGO_AUTO. With
 * WEFT_AUTOTUNE on (the default for coll_tuner_create), when several
 * algorithms are predicted close to the best for the call's bucket, its
 * first calls (at most TRIAL_MAX_CALLS) run them in turn (coll/tune/trial.h):
 * *ticket is then >= 0, and the caller times the call and hands it to
 * coll_tuner_record. Otherwise *ticket is -1 and this is
 * coll_tuner_select. Every rank making the same calls gets the same turns.
 * Unless WEFT_AUTO_FASTEST=1, the candidates are only those that give the
 * model's pick's bits (coll/tune/same_bits.h), so that the clock decides
 * which runs, never what a call computes. */
weft_algo coll_tuner_pick(coll_tuner *t, weft_coll_kind kind, uint64_t bytes,
                          uint32_t esize, int *ticket);
/* Whether ticket's next call is timed (the first round only warms up). */
int coll_tuner_timed(const coll_tuner *t, int ticket);
/* The trial call of ticket took secs for bytes. When it was the bucket's
 * last, writes this rank's fastest time per candidate to mine and returns
 * how many; the ranks must then take the maximum of each over all ranks and
 * pass it to coll_tuner_settle. Otherwise 0. */
int coll_tuner_record(coll_tuner *t, int ticket, uint64_t bytes, double secs,
                      double mine[TRIAL_MAX_CAND]);
/* Ends ticket's trial with the agreed times: the bucket keeps the
 * fastest, which coll_tuner_select returns from now on. */
weft_algo coll_tuner_settle(coll_tuner *t, int ticket, const double *agreed);
/* On rank 0 under WEFT_DEBUG=TUNING: the settled trial's times and choice. */
void coll_tuner_log_trial(const coll_tuner *t, int ticket, int loglevel, int rank);

/* Predicted seconds of every algorithm (negative: no schedule), as
 * coll_tuner_select weighs them; returns the choice. */
weft_algo coll_tuner_predict(const coll_tuner *t, weft_coll_kind kind, uint64_t bytes,
                             uint32_t esize, double secs[WEFT_ALGO_COUNT]);
/* Table of predicted times per algorithm and size (8 B .. max_bytes). */
void coll_tuner_print(const coll_tuner *t, weft_coll_kind kind, uint64_t max_bytes,
                      FILE *f);

/* When loglevel (core/log.h: log_level_of()) asks for INFO on the
 * TUNING subsystem (WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=TUNING) and rank is
 * 0: the constants and the predicted tables (coll_tuner_print, 8 B to
 * 32 MiB by 4) of every collective with sizes, to stderr. For a
 * communicator to call once its selector exists. */
void coll_tuner_log(const coll_tuner *t, int loglevel, int rank);


#endif
