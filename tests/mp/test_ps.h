/* Parameter-server test jobs: a store process, K servers and W workers
 * forked on loopback, each told its rank through the environment (as
 * weftrun does), with CHECK counts folded back through a pipe as in mp.h.
 * A test may kill and restart servers; results go through shared memory. */
#ifndef WEFT_TEST_PS_H
#define WEFT_TEST_PS_H

#include "mp.h"

#include "bootstrap/store.h"

#include <stdatomic.h>
#include <sys/mman.h>

#define PSJ_MAX 32

typedef struct psjob psjob;
typedef void (*psj_worker_fn)(psjob *j, weft_ps *ps, int w);

struct psjob {
    int W, K;
    weft_ps_config cfg;
    psj_worker_fn worker;
    void *shared;            /* MAP_SHARED scratch for results */
    double alarm_s;
    int port, fds[2];
    pid_t store, pid[PSJ_MAX];
    int killed[PSJ_MAX];     /* killed on purpose: no exit status expected */
    weft_ps *replaced;       /* in a worker: the handle it re-made for itself */
};

static inline void *psj_shared(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(p, 0, n);
    return p;
}

static void psj_env(psjob *j, int rank)
{
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("WEFT_RANK", v, 1);
    snprintf(v, sizeof v, "%d", j->W + j->K);
    setenv("WEFT_WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", j->port);
    setenv("WEFT_MASTER_PORT", v, 1);
    setenv("WEFT_MASTER_ADDR", "127.0.0.1", 1);
    setenv("WEFT_JOB_SECRET", "ps-test-job-secret", 1);
    snprintf(v, sizeof v, "%d", j->W);
    setenv("WEFT_NUM_WORKERS", v, 1);
    setenv("WEFT_ROLE", rank < j->W ? "worker" : "server", 1);
}

/* One rank of the job, in a new process. */
static pid_t psj_spawn(psjob *j, int rank)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) {
        j->pid[rank] = pid;
        j->killed[rank] = 0;
        return pid;
    }
    weft_ps *ps;
    int rc;
    close(j->fds[0]);
    test_passed_ = test_failed_ = 0;
    psj_env(j, rank);
    alarm((unsigned)(j->alarm_s > 0 ? j->alarm_s : 60));
    rc = weft_ps_init(&ps, NULL, &j->cfg);
    if (rc) {
        fprintf(stderr, "rank %d: weft_ps_init: %s\n", rank, weft_strerror(rc));
        _exit(3);
    }
    if (weft_ps_role(ps) == WEFT_PS_ROLE_SERVER) {
        rc = weft_ps_serve(ps);
        if (rc)
            fprintf(stderr, "server %d: %s\n", rank - j->W, weft_ps_error(ps));
        weft_ps_destroy(ps);
        _exit(rc ? 10 : 0);
    }
    CHECK(weft_ps_rank(ps) == rank);
    j->worker(j, ps, rank);
    weft_ps_destroy(j->replaced ? j->replaced : ps);
    int counts[2] = { test_passed_, test_failed_ };
    if (write(j->fds[1], counts, sizeof counts) != sizeof counts)
        _exit(4);
    fflush(NULL);
    _exit(test_failed_ ? 1 : 0);
}

static void psj_start(psjob *j)
{
    if (pipe(j->fds))
        exit(2);
    j->port = fx_free_port();
    fflush(NULL);
    j->store = fork();
    if (j->store == 0) {
        store_server *s;
        char e[256];
        close(j->fds[0]);
        close(j->fds[1]);
        if (store_server_start(&s, "127.0.0.1", j->port, NULL, "ps-test-job-secret", e,
                               sizeof e)) {
            fprintf(stderr, "store: %s\n", e);
            _exit(5);
        }
        alarm((unsigned)(j->alarm_s > 0 ? j->alarm_s * 2 : 120));
        for (;;)
            pause();
    }
    for (int r = j->W; r < j->W + j->K; r++)
        psj_spawn(j, r);
    for (int r = 0; r < j->W; r++)
        psj_spawn(j, r);
}

/* Waits for every rank; returns how many exited badly (ranks killed on
 * purpose excepted; a server exits non-zero when weft_ps_serve failed). */
static int psj_finish(psjob *j)
{
    int bad = 0, counts[2];
    close(j->fds[1]);
    while (read(j->fds[0], counts, sizeof counts) == sizeof counts) {
        test_passed_ += counts[0];
        test_failed_ += counts[1];
    }
    close(j->fds[0]);
    for (int r = 0; r < j->W + j->K; r++) {
        int st;
        if (waitpid(j->pid[r], &st, 0) < 0 || j->killed[r])
            continue;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "%s %d: %s %d\n", r < j->W ? "worker" : "server",
                    r < j->W ? r : r - j->W, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    kill(j->store, SIGKILL);
    waitpid(j->store, NULL, 0);
    return bad;
}

static inline void psj_kill(psjob *j, int rank)
{
    j->killed[rank] = 1;
    kill(j->pid[rank], SIGKILL);
    waitpid(j->pid[rank], NULL, 0);
}

#endif
