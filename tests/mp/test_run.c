/* weft_run driven from C: a 2-rank data-parallel MLP run of a few steps
 * through weft_run_open/step/finish/close, its lines through the log
 * callback and its metrics file; the figures weft_run_info gives; a bad
 * configuration refused with its message; one process alone. */
#include "mp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 4
#define BATCH 32

/* The lines a run said, one after another. */
typedef struct {
    char text[16384];
    size_t len;
    int out, warn;
} log_buf;

static void on_line(void *arg, int level, const char *line)
{
    log_buf *l = arg;
    l->out += level == WEFT_RUN_OUT;
    l->warn += level == WEFT_RUN_WARN;
    int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", line);
    if (n > 0 && (size_t)n < sizeof l->text - l->len)
        l->len += (size_t)n;
}

static weft_run_config *small_mlp(log_buf *log, const char *metrics)
{
    weft_run_config *c = NULL;
    CHECK(weft_run_config_new(&c) == 0);
    const char *kv[] = { "model", "mlp:784-32-10", "data", "builtin", "train-size", "512",
                         "batch", "32", "steps", "4", "threads", "1", "lr", "0.05", NULL };
    for (int i = 0; kv[i]; i += 2)
        CHECKF(weft_run_config_set(c, kv[i], kv[i + 1]) == 0, "%s: %s", kv[i],
               weft_run_config_error(c));
    if (metrics)
        CHECK(weft_run_config_set(c, "metrics", metrics) == 0);
    weft_run_config_log(c, on_line, log);
    return c;
}

/* Steps until done, checking each step's figures. */
static void steps(weft_run *run, int rank, int world)
{
    int rc, n = 0;
    while ((rc = weft_run_step(run)) == 0) {
        weft_run_info in;
        n++;
        CHECK(weft_run_info_get(run, &in) == 0);
        CHECK(in.step == n && in.steps == STEPS && in.end == STEPS && in.first_step == 0);
        CHECKF(isfinite(in.loss) && in.loss > 0 && in.loss < 10, "loss %g", (double)in.loss);
        CHECK(in.lr > 0 && in.lr <= 0.05 + 1e-9);
        CHECK(in.seen == BATCH && in.correct >= 0 && in.correct <= in.seen);
        CHECK(in.rank == rank && in.world == world && in.lead == (rank == 0));
        CHECK(in.quiet == (rank != 0) && in.global_batch == BATCH);
        CHECK(in.rate > 0 && in.elapsed > 0 && in.log_every >= 1);
        CHECK(in.epoch > 0 && in.epoch <= 1.0);
        CHECK(in.bubble < 0 && in.skip == 0);
    }
    CHECKF(rc == WEFT_RUN_DONE, "step %d: %d %s", n, rc, weft_run_error(run));
    CHECK(n == STEPS);
    CHECK(weft_run_step(run) == WEFT_RUN_DONE); /* and stays done */
}

static void two_ranks(weft_comm *comm, void *arg)
{
    const char *metrics = arg;
    int rank = weft_comm_rank(comm);
    log_buf log = { .len = 0 };
    weft_run_config *c = small_mlp(&log, rank == 0 ? metrics : NULL);
    weft_run *run = NULL;
    int rc = weft_run_open(c, comm, 0, &run);
    weft_run_config_free(c); /* the run keeps its own copy */
    CHECKF(rc == 0 && run, "open: %d %s", rc, weft_run_error(run));
    if (rc != 0) {
        weft_run_close(run);
        return;
    }
    CHECK(weft_run_comm(run) == comm && weft_run_model(run) != NULL);
    steps(run, rank, 2);
    rc = weft_run_finish(run);
    CHECKF(rc == 0, "finish: %s", weft_run_error(run));
    if (rank == 0) {
        CHECKF(strstr(log.text, "model mlp:784-32-10") != NULL, "%s", log.text);
        CHECK(strstr(log.text, "data parallel: 2 ranks") != NULL);
        CHECK(strstr(log.text, "test: ") != NULL && strstr(log.text, "accuracy") != NULL);
        CHECK(strstr(log.text, "training took") != NULL);
    } else {
        CHECKF(log.out == 0, "rank 1 said: %s", log.text); /* rank 0 speaks for the job */
    }
    CHECK(weft_run_close(run) == 0);
}

TEST(two_ranks_data_parallel)
{
    char metrics[] = "/tmp/weft_test_run_XXXXXX";
    int fd = mkstemp(metrics);
    CHECK(fd >= 0);
    close(fd);
    CHECK(mp_run(2, 60, two_ranks, metrics) == 0);
    long len;
    char *csv = fx_slurp(metrics, &len);
    CHECK(csv != NULL);
    if (csv) {
        CHECK(strncmp(csv, "step,epoch,split,loss,accuracy,lr,grad_norm,samples_per_s,"
                           "elapsed_s,mfu,event\n", 77) == 0);
        int trains = 0;
        for (char *p = csv; (p = strstr(p, ",train,")) != NULL; p++)
            trains++;
        CHECKF(trains == STEPS, "%d train rows:\n%s", trains, csv);
        CHECK(strstr(csv, ",test,") != NULL);
        free(csv);
    }
    unlink(metrics);
}

TEST(bad_config_refused)
{
    log_buf log = { .len = 0 };
    weft_run_config *c = small_mlp(&log, NULL);
    CHECK(weft_run_config_set(c, "epochs", "1") == 0); /* beside steps */
    weft_run *run = NULL;
    int rc = weft_run_open(c, NULL, 0, &run);
    CHECK(rc == WEFT_ECONFIG && run != NULL);
    CHECKF(strcmp(weft_run_error(run), "give --steps or --epochs, not both") == 0, "'%s'",
           weft_run_error(run));
    CHECK(weft_run_step(run) == WEFT_ECONFIG); /* the run cannot go on */
    weft_run_close(run);
    weft_run_config_free(c);

    /* a model that cannot read the data, refused naming both */
    c = small_mlp(&log, NULL);
    CHECK(weft_run_config_set(c, "model", "mlp:100-10-10") == 0);
    rc = weft_run_open(c, NULL, 0, &run);
    CHECK(rc < 0);
    CHECKF(strstr(weft_run_error(run), "takes 100 inputs") != NULL, "'%s'", weft_run_error(run));
    weft_run_close(run);
    weft_run_config_free(c);

    CHECK(weft_run_open(NULL, NULL, 0, &run) == WEFT_EINVAL && run == NULL);
    CHECK(weft_run_step(NULL) == WEFT_EINVAL);
    CHECK(weft_run_close(NULL) == 0);
}

TEST(one_process)
{
    log_buf log = { .len = 0 };
    weft_run_config *c = small_mlp(&log, NULL);
    CHECK(weft_run_config_set(c, "no-eval", NULL) == 0);
    weft_run *run = NULL;
    int rc = weft_run_open(c, NULL, 0, &run);
    weft_run_config_free(c);
    CHECKF(rc == 0, "open: %s", weft_run_error(run));
    if (rc == 0) {
        CHECK(weft_run_comm(run) == NULL);
        steps(run, 0, 1);
        CHECK(weft_run_eval(run) == 0); /* the model as it is, before the end */
        CHECK(strstr(log.text, "test: ") != NULL);
        CHECKF(weft_run_finish(run) == 0, "%s", weft_run_error(run));
    }
    weft_run_close(run);
}
