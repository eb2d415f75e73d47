/* The launcher, run as a user runs it: weftrun from the same build directory
 * starting small /bin/sh ranks. Checks the environment each rank gets, the
 * prefixed whole-line output, and how a failing or killed rank ends the job. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static char weftrun[PATH_MAX];
static volatile pid_t running; /* the weftrun in progress, for the alarm */
static int found;               /* weftrun is built: the cases can run */

static void on_alarm(int sig)
{
    /* a hung job fails its checks instead of hanging the suite */
    if (running > 0)
        kill(running, SIGKILL);
}

TEST_INIT
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    found = fx_tool("weftrun", weftrun, sizeof weftrun) == 0;
    CHECKF(found, "weftrun not found at %s (build it: make tools)", weftrun);
}

typedef struct {
    int status;   /* as from waitpid */
    char *out, *err;
} result;

static char *slurp(FILE *f)
{
    long n;
    fflush(f);
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0)
        return strdup("");
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    s[fread(s, 1, (size_t)n, f)] = '\0';
    return s;
}

/* Runs weftrun with args (NULL-terminated); secret: WEFT_JOB_SECRET for it,
 * or NULL to leave it unset. */
static result run(const char *secret, const char *const *args)
{
    result r = { -1, NULL, NULL };
    const char *argv[64];
    int n = 0;
    argv[n++] = weftrun;
    while (*args && n < 63)
        argv[n++] = *args++;
    argv[n] = NULL;
    FILE *out = tmpfile(), *err = tmpfile();
    if (!out || !err)
        return r;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (secret)
            setenv("WEFT_JOB_SECRET", secret, 1);
        else
            unsetenv("WEFT_JOB_SECRET");
        dup2(fileno(out), 1);
        dup2(fileno(err), 2);
        execv(weftrun, (char *const *)argv);
        _exit(126);
    }
    running = pid;
    alarm(30);
    while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR)
        ;
    alarm(0);
    running = 0;
    r.out = slurp(out);
    r.err = slurp(err);
    fclose(out);
    fclose(err);
    return r;
}

static void done(result *r)
{
    free(r->out);
    free(r->err);
}

static int exited(const result *r, int code)
{
    return WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}

/* (a) every rank present once, every line prefixed by its own rank, long
 * lines kept whole, a last line without newline still delivered */
TEST(output)
{
    if (!found)
        return;
    const char *script =
        "echo \"rank=$WEFT_RANK size=$WEFT_WORLD_SIZE\"; "
        "line=$(printf \"%0300d\" 0 | tr 0 $WEFT_RANK); "
        "for i in 1 2 3 4 5 6 7 8; do echo \"long $WEFT_RANK $line$line$line\"; done; "
        "echo \"to stderr $WEFT_RANK\" >&2; printf \"tail $WEFT_RANK\"";
    result r = run(NULL, (const char *[]){ "-n", "3", "/bin/sh", "-c", script, NULL });
    CHECKF(exited(&r, 0), "status %d, stderr: %s", r.status, r.err ? r.err : "");
    if (!r.out || !r.err)
        return;
    int seen[3] = { 0 }, longs[3] = { 0 }, tails[3] = { 0 }, bad = 0;
    char *save = NULL;
    for (char *l = strtok_r(r.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int p, rank, size;
        char rest[8];
        if (sscanf(l, "[%d] ", &p) != 1 || p < 0 || p > 2) {
            bad++;
            continue;
        }
        const char *body = strchr(l, ']') + 2;
        if (sscanf(body, "rank=%d size=%d", &rank, &size) == 2) {
            seen[p]++;
            bad += rank != p || size != 3;
        } else if (sscanf(body, "long %d ", &rank) == 1) {
            const char *digits = strchr(body + 5, ' ') + 1;
            size_t len = strlen(digits);
            longs[p]++;
            char own[2] = { (char)('0' + p), 0 };
            bad += rank != p || len != 900 || strspn(digits, own) != len;
        } else if (sscanf(body, "tail %d%7s", &rank, rest) == 1) {
            tails[p]++;
            bad += rank != p;
        } else {
            bad++;
        }
    }
    CHECKF(bad == 0, "%d malformed or misattributed lines", bad);
    for (int i = 0; i < 3; i++) {
        CHECKF(seen[i] == 1, "rank %d line seen %d times", i, seen[i]);
        CHECKF(longs[i] == 8, "rank %d: %d long lines", i, longs[i]);
        CHECKF(tails[i] == 1, "rank %d: unterminated last line seen %d times", i, tails[i]);
        char want[32];
        snprintf(want, sizeof want, "[%d] to stderr %d\n", i, i);
        CHECKF(strstr(r.err, want) != NULL, "stderr lacks '%s'", want);
    }
    done(&r);

    r = run(NULL, (const char *[]){ "--no-prefix", "-n", "2", "/bin/sh", "-c",
                                    "echo plain", NULL });
    CHECK(exited(&r, 0));
    CHECK(r.out && !strcmp(r.out, "plain\nplain\n"));
    done(&r);
}

/* (b) one rank fails while the others sleep: the job ends at once */
TEST(failure)
{
    if (!found)
        return;
    result r = run(NULL, (const char *[]){
        "-n", "3", "/bin/sh", "-c",
        "if [ \"$WEFT_RANK\" = 1 ]; then exit 3; fi; sleep 60", NULL });
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0,
           "weftrun status %d", r.status);
    CHECKF(exited(&r, 3), "exit status should be the rank's, got %d", r.status);
    CHECKF(r.err && strstr(r.err, "weftrun: rank 1 exited with status 3"),
           "stderr: %s", r.err ? r.err : "");
    CHECK(r.err && !strstr(r.err, "rank 0 ") && !strstr(r.err, "rank 2 "));
    done(&r);
}

/* (c) a rank killed by a signal is named, with the signal */
TEST(signal)
{
    if (!found)
        return;
    result r = run(NULL, (const char *[]){
        "-n", "3", "/bin/sh", "-c",
        "if [ \"$WEFT_RANK\" = 2 ]; then kill -KILL $$; fi; sleep 60", NULL });
    CHECKF(exited(&r, 128 + SIGKILL), "status %d", r.status);
    CHECKF(r.err && strstr(r.err, "weftrun: rank 2 killed by signal SIGKILL"),
           "stderr: %s", r.err ? r.err : "");
    done(&r);
}

/* (d) one secret for the whole job: 64 hex digits, or the caller's own */
TEST(secret)
{
    if (!found)
        return;
    for (int preset = 0; preset < 2; preset++) {
        const char *mine = "0123456789abcdef-caller-secret";
        result r = run(preset ? mine : NULL, (const char *[]){
            "-n", "4", "/bin/sh", "-c", "echo \"s=$WEFT_JOB_SECRET\"", NULL });
        CHECK(exited(&r, 0));
        char first[128] = "";
        int count = 0, same = 1;
        char *save = NULL;
        for (char *l = r.out ? strtok_r(r.out, "\n", &save) : NULL; l;
             l = strtok_r(NULL, "\n", &save)) {
            const char *s = strstr(l, "s=");
            if (!s)
                continue;
            s += 2;
            if (count++ == 0)
                snprintf(first, sizeof first, "%s", s);
            else
                same &= !strcmp(first, s);
        }
        CHECKF(count == 4, "%d ranks reported a secret", count);
        CHECK(same);
        if (preset)
            CHECK(!strcmp(first, mine));
        else
            CHECKF(strlen(first) == 64 && strspn(first, "0123456789abcdef") == 64,
                   "secret '%s'", first);
        done(&r);
    }
}

/* the rest of the environment: local ranks, master, roles, -x */
TEST(env)
{
    if (!found)
        return;
    result r = run(NULL, (const char *[]){
        "-n", "3", "--servers", "2", "-x", "EXTRA_VAR=yes", "/bin/sh", "-c",
        "echo \"$WEFT_RANK $WEFT_WORLD_SIZE $WEFT_LOCAL_RANK $WEFT_LOCAL_SIZE "
        "$WEFT_ROLE $WEFT_ROLE_RANK $WEFT_MASTER_ADDR $EXTRA_VAR $WEFT_MASTER_PORT\"", NULL });
    CHECK(exited(&r, 0));
    int ok[5] = { 0 }, ports = 1, port0 = -1;
    char *save = NULL;
    for (char *l = r.out ? strtok_r(r.out, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        int p, rank, world, lr, ls, rr, port;
        char role[16], addr[64], extra[16];
        if (sscanf(l, "[%d] %d %d %d %d %15s %d %63s %15s %d", &p, &rank, &world, &lr, &ls,
                   role, &rr, addr, extra, &port) != 10 || p < 0 || p > 4)
            continue;
        int server = rank >= 3;
        ok[p] = rank == p && world == 5 && lr == p && ls == 5 &&
                !strcmp(role, server ? "server" : "worker") &&
                rr == (server ? rank - 3 : rank) && !strcmp(addr, "127.0.0.1") &&
                !strcmp(extra, "yes");
        if (port0 < 0)
            port0 = port;
        ports &= port == port0 && port > 0 && port < 65536;
    }
    for (int i = 0; i < 5; i++)
        CHECKF(ok[i], "rank %d environment wrong: %s", i, r.out ? r.out : "");
    CHECK(ports);
    /* outside the ephemeral range, where no connection's source port and
     * no other bind to port 0 can take it before rank 0 listens */
    int lo = 0, hi = -1;
    FILE *range = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (range) {
        if (fscanf(range, "%d %d", &lo, &hi) != 2)
            lo = 0, hi = -1;
        fclose(range);
    }
    if (lo > 1024 || hi < 65535) /* else the range leaves no room */
        CHECKF(port0 < lo || port0 > hi, "master port %d in the ephemeral range %d-%d", port0,
               lo, hi);
    done(&r);

    /* two "hosts" that are both this machine: blocks of ceil(4/2) */
    r = run(NULL, (const char *[]){ "-n", "4", "--hosts", "localhost,127.0.0.1", "--port",
                                    "29999", "/bin/sh", "-c",
                                    "echo \"$WEFT_LOCAL_RANK/$WEFT_LOCAL_SIZE $WEFT_MASTER_PORT\"",
                                    NULL });
    CHECK(exited(&r, 0));
    CHECK(r.out && strstr(r.out, "[0] 0/2 29999\n") && strstr(r.out, "[1] 1/2 29999\n") &&
          strstr(r.out, "[2] 0/2 29999\n") && strstr(r.out, "[3] 1/2 29999\n"));
    done(&r);

    /* OpenBLAS on one thread unless the caller said otherwise (-x here) */
    const char *blas = getenv("OPENBLAS_NUM_THREADS");
    char want[64];
    snprintf(want, sizeof want, "[1] blas=%s\n", blas ? blas : "1");
    r = run(NULL, (const char *[]){ "-n", "2", "/bin/sh", "-c",
                                    "echo \"blas=$OPENBLAS_NUM_THREADS\"", NULL });
    CHECKF(exited(&r, 0) && r.out && strstr(r.out, want), "%s", r.out ? r.out : "");
    done(&r);
    r = run(NULL, (const char *[]){ "-n", "2", "-x", "OPENBLAS_NUM_THREADS=3", "/bin/sh", "-c",
                                    "echo \"blas=$OPENBLAS_NUM_THREADS\"", NULL });
    CHECKF(exited(&r, 0) && r.out && strstr(r.out, "[1] blas=3\n"), "%s", r.out ? r.out : "");
    done(&r);
}

TEST(misc)
{
    if (!found)
        return;
    result r = run(NULL, (const char *[]){ "-n", "2", "--timeout", "0.5", "/bin/sh", "-c",
                                           "sleep 60", NULL });
    CHECKF(exited(&r, 124), "timeout status %d", r.status);
    CHECK(r.err && strstr(r.err, "timed out"));
    done(&r);

    r = run(NULL, (const char *[]){ "-n", "1", "/nonexistent/program", NULL });
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0);
    CHECK(r.err && strstr(r.err, "rank 0 exited with status 127"));
    done(&r);

    r = run(NULL, (const char *[]){ "/bin/true", NULL }); /* no -n */
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0);
    done(&r);

    r = run(NULL, (const char *[]){ "--help", NULL });
    CHECK(exited(&r, 0) && r.out && strstr(r.out, "--hosts") && strstr(r.out, "ssh"));
    done(&r);
}


/* "0-2,5" (a /proc status list) into a set */
static int parse_cpu_list(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s && *s != '\n') {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s)
            return -1;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        for (long c = lo; c <= hi && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, set);
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* The CPUs each of n ranks runs on, from their /proc status; 0 when all
 * n answered. */
static int ranks_cpus(int n, int bind, cpu_set_t *got)
{
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    const char *script = "grep Cpus_allowed_list /proc/self/status";
    result r = bind ? run(NULL, (const char *[]){ "-n", nbuf, "--bind-to", "core", "/bin/sh",
                                                  "-c", script, NULL })
                    : run(NULL, (const char *[]){ "-n", nbuf, "/bin/sh", "-c", script, NULL });
    int seen = 0;
    CHECKF(exited(&r, 0), "status %d, stderr: %s", r.status, r.err ? r.err : "");
    for (char *l = r.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int rank;
        const char *tab = strchr(l, '\t');
        if (sscanf(l, "[%d] Cpus_allowed_list:", &rank) == 1 && rank >= 0 && rank < n && tab &&
            parse_cpu_list(tab + 1, &got[rank]) == 0)
            seen++;
    }
    done(&r);
    return seen == n ? 0 : -1;
}

/* --bind-to core: local rank r on the r-th equal slice of the CPUs weftrun
 * may use, going round them where the ranks are more; none leaves them all */
TEST(bind)
{
    if (!found)
        return;
    cpu_set_t mine, got[17];
    CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
    int cpu[CPU_SETSIZE], ncpu = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            cpu[ncpu++] = c;
    int sizes[] = { 2, ncpu < 16 ? ncpu + 1 : 17 };
    for (int k = 0; k < 2; k++) {
        int n = sizes[k];
        int ok = ranks_cpus(n, 1, got) == 0;
        CHECKF(ok, "%d bound ranks: not every rank answered", n);
        if (!ok)
            continue;
        for (int r = 0; r < n; r++) {
            cpu_set_t want;
            CPU_ZERO(&want);
            if (n <= ncpu)
                for (int c = r * ncpu / n; c < (r + 1) * ncpu / n; c++)
                    CPU_SET(cpu[c], &want);
            else
                CPU_SET(cpu[r % ncpu], &want);
            CHECKF(CPU_EQUAL(&want, &got[r]), "%d ranks: rank %d bound to %d CPUs, want %d", n,
                   r, CPU_COUNT(&got[r]), CPU_COUNT(&want));
        }
    }
    int ok = ranks_cpus(2, 0, got) == 0;
    CHECK(ok);
    for (int r = 0; ok && r < 2; r++)
        CHECKF(CPU_EQUAL(&mine, &got[r]), "unbound rank %d on %d CPUs, weftrun's %d", r,
               CPU_COUNT(&got[r]), CPU_COUNT(&mine));
    result r = run(NULL, (const char *[]){ "-n", "1", "--bind-to", "socket", "/bin/true", NULL });
    CHECKF(exited(&r, 2) && r.err && strstr(r.err, "--bind-to"), "bad --bind-to: status %d",
           r.status);
    done(&r);
}
