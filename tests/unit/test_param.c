/* The parameter table (core/param_table.h): defaults, parsing, bad values
 * and what they say, launchers' aliases, a weft_config laid over the
 * environment, the WEFT_DEBUG=INIT listing, and README.md's table of
 * environment variables naming exactly the table's variables. */
#include "core/log.h"
#include "core/param.h"
#include "test.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every name and alias of the table unset: the cases start from nothing. */
static void clean_env(void)
{
    for (int i = 0; i < PARAM_COUNT; i++) {
        const param_info *e = param_info_of((param_id)i);
        char list[512], *save = NULL;
        unsetenv(e->name);
        snprintf(list, sizeof list, "%s", e->aliases);
        for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save))
            unsetenv(a);
    }
}

static int load(param_set *p, char *err, size_t cap)
{
    err[0] = 0;
    return param_load(p, err, cap);
}

TEST_INIT { clean_env(); }

TEST(table_rows)
{
    param_set p;
    char err[300];
    for (int i = 0; i < PARAM_COUNT; i++) {
        const param_info *e = param_info_of((param_id)i);
        CHECKF(!strncmp(e->name, "WEFT_", 5), "%s", e->name);
        CHECKF(e->doc && *e->doc, "%s has no doc", e->name);
        CHECKF(param_find(e->name) == e, "%s is not found by name (twice in the table?)",
               e->name);
        CHECKF(param_set_text(&p, (param_id)i, e->dflt, PARAM_SRC_DEFAULT, err, sizeof err) == 0,
               "the default of %s does not parse: %s", e->name, err);
    }
    CHECK(param_info_of(PARAM_COUNT) == NULL);
    CHECK(param_find("WEFT_NO_SUCH_THING") == NULL);
    CHECK(param_find("RANK") == NULL); /* an alias is not an entry */
}

TEST(defaults)
{
    param_set p;
    char err[300];
    clean_env();
    CHECKF(load(&p, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < PARAM_COUNT; i++)
        CHECK(p.src[i] == PARAM_SRC_DEFAULT && p.via[i] == -1);
    /* the values the code had before the table */
    CHECK(p.rank == 0 && p.world_size == 1 && p.local_rank == -1 && p.local_size == 0);
    CHECK(!strcmp(p.master_addr, "127.0.0.1") && p.master_port == 29500);
    CHECK(p.store_external == 0 && p.connect_timeout == 60 && p.handshake_timeout == 5);
    CHECK(p.shm == 1 && p.shm_ring == 2 << 20 && p.shm_cma == 1);
    CHECK(p.algo == WEFT_ALGO_AUTO && p.timeout == 300 && p.spin_us == 50 && p.autotune == 1);
    CHECK(!*p.tune && !*p.tune_file && !*p.job_secret && !*p.host_id && !*p.socket_ifname);
    CHECK(!strcmp(p.debug, "WARN") && !*p.debug_subsys);
    CHECK(p.threads == 0 && p.matmul == 0 && p.matmul_isa == 0);
    CHECK(!strcmp(p.fashion_mnist, WEFT_FASHION_MNIST_DIR));
    CHECK(p.role == WEFT_PS_ROLE_AUTO && p.num_workers == 0 && p.ps_sndbuf == 64 << 10);
    CHECK(log_level_of(&p) == (LOG_WARN | LOG_SUB_ALL << 8));
}

TEST(parsing)
{
    param_set p;
    char err[300], buf[64];
    clean_env();
    setenv("WEFT_SHM", "0", 1);
    setenv("WEFT_SHM_RING", "4M", 1);
    setenv("WEFT_PS_SNDBUF", "0x20000", 1);
    setenv("WEFT_TIMEOUT", "2.5", 1);
    setenv("WEFT_ALGO", "rabenseifner", 1);
    setenv("WEFT_MATMUL", "OpenBLAS", 1);
    setenv("WEFT_ROLE", "server", 1);
    setenv("WEFT_DEBUG", "INIT,SHM", 1);
    setenv("WEFT_SOCKET_IFNAME", "", 1); /* empty: unset, as launchers export them */
    setenv("WEFT_JOB_SECRET", "hush", 1);
    CHECKF(load(&p, err, sizeof err) == 0, "%s", err);
    CHECK(p.shm == 0 && p.src[PARAM_shm] == PARAM_SRC_ENV);
    CHECK(p.shm_ring == 4 << 20 && p.ps_sndbuf == 0x20000);
    /* sizes in the grammar of core/size.h: iB or B after the unit, fractions */
    static const char *const ring[][2] = { { "4MiB", "4194304" }, { "1.5M", "1572864" },
                                           { "64KB", "65536" }, { "1GiB", "1073741824" },
                                           { "131072", "131072" } };
    for (size_t i = 0; i < sizeof ring / sizeof *ring; i++) {
        param_set q;
        setenv("WEFT_SHM_RING", ring[i][0], 1);
        CHECKF(load(&q, err, sizeof err) == 0 && q.shm_ring == atoi(ring[i][1]),
               "WEFT_SHM_RING=%s: %s, %d", ring[i][0], err, q.shm_ring);
    }
    setenv("WEFT_SHM_RING", "4M", 1);
    CHECK(p.timeout == 2.5 && p.algo == WEFT_ALGO_RABENSEIFNER);
    CHECK(p.matmul == 2 && p.role == WEFT_PS_ROLE_SERVER);
    CHECK(p.src[PARAM_socket_ifname] == PARAM_SRC_DEFAULT);
    CHECK(!strcmp(p.job_secret, "hush"));
    CHECK(log_level_of(&p) == (LOG_INFO | (LOG_SUB_INIT | LOG_SUB_SHM) << 8));
    param_format(&p, PARAM_job_secret, buf, sizeof buf);
    CHECKF(!strcmp(buf, "(set)"), "a secret prints as %s", buf);
    param_format(&p, PARAM_matmul, buf, sizeof buf);
    CHECK(!strcmp(buf, "openblas"));
    param_format(&p, PARAM_algo, buf, sizeof buf);
    CHECK(!strcmp(buf, "rabenseifner"));
    /* one entry, without a set */
    int v = -1;
    double d = -1;
    const char *s = NULL;
    CHECK(param_read_int(PARAM_shm_ring, &v, err, sizeof err) == 0 && v == 4 << 20);
    CHECK(param_read_dbl(PARAM_timeout, &d, err, sizeof err) == 0 && d == 2.5);
    CHECK(param_read_str(PARAM_master_addr, &s, err, sizeof err) == 0 && !strcmp(s, "127.0.0.1"));
    CHECK(param_read_dbl(PARAM_shm, &d, err, sizeof err) == WEFT_EINVAL); /* wrong type */
    CHECK(param_env(PARAM_job_secret) && !strcmp(param_env(PARAM_job_secret), "hush"));
    CHECK(param_env(PARAM_socket_ifname) == NULL);
    /* a caller's text, recorded as such */
    CHECK(param_set_text(&p, PARAM_spin_us, "0", PARAM_SRC_CONFIG, err, sizeof err) == 0);
    CHECK(p.spin_us == 0 && p.src[PARAM_spin_us] == PARAM_SRC_CONFIG);
    clean_env();
}

/* name=value must fail, its message holding every one of want (NULL-ended). */
static void refused(const char *name, const char *value, const char *const *want)
{
    param_set p;
    char err[300];
    clean_env();
    setenv(name, value, 1);
    int rc = load(&p, err, sizeof err);
    CHECKF(rc == WEFT_ECONFIG, "%s=%s accepted", name, value);
    for (; *want; want++)
        CHECKF(strstr(err, *want), "%s=%s: \"%s\" lacks \"%s\"", name, value, err, *want);
    clean_env();
}

TEST(bad_values)
{
    refused("WEFT_SHM", "yes", (const char *const[]){ "WEFT_SHM=yes", "expected 0 or 1", NULL });
    refused("WEFT_SHM_CMA", "3", (const char *const[]){ "WEFT_SHM_CMA=3", "from 0 to 2", NULL });
    refused("WEFT_SHM_RING", "1K", (const char *const[]){ "WEFT_SHM_RING", "65536", NULL });
    refused("WEFT_SHM_RING", "2X", (const char *const[]){ "WEFT_SHM_RING=2X", "bad size '2X'",
                                                          "e.g. 64M", NULL });
    refused("WEFT_PS_SNDBUF", "1.5", (const char *const[]){ "bad size", NULL });
    refused("WEFT_SHM_RING", "2T", (const char *const[]){ "out of range", "1G", NULL });
    refused("WEFT_MASTER_PORT", "70000", (const char *const[]){ "1 to 65535", NULL });
    refused("WEFT_RANK", "two", (const char *const[]){ "WEFT_RANK=two", "integer", NULL });
    refused("WEFT_TIMEOUT", "0", (const char *const[]){ "WEFT_TIMEOUT=0", "above 0", NULL });
    refused("WEFT_SPIN_US", "-1", (const char *const[]){ "WEFT_SPIN_US", NULL });
    refused("WEFT_CONNECT_TIMEOUT", "10s", (const char *const[]){ "number", NULL });
    refused("WEFT_ALGO", "fastest", (const char *const[]){ "WEFT_ALGO=fastest", "ring", "hier", NULL });
    refused("WEFT_MATMUL", "cuda", (const char *const[]){ "auto, portable, openblas", NULL });
    refused("WEFT_ROLE", "boss", (const char *const[]){ "worker", "server", NULL });
    refused("WEFT_AUTOTUNE", "on", (const char *const[]){ "WEFT_AUTOTUNE=on", NULL });
    refused("WEFT_DEBUG", "LOUD", (const char *const[]){ "WEFT_DEBUG=LOUD", "TRACE", NULL });
    refused("WEFT_DEBUG_SUBSYS", "INIT,DISK", (const char *const[]){ "subsystem", NULL });
    /* a secret's value is never repeated */
    char big[PARAM_STR_MAX + 8];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = 0;
    refused("WEFT_JOB_SECRET", big, (const char *const[]){ "WEFT_JOB_SECRET: longer", NULL });
    clean_env();
    setenv("WEFT_JOB_SECRET", big, 1);
    char err[300];
    param_set p;
    CHECK(load(&p, err, sizeof err) == WEFT_ECONFIG && !strstr(err, "kkkk"));
    /* the first bad entry stops the load; the rest are their defaults */
    CHECK(p.shm == 1 && p.timeout == 300);
    /* a read of one entry says the same */
    clean_env();
    setenv("WEFT_TLS", "2", 1);
    int v;
    CHECK(param_read_int(PARAM_tls, &v, err, sizeof err) == WEFT_ECONFIG &&
          strstr(err, "WEFT_TLS=2"));
    /* and so does weft_config_from_env (on stderr): no silent default */
    clean_env();
    setenv("WEFT_ALGO", "fastest", 1);
    weft_config cfg;
    weft_config_default(&cfg);
    CHECK(weft_config_from_env(&cfg) == WEFT_ECONFIG);
    clean_env();
}

TEST(aliases)
{
    param_set p;
    char err[300];
    clean_env();
    /* torchrun's names */
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("MASTER_ADDR", "10.1.2.3", 1);
    CHECKF(load(&p, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 3 && p.src[PARAM_rank] == PARAM_SRC_ENV && p.via[PARAM_rank] == 0);
    CHECK(p.world_size == 4 && !strcmp(p.master_addr, "10.1.2.3"));
    /* weft's own name first */
    setenv("WEFT_RANK", "1", 1);
    CHECK(load(&p, err, sizeof err) == 0 && p.rank == 1 && p.via[PARAM_rank] == -1);
    clean_env();
    /* Slurm's, the last in the list; Open MPI's local rank */
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "6", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    CHECKF(load(&p, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 5 && p.via[PARAM_rank] == 4 && p.world_size == 6);
    CHECK(p.local_rank == 1 && p.local_size == 2);
    weft_config cfg;
    weft_config_default(&cfg);
    CHECK(weft_config_from_env(&cfg) == 0 && cfg.rank == 5 && cfg.world_size == 6 &&
          cfg.local_rank == 1);
    clean_env();
    /* a bad value under an alias names the alias and what it stands for */
    setenv("PMI_RANK", "x", 1);
    CHECK(load(&p, err, sizeof err) == WEFT_ECONFIG);
    CHECKF(strstr(err, "PMI_RANK=x (read as WEFT_RANK)"), "%s", err);
    clean_env();
    /* WEFT_LOG is WEFT_DEBUG's older name */
    setenv("WEFT_LOG", "info", 1);
    CHECK(load(&p, err, sizeof err) == 0 && !strcmp(p.debug, "info") &&
          (log_level_of(&p) & 0xff) == LOG_INFO);
    clean_env();
    /* a rank without a size is a launcher's mistake, not a one-rank job */
    setenv("RANK", "0", 1);
    weft_config_default(&cfg);
    CHECK(weft_config_from_env(&cfg) == WEFT_ECONFIG);
    clean_env();
}

TEST(config_overlay)
{
    param_set p;
    weft_config cfg;
    char err[300];
    clean_env();
    setenv("WEFT_RANK", "1", 1);
    setenv("WEFT_WORLD_SIZE", "2", 1);
    setenv("WEFT_TIMEOUT", "30", 1);
    setenv("MASTER_ADDR", "10.0.0.9", 1);
    weft_config_default(&cfg);
    CHECK(weft_config_from_env(&cfg) == 0);
    /* a config made from the environment: every source stays "environment" */
    CHECKF(param_from_config(&p, &cfg, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 1 && p.src[PARAM_rank] == PARAM_SRC_ENV);
    CHECK(p.timeout == 30 && p.src[PARAM_timeout] == PARAM_SRC_ENV);
    CHECK(!strcmp(p.master_addr, "10.0.0.9") && p.src[PARAM_master_addr] == PARAM_SRC_ENV &&
          p.via[PARAM_master_addr] == 0);
    CHECK(p.src[PARAM_algo] == PARAM_SRC_DEFAULT && p.src[PARAM_connect_timeout] == PARAM_SRC_DEFAULT);
    /* a config of its own: what it says, and what it leaves out is the default */
    weft_config_default(&cfg);
    cfg.rank = 0;
    cfg.world_size = 2;
    cfg.timeout_s = 7;
    cfg.algo = WEFT_ALGO_TREE;
    cfg.host_store = 0;
    CHECKF(param_from_config(&p, &cfg, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 0 && p.src[PARAM_rank] == PARAM_SRC_CONFIG);
    CHECK(p.world_size == 2 && p.src[PARAM_world_size] == PARAM_SRC_ENV);
    CHECK(p.timeout == 7 && p.src[PARAM_timeout] == PARAM_SRC_CONFIG);
    CHECK(p.algo == WEFT_ALGO_TREE && p.src[PARAM_algo] == PARAM_SRC_CONFIG);
    CHECK(p.store_external == 1 && p.src[PARAM_store_external] == PARAM_SRC_CONFIG);
    CHECK(!strcmp(p.master_addr, "127.0.0.1") && p.src[PARAM_master_addr] == PARAM_SRC_DEFAULT);
    clean_env();
}

/* What fn writes to stderr, into buf. */
static void stderr_of(void (*fn)(void *), void *arg, char *buf, size_t cap)
{
    char path[] = "/tmp/weft-test-param-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    buf[0] = 0;
    if (fd < 0 || saved < 0)
        return;
    fflush(stderr);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
}

typedef struct {
    param_set *p;
    int rank;
} log_arg;

static void log_it(void *arg)
{
    log_arg *a = arg;
    param_log(a->p, log_level_of(a->p), a->rank);
}

static void init_singleton(void *arg)
{
    weft_comm *c = NULL;
    *(int *)arg = weft_comm_init_env(&c);
    weft_comm_destroy(c);
}

TEST(init_listing)
{
    static char out[1 << 16];
    param_set p;
    char err[300];
    clean_env();
    setenv("WEFT_DEBUG", "INIT", 1);
    setenv("WEFT_SHM", "0", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("WEFT_JOB_SECRET", "do-not-print-me", 1);
    CHECKF(load(&p, err, sizeof err) == 0, "%s", err);
    log_arg a = { &p, 0 };
    stderr_of(log_it, &a, out, sizeof out);
    /* rank 0: every entry, with its source */
    for (int i = 0; i < PARAM_COUNT; i++) {
        char want[128];
        snprintf(want, sizeof want, "%s = ", param_info_of((param_id)i)->name);
        CHECKF(strstr(out, want), "rank 0 does not list %s", want);
    }
    CHECK(strstr(out, "WEFT_SHM = 0 (environment)"));
    CHECK(strstr(out, "WEFT_LOCAL_RANK = 0 (environment, as LOCAL_RANK)"));
    CHECK(strstr(out, "WEFT_TIMEOUT = 300 (default)"));
    CHECK(strstr(out, "WEFT_JOB_SECRET = (set) (environment)") && !strstr(out, "do-not-print"));
    /* other ranks: only what was set */
    a.rank = 2;
    stderr_of(log_it, &a, out, sizeof out);
    CHECK(strstr(out, "WEFT_SHM = 0") && !strstr(out, "WEFT_TIMEOUT"));
    /* quiet without INIT */
    setenv("WEFT_DEBUG", "NET", 1);
    CHECK(load(&p, err, sizeof err) == 0);
    a.rank = 0;
    stderr_of(log_it, &a, out, sizeof out);
    CHECK(!strstr(out, "WEFT_SHM"));
    /* a communicator lists them once, at init */
    clean_env();
    setenv("WEFT_DEBUG", "INIT", 1);
    int rc = -1;
    stderr_of(init_singleton, &rc, out, sizeof out);
    CHECKF(rc == 0, "init: %d", rc);
    CHECKF(strstr(out, "WEFT_ALGO = auto (default)"), "%s", out);
    /* and refuses a bad value, naming it */
    setenv("WEFT_SPIN_US", "soon", 1);
    stderr_of(init_singleton, &rc, out, sizeof out);
    CHECK(rc == WEFT_ECONFIG && strstr(out, "WEFT_SPIN_US=soon"));
    clean_env();
}

static void config_from_env(void *arg)
{
    weft_config cfg;
    weft_config_default(&cfg);
    *(int *)arg = weft_config_from_env(&cfg);
}

/* A job's environment that cannot be right, as a launcher or a hand
 * might write it: refused, and what stderr says names the variable as it
 * was set, its value and what is allowed, every one of want (NULL-ended).
 * env: "A=1 B=2" */
static void job_refused(const char *env, const char *const *want)
{
    static char out[1 << 14];
    char list[256], *save = NULL;
    int rc = 0;
    clean_env();
    snprintf(list, sizeof list, "%s", env);
    for (char *kv = strtok_r(list, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        setenv(kv, eq + 1, 1);
    }
    stderr_of(config_from_env, &rc, out, sizeof out);
    CHECKF(rc == WEFT_ECONFIG, "%s: accepted (%d)", env, rc);
    for (; *want; want++)
        CHECKF(strstr(out, *want), "%s: \"%s\" lacks \"%s\"", env, out, *want);
    clean_env();
}

TEST(job_values)
{
    /* beyond what one entry can say: the rank against the size */
    job_refused("WEFT_RANK=7 WEFT_WORLD_SIZE=4",
                (const char *const[]){ "WEFT_RANK=7", "from 0 to 3", "WEFT_WORLD_SIZE=4", NULL });
    job_refused("WEFT_RANK=4 WEFT_WORLD_SIZE=4",
                (const char *const[]){ "WEFT_RANK=4", "from 0 to 3", NULL });
    job_refused("RANK=5 WORLD_SIZE=2",
                (const char *const[]){ "RANK=5 (read as WEFT_RANK)", "from 0 to 1",
                                       "WORLD_SIZE=2", NULL });
    job_refused("WEFT_RANK=1", (const char *const[]){ "WEFT_RANK=1", "without WEFT_WORLD_SIZE",
                                                      "SLURM_NTASKS", "neither", NULL });
    job_refused("WEFT_WORLD_SIZE=4",
                (const char *const[]){ "WEFT_WORLD_SIZE=4", "without WEFT_RANK", NULL });
    job_refused("OMPI_COMM_WORLD_RANK=0",
                (const char *const[]){ "OMPI_COMM_WORLD_RANK=0 (read as WEFT_RANK)",
                                       "WEFT_WORLD_SIZE", NULL });
    /* one entry alone, through the same path a launcher's job takes */
    job_refused("WEFT_RANK=-1 WEFT_WORLD_SIZE=4",
                (const char *const[]){ "WEFT_RANK=-1", "from 0 to", NULL });
    job_refused("WEFT_RANK=2147483648 WEFT_WORLD_SIZE=4",
                (const char *const[]){ "WEFT_RANK=2147483648", "integer from 0", NULL });
    job_refused("WEFT_RANK=0 WEFT_WORLD_SIZE=abc",
                (const char *const[]){ "WEFT_WORLD_SIZE=abc", "integer from 1", NULL });
    job_refused("WEFT_MASTER_PORT=99999",
                (const char *const[]){ "WEFT_MASTER_PORT=99999", "from 1 to 65535", NULL });
    job_refused("WEFT_TIMEOUT=abc", (const char *const[]){ "WEFT_TIMEOUT=abc", "above 0", NULL });
    job_refused("WEFT_TIMEOUT=-5", (const char *const[]){ "WEFT_TIMEOUT=-5", "above 0", NULL });
    job_refused("WEFT_CONNECT_TIMEOUT=0",
                (const char *const[]){ "WEFT_CONNECT_TIMEOUT=0", "above 0", NULL });
    job_refused("WEFT_ALGO=bogus",
                (const char *const[]){ "WEFT_ALGO=bogus", "ring", "auto", NULL });
    /* and what is right stays right: a whole job, a one-rank job */
    param_set p;
    char err[300];
    clean_env();
    setenv("WEFT_RANK", "3", 1);
    setenv("WEFT_WORLD_SIZE", "4", 1);
    CHECK(load(&p, err, sizeof err) == 0 && param_check_job(&p, err, sizeof err) == 0);
    clean_env();
    CHECK(load(&p, err, sizeof err) == 0 && param_check_job(&p, err, sizeof err) == 0);
}

/* README.md of this source tree: tests run from the repository root; else
 * two folders above the test binary ($BUILD/tests). */
static char *readme(void)
{
    char self[PATH_MAX], path[PATH_MAX + 32];
    long len;
    char *text = fx_slurp("README.md", &len);
    ssize_t n;
    if (text || (n = readlink("/proc/self/exe", self, sizeof self - 1)) <= 0)
        return text;
    self[n] = 0;
    snprintf(path, sizeof path, "%s/../../README.md", dirname(self));
    return fx_slurp(path, &len);
}

/* One row per variable: the WEFT_ name in backticks at the start of the
 * first cell of each row of the environment-variable table. */
TEST(readme_table)
{
    char *text = readme(), *at;
    int seen[PARAM_COUNT] = { 0 }, rows = 0;
    CHECKF(text, "README.md not found (run from the repository root)");
    if (!text)
        return;
    at = strstr(text, "### Environment variables");
    CHECK(at);
    for (char *line = at; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (line != at && !strncmp(line, "#", 1))
            break; /* the next section */
        if (strncmp(line, "| `", 3))
            continue;
        if (!strncmp(line, "| `variable", 11))
            continue;
        char name[64];
        size_t len = strspn(line + 3, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        snprintf(name, sizeof name, "%.*s", (int)len, line + 3);
        size_t cell = strcspn(line + 1, "|\n");
        char first[256];
        snprintf(first, sizeof first, "%.*s", (int)cell, line + 1);
        CHECKF(!strstr(first + 3 + len, "WEFT_"), "README row names more than one variable: %s",
               first);
        const param_info *e = param_find(name);
        CHECKF(e, "README lists %s, which the parameter table does not", name);
        if (e) {
            int i = (int)(e - param_info_of((param_id)0));
            CHECKF(!seen[i], "README lists %s twice", name);
            seen[i]++;
        }
        rows++;
    }
    for (int i = 0; i < PARAM_COUNT; i++)
        CHECKF(seen[i], "the parameter table has %s, README's table does not",
               param_info_of((param_id)i)->name);
    CHECK(rows == PARAM_COUNT);
    free(text);
}
