/* Committing a sharded save (run_ckpt_commit.h): the manifest last, then
 * latest, each written to a temporary name, synced and renamed, so a kill
 * at any moment leaves latest naming a complete save. */
#include "run/run_ckpt_commit.h"

#include "train/ckpt.h"
#include "train/ckpt_shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return WEFT_EIO;
    int rc = fsync(fd) != 0 ? WEFT_EIO : 0;
    close(fd);
    return rc;
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
        const int64_t *m = all + (size_t)r * (size_t)(CKPT_META + nmax * CKPT_SLICE_FIELDS);
        if (m[1] == 0)
            continue;
        len += (size_t)snprintf(names + len, cap - len, "rank-%05d.bin\n", r);
        info[2 * nf] = m[1];
        info[2 * nf + 1] = m[2];
        for (int64_t k = 0; k < m[0]; k++, ns++) {
            memcpy(sl + ns * CKPT_SLICE_FIELDS, m + CKPT_META + k * CKPT_SLICE_FIELDS,
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
    char layout[512], vectors[512];
    size_t len = (size_t)snprintf(vectors, sizeof vectors, "param\n");
    for (int i = 0; i < weft_optim_state_count(any) && len < sizeof vectors; i++) {
        const char *sn;
        weft_optim_state(any, i, &sn);
        len += (size_t)snprintf(vectors + len, sizeof vectors - len, "%s\n", sn);
    }
    int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1;
    /* what a resume is to agree on (sync mode and period, compressor) or
     * to know (the elastic membership changes before this save) */
    int n = snprintf(layout, sizeof layout, "world=%d tp=%d pp=%d dp=%d zero=%d sync=%.64s "
                     "compress=%.64s", jw, tp, pp, jw / (tp * pp), o->zero,
                     o->sync[0] ? o->sync : "full", o->compress[0] ? o->compress : "none");
    /* the expert groups the experts were divided over (only where they
     * were: the line of other saves is as it was) */
    if (o->ep > 1 && n > 0 && (size_t)n < sizeof layout)
        n += snprintf(layout + n, sizeof layout - (size_t)n, " ep=%d", o->ep);
    if (o->elastic && n > 0 && (size_t)n < sizeof layout)
        snprintf(layout + n, sizeof layout - (size_t)n, " elastic=%lld launch=%d",
                 (long long)t->el.view, t->el.world0);
    /* the optimiser's config and step count are the save's records: a
     * background save commits steps after its snapshot */
    int rc = train_ckpt_put_config(man, weft_model_config_of(t->m));
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/format", "weft-shards 1");
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/layout", layout);
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/vectors", vectors);
    return rc;
}

/* latest names the save, atomically. */
static int point_latest(const char *dir, const char *name, char *why, size_t cap)
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
        snprintf(why, cap, "cannot update %s: %s", path, strerror(err));
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
    if (n)
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
int ckpt_commit(weft_run *t, const char *dir, const char *name, weft_ckpt *man,
                const int64_t *all, int jw, int64_t nmax, char *why, size_t cap)
{
    char save[4200], path[4300];
    snprintf(save, sizeof save, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s/manifest", save);
    if (!man) { /* the run's records could not be made (run_fail said why) */
        snprintf(why, cap, "no memory for the manifest");
        return WEFT_ENOMEM;
    }
    int rc = put_run(t, man, jw);
    if (rc == 0)
        rc = put_layout(man, all, jw, nmax);
    if (rc == 0 && (rc = weft_ckpt_save(man, path)) != 0)
        snprintf(why, cap, "cannot write %s: %s", path, weft_strerror(rc));
    if (rc == 0 && (rc = sync_dir(save)) != 0)
        snprintf(why, cap, "cannot sync %s: %s", save, strerror(errno));
    if (rc == 0)
        rc = point_latest(dir, name, why, cap);
    if (rc == 0)
        rotate(dir, name, t->o->keep);
    return rc;
}

