/*
 * weftrun — start the ranks of a weft job and gather their output.
 * Options and environment: see usage() below, or weftrun --help.
 *
 * Placement. Without --hosts, or when every host names this machine, all
 * ranks run here with WEFT_MASTER_ADDR=127.0.0.1 and a free port (one that
 * 127.0.0.1 binds, outside the ephemeral range) unless --port is given. With H
 * hosts, ranks go in blocks of ceil(W/H), W the world size: ranks 0..B-1
 * on the first host and so on; WEFT_LOCAL_RANK counts within a host. A rank
 * on another host starts as
 *     ssh -o BatchMode=yes HOST env VAR=VAL... prog args...
 * (each word shell-quoted), with WEFT_MASTER_ADDR set to the first host's
 * name; give --port there, since a port free here need not be free there.
 *
 * Output. Each rank's stdout and stderr come through pipes and leave on
 * weftrun's a whole line at a time, prefixed "[R] "; a last line without a
 * newline is ended at exit. Ranks read stdin from /dev/null.
 *
 * Failure. Each rank runs in its own process group, which gets forwarded
 * SIGINT/SIGTERM/SIGHUP; SIGUSR1 is passed on too, without stopping the
 * job (a rank that calls weft_comm_dump from a SIGUSR1 handler prints its
 * flight recorder; one without a handler dies of it, as the signal's
 * default says). When a rank exits non-zero or dies by a signal,
 * weftrun says so on stderr, sends SIGTERM to the other ranks, SIGKILL
 * after 3 s, and exits with that rank's status, or 128 + its signal. It
 * exits 124 after --timeout, 128 + the signal after a forwarded one, and 0
 * when every rank exits 0.
 *
 * With --servers (a parameter-server job) a worker that fails stops no
 * one: the servers go on with the live workers, as they are built to.
 * weftrun says so, and at the end exits 0 when every server and every
 * other worker exited 0; with no worker left, or a server failed, it
 * exits as above with the first failure's status.
 *
 * With --elastic MIN:MAX weftrun serves the job's rendezvous store itself
 * (ranks get WEFT_STORE_EXTERNAL=1), so that no rank's death takes it
 * away, as torchrun's agent keeps its c10d store: a rank that fails stops
 * no one while at least MIN ranks live (the survivors weft_comm_shrink);
 * with --restarts N, up to N failed ranks are started again with
 * WEFT_JOIN=1 and join the running job (weft_comm_grow admits them).
 *
 * Known limits: killing ssh does not always stop the remote process (no tty
 * is allocated), and a remote rank's environment, secret included, shows in
 * the remote host's process list.
 */
#include "weft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GRACE_S 3.0
/* After a rank exits with an error the others usually leave by themselves
 * (they saw the same failure); a SIGTERM in the middle of their exit only
 * adds noise, so it waits this long for them first. */
#define EXIT_GRACE_S 1.0
#define MAX_RANKS 4096
#define MAX_LINE (1u << 20) /* a longer "line" is cut into pieces */

typedef struct {
    pid_t pid;       /* 0 once reaped */
    int fd[2];       /* read ends for stdout, stderr; -1 once closed */
    char *buf[2];    /* pending bytes not yet ending in a newline */
    size_t len[2], cap[2];
    const char *host;
    int local_rank, local_size, remote;
    int joins;       /* started again (--restarts): it joins the running job */
} rank_info;

typedef struct {
    int nworkers, nservers, world;
    char **hosts;
    int nhosts, any_remote;
    int port, prefix;
    double timeout_s;
    char **extra;    /* "VAR=VAL" */
    int nextra;
    char **prog;     /* prog and its arguments, NULL-terminated */
    const char *master;
    const char *secret;
    int el_min, el_max;   /* --elastic MIN:MAX; el_max 0: not elastic */
    int clusters;         /* --clusters C; 0: WEFT_CLUSTER left as it is */
    int restarts, restarted;
    int bind;             /* --bind-to core: each local rank on its own cores */
    int ncpu, *cpu;       /* the CPUs weftrun may use, in order (--bind-to) */
    weft_store_server *store;  /* elastic: the job's store, here, outside every rank */
    rank_info *r;
} job;

static int sig_w = -1; /* write end of the self-pipe the handlers use */
static const int handled[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1 };

static void on_signal(int sig)
{
    int e = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_w, &b, 1) < 0) { /* a full pipe already holds a wake-up */ }
    errno = e;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("weftrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void usage(FILE *f)
{
    fputs("usage: weftrun -n N [--hosts h1,h2,...] [--port P] [--timeout S]\n"
          "               [--no-prefix] [--servers K] [--elastic MIN:MAX [--restarts N]]\n"
          "               [--clusters C] [--bind-to core|none] [-x VAR=VAL]...\n"
          "               [--] prog args...\n"
          "\n"
          "Starts N ranks of prog (N workers and K servers with --servers) with\n"
          "WEFT_RANK, WEFT_WORLD_SIZE, WEFT_LOCAL_RANK, WEFT_LOCAL_SIZE,\n"
          "WEFT_MASTER_ADDR, WEFT_MASTER_PORT and WEFT_JOB_SECRET (64 random hex\n"
          "digits, or weftrun's own WEFT_JOB_SECRET if set) in the environment; with\n"
          "--servers also WEFT_ROLE=worker|server, WEFT_ROLE_RANK, WEFT_NUM_WORKERS\n"
          "and WEFT_NUM_SERVERS (workers are ranks 0..N-1, servers N..N+K-1).\n"
          "OPENBLAS_NUM_THREADS=1 unless set: weft runs OpenBLAS on one thread.\n"
          "\n"
          "  -n N          number of ranks (workers)\n"
          "  --hosts LIST  place ranks in blocks of ceil(world/hosts) per host; ranks on\n"
          "                other hosts start as: ssh -o BatchMode=yes HOST env VAR=VAL... prog\n"
          "                and the first host is the master (WEFT_MASTER_ADDR)\n"
          "  --port P      master port (default: a free port on 127.0.0.1)\n"
          "  --timeout S   stop the job after S seconds (exit status 124)\n"
          "  --no-prefix   do not prefix output lines with \"[rank] \"\n"
          "  --servers K   add K parameter-server ranks\n"
          "  --elastic MIN:MAX  weftrun serves the store; a failed rank stops no one\n"
          "                while MIN ranks live (the program shrinks its communicator)\n"
          "  --restarts N  with --elastic: start up to N failed ranks again, with\n"
          "                WEFT_JOIN=1 (they join at the others' next weft_comm_grow)\n"
          "  --clusters C  place ranks in C clusters, in blocks of consecutive ranks\n"
          "                (WEFT_CLUSTER=0..C-1; docs/WAN.md)\n"
          "  --bind-to core  local rank r of L runs on the r-th of L equal slices of the\n"
          "                CPUs weftrun may use (on CPU r mod the CPUs where L is more);\n"
          "                none (the default) leaves placement to the kernel\n"
          "  -x VAR=VAL    set VAR for every rank (-x VAR: pass this VAR on)\n"
          "\n"
          "Output is passed on a line at a time, prefixed \"[R] \". If a rank fails,\n"
          "the others get SIGTERM, then SIGKILL after 3 s, and weftrun exits with\n"
          "the rank's status (128+signal if it was killed); with --servers a failed\n"
          "worker stops no one and the job ends with 0 if all the rest did, while\n"
          "a failed server stops the job as above. SIGINT, SIGTERM and\n"
          "SIGHUP are forwarded to every rank; so is SIGUSR1, which does not stop\n"
          "the job (ranks that handle it with weft_comm_dump print what each\n"
          "communicator is doing and waiting for).\n", f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *sig_name(int sig, char *tmp, size_t n)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
    const char *abbrev = sigabbrev_np(sig); /* "SEGV" */
    if (abbrev) {
        snprintf(tmp, n, "SIG%s", abbrev);
        return tmp;
    }
#endif
    snprintf(tmp, n, "SIG%d", sig);
    return tmp;
}

/* ---- setup ----------------------------------------------------------------- */

static int parse_int(const char *s, const char *what, int lo, int hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die("bad %s '%s' (want %d..%d)", what, s, lo, hi);
    return (int)v;
}

/* "--name VALUE" or "--name=VALUE"; advances *i past what it used. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        die("%s needs a value", name);
    return argv[++*i];
}

static int host_is_local(const char *h)
{
    char me[256] = "";
    if (!*h || !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, "::1"))
        return 1;
    if (gethostname(me, sizeof me - 1) != 0)
        return 0;
    size_t n = strcspn(me, ".");
    return !strcmp(h, me) || (strlen(h) == n && !strncmp(h, me, n));
}

static void parse_args(job *j, int argc, char **argv)
{
    const char *v, *hosts = NULL;
    int i;
    j->prefix = 1;
    j->port = -1;
    if (!(j->extra = calloc((size_t)argc, sizeof *j->extra)))
        die("out of memory");
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            exit(0);
        } else if ((v = opt_value(argc, argv, &i, "-n"))) {
            j->nworkers = parse_int(v, "rank count", 1, MAX_RANKS);
        } else if ((v = opt_value(argc, argv, &i, "--hosts"))) {
            hosts = v;
        } else if ((v = opt_value(argc, argv, &i, "--port"))) {
            j->port = parse_int(v, "port", 1, 65535);
        } else if ((v = opt_value(argc, argv, &i, "--timeout"))) {
            char *end;
            j->timeout_s = strtod(v, &end);
            if (end == v || *end || !(j->timeout_s >= 0))
                die("bad timeout '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--servers"))) {
            j->nservers = parse_int(v, "server count", 0, MAX_RANKS);
        } else if ((v = opt_value(argc, argv, &i, "--elastic"))) {
            if (sscanf(v, "%d:%d", &j->el_min, &j->el_max) != 2 || j->el_min < 1 ||
                j->el_max < j->el_min || j->el_max > MAX_RANKS)
                die("bad --elastic '%s' (want MIN:MAX, 1 <= MIN <= MAX)", v);
        } else if ((v = opt_value(argc, argv, &i, "--restarts"))) {
            j->restarts = parse_int(v, "restart count", 0, MAX_RANKS);
        } else if ((v = opt_value(argc, argv, &i, "--clusters"))) {
            j->clusters = parse_int(v, "cluster count", 1, MAX_RANKS);
        } else if ((v = opt_value(argc, argv, &i, "--bind-to"))) {
            if (strcmp(v, "core") && strcmp(v, "none"))
                die("bad --bind-to '%s' (want core or none)", v);
            j->bind = !strcmp(v, "core");
        } else if (!strcmp(argv[i], "--no-prefix")) {
            j->prefix = 0;
        } else if ((v = opt_value(argc, argv, &i, "-x"))) {
            char *kv = (char *)v;
            if (!strchr(v, '=') && (!getenv(v) || asprintf(&kv, "%s=%s", v, getenv(v)) < 0))
                die("-x %s: not set in this environment", v);
            j->extra[j->nextra++] = kv;
        } else {
            die("unknown option '%s' (see weftrun --help)", argv[i]);
        }
    }
    if (j->nworkers < 1)
        die("-n N is required (see weftrun --help)");
    if (i >= argc)
        die("no program given (see weftrun --help)");
    j->prog = argv + i;
    j->world = j->nworkers + j->nservers;
    if (j->el_max && (j->nservers || j->nworkers < j->el_min || j->nworkers > j->el_max))
        die("--elastic %d:%d: -n must lie between them, without --servers", j->el_min,
            j->el_max);
    if (j->restarts && !j->el_max)
        die("--restarts needs --elastic");
    if (j->world > MAX_RANKS)
        die("too many ranks (%d > %d)", j->world, MAX_RANKS);
    if (j->clusters > j->world)
        die("--clusters %d: more clusters than the %d ranks", j->clusters, j->world);

    /* hosts: split the list in place */
    if (hosts) {
        char *copy = strdup(hosts), *save = NULL;
        j->hosts = calloc(strlen(hosts) + 1, sizeof *j->hosts);
        if (!copy || !j->hosts)
            die("out of memory");
        for (char *h = strtok_r(copy, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
            j->hosts[j->nhosts++] = h;
            if (!host_is_local(h))
                j->any_remote = 1;
        }
        if (j->nhosts == 0)
            die("--hosts: empty list");
    }
}

static int free_port(void)
{
    int port;
    if (weft_spare_port(&port))
        die("cannot find a free port: %s", strerror(errno));
    return port;
}

static void make_secret(job *j)
{
    static char hex[65];
    unsigned char b[32];
    /* an empty WEFT_JOB_SECRET is none, as the ranks read it */
    const char *given = getenv("WEFT_JOB_SECRET");
    if (given && *given) {
        j->secret = given;
        return;
    }
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, sizeof b) != (ssize_t)sizeof b)
        die("cannot read /dev/urandom: %s", strerror(errno));
    close(fd);
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", b[i]);
    j->secret = hex;
}

/* --bind-to: the CPUs this weftrun may run on (a taskset or a cgroup's
 * cpuset narrows them), which its ranks share out. */
static void allowed_cpus(job *j)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        die("--bind-to: cannot read this process's CPUs: %s", strerror(errno));
    if (!(j->cpu = calloc(CPU_SETSIZE, sizeof *j->cpu)))
        die("out of memory");
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            j->cpu[j->ncpu++] = c;
    if (j->ncpu == 0)
        die("--bind-to: no CPU to bind to");
}

/* In the child. A rank that fits gets a slice of the CPUs, not one CPU, so
 * that its threads (weft-train's default is the host's cores over its
 * ranks) keep a core each; more ranks than CPUs go round them, as
 * Open MPI's --bind-to core --oversubscribe places them. */
static int bind_rank(const job *j, const rank_info *r)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (r->local_size <= j->ncpu) {
        int lo = (int)((long)r->local_rank * j->ncpu / r->local_size);
        int hi = (int)((long)(r->local_rank + 1) * j->ncpu / r->local_size);
        for (int c = lo; c < hi; c++)
            CPU_SET(j->cpu[c], &set);
    } else {
        CPU_SET(j->cpu[r->local_rank % j->ncpu], &set);
    }
    return sched_setaffinity(0, sizeof set, &set);
}

static void place(job *j)
{
    j->r = calloc((size_t)j->world, sizeof *j->r);
    if (!j->r)
        die("out of memory");
    int block = j->nhosts ? (j->world + j->nhosts - 1) / j->nhosts : j->world;
    for (int i = 0; i < j->world; i++) {
        rank_info *r = &j->r[i];
        int h = i / block, first = h * block;
        int last = first + block < j->world ? first + block : j->world;
        r->host = j->nhosts ? j->hosts[h] : "127.0.0.1";
        r->remote = j->any_remote && !host_is_local(r->host);
        r->local_rank = i - first;
        r->local_size = last - first;
        r->fd[0] = r->fd[1] = -1;
    }
    j->master = "127.0.0.1";
    if (j->any_remote) {
        /* other hosts must reach the master by name, not as "localhost" */
        static char me[256];
        j->master = j->hosts[0];
        if (host_is_local(j->hosts[0]) && gethostname(me, sizeof me - 1) == 0)
            j->master = me;
    }
    if (j->port < 0)
        j->port = free_port();
    if (j->bind)
        allowed_cpus(j);
}

/* ---- launching --------------------------------------------------------------- */

/* --clusters: rank's cluster, blocks as even as the count allows (5 ranks
 * in 2: 0 0 0 1 1), so that consecutive ranks, which --hosts also keeps
 * together, share a cluster. -1: not asked. */
static int cluster_of(const job *j, int rank)
{
    return j->clusters ? (int)((long)rank * j->clusters / j->world) : -1;
}

/* The rank's variables as "VAR=VAL" strings, NULL-terminated. */
static char **rank_env(const job *j, int rank)
{
    const rank_info *r = &j->r[rank];
    int server = rank >= j->nworkers, n = 0;
    char **env = calloc((size_t)j->nextra + 16, sizeof *env);
    if (!env)
        return NULL;
#define PUT(...) do { if (asprintf(&env[n++], __VA_ARGS__) < 0) return NULL; } while (0)
    PUT("WEFT_RANK=%d", rank);
    PUT("WEFT_WORLD_SIZE=%d", j->world);
    PUT("WEFT_LOCAL_RANK=%d", r->local_rank);
    PUT("WEFT_LOCAL_SIZE=%d", r->local_size);
    PUT("WEFT_MASTER_ADDR=%s", j->master);
    PUT("WEFT_MASTER_PORT=%d", j->port);
    PUT("WEFT_JOB_SECRET=%s", j->secret);
    if (cluster_of(j, rank) >= 0)
        PUT("WEFT_CLUSTER=%d", cluster_of(j, rank));
    if (j->el_max)
        PUT("WEFT_STORE_EXTERNAL=1");
    if (r->joins)
        PUT("WEFT_JOIN=1");
    /* weft calls OpenBLAS on one thread (its own pool splits the work);
     * OpenBLAS's threads, started when the library loads, would spin on
     * sched_yield for about 0.1 s first, taking the cores from ranks'
     * start-up and a resume's reads. Set to start none (-x overrides). */
    if (!getenv("OPENBLAS_NUM_THREADS"))
        PUT("OPENBLAS_NUM_THREADS=1");
    if (j->nservers > 0) {
        PUT("WEFT_ROLE=%s", server ? "server" : "worker");
        PUT("WEFT_ROLE_RANK=%d", server ? rank - j->nworkers : rank);
        PUT("WEFT_NUM_WORKERS=%d", j->nworkers);
        PUT("WEFT_NUM_SERVERS=%d", j->nservers);
    }
#undef PUT
    for (int i = 0; i < j->nextra; i++)
        env[n++] = j->extra[i];
    return env;
}

/* 'word' for a remote shell, with ' written as '\'' */
static char *shell_quote(const char *s)
{
    char *q = malloc(4 * strlen(s) + 3), *o = q;
    if (!q)
        return NULL;
    *o++ = '\'';
    for (; *s; s++)
        o = *s == '\'' ? stpcpy(o, "'\\''") : (*o = *s, o + 1);
    strcpy(o, "'");
    return q;
}

/* In the child: never returns. */
static void exec_rank(const job *j, int rank)
{
    const rank_info *r = &j->r[rank];
    char **env = rank_env(j, rank);
    if (!env)
        _exit(127);
    if (!r->remote) {
        if (j->bind && bind_rank(j, r) != 0) {
            fprintf(stderr, "weftrun: rank %d: cannot bind to its CPUs: %s\n", rank,
                    strerror(errno));
            _exit(127);
        }
        for (char **e = env; *e; e++)
            putenv(*e);
        execvp(j->prog[0], j->prog);
        fprintf(stderr, "weftrun: cannot run %s: %s\n", j->prog[0], strerror(errno));
        _exit(127);
    }
    char *av[4096] = { "ssh", "-o", "BatchMode=yes", (char *)r->host, "env" };
    int n = 5;
    for (char **e = env; *e && n < 4000; e++)
        av[n++] = shell_quote(*e);
    for (char **p = j->prog; *p && n < 4094; p++)
        av[n++] = shell_quote(*p);
    execvp("ssh", av);
    fprintf(stderr, "weftrun: cannot run ssh: %s\n", strerror(errno));
    _exit(127);
}

static void launch(job *j, int rank)
{
    rank_info *r = &j->r[rank];
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        setpgid(0, 0);
        for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++)
            signal(handled[i], SIG_DFL);
        if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
            _exit(127);
        exec_rank(j, rank);
    }
    setpgid(pid, pid); /* also here: the child may not have run yet */
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    r->pid = pid;
    r->fd[0] = out[0];
    r->fd[1] = err[0];
}

/* ---- output ------------------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nobody is reading: drop it */
        p += w;
        n -= (size_t)w;
    }
}

/* Pass on the complete lines of one stream; at_end: the rest too. */
static void emit(const job *j, int rank, int s, int at_end)
{
    rank_info *r = &j->r[rank];
    char pre[24] = "";
    if (j->prefix)
        snprintf(pre, sizeof pre, "[%d] ", rank);
    size_t plen = strlen(pre), nl = 0, start = 0;
    for (size_t i = 0; i < r->len[s]; i++)
        nl += r->buf[s][i] == '\n';
    int cut = r->len[s] >= MAX_LINE;
    if (nl == 0 && !cut && !(at_end && r->len[s] > 0))
        return;
    char *out = malloc(r->len[s] + (nl + 1) * plen + 1);
    size_t o = 0;
    if (!out)
        return;
    for (size_t i = 0; i <= r->len[s]; i++) {
        int last = i == r->len[s]; /* the unterminated rest, if due */
        if (last ? start == i || !(at_end || cut) : r->buf[s][i] != '\n')
            continue;
        memcpy(out + o, pre, plen);
        memcpy(out + o + plen, r->buf[s] + start, i + !last - start);
        o += plen + i + !last - start;
        if (last)
            out[o++] = '\n';
        start = i + !last;
    }
    write_all(s == 0 ? 1 : 2, out, o);
    free(out);
    memmove(r->buf[s], r->buf[s] + start, r->len[s] - start);
    r->len[s] -= start;
}

/* Read what is there; closes the stream at end of file. */
static void pump(const job *j, int rank, int s)
{
    rank_info *r = &j->r[rank];
    for (;;) {
        if (r->cap[s] - r->len[s] < 65536) {
            size_t cap = r->cap[s] ? 2 * r->cap[s] : 131072;
            char *b = realloc(r->buf[s], cap);
            if (!b)
                die("out of memory");
            r->buf[s] = b;
            r->cap[s] = cap;
        }
        ssize_t n = read(r->fd[s], r->buf[s] + r->len[s], r->cap[s] - r->len[s]);
        if (n > 0) {
            r->len[s] += (size_t)n;
            emit(j, rank, s, 0);
        } else if (n == 0 || errno != EINTR) {
            if (n == 0 || errno != EAGAIN) {
                close(r->fd[s]);
                r->fd[s] = -1;
            }
            return;
        }
    }
}

/* ---- supervision ------------------------------------------------------------- */

static void signal_all(job *j, int sig)
{
    for (int i = 0; i < j->world; i++)
        if (j->r[i].pid > 0)
            kill(-j->r[i].pid, sig);
}

/* Take what a finished rank left in its pipes, and close them. */
static void drain(job *j, int i)
{
    for (int s = 0; s < 2; s++) {
        if (j->r[i].fd[s] >= 0) {
            pump(j, i, s);
            if (j->r[i].fd[s] >= 0)
                close(j->r[i].fd[s]);
            j->r[i].fd[s] = -1;
        }
        emit(j, i, s, 1);
    }
}

static void launch(job *j, int rank);

/* --elastic: rank i failed with alive others left. 1: the job goes on
 * (rank i started again when a restart is left); 0: it stops. */
static int elastic_goes_on(job *j, int i, int alive)
{
    if (j->restarted < j->restarts) {
        j->restarted++;
        fprintf(stderr, "; elastic: starting it again (restart %d of %d), to join the "
                        "running job\n", j->restarted, j->restarts);
        drain(j, i);
        j->r[i].joins++;
        launch(j, i);
        return 1;
    }
    if (alive >= j->el_min) {
        fprintf(stderr, "; elastic: the job goes on with %d rank(s) (at least %d)\n", alive,
                j->el_min);
        return 1;
    }
    fprintf(stderr, "; elastic: %d rank(s) left, fewer than %d", alive, j->el_min);
    return 0;
}

static int supervise(job *j, int sig_r)
{
    struct pollfd *pfd = calloc((size_t)(2 * j->world + 1), sizeof *pfd);
    int *who = calloc((size_t)(2 * j->world + 1), sizeof *who);
    int alive = j->world, exit_code = 0, stopping = 0, lost = 0, lost_code = 0;
    double kill_at = -1, term_at = -1, deadline = j->timeout_s > 0 ? now_s() + j->timeout_s : -1;
    if (!pfd || !who)
        die("out of memory");
    while (alive > 0) {
        int n = 0;
        pfd[n++] = (struct pollfd){ .fd = sig_r, .events = POLLIN };
        for (int i = 0; i < j->world; i++)
            for (int s = 0; s < 2; s++)
                if (j->r[i].fd[s] >= 0) {
                    who[n] = 2 * i + s;
                    pfd[n++] = (struct pollfd){ .fd = j->r[i].fd[s], .events = POLLIN };
                }
        /* the next thing to do on a clock: the SIGKILL, or the timeout */
        double t = now_s(), wake = stopping ? kill_at : deadline;
        if (term_at >= 0 && term_at < wake)
            wake = term_at;
        int ms = wake < 0 ? -1 : wake <= t ? 0 : (int)((wake - t) * 1000) + 1;
        if (poll(pfd, (nfds_t)n, ms) < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        for (int k = 1; k < n; k++)
            if (pfd[k].revents)
                pump(j, who[k] / 2, who[k] % 2);
        if (pfd[0].revents) {
            unsigned char b[64];
            ssize_t got = read(sig_r, b, sizeof b);
            for (ssize_t k = 0; k < got; k++) {
                if (b[k] == SIGCHLD)
                    continue;
                if (b[k] == SIGUSR1) {
                    signal_all(j, SIGUSR1);
                    continue;
                }
                if (!stopping)
                    exit_code = 128 + b[k];
                stopping = 1;
                signal_all(j, b[k]);
                if (kill_at < 0)
                    kill_at = now_s() + GRACE_S;
            }
        }
        int st;
        for (pid_t pid; (pid = waitpid(-1, &st, WNOHANG)) > 0;) {
            int i = 0;
            while (i < j->world && j->r[i].pid != pid)
                i++;
            if (i == j->world)
                continue;
            j->r[i].pid = 0;
            alive--;
            int failed = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            if (!failed || stopping)
                continue;
            char tmp[16];
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (WIFEXITED(st))
                fprintf(stderr, "weftrun: rank %d exited with status %d", i, WEXITSTATUS(st));
            else
                fprintf(stderr, "weftrun: rank %d killed by signal %s", i,
                        sig_name(WTERMSIG(st), tmp, sizeof tmp));
            if (j->el_max && elastic_goes_on(j, i, alive)) {
                alive += j->r[i].pid > 0;
                continue;
            }
            if (j->nservers > 0 && i < j->nworkers && ++lost < j->nworkers) {
                /* the servers carry on with the live workers */
                fprintf(stderr, "; it was a worker: the job goes on without it\n");
                if (!lost_code)
                    lost_code = code;
                continue;
            }
            fputc('\n', stderr);
            exit_code = lost_code && lost == j->nworkers && i < j->nworkers ? lost_code : code;
            stopping = 1;
            if (WIFEXITED(st)) {
                term_at = now_s() + EXIT_GRACE_S;
                kill_at = term_at + GRACE_S;
            } else {
                signal_all(j, SIGTERM);
                kill_at = now_s() + GRACE_S;
            }
        }
        t = now_s();
        if (deadline >= 0 && t >= deadline && !stopping) {
            fprintf(stderr, "weftrun: job timed out after %g s\n", j->timeout_s);
            exit_code = 124;
            stopping = 1;
            signal_all(j, SIGTERM);
            kill_at = t + GRACE_S;
        }
        if (term_at >= 0 && t >= term_at) {
            if (alive > 0)
                signal_all(j, SIGTERM);
            term_at = -1;
        }
        if (kill_at >= 0 && t >= kill_at && alive > 0) {
            signal_all(j, SIGKILL);
            kill_at = -1;
            deadline = -1;
        }
    }
    if (lost && !stopping)
        fprintf(stderr, "weftrun: the job finished without %d of its %d worker(s)\n", lost,
                j->nworkers);
    /* Every rank is gone: take what is left in the pipes (a process the rank
     * left behind may keep one open, so do not wait for end of file). */
    for (int i = 0; i < j->world; i++)
        for (int s = 0; s < 2; s++) {
            if (j->r[i].fd[s] >= 0) {
                pump(j, i, s);
                if (j->r[i].fd[s] >= 0)
                    close(j->r[i].fd[s]);
            }
            emit(j, i, s, 1);
        }
    free(pfd);
    free(who);
    return exit_code;
}

/* Open files: weftrun keeps two pipes per rank, and a rank a socket each
 * way per peer it talks to (every peer in an all-to-all) and an epoll set.
 * A soft RLIMIT_NOFILE of 1024, the default of many systems, runs out
 * within a few hundred ranks, so the soft limit goes up to the hard one
 * (what the administrator allows), here and in the ranks, which inherit
 * it. weftrun says so only when even that is too few for its own pipes;
 * a rank that runs out says so itself, naming the limit. */
static void raise_nofile(const job *j)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    rlim_t need = 2 * (rlim_t)j->world + 32;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        die("%d ranks need about %llu open files in weftrun (two pipes a rank), but "
            "RLIMIT_NOFILE allows %llu (hard limit %llu): raise it (ulimit -n, "
            "/etc/security/limits.conf)",
            j->world, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max);
}

int main(int argc, char **argv)
{
    static job j; /* lives until exit, and so does what it points to */
    int sp[2];
    parse_args(&j, argc, argv);
    make_secret(&j);
    place(&j);
    raise_nofile(&j);

    if (pipe2(sp, O_CLOEXEC | O_NONBLOCK) != 0)
        die("pipe: %s", strerror(errno));
    sig_w = sp[1];
    struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART | SA_NOCLDSTOP };
    for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++)
        if (handled[i] != SIGPIPE)
            sigaction(handled[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the job */

    if (j.el_max) {
        char err[256];
        int port;
        if (weft_store_server_start(&j.store, j.any_remote ? NULL : "127.0.0.1", j.port, &port,
                               j.secret, err, sizeof err))
            die("cannot serve the store: %s", err);
        j.port = port;
    }
    for (int i = 0; i < j.world; i++)
        launch(&j, i);
    int rc = supervise(&j, sp[0]);
    /* its thread may still be answering a rank: stopped before exit's
     * cleanup frees what it uses (OpenSSL's state among it) */
    if (j.store)
        weft_store_server_stop(j.store);
    return rc;
}
