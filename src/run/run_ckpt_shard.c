/* Sharded checkpoints of the run: job rank 0 makes a new save directory
 * and names it to all; every rank writes what it owns (its ZeRO shard of
 * its stage's and tensor rank's part, and under --ep its experts where it
 * is the first of their replicas, or its shard of them at ZeRO 2-3;
 * whole-model sync modes: the first data-parallel rank's model) to its
 * own file and syncs it; a reduction
 * tells every rank whether all did; only then rank 0 gathers the slice
 * tables (small) and commits (run_ckpt_commit.c). An asynchronous save
 * copies the rank's share into a snapshot and writes it from a thread,
 * which then does the reduction and the commit over a communicator of its
 * own (split from the job once), so the loop stalls only for the copy and
 * the announcement; the next save or the run's end joins the thread. */
#include "run/run_ckpt_shard.h"

#include "run/run_ckpt_commit.h"
#include "run/run_ckpt_sync.h"

#include "core/clock.h"
#include "core/huge.h"

#include "train/ckpt.h"
#include "train/ckpt_shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { NAME_CAP = 64, WHY_CAP = 4608, SHARD_BUF = 4 << 20, META = CKPT_META };

int ckpt_sharded(const char *path)
{
    size_t n = strlen(path);
    char latest[4200];
    struct stat st;
    snprintf(latest, sizeof latest, "%s/latest", path);
    return (n && path[n - 1] == '/') || (stat(latest, &st) == 0 && S_ISREG(st.st_mode));
}

/* What rank 0 tells every rank before they write. */
typedef struct {
    int32_t rc;
    char name[NAME_CAP];
    char why[WHY_CAP];
} announce;

/* Rank 0: dir (made if need be; once: made is 1 once this run has saved
 * there, and a directory that went away since is an error, not made anew
 * without the saves it held) and a new save directory in it. */
static void make_save_dir(const char *dir, int made, long step, announce *a)
{
    struct stat st;
    if (made && stat(dir, &st) != 0) {
        a->rc = WEFT_EIO;
        snprintf(a->why, WHY_CAP, "%s: %s (it held this run's earlier saves)", dir,
                 strerror(errno));
        return;
    }
    if (!made && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        a->rc = WEFT_EIO;
        snprintf(a->why, WHY_CAP, "cannot make %s: %s", dir, strerror(errno));
        return;
    }
    for (int k = 0; k < 1000; k++) {
        char p[4200];
        snprintf(a->name, NAME_CAP, "step-%08ld-%03d", step, k);
        snprintf(p, sizeof p, "%s/%s", dir, a->name);
        if (mkdir(p, 0777) == 0)
            return;
        if (errno != EEXIST) {
            a->rc = WEFT_EIO;
            snprintf(a->why, WHY_CAP, "cannot make %s: %s", p, strerror(errno));
            return;
        }
    }
    a->rc = WEFT_EIO;
    snprintf(a->why, WHY_CAP, "%s: a thousand saves of step %ld already", dir, step);
}

/* A pipeline's tensors that another part's file has: a later stage's copy
 * of the tied embedding, a tensor rank's whole (replicated) tensor but
 * tensor rank 0's. NULL: none (or no memory: then duplicates, harmless). */
static unsigned char *part_skip(const weft_run *t, int jr, int jw)
{
    const opts *o = t->o;
    weft_layout l;
    if (!t->pl || weft_layout_init(&l, jw, o->tp > 1 ? o->tp : 1, o->pp > 1 ? o->pp : 1,
                                   o->order) != 0)
        return NULL;
    int tp, dp, pp, nt = weft_model_tensor_count(t->m), tied = weft_model_tied_tensor(t->m);
    weft_layout_coords(&l, jr, &tp, &dp, &pp);
    unsigned char *skip = calloc((size_t)nt + 1, 1);
    for (int i = 0; skip && i < nt; i++) {
        weft_tensor_info ti;
        weft_model_tensor_info(t->m, i, &ti);
        skip[i] = (i == tied && pp > 0) || (tp > 0 && ti.numel == ti.whole_numel);
    }
    return skip;
}

/* One save from its announcement to its commit; the run keeps one
 * (t->ckpt) for its saves' figures. */
struct ckpt_pending {
    int busy, threaded;   /* a save not yet committed; its writer runs */
    int concluded;        /* the writer did the reduction and the commit */
    int announced;        /* the save's directory is made and named to all */
    weft_comm *bgc;       /* the writers' communicator (a split of the job), kept */
    int no_bgc;           /* the split failed: background saves are synchronous */
    int deferred;         /* committed by the next save or ckpt_shard_wait */
    pthread_t th;
    weft_run *t;
    char dir[4096], save[4200], path[1024];
    char made[4096];      /* the directory of this run's last announced save */
    announce a;
    weft_ckpt *rec;
    ckpt_piece *p;
    int np, jr, jw;
    long step;
    unsigned char *skip;
    float *snap;          /* the share's copy (asynchronous saves), kept */
    size_t snap_cap;      /* its floats */
    int snapped;          /* this save's share is in it */
    ckpt_slices sl;
    int64_t meta[META];
    int rc;
    char why[WHY_CAP];
    double t0, done;      /* the save's start, its commit's end (clock_now) */
    uint64_t total;       /* the save's bytes, all ranks (rank 0's count) */
    /* saves committed [0] in the loop's time, [1] in the background: how
     * many, their seconds from start to commit, their bytes (rank 0's
     * count); the loop's seconds in the background ones */
    int saves[2];
    double save_s[2], stall_s;
    uint64_t bytes[2];
};

/* What this rank writes: pieces of its ZeRO state, none where whole-model
 * sync modes have another rank write. */
static int own_pieces(struct ckpt_pending *pd)
{
    weft_run *t = pd->t;
    if (!t->sync.shared && t->rank != 0)
        return 0; /* every rank's model is whole: the first one's is saved */
    int rc = ckpt_shard_zero_pieces(t->sync.z, &pd->p, &pd->np);
    if (rc)
        snprintf(pd->why, WHY_CAP, "rank %d: %s", pd->jr, weft_strerror(rc));
    if (rc == 0 && pd->np)
        pd->skip = part_skip(t, pd->jr, pd->jw);
    return rc;
}

/* Room for n floats of snapshot, kept from save to save: a new buffer's
 * first touch (a page fault a page) would be the loop's time again at
 * every save. In 2 MiB pages where the kernel has them: 5 ms rather than
 * 150 for a 32 MB share on a virtual machine. */
static int snap_reserve(struct ckpt_pending *pd, size_t n)
{
    if (n <= pd->snap_cap)
        return 0;
    free(pd->snap);
    pd->snap_cap = 0;
    if (!(pd->snap = huge_alloc(n * sizeof(float))))
        return WEFT_ENOMEM;
    pd->snap_cap = n;
    return 0;
}

/* The pieces into one buffer, so the loop may go on changing the state;
 * 0 and no copy where there is no memory for it (the save is then
 * synchronous). */
static void snapshot(struct ckpt_pending *pd)
{
    size_t n = 0;
    for (int k = 0; k < pd->np; k++)
        n += pd->p[k].n;
    /* kept from save to save: a new buffer's first touch (a page fault a
     * page) would be the loop's time again at every save */
    if (!n || snap_reserve(pd, n) != 0)
        return;
    pd->snapped = 1;
    size_t at = 0;
    for (int k = 0; k < pd->np; k++) {
        memcpy(pd->snap + at, pd->p[k].src, pd->p[k].n * sizeof(float));
        pd->p[k].src = pd->snap + at;
        at += pd->p[k].n;
    }
}

/* This rank's file, when it owns anything: meta gets its slice count,
 * bytes and CRC. Runs on the writer thread of an asynchronous save. */
static int write_file(struct ckpt_pending *pd)
{
    if (!pd->np)
        return 0;
    char path[4300];
    snprintf(path, sizeof path, "%s/rank-%05d.bin", pd->save, pd->jr);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    int rc, fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    /* Straight from the writer's buffer to the disk: through the page
     * cache each 4 KiB first takes a free page and a copy into it, and
     * those pwrites were most of a save's time and moved by a factor of
     * several from save to save (docs/TRAINING.md, "Writing fast").
     * --save-cached keeps the page cache (a file system where direct
     * writes are slow); one that refuses them keeps it anyway. */
    if (fd >= 0 && !pd->t->o->save_cached) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(fd, F_SETFL, fl | O_DIRECT);
    }
    if (fd < 0) {
        rc = WEFT_EIO;
        snprintf(pd->why, WHY_CAP, "cannot create %s: %s", path, strerror(errno));
    } else {
        rc = ckpt_shard_write(fd, pd->t->m, pd->p, pd->np, pd->skip, (uint64_t)pd->jr,
                              SHARD_BUF, &pd->sl, &bytes, &crc);
        if (rc == 0 && fsync(fd) != 0)
            rc = WEFT_EIO;
        int err = errno;
        if (close(fd) != 0 && rc == 0)
            rc = WEFT_EIO;
        if (rc)
            snprintf(pd->why, WHY_CAP, "writing %s: %s", path,
                     rc == WEFT_EIO ? strerror(err ? err : EIO) : weft_strerror(rc));
    }
    pd->meta[0] = (int64_t)pd->sl.n;
    pd->meta[1] = (int64_t)bytes;
    pd->meta[2] = (int64_t)crc;
    return rc;
}


/* Every rank: the first rank that failed (jw: none). */
static int first_failed(weft_comm *job, int rc, int jr, int jw, int *who)
{
    int32_t mine = rc ? jr : jw, first = mine;
    int crc = job ? weft_allreduce(job, &mine, &first, 1, WEFT_I32, WEFT_MIN) : 0;
    *who = first;
    return crc;
}

/* Every rank's slice table on rank 0 (padded to the longest), and rank
 * 0's commit; its outcome to every rank. */
static int gather_commit(weft_run *t, weft_comm *job, const char *dir, const announce *a,
                         weft_ckpt *rec, const ckpt_slices *sl, const int64_t meta[META], int jr,
                         int jw, char *why, uint64_t *total)
{
    int64_t mine = (int64_t)sl->n, nmax = mine;
    int rc = job ? weft_allreduce(job, &mine, &nmax, 1, WEFT_I64, WEFT_MAX) : 0;
    size_t row = (size_t)(META + nmax * CKPT_SLICE_FIELDS);
    int64_t *buf = calloc(row, sizeof *buf);
    int64_t *all = jr == 0 ? calloc(row * (size_t)jw, sizeof *all) : NULL;
    if (rc == 0 && (!buf || (jr == 0 && !all)))
        rc = WEFT_ENOMEM; /* the gather goes on, so no rank waits for this one */
    if (buf) {
        memcpy(buf, meta, META * sizeof *buf);
        for (size_t k = 0; k < sl->n; k++)
            memcpy(buf + META + k * CKPT_SLICE_FIELDS, &sl->s[k], sizeof sl->s[k]);
    }
    int g = buf && job ? weft_gather(job, buf, all, row, WEFT_I64, 0) : 0;
    if (!job && buf && all)
        memcpy(all, buf, row * sizeof *buf);
    rc = rc ? rc : g;
    if (rc)
        snprintf(why, WHY_CAP, "gathering the slice tables: %s", weft_strerror(rc));
    for (int r = 0; rc == 0 && all && r < jw; r++)
        *total += (uint64_t)all[(size_t)r * row + 1];
    if (rc == 0 && jr == 0)
        rc = ckpt_commit(t, dir, a->name, rec, all, jw, nmax, why, WHY_CAP);
    /* rank 0's outcome and its why to every rank, so each names the cause */
    announce out = { .rc = rc };
    if (jr == 0 && rc)
        snprintf(out.why, WHY_CAP, "%s", why);
    if (job && weft_broadcast(job, &out, sizeof out, WEFT_U8, 0) != 0 && out.rc == 0)
        out.rc = WEFT_EIO;
    if (out.rc && !rc)
        snprintf(why, WHY_CAP, "rank 0 could not commit the save: %.4000s",
                 out.why[0] ? out.why : weft_strerror(out.rc));
    free(buf);
    free(all);
    return out.rc;
}

/* The save's path and its directory (path without trailing '/'). */
static void name_save(struct ckpt_pending *pd, const char *path)
{
    snprintf(pd->path, sizeof pd->path, "%s", path);
    snprintf(pd->dir, sizeof pd->dir, "%s", path);
    for (size_t n = strlen(pd->dir); n > 1 && pd->dir[n - 1] == '/'; n--)
        pd->dir[n - 1] = 0;
}

/* Collective over c (the job's ranks; on the writer thread, its own
 * communicator): the save directory, made by rank 0 and named to all;
 * a failure's account in pd->why. */
static int announce_on(struct ckpt_pending *pd, weft_comm *c)
{
    memset(&pd->a, 0, sizeof pd->a);
    if (pd->jr == 0)
        make_save_dir(pd->dir, strcmp(pd->made, pd->dir) == 0, pd->step, &pd->a);
    int rc = c ? weft_broadcast(c, &pd->a, sizeof pd->a, WEFT_U8, 0) : 0;
    if (rc == 0 && pd->a.rc) {
        memcpy(pd->why, pd->a.why, WHY_CAP);
        return pd->a.rc;
    }
    if (rc) {
        snprintf(pd->why, WHY_CAP, "naming the save directory: %s", weft_strerror(rc));
        return rc;
    }
    snprintf(pd->save, sizeof pd->save, "%s/%s", pd->dir, pd->a.name);
    snprintf(pd->made, sizeof pd->made, "%s", pd->dir);
    pd->announced = 1;
    return 0;
}

/* Collective over the job, in the loop's time. */
static int announce_save(struct ckpt_pending *pd)
{
    int rc = announce_on(pd, pd->t->job);
    return rc ? run_fail(pd->t, rc, "cannot save checkpoint %s: %s", pd->path, pd->why) : 0;
}

/* Collective over the job, at the first background save: the writers'
 * communicator, on every rank or none. */
static void split_writers(struct ckpt_pending *pd)
{
    weft_comm *job = pd->t->job;
    if (weft_comm_split(job, 0, pd->jr, &pd->bgc) != 0)
        pd->bgc = NULL;
    int32_t mine = pd->bgc != NULL, all = 0;
    if (weft_allreduce(job, &mine, &all, 1, WEFT_I32, WEFT_MIN) != 0 || !all) {
        weft_comm_destroy(pd->bgc);
        pd->bgc = NULL;
        pd->no_bgc = 1;
    }
}

/* What one save holds, freed once it is committed or given up. */
static void release(struct ckpt_pending *pd)
{
    weft_ckpt_free(pd->rec);
    free(pd->p);
    free(pd->skip);
    ckpt_slices_free(&pd->sl);
    pd->rec = NULL;
    pd->p = NULL;
    pd->skip = NULL;
    pd->snapped = 0;
    pd->np = 0;
    pd->busy = 0;
    pd->deferred = 0;
    pd->concluded = 0;
}

/* Collective over c (the job's ranks): the save's outcome on every rank,
 * and its commit; into pd->rc. */
static void conclude(struct ckpt_pending *pd, weft_comm *c)
{
    int who = pd->jw, rc = pd->rc;
    pd->total = 0;
    int crc = first_failed(c, rc, pd->jr, pd->jw, &who);
    if (crc == 0 && who < pd->jw && rc == 0)
        snprintf(pd->why, WHY_CAP, "rank %d could not write its file in %s", who, pd->save);
    if (crc == 0 && who == pd->jw)
        rc = gather_commit(pd->t, c, pd->dir, &pd->a, pd->rec, &pd->sl, pd->meta, pd->jr,
                           pd->jw, pd->why, &pd->total);
    else if (rc == 0)
        rc = crc ? crc : WEFT_EIO;
    pd->rc = rc;
    pd->done = clock_now();
    pd->concluded = 1;
}

/* A background save, start to end: the file, then the outcome and the
 * commit over the writers' communicator while the loop goes on. */
static void *writer(void *arg)
{
    struct ckpt_pending *pd = arg;
    /* every rank takes part in the announcement, one that failed too */
    int rc = pd->announced ? 0 : announce_on(pd, pd->bgc);
    if (pd->rc == 0)
        pd->rc = rc;
    if (pd->rc == 0)
        pd->rc = write_file(pd);
    conclude(pd, pd->bgc);
    return NULL;
}

/* Collective: the save's outcome on every rank, and its commit. */
static int finish(struct ckpt_pending *pd)
{
    weft_run *t = pd->t;
    if (pd->threaded) {
        pthread_join(pd->th, NULL);
        pd->threaded = 0;
    }
    if (!pd->concluded)
        conclude(pd, t->job);
    int rc = pd->rc;
    if (rc == 0) {
        int bg = pd->deferred;
        pd->saves[bg]++;
        /* a background save's duration is its work, the file and the
         * commit, not the steps between its commit and the join */
        pd->save_s[bg] += pd->done - pd->t0;
        pd->bytes[bg] += pd->total;
    }
    release(pd);
    if (rc)
        return run_fail(t, rc, "cannot save checkpoint %s: %s", pd->path,
                        pd->why[0] ? pd->why : weft_strerror(rc));
    return 0;
}

int ckpt_shard_wait(weft_run *t)
{
    struct ckpt_pending *pd = t->ckpt;
    return pd && pd->busy ? finish(pd) : 0;
}

int ckpt_shard_save(weft_run *t, const char *path, long step, weft_ckpt *rec, int async)
{
    double t0 = clock_now();
    struct ckpt_pending *was = t->ckpt;
    /* the last step's save again (the run's end after --save-every): the
     * one in flight is it */
    int same = was && was->busy && was->step == step && strcmp(was->path, path) == 0;
    int rc = ckpt_shard_wait(t);
    if (same || rc) {
        weft_ckpt_free(rec);
        return rc;
    }
    if (!t->ckpt && !(t->ckpt = calloc(1, sizeof *t->ckpt)))
        rc = run_fail(t, WEFT_ENOMEM, "cannot save checkpoint %s: out of memory", path);
    if (rc) {
        weft_ckpt_free(rec);
        return rc;
    }
    struct ckpt_pending *pd = t->ckpt;
    pd->t = t;
    pd->jr = t->job ? weft_comm_rank(t->job) : 0;
    pd->jw = t->job ? weft_comm_size(t->job) : 1;
    pd->rec = rec;
    pd->busy = 1;
    pd->rc = 0;
    pd->why[0] = 0;
    pd->t0 = t0;
    pd->done = 0;
    pd->step = step;
    pd->announced = 0;
    name_save(pd, path);
    /* under --mem-limit there is no room for a second copy of the share;
     * under --elastic a save must not outlive the step: a membership
     * change replaces the job, the model and the shards it was taken of */
    int bg = async && t->o->mem_limit <= 0 && !t->o->elastic;
    if (bg && t->job && !pd->bgc && !pd->no_bgc)
        split_writers(pd);
    bg = bg && (!t->job || pd->bgc);
    /* a background save is announced by its writers, unless the sync
     * mode's per-rank files need the directory now */
    int sync_state = ckpt_sync_kind(&t->sync) > 0;
    if ((!bg || sync_state) && (rc = announce_save(pd)) != 0) {
        release(pd);
        return rc;
    }
    pd->rc = own_pieces(pd);
    /* the step count of the snapshot, not of the commit's moment */
    weft_optim *opt = weft_zero_optim(t->sync.z);
    if (pd->rc == 0 && pd->rec)
        pd->rc = train_ckpt_put_optim_config(pd->rec, weft_optim_config_of(opt),
                                             weft_optim_steps(opt));
    /* a sync mode's per-rank state beside the shards, before the status
     * reduction, so a committed save has every rank's */
    if (pd->rc == 0 && sync_state)
        pd->rc = ckpt_sync_save(t, pd->save, pd->jr, step, pd->why, WHY_CAP);
    if (bg && pd->rc == 0 && pd->np)
        snapshot(pd);
    if (bg) {
        /* every rank runs a writer, with or without a file: the
         * announcement's and the commit's collectives are on all ranks'
         * writers. A rank without its snapshot (no memory for it) runs
         * its writer in the loop's time, on the live state; no other
         * rank waits for that. */
        pd->deferred = 1;
        int live = pd->rc == 0 && pd->np && !pd->snapped;
        if (!live && pthread_create(&pd->th, NULL, writer, pd) == 0)
            pd->threaded = 1;
        else
            writer(pd);
        pd->stall_s += clock_now() - t0;
        return 0;
    }
    if (pd->rc == 0)
        pd->rc = write_file(pd);
    return finish(pd);
}

int ckpt_shard_prepare(weft_run *t)
{
    const opts *o = t->o;
    /* the conditions of ckpt_shard_save's background saves, the same on
     * every rank (the split is collective) */
    if (!o->save[0] || o->save_every <= 0 || !ckpt_sharded(o->save) || o->mem_limit > 0 ||
        o->elastic || t->ckpt)
        return 0;
    struct ckpt_pending *pd = calloc(1, sizeof *pd);
    if (!pd)
        return run_fail(t, WEFT_ENOMEM, "--save-every: out of memory");
    t->ckpt = pd;
    pd->t = t;
    pd->jr = t->job ? weft_comm_rank(t->job) : 0;
    pd->jw = t->job ? weft_comm_size(t->job) : 1;
    if (t->job)
        split_writers(pd);
    size_t n = 0;
    if (own_pieces(pd) == 0)
        for (int k = 0; k < pd->np; k++)
            n += pd->p[k].n;
    /* touched now, so the first save copies into pages already there; a
     * buffer that cannot be had is the save's to find out again */
    if (n && snap_reserve(pd, n) == 0)
        memset(pd->snap, 0, n * sizeof(float));
    release(pd);
    pd->why[0] = 0;
    return 0;
}

void ckpt_shard_close(weft_run *t)
{
    struct ckpt_pending *pd = t->ckpt;
    if (!pd)
        return;
    if (pd->threaded)
        pthread_join(pd->th, NULL);
    release(pd);
    weft_comm_destroy(pd->bgc);
    free(pd->snap);
    free(pd);
    t->ckpt = NULL;
}

void ckpt_shard_figures(const weft_run *t, ckpt_figures_t *f)
{
    const struct ckpt_pending *pd = t->ckpt;
    memset(f, 0, sizeof *f);
    for (int k = 0; pd && k < 2; k++) {
        f->saves[k] = pd->saves[k];
        f->save_s[k] = pd->save_s[k];
        f->bytes[k] = pd->bytes[k];
    }
    f->stall_s = pd ? pd->stall_s : 0;
}
