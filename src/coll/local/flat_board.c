#include "coll/local/flat_board.h"
#include "transport/shm.h"

#include "weft.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FLAT_MAGIC 0x54414c46u /* "FLAT" */
#define FLAT_VERSION 1
#define FLAT_HEAD_BYTES 4096u

_Static_assert(sizeof(flat_head) <= FLAT_HEAD_BYTES, "the head fits its page");
_Static_assert(FLAT_SLOT % 64 == 0, "slots keep data cache-line aligned");
_Static_assert(sizeof(flat_post) == 64, "a post is one cache line");

static size_t board_len(int nranks)
{
    size_t ranks = ((size_t)nranks * sizeof(flat_rank) + 4095) & ~(size_t)4095;
    return FLAT_HEAD_BYTES + ranks + (size_t)nranks * 2 * FLAT_SLOT;
}

#define PIPE_MAGIC 0x45504950u /* "PIPE" */
#define PIPE_SUFFIX "-pipe"

static void board_name(char *out, uint64_t comm_id, long pid)
{
    snprintf(out, FLAT_NAME_MAX, "/weft-%016llx-flat-%ld", (unsigned long long)comm_id, pid);
}

static void pipe_name(char *out, uint64_t comm_id, long pid)
{
    snprintf(out, FLAT_NAME_MAX, "/weft-%016llx-flat-%ld" PIPE_SUFFIX,
             (unsigned long long)comm_id, pid);
}

static void board_set(flat_board *b, void *m, size_t len, int nranks)
{
    b->head = m;
    b->ranks = (flat_rank *)((char *)m + FLAT_HEAD_BYTES);
    b->data = (char *)m + (len - (size_t)nranks * 2 * FLAT_SLOT);
    b->map_len = len;
    b->nranks = nranks;
}

int flat_board_create(flat_board *b, uint64_t comm_id, int nranks, char *err, size_t errlen)
{
    char name[FLAT_NAME_MAX];
    size_t len = board_len(nranks);
    memset(b, 0, sizeof *b);
    flat_board_reap(comm_id);
    shm_reap_orphans(SHM_ORPHAN_AGE); /* earlier jobs' killed ranks' */
    board_name(name, comm_id, (long)getpid());
    void *m;
    int rc = shm_segment_create(name, len, &m, err, errlen);
    if (rc)
        return rc;
    board_set(b, m, len, nranks);
    memcpy(b->name, name, sizeof name);
    b->head->nranks = (uint32_t)nranks;
    b->head->slot = FLAT_SLOT;
    b->head->comm_id = comm_id;
    b->head->version = FLAT_VERSION;
    atomic_store(&b->head->bell, 0);
    /* last: a reader checks it after mapping */
    __atomic_store_n(&b->head->magic, FLAT_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int flat_board_attach(flat_board *b, uint64_t comm_id, int nranks, long creator_pid,
                      char *err, size_t errlen)
{
    char name[FLAT_NAME_MAX];
    size_t len = board_len(nranks);
    memset(b, 0, sizeof *b);
    board_name(name, comm_id, creator_pid);
    void *m;
    int rc = shm_segment_open(name, len, 0, &m, err, errlen);
    if (rc)
        return rc;
    flat_head *h = m;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != FLAT_MAGIC ||
        h->version != FLAT_VERSION || h->nranks != (uint32_t)nranks || h->slot != FLAT_SLOT ||
        h->comm_id != comm_id) {
        munmap(m, len);
        snprintf(err, errlen, "%s is not this communicator's flat board", name);
        return WEFT_EPROTO;
    }
    board_set(b, m, len, nranks);
    /* every rank that mapped it unlinks it too, so the name goes even
     * when rank 0 dies before it could */
    memcpy(b->name, name, sizeof name);
    return 0;
}

void flat_board_join(flat_board *b, int rank)
{
    struct stat sb;
    flat_rank *me = &b->ranks[rank];
    me->pid = (int32_t)getpid();
    me->pidns = stat("/proc/self/ns/pid", &sb) ? 0 : (uint64_t)sb.st_ino;
}

void flat_board_reap(uint64_t comm_id)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char prefix[48];
    snprintf(prefix, sizeof prefix, "weft-%016llx-flat-", (unsigned long long)comm_id);
    size_t pl = strlen(prefix);
    while (d && (e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, prefix, pl))
            continue;
        long pid = strtol(e->d_name + pl, &end, 10);
        if ((!*end || !strcmp(end, PIPE_SUFFIX)) && pid > 0 && !(kill((pid_t)pid, 0) && errno == ESRCH))
            continue; /* its creator lives: a board in use */
        char full[300];
        snprintf(full, sizeof full, "/%s", e->d_name);
        shm_unlink(full);
    }
    if (d)
        closedir(d);
}

void flat_board_unlink(flat_board *b)
{
    if (b->name[0])
        shm_unlink(b->name);
    b->name[0] = 0;
}

void flat_board_close(flat_board *b)
{
    flat_board_unlink(b);
    if (b->head)
        munmap(b->head, b->map_len);
    memset(b, 0, sizeof *b);
}

static size_t pipe_len(int nranks)
{
    size_t steps = ((size_t)nranks * sizeof(flat_step) + 4095) & ~(size_t)4095;
    return FLAT_HEAD_BYTES + steps + ((size_t)nranks + 1) * 2 * FLAT_CHUNK;
}

static void pipe_set(flat_pipe *x, void *m, size_t len, int nranks)
{
    x->head = m;
    x->step = (flat_step *)((char *)m + FLAT_HEAD_BYTES);
    x->in = (char *)m + (len - ((size_t)nranks + 1) * 2 * FLAT_CHUNK);
    x->out = x->in + (size_t)nranks * 2 * FLAT_CHUNK;
    x->map_len = len;
    x->nranks = nranks;
}

_Static_assert(sizeof(flat_step) == 64, "a step counter is one cache line");
_Static_assert(FLAT_CHUNK % 4096 == 0, "chunks start on pages");

int flat_pipe_create(flat_pipe *x, uint64_t comm_id, int nranks, char *err, size_t errlen)
{
    char name[FLAT_NAME_MAX];
    size_t len = pipe_len(nranks);
    memset(x, 0, sizeof *x);
    flat_board_reap(comm_id);
    pipe_name(name, comm_id, (long)getpid());
    void *m;
    int rc = shm_segment_create(name, len, &m, err, errlen);
    if (rc)
        return rc;
    pipe_set(x, m, len, nranks);
    memcpy(x->name, name, sizeof name);
    x->head->nranks = (uint32_t)nranks;
    x->head->chunk = FLAT_CHUNK;
    x->head->comm_id = comm_id;
    x->head->version = FLAT_VERSION;
    __atomic_store_n(&x->head->magic, PIPE_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int flat_pipe_attach(flat_pipe *x, uint64_t comm_id, int nranks, long creator_pid,
                     char *err, size_t errlen)
{
    char name[FLAT_NAME_MAX];
    size_t len = pipe_len(nranks);
    memset(x, 0, sizeof *x);
    pipe_name(name, comm_id, creator_pid);
    void *m;
    int rc = shm_segment_open(name, len, 0, &m, err, errlen);
    if (rc)
        return rc;
    flat_pipe_head *h = m;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != PIPE_MAGIC ||
        h->version != FLAT_VERSION || h->nranks != (uint32_t)nranks ||
        h->chunk != FLAT_CHUNK || h->comm_id != comm_id) {
        munmap(m, len);
        snprintf(err, errlen, "%s is not this communicator's flat pipe", name);
        return WEFT_EPROTO;
    }
    pipe_set(x, m, len, nranks);
    memcpy(x->name, name, sizeof name); /* as the board's */
    return 0;
}

void flat_pipe_unlink(flat_pipe *x)
{
    if (x->name[0])
        shm_unlink(x->name);
    x->name[0] = 0;
}

void flat_pipe_close(flat_pipe *x)
{
    flat_pipe_unlink(x);
    if (x->head)
        munmap(x->head, x->map_len);
    memset(x, 0, sizeof *x);
}
