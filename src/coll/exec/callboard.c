/* The call board (callboard.h). Layout of the segment:
 *
 *   head    how many of the host's ranks mapped it
 *   rank r  CALLBOARD_HIST entries, the entry of operation s at s % HIST,
 *           then its pid and pid namespace once it mapped the board
 *
 * An entry is four words, each stored and loaded atomically; its seq word
 * is cleared before the others change and set after, so a reader that
 * finds the same seq before and after reading the others has a whole
 * post (a seqlock with one writer: the entry's rank).
 *
 * The name is /weft-<comm id>-calls-<host>-<token>, the token a hash of
 * every member's listening address: every rank of the host derives it
 * alone, and a later job on the same port (the same communicator id)
 * never maps a board a dead one left, which would hold posts of the same
 * operation numbers. Every rank creates or maps it at its first
 * collective; the last of the host's ranks to map it unlinks the name,
 * and a rank that leaves before then unlinks it as it goes (one arriving
 * after that makes a board of its own and goes unchecked, no worse than
 * without). A name whose whole host died before all mapped it is removed
 * by the next board of that communicator id on the host, and by any
 * job's first board once every process that mapped it is gone
 * (callboard_reap: the name cannot carry a pid, every rank derives it
 * alone, so the pids are in the segment). */
#include "coll/exec/callboard.h"

#include "coll/exec/mismatch.h"
#include "core/clock.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CALLBOARD_HIST 8 /* a peer up to this many operations ahead is still seen */
#define CB_NAME_MAX 80

enum { CB_NEW = 0, CB_ON, CB_OFF };

typedef struct {
    _Atomic uint64_t seq;   /* the operation's number; 0: being written or none */
    _Atomic uint64_t count;
    _Atomic uint64_t what;  /* root (low 32 bits), kind, dtype, op, algo */
    _Atomic uint64_t flags;
} cb_entry;

typedef struct {
    _Alignas(64) _Atomic uint32_t joined;
} cb_head;

typedef struct {
    _Alignas(64) cb_entry e[CALLBOARD_HIST];
    _Atomic int32_t pid;    /* 0 until the rank mapped the board */
    _Atomic uint64_t pidns; /* inode of its pid namespace; 0: unknown */
} cb_rank;

struct callboard {
    int state;           /* CB_* */
    cb_head *head;
    cb_rank *ranks;
    size_t len;
    int *peers, npeers;  /* the other ranks of this host */
    frame_hdr mine;      /* this rank's current post */
    frame_hdr past[CALLBOARD_HIST]; /* and its recent ones, board or not */
    uint64_t verified;   /* the last operation every rank's post of which was compared */
    char name[CB_NAME_MAX]; /* while this rank may still have to unlink it */
};

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    while (n--)
        h = (h ^ *s++) * 0x100000001b3ull;
    return h;
}

static void unlink_stale(const weft_comm *c, const char *name)
{
    char prefix[64];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = snprintf(prefix, sizeof prefix, "weft-%016llx-calls-%d-",
                     (unsigned long long)c->id, (int)c->host[c->rank]);
    while (d && (e = readdir(d))) {
        char full[300];
        if (strncmp(e->d_name, prefix, (size_t)n) || !strcmp(e->d_name, name + 1))
            continue;
        snprintf(full, sizeof full, "/%s", e->d_name);
        shm_unlink(full);
    }
    if (d)
        closedir(d);
}

static uint64_t my_pidns(void)
{
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) ? 0 : (uint64_t)sb.st_ino;
}

static size_t board_len(int nranks)
{
    return sizeof(cb_head) + (size_t)nranks * sizeof(cb_rank);
}

int callboard_map(const char *name, int nranks, int rank, void **map, size_t *len)
{
    size_t want = board_len(nranks);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600), e = 0;
    if (fd < 0)
        return errno;
    struct stat sb;
    /* every rank sizes it alike; a board of another size is not this one */
    if (ftruncate(fd, (off_t)want) || fstat(fd, &sb))
        e = errno;
    else if ((size_t)sb.st_size != want)
        e = EEXIST;
    else
        e = posix_fallocate(fd, 0, (off_t)want);
    void *m = e ? MAP_FAILED : mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!e && m == MAP_FAILED)
        e = errno;
    close(fd);
    if (e)
        return e;
    cb_rank *me = (cb_rank *)(void *)((char *)m + sizeof(cb_head)) + rank;
    atomic_store_explicit(&me->pidns, my_pidns(), memory_order_relaxed);
    atomic_store_explicit(&me->pid, (int32_t)getpid(), memory_order_release);
    *map = m;
    *len = want;
    return 0;
}

/* May the board at path go: none of the processes that mapped it lives?
 * A pid of another pid namespace (or of an unknown one) counts as alive:
 * kill cannot tell there. */
static int board_orphaned(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), gone = 0;
    struct stat sb;
    if (fd < 0)
        return 0;
    void *m = MAP_FAILED;
    size_t len = 0;
    if (!fstat(fd, &sb) && (size_t)sb.st_size > sizeof(cb_head) &&
        ((size_t)sb.st_size - sizeof(cb_head)) % sizeof(cb_rank) == 0) {
        len = (size_t)sb.st_size;
        m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    const cb_rank *r = (const cb_rank *)(const void *)((const char *)m + sizeof(cb_head));
    size_t n = (len - sizeof(cb_head)) / sizeof(cb_rank);
    uint64_t ns = my_pidns();
    gone = 1;
    for (size_t i = 0; i < n && gone; i++) {
        int32_t pid = atomic_load_explicit(&r[i].pid, memory_order_acquire);
        if (!pid)
            continue; /* never mapped it */
        uint64_t theirs = atomic_load_explicit(&r[i].pidns, memory_order_relaxed);
        if (!ns || theirs != ns || !(kill((pid_t)pid, 0) && errno == ESRCH))
            gone = 0;
    }
    munmap(m, len);
    return gone;
}

void callboard_reap(int min_age_s)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    long long now = clock_wall_s();
    while (d && (e = readdir(d))) {
        unsigned long long id, token;
        int host, used = 0;
        char path[300];
        struct stat sb;
        if (sscanf(e->d_name, "weft-%16llx-calls-%d-%16llx%n", &id, &host, &token, &used) != 3 ||
            e->d_name[used])
            continue;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        /* an age as shm_reap_orphans: a name of a live job lasts only
         * until its host's ranks have all reached their first collective */
        if (stat(path, &sb) || (min_age_s > 0 && now - sb.st_ctime < min_age_s) || !board_orphaned(path))
            continue;
        shm_unlink(path + strlen("/dev/shm"));
    }
    if (d)
        closedir(d);
}

/* Map (or make) the host's board; 0 or an errno. */
static int open_board(weft_comm *c, struct callboard *b)
{
    uint64_t token = mix(0xcbf29ce484222325ull, &c->id, sizeof c->id);
    for (int r = 0; r < c->size; r++)
        token = mix(token, c->net.addr[r], strlen(c->net.addr[r]) + 1);
    snprintf(b->name, sizeof b->name, "/weft-%016llx-calls-%d-%016llx",
             (unsigned long long)c->id, (int)c->host[c->rank], (unsigned long long)token);
    callboard_reap(CALLBOARD_ORPHAN_AGE);
    void *m;
    int e = callboard_map(b->name, c->size, c->rank, &m, &b->len);
    if (e)
        return e;
    b->head = m;
    b->ranks = (cb_rank *)(void *)((char *)m + sizeof(cb_head));
    if (atomic_fetch_add(&b->head->joined, 1) + 1 == (uint32_t)(b->npeers + 1)) {
        shm_unlink(b->name); /* the host's last: everyone has it */
        b->name[0] = 0;
    }
    return 0;
}

static struct callboard *board(weft_comm *c)
{
    struct callboard *b = c->calls;
    if (b)
        return b->state == CB_ON ? b : NULL;
    if (!(b = c->calls = calloc(1, sizeof *b)))
        return NULL;
    b->state = CB_OFF;
    if (c->size < 2 || !c->shm_on || !(b->peers = malloc((size_t)c->size * sizeof *b->peers)))
        return NULL;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank && c->host[r] == c->host[c->rank])
            b->peers[b->npeers++] = r;
    if (!b->npeers)
        return NULL;
    int e = open_board(c, b);
    if (e) {
        log_sub(c->loglevel, LOG_DEBUG, LOG_SUB_SHM, c->rank,
                "no call board (%s): mismatched calls on this host show only through "
                "their messages", strerror(e));
        b->name[0] = 0;
        return NULL;
    }
    unlink_stale(c, b->name[0] ? b->name : "/");
    b->state = CB_ON;
    return b;
}

static uint64_t what_of(const frame_hdr *h)
{
    return (uint64_t)(uint32_t)h->root | (uint64_t)h->kind << 32 | (uint64_t)h->dtype << 40 |
           (uint64_t)h->op << 48 | (uint64_t)h->algo << 56;
}

/* Rank q's post of operation seq into *h (the other fields from
 * b->mine); 0 when it has none (yet, or any more). */
static int read_post(const struct callboard *b, int q, uint64_t seq, frame_hdr *h)
{
    cb_entry *e = &b->ranks[q].e[seq % CALLBOARD_HIST];
    if (atomic_load_explicit(&e->seq, memory_order_acquire) != seq)
        return 0;
    uint64_t count = atomic_load_explicit(&e->count, memory_order_relaxed);
    uint64_t what = atomic_load_explicit(&e->what, memory_order_relaxed);
    uint64_t flags = atomic_load_explicit(&e->flags, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&e->seq, memory_order_relaxed) != seq)
        return 0;
    *h = b->mine;
    h->seq = seq;
    h->count = count;
    h->root = (int32_t)(uint32_t)what;
    h->kind = (uint8_t)(what >> 32);
    h->dtype = (uint8_t)(what >> 40);
    h->op = (uint8_t)(what >> 48);
    h->algo = (uint8_t)(what >> 56);
    h->flags = (uint16_t)flags;
    return 1;
}

/* Every peer that posted operation seq against this rank's own post. */
static int check_seq(weft_comm *c, const struct callboard *b, uint64_t seq)
{
    frame_hdr m, h;
    if (!seq || !read_post(b, c->rank, seq, &m))
        return 0;
    for (int i = 0; i < b->npeers; i++)
        if (read_post(b, b->peers[i], seq, &h) && !exec_same_call(&h, &m))
            return callboard_mismatch(c, b->peers[i], &h, &m);
    return 0;
}

int callboard_post(weft_comm *c, const frame_hdr *fp)
{
    struct callboard *b = board(c);
    if (c->calls)
        c->calls->past[fp->seq % CALLBOARD_HIST] = *fp;
    if (!b)
        return 0;
    cb_entry *e = &b->ranks[c->rank].e[fp->seq % CALLBOARD_HIST];
    b->mine = *fp;
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&e->count, fp->count, memory_order_relaxed);
    atomic_store_explicit(&e->what, what_of(fp), memory_order_relaxed);
    atomic_store_explicit(&e->flags, fp->flags, memory_order_relaxed);
    atomic_store_explicit(&e->seq, fp->seq, memory_order_release);
    /* a call that completed on both sides without a message between them
     * (a broadcast's root and a reduce's leaf) shows here, at the next;
     * one whose posts were all compared already (the small path's) is not
     * looked at again: reading the peers' lines, half of them on another
     * core, was a third of the small all-reduce's own work */
    return fp->seq - 1 == b->verified ? 0 : check_seq(c, b, fp->seq - 1);
}

void callboard_verified(weft_comm *c, uint64_t seq)
{
    if (c->calls)
        c->calls->verified = seq;
}

int callboard_check(weft_comm *c)
{
    struct callboard *b = c->calls;
    return b && b->state == CB_ON ? check_seq(c, b, b->mine.seq) : 0;
}

const frame_hdr *callboard_past(const weft_comm *c, uint64_t seq)
{
    const frame_hdr *h = c->calls && seq ? &c->calls->past[seq % CALLBOARD_HIST] : NULL;
    return h && h->seq == seq ? h : NULL;
}

void callboard_free(weft_comm *c)
{
    struct callboard *b = c->calls;
    if (!b)
        return;
    if (b->name[0])
        shm_unlink(b->name);
    if (b->head)
        munmap(b->head, b->len);
    free(b->peers);
    free(b);
    c->calls = NULL;
}

int callboard_mismatch(weft_comm *c, int peer, const frame_hdr *theirs, const frame_hdr *mine)
{
    const frame_hdr *then = theirs->seq < mine->seq ? callboard_past(c, theirs->seq) : NULL;
    return exec_mismatch(c, peer, theirs, mine, then);
}
