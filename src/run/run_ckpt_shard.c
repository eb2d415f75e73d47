/* Sharded checkpoints of the run: job rank 0 makes a new save directory
 * and names it to all; every rank writes what it owns (its ZeRO shard of
 * its stage's and tensor rank's part; whole-model sync modes: the first
 * data-parallel rank's model) to its own file and syncs it; a reduction
 * tells every rank whether all did; only then rank 0 gathers the slice
 * tables (small), writes the manifest (renamed into place, then the
 * directory synced), points latest at it and drops saves beyond --keep.
 * A kill at any moment leaves latest naming a complete save. */
#include "run/run_ckpt_shard.h"

#include "train/ckpt.h"
#include "train/ckpt_shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { NAME_CAP = 64, WHY_CAP = 4608, SHARD_BUF = 4 << 20, META = 3 };

int ckpt_sharded(const char *path)
{
    size_t n = strlen(path);
    char latest[4200];
    struct stat st;
    snprintf(latest, sizeof latest, "%s/latest", path);
    return (n && path[n - 1] == '/') || (stat(latest, &st) == 0 && S_ISREG(st.st_mode));
}

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return WEFT_EIO;
    int rc = fsync(fd) != 0 ? WEFT_EIO : 0;
    close(fd);
    return rc;
}

/* What rank 0 tells every rank before they write. */
typedef struct {
    int32_t rc;
    char name[NAME_CAP];
    char why[WHY_CAP];
} announce;

/* Rank 0: dir (made if need be) and a new save directory in it. */
static void make_save_dir(const char *dir, long step, announce *a)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
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

/* This rank's file, when it owns anything: meta gets its slice count,
 * bytes and CRC. */
static int write_own(weft_run *t, const char *save, int jr, int jw, ckpt_slices *sl,
                     int64_t meta[META], char *why)
{
    if (!t->sync.shared && t->rank != 0)
        return 0; /* every rank's model is whole: the first one's is saved */
    ckpt_piece *p;
    int np, rc = ckpt_shard_zero_pieces(t->sync.z, &p, &np);
    if (rc != 0 || np == 0) {
        if (rc)
            snprintf(why, WHY_CAP, "rank %d: %s", jr, weft_strerror(rc));
        free(p);
        return rc;
    }
    unsigned char *skip = part_skip(t, jr, jw);
    char path[4300];
    snprintf(path, sizeof path, "%s/rank-%05d.bin", save, jr);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = WEFT_EIO;
        snprintf(why, WHY_CAP, "cannot create %s: %s", path, strerror(errno));
    } else {
        rc = ckpt_shard_write(fd, t->m, p, np, skip, (uint64_t)jr, SHARD_BUF, sl, &bytes, &crc);
        if (rc == 0 && fsync(fd) != 0)
            rc = WEFT_EIO;
        int err = errno;
        if (close(fd) != 0 && rc == 0)
            rc = WEFT_EIO;
        if (rc)
            snprintf(why, WHY_CAP, "writing %s: %s", path,
                     rc == WEFT_EIO ? strerror(err ? err : EIO) : weft_strerror(rc));
    }
    meta[0] = (int64_t)sl->n;
    meta[1] = (int64_t)bytes;
    meta[2] = (int64_t)crc;
    free(skip);
    free(p);
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

/* Rank 0: the file list and the slices renumbered to it. */
static int put_layout(weft_ckpt *man, const int64_t *all, int jw, int64_t nmax)
{
    size_t cap = (size_t)jw * 24 + 1, len = 0, nf = 0, ns = 0;
    char *names = calloc(cap, 1);
    int64_t *info = calloc((size_t)jw * 2 + 1, sizeof *info);
    int64_t *sl = calloc((size_t)(jw * nmax) * CKPT_SLICE_FIELDS + 1, sizeof *sl);
    int rc = names && info && sl ? 0 : WEFT_ENOMEM;
    for (int r = 0; rc == 0 && r < jw; r++) {
        const int64_t *m = all + (size_t)r * (size_t)(META + nmax * CKPT_SLICE_FIELDS);
        if (m[1] == 0)
            continue;
        len += (size_t)snprintf(names + len, cap - len, "rank-%05d.bin\n", r);
        info[2 * nf] = m[1];
        info[2 * nf + 1] = m[2];
        for (int64_t k = 0; k < m[0]; k++, ns++) {
            memcpy(sl + ns * CKPT_SLICE_FIELDS, m + META + k * CKPT_SLICE_FIELDS,
                   CKPT_SLICE_FIELDS * sizeof *sl);
            sl[ns * CKPT_SLICE_FIELDS] = (int64_t)nf;
        }
        nf++;
    }
    int64_t ishape[2] = { (int64_t)nf, 2 }, sshape[2] = { (int64_t)ns, CKPT_SLICE_FIELDS };
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/files", names);
    if (rc == 0)
        rc = weft_ckpt_put_tensor(man, "shard/file_info", WEFT_I64, info, 2, ishape);
    if (rc == 0)
        rc = weft_ckpt_put_tensor(man, "shard/slices", WEFT_I64, sl, 2, sshape);
    free(names);
    free(info);
    free(sl);
    return rc;
}

/* Rank 0: the run's config, the layout and the vectors' names. */
static int put_run(weft_run *t, weft_ckpt *man, int jw)
{
    const opts *o = t->o;
    weft_optim *any = weft_zero_optim(t->sync.z);
    char layout[256], vectors[512];
    size_t len = (size_t)snprintf(vectors, sizeof vectors, "param\n");
    for (int i = 0; i < weft_optim_state_count(any) && len < sizeof vectors; i++) {
        const char *sn;
        weft_optim_state(any, i, &sn);
        len += (size_t)snprintf(vectors + len, sizeof vectors - len, "%s\n", sn);
    }
    int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1;
    snprintf(layout, sizeof layout, "world=%d tp=%d pp=%d dp=%d zero=%d sync=%s", jw, tp, pp,
             jw / (tp * pp), o->zero, o->sync[0] ? o->sync : "full");
    int rc = train_ckpt_put_config(man, weft_model_config_of(t->m));
    if (rc == 0)
        rc = train_ckpt_put_optim_config(man, weft_optim_config_of(any), weft_optim_steps(any));
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/format", "weft-shards 1");
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/layout", layout);
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/vectors", vectors);
    return rc;
}

/* latest names the save, atomically. */
static int point_latest(const char *dir, const char *name, char *why)
{
    char tmp[4200], path[4200];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(path, sizeof path, "%s/latest", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    size_t n = strlen(name);
    int ok = fd >= 0 && write(fd, name, n) == (ssize_t)n && write(fd, "\n", 1) == 1 &&
             fsync(fd) == 0;
    int err = errno;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        err = errno;
    }
    if (ok && sync_dir(dir) != 0) {
        ok = 0;
        err = errno;
    }
    if (!ok)
        snprintf(why, WHY_CAP, "cannot update %s: %s", path, strerror(err));
    return ok ? 0 : WEFT_EIO;
}

static void remove_save(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    DIR *d = opendir(p);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(p);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rank 0 after latest moved: saves a crash left without a manifest go,
 * and complete ones beyond the newest keep (0: all kept). */
static void rotate(const char *dir, const char *current, int keep)
{
    DIR *d = opendir(dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "step-", 5) != 0 || strcmp(e->d_name, current) == 0)
            continue;
        if (n == cap) {
            char **g = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!g)
                break;
            names = g;
        }
        if (!(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    if (d)
        closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int kept = 1; /* the current one */
    for (size_t i = n; i-- > 0;) {
        char m[4300];
        struct stat st;
        snprintf(m, sizeof m, "%s/%s/manifest", dir, names[i]);
        int complete = stat(m, &st) == 0;
        if (!complete || (keep > 0 && ++kept > keep))
            remove_save(dir, names[i]);
        free(names[i]);
    }
    free(names);
}

/* Rank 0: the manifest, then latest; every rank's files are written. */
static int commit(weft_run *t, const char *dir, const char *name, weft_ckpt *man,
                  const int64_t *all, int jw, int64_t nmax, char *why)
{
    char save[4200], path[4300];
    snprintf(save, sizeof save, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s/manifest", save);
    if (!man) { /* the run's records could not be made (run_fail said why) */
        snprintf(why, WHY_CAP, "no memory for the manifest");
        return WEFT_ENOMEM;
    }
    int rc = put_run(t, man, jw);
    if (rc == 0)
        rc = put_layout(man, all, jw, nmax);
    if (rc == 0 && (rc = weft_ckpt_save(man, path)) != 0)
        snprintf(why, WHY_CAP, "cannot write %s: %s", path, weft_strerror(rc));
    if (rc == 0 && (rc = sync_dir(save)) != 0)
        snprintf(why, WHY_CAP, "cannot sync %s: %s", save, strerror(errno));
    if (rc == 0)
        rc = point_latest(dir, name, why);
    if (rc == 0)
        rotate(dir, name, t->o->keep);
    return rc;
}

/* Every rank's slice table on rank 0 (padded to the longest), and rank
 * 0's commit; its outcome to every rank. */
static int gather_commit(weft_run *t, const char *dir, const announce *a, weft_ckpt *rec,
                         const ckpt_slices *sl, const int64_t meta[META], int jr, int jw,
                         char *why)
{
    weft_comm *job = t->job;
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
    if (rc == 0 && jr == 0)
        rc = commit(t, dir, a->name, rec, all, jw, nmax, why);
    int32_t out = rc;
    if (job && weft_broadcast(job, &out, 1, WEFT_I32, 0) != 0 && out == 0)
        out = WEFT_EIO;
    if (out && !rc)
        snprintf(why, WHY_CAP, "rank 0 could not commit the save");
    free(buf);
    free(all);
    return out;
}

int ckpt_shard_save(weft_run *t, const char *path, long step, weft_ckpt *rec)
{
    weft_comm *job = t->job;
    int jr = job ? weft_comm_rank(job) : 0, jw = job ? weft_comm_size(job) : 1;
    char dir[4096], save[4200], why[WHY_CAP] = "";
    snprintf(dir, sizeof dir, "%s", path);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = 0;
    announce a = { 0 };
    if (jr == 0)
        make_save_dir(dir, step, &a);
    int rc = job ? weft_broadcast(job, &a, sizeof a, WEFT_U8, 0) : 0;
    if (rc == 0 && a.rc)
        return run_fail(t, a.rc, "cannot save checkpoint %s: %s", path, a.why);
    snprintf(save, sizeof save, "%s/%s", dir, a.name);
    ckpt_slices sl = { 0 };
    int64_t meta[META] = { 0 };
    if (rc == 0)
        rc = write_own(t, save, jr, jw, &sl, meta, why);
    int who = jw;
    int crc = first_failed(job, rc, jr, jw, &who);
    if (crc == 0 && who < jw && rc == 0)
        snprintf(why, WHY_CAP, "rank %d could not write its file in %s", who, save);
    if (crc == 0 && who == jw)
        rc = gather_commit(t, dir, &a, rec, &sl, meta, jr, jw, why);
    else if (rc == 0)
        rc = crc ? crc : WEFT_EIO;
    ckpt_slices_free(&sl);
    if (rc)
        return run_fail(t, rc, "cannot save checkpoint %s: %s", path,
                        why[0] ? why : weft_strerror(rc));
    return 0;
}
