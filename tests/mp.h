/* Multi-process test support: fork n ranks on loopback, each running
 * fn(comm, arg) with its own CHECK counters, and add their results up. A
 * case (TEST in test.h) calls mp_run once or more; each call is one job. */
#ifndef WEFT_TEST_MP_H
#define WEFT_TEST_MP_H

#include "test.h"
#include "weft.h"

#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void (*mp_fn)(weft_comm *c, void *arg);

/* When > 0, rank r claims to be on host r / mp_ranks_per_host (WEFT_HOST_ID),
 * so one machine stands for several hosts. */
static int mp_ranks_per_host;
/* When > 0, rank r is in cluster r / mp_ranks_per_cluster (WEFT_CLUSTER). */
static int mp_ranks_per_cluster;

/* Every rank this process forked, so that a test can tell its own
 * leftovers (in /dev/shm, say) from those of tests running beside it. */
static pid_t mp_forked[4096];
static int mp_forked_n;

/* Runs fn on n forked ranks; returns the number of ranks that failed to
 * start, crashed or exited non-zero. Check counts are folded into this
 * process's totals through a pipe. */
static inline int mp_run(int n, double timeout_s, mp_fn fn, void *arg)
{
    int port = fx_free_port(), bad = 0, fds[2];
    pid_t pids[64];
    if (pipe(fds))
        return n;
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            weft_config cfg;
            weft_comm *c;
            close(fds[0]);
            weft_config_default(&cfg);
            /* WEFT_ALGO=NAME reruns a test under one algorithm */
            const char *algo = getenv("WEFT_ALGO");
            if (algo && *algo && weft_algo_parse(algo, &cfg.algo)) {
                fprintf(stderr, "rank %d: WEFT_ALGO=%s: no such algorithm\n", r, algo);
                _exit(3);
            }
            cfg.rank = r;
            cfg.world_size = n;
            cfg.master_addr = "127.0.0.1";
            cfg.master_port = port;
            cfg.timeout_s = timeout_s;
            cfg.connect_timeout_s = 30;
            cfg.job_secret = "mp-test-job-secret"; /* every connection authenticates */
            test_passed_ = test_failed_ = 0;
            if (mp_ranks_per_host > 0) {
                char id[32];
                snprintf(id, sizeof id, "host%d", r / mp_ranks_per_host);
                setenv("WEFT_HOST_ID", id, 1);
            }
            if (mp_ranks_per_cluster > 0) {
                char id[32];
                snprintf(id, sizeof id, "%d", r / mp_ranks_per_cluster);
                setenv("WEFT_CLUSTER", id, 1);
            }
            alarm((unsigned)(timeout_s * 4 + 60)); /* a hang must fail, not stall CI */
            int rc = weft_comm_init(&c, &cfg);
            if (rc) {
                fprintf(stderr, "rank %d: init failed: %s\n", r, weft_strerror(rc));
                _exit(3);
            }
            fn(c, arg);
            rc = weft_comm_destroy(c);
            if (rc)
                fprintf(stderr, "rank %d: destroy: %s\n", r, weft_strerror(rc));
            int counts[2] = { test_passed_, test_failed_ };
            if (write(fds[1], counts, sizeof counts) != sizeof counts)
                _exit(4);
            fflush(NULL);
            _exit(test_failed_ ? 1 : 0);
        }
        pids[r] = pid;
        if (pid > 0 && mp_forked_n < (int)(sizeof mp_forked / sizeof mp_forked[0]))
            mp_forked[mp_forked_n++] = pid;
    }
    close(fds[1]);
    int counts[2];
    while (read(fds[0], counts, sizeof counts) == sizeof counts) {
        test_passed_ += counts[0];
        test_failed_ += counts[1];
    }
    close(fds[0]);
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d of %d: %s %d\n", r, n,
                    WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    return bad;
}

/* Under sanitizers (TEST_SCALE > 1, about ten times slower) the sweeps over
 * rank counts keep a spread — one rank, an odd count, a power of two and
 * the most — rather than every count. */
static inline int mp_thin(void)
{
    const char *s = getenv("TEST_SCALE");
    return s && atoi(s) > 1;
}
static inline int mp_size_kept(int n)
{
    return !mp_thin() || n == 1 || n == 3 || n == 4 || n == 8;
}

/* ---- helpers more than one test program uses ---------------------------- */

/* Seconds on the monotonic clock, for deadlines and ordering, never for
 * asserting how long something took. */
static inline double mp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void mp_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* A thread body: aborts the communicator arg after 200 ms, so a rank
 * blocked in a collective that cannot finish learns of it. */
static inline void *mp_abort_later(void *arg)
{
    mp_sleep_ms(200);
    weft_comm_abort(arg);
    return NULL;
}

/* A thread body: kills this rank (SIGKILL, no clean-up) after the number
 * of milliseconds in arg, an intptr_t cast to a pointer, while its other
 * thread is inside a collective. */
static inline void *mp_kill_later(void *arg)
{
    mp_sleep_ms((int)(intptr_t)arg);
    raise(SIGKILL);
    return NULL;
}

/* Whether kind k reduces (has an op), as against only moving data. */
static inline int mp_is_reduction(weft_coll_kind k)
{
    return k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE || k == WEFT_COLL_REDUCE_SCATTER;
}

/* How many /dev/shm names of the communicator with this id are addressed
 * to rank r ("weft-ID-FROM-r-..."): what a rank that died or left would
 * leave behind. */
static inline int mp_shm_names_to(uint64_t comm_id, int r)
{
    char prefix[40], tail[24];
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    snprintf(prefix, sizeof prefix, "weft-%016llx-", (unsigned long long)comm_id);
    snprintf(tail, sizeof tail, "-%d-", r);
    while (d && (e = readdir(d))) {
        const char *rest = e->d_name + strlen(prefix);
        const char *dash = strncmp(e->d_name, prefix, strlen(prefix)) ? NULL : strchr(rest, '-');
        n += dash && !strncmp(dash, tail, strlen(tail));
    }
    if (d)
        closedir(d);
    return n;
}

/* Forbids this process process_vm_readv (a seccomp filter: EPERM), as a
 * container without CAP_SYS_PTRACE does; non-zero when it cannot. Every
 * thread of it (TSYNC): prctl's filter covers only the calling thread, and
 * the communicator's threads, already running, would go on reading. */
static inline int mp_deny_cma(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { (unsigned short)(sizeof f / sizeof f[0]), f };
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
           syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0;
}

/* Training sample i of a made-up classification task: in features, label
 * i % classes, and noise around a one-hot pattern of the label, the same
 * on every rank and in every run. */
static inline void mp_sample(long i, float *x, int32_t *y, int in, int classes)
{
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    *y = (int32_t)(i % classes);
    for (int k = 0; k < in; k++) {
        h ^= h >> 29;
        h *= 0xbf58476d1ce4e5b9ull;
        float noise = (float)(h >> 40) / (float)(1u << 24) - 0.5f;
        x[k] = noise + (k % classes == *y ? 1.0f : 0.0f);
    }
}

#endif
