/* A sharded checkpoint directory read back as the one-file layout
 * (train/ckpt_shard.h): the manifest's records, and every whole vector
 * put together from the ranks' files, each run one pread. */
#include "train/ckpt_shard.h"

#include "core/crc32.h"
#include "train/data_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_file(const char *dir, const char *name)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int ckpt_shard_resolve(const char *dir, char *buf, size_t cap)
{
    if (is_file(dir, "manifest")) {
        if ((size_t)snprintf(buf, cap, "%s", dir) >= cap)
            return WEFT_EINVAL;
        return 0;
    }
    char p[4200], name[256];
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return WEFT_EIO;
    int ok = fgets(name, sizeof name, f) != NULL;
    fclose(f);
    name[strcspn(name, "\n")] = 0;
    /* a name in dir, nothing more */
    if (!ok || !name[0] || strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0)
        return WEFT_EIO;
    if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap)
        return WEFT_EINVAL;
    return is_file(buf, "manifest") ? 0 : WEFT_EIO;
}

typedef struct {
    int fd;
    float *dst;
    uint64_t n;      /* the vector's elements */
    uint64_t expect; /* the next byte of the file, to check the runs tile it */
    uint32_t crc;
    const crc32_tables *k;
    uint64_t *covered; /* the vector's elements read so far */
} reader;

static int get_run(void *arg, uint64_t at, uint64_t off, uint64_t len)
{
    reader *r = arg;
    if (at + len > r->n || off != r->expect)
        return WEFT_EIO;
    int rc = train_pread_all(r->fd, r->dst + at, (size_t)len * sizeof(float), off);
    if (rc == 0)
        r->crc = crc32_update_fast(r->k, r->crc, r->dst + at, (size_t)len * sizeof(float));
    r->expect += len * sizeof(float);
    *r->covered += len;
    return rc;
}

/* What the manifest says of the files and slices. */
typedef struct {
    const char *dir, *files, *vectors;
    const int64_t *info, *sl;
    size_t nfiles, nslices;
    int fields; /* per slice: CKPT_SLICE_FIELDS, or _V1 in older saves */
    float **vec;
    uint64_t cov[16]; /* per vector: elements read, n each when every one was */
    int nvec;
    uint64_t n;
    crc32_tables k;
} layout;

static int read_file(layout *L, size_t f)
{
    char name[256], path[4400];
    int rc = ckpt_shard_line(L->files, (int)f, name, sizeof name);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/%s", L->dir, name);
    int fd = train_open_regular(path, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    struct stat st;
    reader r = { .fd = fd, .n = L->n, .k = &L->k };
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != (uint64_t)L->info[2 * f])
        rc = WEFT_EIO;
    for (size_t k = 0; rc == 0 && k < L->nslices; k++) {
        const int64_t *q = L->sl + (size_t)L->fields * k;
        ckpt_slice s = { (uint64_t)q[0], (uint64_t)q[1], (uint64_t)q[2], (uint64_t)q[3],
                         (uint64_t)q[4], (uint64_t)q[5], (uint64_t)q[6], 0 };
        if (s.file != f)
            continue;
        if (s.vec >= (uint64_t)L->nvec)
            rc = WEFT_EIO;
        r.dst = rc == 0 ? L->vec[s.vec] : NULL;
        r.covered = rc == 0 ? &L->cov[s.vec] : NULL;
        if (rc == 0)
            rc = ckpt_slice_overlap(&s, 0, UINT64_MAX, get_run, &r);
    }
    if (rc == 0 && (r.expect != (uint64_t)L->info[2 * f] || r.crc != (uint32_t)L->info[2 * f + 1]))
        rc = WEFT_EIO;
    close(fd);
    return rc;
}

/* The vectors the slices name: the parameters, then optimiser states. */
static int map_vectors(layout *L, weft_model *whole, weft_optim *opt)
{
    char name[64];
    L->vec = calloc(16, sizeof *L->vec);
    if (!L->vec)
        return WEFT_ENOMEM;
    for (L->nvec = 0; L->nvec < 16 && ckpt_shard_line(L->vectors, L->nvec, name, sizeof name) == 0;
         L->nvec++) {
        float *v = strcmp(name, "param") == 0 ? weft_model_params(whole, NULL) : NULL;
        for (int i = 0; !v && i < weft_optim_state_count(opt); i++) {
            const char *sn;
            float *s = weft_optim_state(opt, i, &sn);
            if (strcmp(sn, name) == 0)
                v = s;
        }
        if (!v)
            return WEFT_EIO;
        L->vec[L->nvec] = v;
    }
    return 0;
}

static int shard_records(const weft_ckpt *man, layout *L)
{
    weft_ckpt_entry f, v, info, sl;
    int rc = weft_ckpt_find(man, "shard/files", &f);
    if (rc == 0)
        rc = weft_ckpt_find(man, "shard/vectors", &v);
    if (rc == 0)
        rc = weft_ckpt_find(man, "shard/file_info", &info);
    if (rc == 0)
        rc = weft_ckpt_find(man, "shard/slices", &sl);
    if (rc != 0)
        return WEFT_EIO;
    if (info.dtype != WEFT_I64 || info.ndim != 2 || info.shape[1] != 2 || sl.dtype != WEFT_I64 ||
        sl.ndim != 2 ||
        (sl.shape[1] != CKPT_SLICE_FIELDS && sl.shape[1] != CKPT_SLICE_FIELDS_V1) || f.kind != WEFT_CKPT_BLOB ||
        v.kind != WEFT_CKPT_BLOB || memchr(f.data, 0, f.nbytes) || memchr(v.data, 0, v.nbytes))
        return WEFT_EIO;
    /* the blobs are not terminated: copies that are */
    char *fs = calloc(1, f.nbytes + 1), *vs = calloc(1, v.nbytes + 1);
    if (!fs || !vs) {
        free(fs);
        free(vs);
        return WEFT_ENOMEM;
    }
    memcpy(fs, f.data, f.nbytes);
    memcpy(vs, v.data, v.nbytes);
    L->files = fs;
    L->vectors = vs;
    L->info = info.data;
    L->nfiles = (size_t)info.shape[0];
    L->sl = sl.data;
    L->nslices = (size_t)sl.shape[0];
    L->fields = (int)sl.shape[1];
    return 0;
}

/* The manifest's own records (of shard/ the layout alone), the whole
 * model and optimiser after them. */
static int assemble(const weft_ckpt *man, weft_model *whole, weft_optim *opt, weft_ckpt **out)
{
    weft_ckpt *c;
    int rc = weft_ckpt_new(&c);
    for (int i = 0; rc == 0 && i < weft_ckpt_count(man); i++) {
        weft_ckpt_entry e;
        weft_ckpt_entry_at(man, i, &e);
        /* where the slices were: no longer so once assembled */
        if (strncmp(e.name, "shard/", 6) == 0 && strcmp(e.name, "shard/layout") != 0)
            continue;
        int64_t shape[WEFT_CKPT_MAX_DIM];
        for (int d = 0; d < e.ndim; d++)
            shape[d] = e.shape[d];
        rc = e.kind == WEFT_CKPT_BLOB ? weft_ckpt_put_blob(c, e.name, e.data, e.nbytes)
                                      : weft_ckpt_put_tensor(c, e.name, e.dtype, e.data,
                                                             e.ndim, shape);
    }
    if (rc == 0)
        rc = weft_ckpt_put_model(c, whole);
    if (rc == 0)
        rc = weft_ckpt_put_optim(c, opt);
    if (rc != 0) {
        weft_ckpt_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int ckpt_shard_load_whole(const char *dir, weft_ckpt **out)
{
    char at[4200], path[4400], fmt[64];
    *out = NULL;
    int rc = ckpt_shard_resolve(dir, at, sizeof at);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/manifest", at);
    weft_ckpt *man = NULL;
    weft_model *whole = NULL;
    weft_optim *opt = NULL;
    weft_model_config cfg;
    weft_optim_config oc;
    uint64_t steps = 0;
    layout L = { .dir = at };
    crc32_tables_init(&L.k);
    if ((rc = weft_ckpt_load(&man, path)) != 0)
        return rc;
    if (weft_ckpt_get_str(man, "shard/format", fmt, sizeof fmt) != 0 ||
        strcmp(fmt, "weft-shards 1") != 0 || weft_ckpt_model_config(man, &cfg) != 0 ||
        weft_ckpt_optim_config(man, &oc) != 0 || weft_ckpt_get_u64(man, "optim/steps", &steps))
        rc = WEFT_EIO;
    if (rc == 0)
        rc = weft_model_create(&whole, &cfg, 0);
    size_t n = 0;
    if (rc == 0) {
        weft_model_params(whole, &n);
        L.n = n;
        rc = weft_optim_create(&opt, &oc, 0, n);
    }
    if (rc == 0)
        rc = weft_optim_set_steps(opt, (int64_t)steps);
    if (rc == 0)
        rc = shard_records(man, &L);
    if (rc == 0)
        rc = map_vectors(&L, whole, opt);
    for (size_t f = 0; rc == 0 && f < L.nfiles; f++)
        rc = read_file(&L, f);
    /* each element once: a slice missing or twice is a broken checkpoint */
    for (int v = 0; rc == 0 && v < L.nvec; v++)
        if (L.cov[v] != n)
            rc = WEFT_EIO;
    if (rc == 0)
        rc = assemble(man, whole, opt, out);
    free((char *)L.files);
    free((char *)L.vectors);
    free(L.vec);
    weft_optim_destroy(opt);
    weft_model_destroy(whole);
    weft_ckpt_free(man);
    return rc;
}
