#include "bootstrap/world.h"

#include "core/clock.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void world_host_id(const char *override, char out[64])
{
    if (override && *override)
        snprintf(out, 64, "%.63s", override);
    else if (gethostname(out, 64) != 0)
        snprintf(out, 64, "localhost");
    out[63] = 0;
}

int world_is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "localhost") || !strcmp(host, "::1");
}

static void record_key(uint64_t id, int rank, char key[96])
{
    snprintf(key, 96, "weft/%016llx/addr/%d", (unsigned long long)id, rank);
}

static void claim_key(uint64_t id, int rank, char key[96])
{
    snprintf(key, 96, "weft/%016llx/claim/%d", (unsigned long long)id, rank);
}

static void read_key(uint64_t id, int rank, char key[96])
{
    snprintf(key, 96, "weft/%016llx/read/%d", (unsigned long long)id, rank);
}

void world_records_free(char **recs, int size)
{
    for (int i = 0; recs && i < size; i++)
        free(recs[i]);
    free(recs);
}

/* Who published a record: the first line of every record, before the
 * caller's text. The world size is in it so that ranks started with
 * different sizes find out at once, naming each other, instead of waiting
 * for ranks that will never come or mistaking one another for the dead. */
typedef struct {
    int size;
    long pid;
    char host[64];
} claimant;

static void me_of(int size, claimant *m)
{
    m->size = size;
    m->pid = (long)getpid();
    if (gethostname(m->host, sizeof m->host) != 0)
        snprintf(m->host, sizeof m->host, "localhost");
    m->host[sizeof m->host - 1] = 0;
}

/* Parses and strips the first line of v; -1 if it has none. */
static int claimant_take(char *v, claimant *c)
{
    char *nl = strchr(v, '\n');
    if (!nl || sscanf(v, "weft-rank size=%d pid=%ld host=%63s", &c->size, &c->pid, c->host) != 3)
        return -1;
    memmove(v, nl + 1, strlen(nl + 1) + 1);
    return 0;
}

/* A second process claims this rank: name the first (its record comes
 * right after its claim) and this one. The first keeps its place. */
static int refuse_duplicate(store_client *s, uint64_t id, int rank, const claimant *me,
                            double deadline, char *err, size_t errlen)
{
    char key[96], first[160] = "a process whose record never arrived";
    claimant c;
    void *v = NULL;
    size_t len;
    double left = deadline - clock_now();
    record_key(id, rank, key);
    if (store_get(s, key, &v, &len, left > 0 ? left : 0) == 0 && !claimant_take(v, &c)) {
        if (c.pid == me->pid && !strcmp(c.host, me->host)) {
            free(v); /* this very process, joining again after a failed try */
            return 0;
        }
        snprintf(first, sizeof first, "pid %ld on host %s", c.pid, c.host);
    }
    free(v);
    snprintf(err, errlen,
             "rank %d is claimed twice: first by %s, in the job; then by this process (pid %ld "
             "on host %s), refused (is WEFT_RANK right, or is this a second launch of the "
             "same job?)",
             rank, first, me->pid, me->host);
    return WEFT_ECONFIG;
}

/* Beyond this many ranks, rank 0 reads every record and publishes them
 * together under one key that each other rank reads with one get: the
 * store then answers about 3P requests instead of P^2 (256 ranks on one
 * host: 65,536 round trips, each waiting for the store's thread to be
 * scheduled, made start-up grow with the square of the ranks). */
#define WORLD_GATHER_MIN 16

static void all_key(uint64_t id, char key[96])
{
    snprintf(key, 96, "weft/%016llx/all", (unsigned long long)id);
}

/* Record i's raw value into all[i], waiting for it until deadline. */
static int get_one(store_client *s, uint64_t id, int i, double deadline, char **all,
                   size_t *len)
{
    char key[96];
    void *v;
    double left = deadline - clock_now();
    record_key(id, i, key);
    int rc = store_get(s, key, &v, len, left > 0 ? left : 0);
    if (!rc)
        all[i] = v;
    return rc;
}

/* The first rank whose record is not in the store yet (after a wait for
 * the gathered records timed out), or -1. */
static int first_missing(store_client *s, uint64_t id, int size)
{
    char key[96];
    for (int i = 0; i < size; i++) {
        int there = 0;
        record_key(id, i, key);
        if (store_check(s, key, &there) || !there)
            return i;
    }
    return -1;
}

/* Every raw record into all[] (lens[] their lengths): each from its own
 * key, or (beyond WORLD_GATHER_MIN ranks) from rank 0's gathered value,
 * which is each record preceded by its length as 8 decimal digits. */
static int get_records(store_client *s, uint64_t id, int rank, int size, double deadline,
                       char **all, size_t *lens, int *missing, char *err, size_t errlen)
{
    char key[96];
    int rc = 0;
    if (size <= WORLD_GATHER_MIN || rank == 0) {
        size_t total = 0;
        for (int i = 0; i < size && !rc; i++)
            if ((rc = get_one(s, id, i, deadline, all, &lens[i])) == WEFT_ETIMEDOUT)
                *missing = i;
            else
                total += 8 + lens[i];
        if (rc || size <= WORLD_GATHER_MIN)
            goto out;
        char *cat = malloc(total ? total : 1), *p = cat;
        if (!cat)
            return WEFT_ENOMEM;
        for (int i = 0; i < size; i++) {
            char n[9];
            snprintf(n, sizeof n, "%08zu", lens[i]);
            memcpy(p, n, 8);
            memcpy(p + 8, all[i], lens[i]);
            p += 8 + lens[i];
        }
        all_key(id, key);
        rc = store_set(s, key, cat, total);
        free(cat);
        goto out;
    }
    void *v;
    size_t len, at = 0;
    double left = deadline - clock_now();
    all_key(id, key);
    rc = store_get(s, key, &v, &len, left > 0 ? left : 0);
    if (rc == WEFT_ETIMEDOUT)
        *missing = first_missing(s, id, size);
    if (rc)
        goto out;
    /* a gatherer of another world size ends early or leaves bytes over;
     * its own record, the first, says so (read_records) */
    for (int i = 0; i < size; i++) {
        char n[9] = "";
        size_t k;
        if (at + 8 > len)
            break;
        memcpy(n, (char *)v + at, 8);
        k = strtoul(n, NULL, 10);
        if (at + 8 + k > len || !(all[i] = malloc(k ? k : 1))) {
            free(v);
            snprintf(err, errlen, "rank 0's gathered records are cut short");
            return WEFT_EPROTO;
        }
        memcpy(all[i], (char *)v + at + 8, k);
        lens[i] = k;
        at += 8 + k;
    }
    free(v);
out:
    if (rc)
        snprintf(err, errlen, "%s", rc == WEFT_ETIMEDOUT ? "timed out" : store_error(s));
    return rc;
}

/* Every rank's record, in rank order, each checked against this rank. */
static int read_records(store_client *s, uint64_t id, int rank, int size, const claimant *me,
                        double deadline, char ***recs, int *missing, char *err, size_t errlen)
{
    claimant c;
    int rc;
    char **all = calloc((size_t)size, sizeof *all);
    size_t *lens = calloc((size_t)size, sizeof *lens);
    if (!all || !lens) {
        free(all);
        free(lens);
        snprintf(err, errlen, "out of memory");
        return WEFT_ENOMEM;
    }
    rc = get_records(s, id, rank, size, deadline, all, lens, missing, err, errlen);
    for (int i = 0; i < size && !rc; i++) {
        size_t len = lens[i];
        /* the store sends the NUL with the value */
        if (!all[i] || !len || all[i][len - 1] || claimant_take(all[i], &c)) {
            snprintf(err, errlen, "rank %d's record is not a weft rank's", i);
            rc = WEFT_EPROTO;
            break;
        }
        if (c.size != size) {
            snprintf(err, errlen,
                     "the ranks disagree on the world size: rank %d (pid %ld on host %s) was "
                     "started with %d, this rank (%d, pid %ld on host %s) with %d",
                     i, c.pid, c.host, c.size, rank, me->pid, me->host, size);
            rc = WEFT_ECONFIG;
        }
    }
    free(lens);
    if (rc) {
        world_records_free(all, size);
        return rc;
    }
    *recs = all;
    return 0;
}

int world_exchange(store_client *s, uint64_t id, int rank, int size, const char *rec,
                   double timeout_s, char ***recs, int *missing, char *err, size_t errlen)
{
    char key[96], *mine;
    double deadline = clock_now() + timeout_s;
    int64_t claims = 0;
    claimant me;
    int rc, n;
    *recs = NULL;
    *missing = -1;
    me_of(size, &me);
    claim_key(id, rank, key);
    if ((rc = store_add(s, key, 1, &claims))) {
        snprintf(err, errlen, "%s", store_error(s));
        return rc;
    }
    if (claims > 1 && (rc = refuse_duplicate(s, id, rank, &me, deadline, err, errlen)))
        return rc;
    n = snprintf(NULL, 0, "weft-rank size=%d pid=%ld host=%s\n%s", me.size, me.pid, me.host, rec);
    if (!(mine = malloc((size_t)n + 1))) {
        snprintf(err, errlen, "out of memory");
        return WEFT_ENOMEM;
    }
    snprintf(mine, (size_t)n + 1, "weft-rank size=%d pid=%ld host=%s\n%s", me.size, me.pid,
             me.host, rec);
    record_key(id, rank, key);
    rc = store_set(s, key, mine, (size_t)n + 1);
    free(mine);
    if (rc) {
        snprintf(err, errlen, "%s", store_error(s));
        return rc;
    }
    rc = read_records(s, id, rank, size, &me, deadline, recs, missing, err, errlen);
    read_key(id, rank, key);
    store_set(s, key, "1", 1); /* for world_linger, whatever the outcome */
    return rc;
}

int world_linger(store_client *s, uint64_t id, int rank, int size, double timeout_s)
{
    char key[96];
    double deadline = clock_now() + timeout_s;
    for (int i = 0; i < size; i++) {
        void *v = NULL;
        double left = deadline - clock_now();
        int rc;
        if (i == rank)
            continue;
        read_key(id, i, key);
        rc = store_get(s, key, &v, NULL, left > 0 ? left : 0);
        free(v);
        if (rc)
            return rc;
    }
    return 0;
}

int world_number_hosts(const char *const *ids, int size, int32_t *host)
{
    int n = 0;
    for (int i = 0; i < size; i++) {
        int j = 0;
        while (j < i && strcmp(ids[i], ids[j]))
            j++;
        host[i] = j < i ? host[j] : n++;
    }
    return n;
}

void world_fail_key(uint64_t id, char key[64])
{
    snprintf(key, 64, "weft/%016llx/failed", (unsigned long long)id);
}

void world_gone_key(uint64_t id, int rank, char key[64])
{
    snprintf(key, 64, "weft/%016llx/gone/%d", (unsigned long long)id, rank);
}

int world_notice_post(store_client *s, uint64_t id, const fail_note *f)
{
    char key[64], val[FAIL_NOTE_MAX + 40];
    world_fail_key(id, key);
    int n = fail_note_encode(f, val, sizeof val);
    return store_set(s, key, val, (size_t)n);
}
