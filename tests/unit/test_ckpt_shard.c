/* Sharded checkpoints' slices (train/ckpt_shard.h): runs merge into
 * strided slices, an intersection with a range of whole elements cuts
 * them right, and a tensor-parallel part written to a file reads back into
 * its places in the whole vector; a reader takes a model's elements from
 * such files, each slice checked against its CRC. */
#include "test.h"
#include "core/clock.h"
#include "core/crc32.h"
#include "train/ckpt.h"
#include "train/ckpt_shard.h"
#include "train/zero_full.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The tables' CRC is core/crc32's for every length and alignment, and
 * two pieces' CRCs join into the whole's. */
TEST(crc)
{
    crc32_tables k;
    crc32_tables_init(&k);
    unsigned char buf[1100];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    int bad = 0;
    for (size_t at = 0; at < 9; at++)
        for (size_t n = 0; n + at <= sizeof buf; n += 1 + n / 3)
            bad += crc32_update_fast(&k, 0, buf + at, n) != crc32_update(0, buf + at, n);
    CHECK(bad == 0);
    /* fed in pieces, as a writer does */
    CHECK(crc32_update_fast(&k, crc32_update_fast(&k, 0, buf, 13), buf + 13, 1000) == crc32_update(0, buf, 1013));
    for (size_t cut = 0; cut <= sizeof buf; cut += 37)
        bad += crc32_combine(crc32_update(0, buf, cut), crc32_update(0, buf + cut, sizeof buf - cut),
                             sizeof buf - cut) != crc32_update(0, buf, sizeof buf);
    CHECK(bad == 0);
    CHECK(crc32_combine(0, 0xdeadbeefu, 7) == 0xdeadbeefu);
}

TEST(merge)
{
    ckpt_slices l = { 0 };
    /* two consecutive runs: one longer run */
    CHECK(ckpt_slices_add(&l, 0, 0, 10, 4, 0) == 0);
    CHECK(ckpt_slices_add(&l, 0, 0, 14, 4, 16) == 0);
    CHECK(l.n == 1 && l.s[0].len == 8 && l.s[0].count == 1);
    /* a column split: rows of 3 every 12, one strided slice */
    for (int r = 0; r < 5; r++)
        CHECK(ckpt_slices_add(&l, 0, 1, 100 + 12 * (uint64_t)r, 3, 32 + 12 * (uint64_t)r) == 0);
    CHECK(l.n == 2 && l.s[1].len == 3 && l.s[1].stride == 12 && l.s[1].count == 5);
    /* a break in the pattern (or another vector, or a gap in the file) */
    CHECK(ckpt_slices_add(&l, 0, 1, 200, 3, 92) == 0);
    CHECK(l.n == 3);
    CHECK(ckpt_slices_add(&l, 0, 2, 203, 3, 104) == 0);
    CHECK(l.n == 4);
    CHECK(ckpt_slices_add(&l, 0, 2, 206, 3, 200) == 0);
    CHECK(l.n == 5);
    ckpt_slices_free(&l);
    CHECK(l.n == 0 && l.s == NULL);
}

typedef struct {
    uint64_t at[16], off[16], len[16];
    int n;
} seen;

static int note(void *arg, uint64_t at, uint64_t off, uint64_t len)
{
    seen *s = arg;
    if (s->n < 16) {
        s->at[s->n] = at;
        s->off[s->n] = off;
        s->len[s->n] = len;
    }
    s->n++;
    return 0;
}

TEST(overlap)
{
    /* runs [100,103) [112,115) [124,127) [136,139) at file 32, 44, 56, 68 */
    ckpt_slice s = { .file = 0, .vec = 0, .start = 100, .len = 3, .stride = 12, .count = 4,
                     .off = 32 };
    seen a = { 0 };
    CHECK(ckpt_slice_overlap(&s, 0, 1000, note, &a) == 0);
    CHECK(a.n == 4 && a.at[3] == 136 && a.off[3] == 68 && a.len[3] == 3);
    seen b = { 0 };
    CHECK(ckpt_slice_overlap(&s, 113, 125, note, &b) == 0);
    CHECKF(b.n == 2, "%d runs", b.n);
    CHECK(b.at[0] == 113 && b.len[0] == 2 && b.off[0] == 44 + 4);
    CHECK(b.at[1] == 124 && b.len[1] == 1 && b.off[1] == 56);
    seen c = { 0 };
    CHECK(ckpt_slice_overlap(&s, 103, 112, note, &c) == 0 && c.n == 0); /* a gap */
    CHECK(ckpt_slice_overlap(&s, 139, 500, note, &c) == 0 && c.n == 0); /* past the end */
    CHECK(ckpt_slice_overlap(&s, 0, 100, note, &c) == 0 && c.n == 0);   /* before */
    ckpt_slice one = { .start = 10, .len = 50, .stride = 50, .count = 1, .off = 0 };
    seen d = { 0 };
    CHECK(ckpt_slice_overlap(&one, 20, 30, note, &d) == 0);
    CHECK(d.n == 1 && d.at[0] == 20 && d.off[0] == 40 && d.len[0] == 10);
}

/* Each tensor-parallel part of a GPT written whole: every element of the
 * whole model is in exactly one file (replicated tensors from rank 0),
 * with the value the whole model has there. */
TEST(part_roundtrip)
{
    weft_model_config cfg;
    weft_model *whole = NULL;
    CHECK(weft_model_config_parse("gpt:vocab=30,ctx=8,layers=2,heads=2,dim=8", &cfg) == 0);
    CHECK(weft_model_create(&whole, &cfg, 7) == 0);
    size_t N;
    const float *W = weft_model_params(whole, &N);
    float *got = calloc(N, sizeof *got);
    int *hits = calloc(N, sizeof *hits);
    char path[] = "/tmp/weft-test-shard-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && got && hits);
    weft_block_range all = { 0, weft_model_block_count(&cfg) };
    for (int r = 0; r < 2 && fd >= 0; r++) {
        weft_model *part = NULL;
        CHECK(weft_model_create_tp(&part, &cfg, 7, &all, 1, 0, NULL, 2, r) == 0);
        if (!part)
            break;
        size_t n;
        const float *P = weft_model_params(part, &n);
        int nt = weft_model_tensor_count(part);
        unsigned char *skip = calloc((size_t)nt, 1);
        for (int i = 0; i < nt; i++) {
            weft_tensor_info ti;
            weft_model_tensor_info(part, i, &ti);
            skip[i] = r > 0 && ti.numel == ti.whole_numel;
        }
        /* two pieces, cut mid-tensor, as ZeRO's shards are */
        ckpt_piece p[2] = { { 0, 0, n / 3, P }, { 0, n / 3, n - n / 3, P + n / 3 } };
        ckpt_slices l = { 0 };
        uint64_t bytes = 0;
        uint32_t crc = 0;
        CHECK(ftruncate(fd, 0) == 0);
        CHECK(ckpt_shard_write(fd, part, p, 2, skip, 0, 64, &l, &bytes, &crc) == 0);
        uint64_t sum = 0;
        for (size_t k = 0; k < l.n; k++) {
            const ckpt_slice *s = &l.s[k];
            for (uint64_t j = 0; j < s->count; j++) {
                uint64_t at = s->start + j * s->stride;
                CHECK(pread(fd, got + at, s->len * 4, (off_t)(s->off + j * s->len * 4)) ==
                      (ssize_t)(s->len * 4));
                for (uint64_t e = 0; e < s->len; e++)
                    hits[at + e]++;
                sum += s->len;
            }
        }
        CHECKF(sum * 4 == bytes, "part %d: %llu elements in %llu bytes", r,
               (unsigned long long)sum, (unsigned long long)bytes);
        /* a column split is a few strided slices, not one per row */
        CHECKF(l.n < (size_t)nt * 3, "part %d: %zu slices for %d tensors", r, l.n, nt);
        ckpt_slices_free(&l);
        free(skip);
        weft_model_destroy(part);
    }
    size_t once = 0, same = 0;
    for (size_t i = 0; i < N; i++) {
        once += hits[i] == 1;
        same += got[i] == W[i];
    }
    CHECKF(once == N && same == N, "%zu of %zu once, %zu equal", once, N, same);
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    free(got);
    free(hits);
    weft_model_destroy(whole);
}



/* Runs that go on: one slice until it would pass CKPT_SLICE_MAX_BYTES. */
TEST(slice_cap)
{
    ckpt_slices l = { 0 };
    uint64_t run = 1024, most = CKPT_SLICE_MAX_BYTES / 4;
    for (uint64_t k = 0; k < 2 * most / run + 1; k++)
        CHECK(ckpt_slices_add(&l, 0, 0, k * run, run, k * run * 4) == 0);
    CHECKF(l.n == 3 && l.s[0].len == most && l.s[1].len == most && l.s[2].len == run,
           "%zu slices", l.n);
    ckpt_slices_free(&l);
}

/* A GPT's two tensor-parallel parts written to rank-0000R.bin in dir, their
 * slice table (8 columns) and file info in *man, as a save's manifest. */
static int write_parts(const char *dir, const weft_model_config *cfg, weft_ckpt *man)
{
    weft_block_range all = { 0, weft_model_block_count(cfg) };
    int64_t info[4], *tab = NULL;
    size_t ns = 0;
    int rc = 0;
    for (int r = 0; r < 2 && rc == 0; r++) {
        weft_model *part = NULL;
        char path[300];
        snprintf(path, sizeof path, "%s/rank-%05d.bin", dir, r);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || weft_model_create_tp(&part, cfg, 7, &all, 1, 0, NULL, 2, r) != 0)
            rc = WEFT_EIO;
        size_t n = 0;
        const float *P = rc == 0 ? weft_model_params(part, &n) : NULL;
        int nt = rc == 0 ? weft_model_tensor_count(part) : 0;
        unsigned char *skip = calloc((size_t)nt + 1, 1);
        for (int i = 0; skip && i < nt; i++) {
            weft_tensor_info ti;
            weft_model_tensor_info(part, i, &ti);
            skip[i] = r > 0 && ti.numel == ti.whole_numel;
        }
        ckpt_piece p = { 0, 0, n, P };
        ckpt_slices l = { 0 };
        uint64_t bytes = 0;
        uint32_t crc = 0;
        if (rc == 0)
            rc = ckpt_shard_write(fd, part, &p, 1, skip, (uint64_t)r, 64, &l, &bytes, &crc);
        info[2 * r] = (int64_t)bytes;
        info[2 * r + 1] = (int64_t)crc;
        int64_t *t = rc == 0 ? realloc(tab, (ns + l.n) * sizeof(ckpt_slice)) : NULL;
        if (t) {
            memcpy(t + ns * CKPT_SLICE_FIELDS, l.s, l.n * sizeof(ckpt_slice));
            tab = t;
            ns += l.n;
        } else if (rc == 0) {
            rc = WEFT_ENOMEM;
        }
        ckpt_slices_free(&l);
        free(skip);
        weft_model_destroy(part);
        if (fd >= 0)
            close(fd);
    }
    int64_t ishape[2] = { 2, 2 }, sshape[2] = { (int64_t)ns, CKPT_SLICE_FIELDS };
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/dir", dir);
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/files", "rank-00000.bin\nrank-00001.bin\n");
    if (rc == 0)
        rc = weft_ckpt_put_str(man, "shard/vectors", "param\n");
    if (rc == 0)
        rc = weft_ckpt_put_tensor(man, "shard/file_info", WEFT_I64, info, 2, ishape);
    if (rc == 0)
        rc = weft_ckpt_put_tensor(man, "shard/slices", WEFT_I64, tab, 2, sshape);
    free(tab);
    return rc;
}

/* A tp 2 save of a small GPT in a new directory dir (a mkdtemp
 * template), its manifest *man and a whole model *whole to read it into;
 * 0 when all are made. */
static int small_save(char *dir, weft_ckpt **man, weft_model **whole)
{
    weft_model_config cfg;
    *man = NULL;
    *whole = NULL;
    if (!mkdtemp(dir) || weft_model_config_parse("gpt:vocab=30,ctx=8,layers=2,heads=2,dim=8",
                                                 &cfg) != 0 ||
        weft_ckpt_new(man) != 0 || write_parts(dir, &cfg, *man) != 0)
        return -1;
    return weft_model_create(whole, &cfg, 1);
}

/* The files of small_save's dir, and dir. */
static void small_remove(const char *dir)
{
    char path[300];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/rank-%05d.bin", dir, k);
        unlink(path);
    }
    rmdir(dir);
}

/* Written at tp 2, read whole and as tp 2's part 1 (each element from its
 * place); a changed byte fails the slice's CRC, a slice left out fails
 * the coverage. */
TEST(read_parts)
{
    weft_model_config cfg;
    weft_model *whole = NULL, *want = NULL, *part = NULL;
    weft_ckpt *man = NULL;
    char dir[] = "/tmp/weft-test-shard-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(weft_model_config_parse("gpt:vocab=30,ctx=8,layers=2,heads=2,dim=8", &cfg) == 0);
    CHECK(weft_ckpt_new(&man) == 0);
    CHECK(man && write_parts(dir, &cfg, man) == 0);
    CHECK(ckpt_shard_lazy(man));
    CHECK(weft_model_create(&whole, &cfg, 1) == 0 && weft_model_create(&want, &cfg, 7) == 0);
    weft_block_range all = { 0, weft_model_block_count(&cfg) };
    CHECK(weft_model_create_tp(&part, &cfg, 1, &all, 1, 0, NULL, 2, 1) == 0);
    if (!whole || !want || !part || !man)
        return;
    size_t N, n;
    CHECK(weft_ckpt_get_params(man, whole) == 0);
    const float *G = weft_model_params(whole, &N), *W = weft_model_params(want, NULL);
    size_t same = 0, firstbad = N;
    for (size_t i = 0; i < N; i++) {
        same += G[i] == W[i];
        if (G[i] != W[i] && firstbad == N)
            firstbad = i;
    }
    CHECKF(same == N && memcmp(G, W, N * 4) == 0, "%zu of %zu equal, first differing %zu",
           same, N, firstbad);
    /* a part: equal to a part made with the same seed */
    weft_model *ref = NULL;
    CHECK(weft_model_create_tp(&ref, &cfg, 7, &all, 1, 0, NULL, 2, 1) == 0);
    CHECK(ckpt_shard_get_params(man, part) == 0);
    const float *Pp = weft_model_params(part, &n);
    CHECK(ref && memcmp(Pp, weft_model_params(ref, NULL), n * 4) == 0);
    weft_model_destroy(ref);
    uint64_t first = 0;
    CHECK(ckpt_shard_missing(man, "param", 0, N, &first) == 0);
    CHECK(ckpt_shard_extent(man) == N);
    /* a changed byte: its slice's CRC */
    char path[300];
    snprintf(path, sizeof path, "%s/rank-00001.bin", dir);
    int fd = open(path, O_RDWR);
    float x = 12345.0f;
    CHECK(fd >= 0 && pwrite(fd, &x, 4, 8) == 4);
    if (fd >= 0)
        close(fd);
    char zero[512] = { 0 }, why[512];
    CHECK(weft_ckpt_put_blob(man, "shard/error", zero, sizeof zero) == 0);
    CHECK(ckpt_shard_get_params(man, whole) == WEFT_EIO);
    /* the account names the file, the slice and the tensor */
    CHECK(ckpt_shard_error(man, why, sizeof why) == 1);
    CHECK(strstr(why, "rank-00001.bin: slice ") != NULL);
    CHECK(strstr(why, "fails its CRC") != NULL && strstr(why, "reading tensor param/") != NULL);
    /* a slice left out: the elements it held are missing */
    weft_ckpt_entry e;
    CHECK(weft_ckpt_find(man, "shard/slices", &e) == 0);
    int64_t shape[2] = { e.shape[0] - 1, e.shape[1] };
    int64_t *less = malloc(e.nbytes);
    CHECK(less != NULL);
    if (less) {
        memcpy(less, (const int64_t *)e.data + CKPT_SLICE_FIELDS, e.nbytes - 8 * CKPT_SLICE_FIELDS);
        uint64_t gone = (uint64_t)((const int64_t *)e.data)[2];
        CHECK(weft_ckpt_put_tensor(man, "shard/slices", WEFT_I64, less, 2, shape) == 0);
        CHECK(ckpt_shard_missing(man, "param", 0, N, &first) == 1 && first == gone);
        free(less);
    }
    weft_model_destroy(part);
    weft_model_destroy(whole);
    weft_model_destroy(want);
    weft_ckpt_free(man);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/rank-%05d.bin", dir, r);
        unlink(path);
    }
    rmdir(dir);
}

/* A load's records: its time by phase, its window from the manifest's
 * opening (spanning the reads and the CRCs in it; the whole phase is the
 * run's to set from it) and its share of the bytes; none without the
 * records. */
TEST(phases)
{
    weft_model *whole = NULL;
    weft_ckpt *man = NULL;
    char dir[] = "/tmp/weft-test-shard-XXXXXX";
    CHECK(small_save(dir, &man, &whole) == 0);
    if (!whole || !man)
        return;
    double ph[CKPT_PHASES] = { 1 }, none[CKPT_PHASES] = { 0 };
    CHECK(ckpt_shard_phases(man, ph) == WEFT_EINVAL && ph[0] == 0);
    ckpt_shard_phase(man, CKPT_PH_LOAD, 1.0); /* no record: nothing */
    int64_t np = CKPT_PHASES;
    CHECK(weft_ckpt_put_tensor(man, "shard/phase_s", WEFT_F64, none, 1, &np) == 0);
    CHECK(weft_ckpt_put_u64(man, "shard/bytes_need", 0) == 0);
    CHECK(weft_ckpt_put_u64(man, "shard/bytes_read", 0) == 0);
    CHECK(ckpt_shard_since_open(man) == 0); /* no record */
    double t0[1] = { clock_now() };
    int64_t one = 1;
    CHECK(weft_ckpt_put_tensor(man, "shard/t0", WEFT_F64, t0, 1, &one) == 0);
    size_t N;
    weft_model_params(whole, &N);
    CHECK(ckpt_shard_get_params(man, whole) == 0);
    uint64_t need = 0, got = 0;
    CHECK(weft_ckpt_get_u64(man, "shard/bytes_need", &need) == 0 && need == N * 4);
    CHECK(weft_ckpt_get_u64(man, "shard/bytes_read", &got) == 0 && got >= N * 4);
    CHECK(ckpt_shard_phases(man, ph) == 0);
    double window = ckpt_shard_since_open(man);
    CHECKF(ph[CKPT_PH_READ] > 0 && ph[CKPT_PH_CRC] > 0 &&
           window >= ph[CKPT_PH_READ] + ph[CKPT_PH_CRC] && ph[CKPT_PH_LOAD] == 0 &&
           ph[CKPT_PH_OPEN] == 0 && ph[CKPT_PH_GATHER] == 0, "window %g read %g crc %g",
           window, ph[CKPT_PH_READ], ph[CKPT_PH_CRC]);
    ckpt_shard_phase(man, CKPT_PH_OPEN, 0.5);
    ckpt_shard_phase(man, CKPT_PHASES, 9.0); /* no such phase: nothing */
    double again[CKPT_PHASES];
    CHECK(ckpt_shard_phases(man, again) == 0 && again[CKPT_PH_OPEN] == 0.5 &&
          again[CKPT_PH_LOAD] == ph[CKPT_PH_LOAD]);
    weft_model_destroy(whole);
    weft_ckpt_free(man);
    small_remove(dir);
}

/* A ZeRO rank's own parameters, read with its optimiser ranges: only
 * while marked pending, each range's parameters into the model (nothing
 * else of it written); the finish (one rank: nothing to gather) marks
 * the load done once, and refuses a load not pending. */
TEST(own_params)
{
    weft_model *whole = NULL, *m = NULL;
    weft_ckpt *man = NULL;
    weft_zero *z = NULL;
    char dir[] = "/tmp/weft-test-shard-XXXXXX";
    CHECK(small_save(dir, &man, &whole) == 0);
    if (!whole || !man)
        return;
    weft_model_config cfg = *weft_model_config_of(whole);
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_SGD);
    /* the optimiser's one state saved as a second vector with the
     * parameters' values: each slice again, as that vector's */
    weft_optim *any = NULL;
    const char *sname = "?";
    CHECK(weft_optim_create(&any, &oc, 0, 1) == 0 && any);
    if (any)
        weft_optim_state(any, 0, &sname);
    char vecs[128];
    snprintf(vecs, sizeof vecs, "param\n%s\n", sname);
    weft_optim_destroy(any);
    weft_ckpt_entry e;
    CHECK(weft_ckpt_find(man, "shard/slices", &e) == 0 && e.ndim == 2);
    int64_t rows = e.shape[0], shape[2] = { 2 * rows, CKPT_SLICE_FIELDS };
    int64_t *two = malloc((size_t)(2 * rows) * CKPT_SLICE_FIELDS * sizeof *two);
    CHECK(two != NULL);
    if (two) {
        memcpy(two, e.data, (size_t)rows * CKPT_SLICE_FIELDS * sizeof *two);
        memcpy(two + rows * CKPT_SLICE_FIELDS, e.data,
               (size_t)rows * CKPT_SLICE_FIELDS * sizeof *two);
        for (int64_t k = rows; k < 2 * rows; k++)
            two[k * CKPT_SLICE_FIELDS + 1] = 1;
        CHECK(weft_ckpt_put_tensor(man, "shard/slices", WEFT_I64, two, 2, shape) == 0);
        free(two);
    }
    CHECK(weft_ckpt_put_str(man, "shard/vectors", vecs) == 0);
    CHECK(weft_ckpt_put_u64(man, "shard/own_params", 0) == 0);
    CHECK(train_ckpt_put_optim_config(man, &oc, 3) == 0);
    CHECK(ckpt_shard_own_params(man) == CKPT_OWN_NONE);
    CHECK(ckpt_shard_zero_model(&cfg, &m) == 0);
    if (!m) {
        weft_model_destroy(whole);
        weft_ckpt_free(man);
        return;
    }
    size_t N;
    float *P = weft_model_params(m, &N);
    const float *W = weft_model_params(whole, NULL);
    CHECK(ckpt_shard_get_params(man, whole) == 0);
    memset(P, 0x7f, N * sizeof *P);
    size_t lo = N / 3, n = N / 3;
    weft_optim *o = NULL;
    /* not marked: the optimiser's range alone */
    CHECK(ckpt_shard_get_optim_stage(man, m, lo, n, &o) == 0 && o);
    weft_optim_destroy(o);
    CHECK(P[lo] != W[lo]);
    ckpt_shard_own_params_set(man, CKPT_OWN_PENDING);
    CHECK(ckpt_shard_own_params(man) == CKPT_OWN_PENDING);
    /* marked: the range's optimiser made, its state and parameters left
     * to the finish, which has the buckets */
    CHECK(ckpt_shard_get_optim_stage(man, m, lo, n, &o) == 0 && o);
    CHECK(o && weft_optim_steps(o) == 3);
    weft_optim_destroy(o);
    float fill;
    memset(&fill, 0x7f, sizeof fill);
    CHECK(P[lo] == fill && P[lo + n - 1] == fill);
    /* one process: its one bucket is all its own, read whole */
    CHECK(weft_zero_create(&z, NULL, m, &oc, 1, 0) == 0);
    CHECK(z && weft_zero_load_optim(z, man) == 0);
    CHECK(ckpt_shard_zero_finish(z, man) == 0);
    CHECK(memcmp(P, W, N * sizeof *P) == 0);
    const float *st = z ? train_zero_state_at(z, 0, lo) : NULL;
    CHECK(st && memcmp(st, W + lo, n * sizeof *P) == 0);
    CHECK(ckpt_shard_own_params(man) == CKPT_OWN_DONE);
    ckpt_shard_own_params_set(man, CKPT_OWN_PENDING); /* states only go up */
    CHECK(ckpt_shard_zero_finish(z, man) == WEFT_EINVAL);
    weft_zero_destroy(z);
    weft_model_destroy(m);
    weft_model_destroy(whole);
    weft_ckpt_free(man);
    small_remove(dir);
}

/* Asking ahead for a file that is gone records nothing: the read that
 * follows fails and its account names the tensor it was for. */
TEST(prefetch_quiet)
{
    weft_model *whole = NULL;
    weft_ckpt *man = NULL;
    char dir[] = "/tmp/weft-test-shard-XXXXXX", path[300], moved[320];
    CHECK(small_save(dir, &man, &whole) == 0);
    if (!whole || !man)
        return;
    size_t N;
    weft_model_params(whole, &N);
    snprintf(path, sizeof path, "%s/rank-00001.bin", dir);
    snprintf(moved, sizeof moved, "%s/moved.bin", dir);
    CHECK(rename(path, moved) == 0);
    /* the record the readers keep their account in, as a load makes it */
    char zero[512] = { 0 };
    CHECK(weft_ckpt_put_blob(man, "shard/error", zero, sizeof zero) == 0);
    ckpt_shard_reader *r = NULL;
    CHECK(ckpt_shard_reader_open(man, &r) == 0);
    char why[512];
    if (r) {
        ckpt_shard_prefetch(r, ckpt_shard_reader_vector(r, "param"), 0, N);
        CHECK(ckpt_shard_error(man, why, sizeof why) == 0);
        ckpt_shard_reader_close(r);
    }
    /* a whole file asked for, gone or not in the save: no account either */
    ckpt_shard_prefetch_file(man, "rank-00001.bin");
    ckpt_shard_prefetch_file(man, "rank-00009.bin");
    ckpt_shard_prefetch_file(man, "rank-00000.bin");
    CHECK(ckpt_shard_error(man, why, sizeof why) == 0);
    CHECK(ckpt_shard_get_params(man, whole) != 0);
    CHECK(ckpt_shard_error(man, why, sizeof why) == 1);
    CHECKF(strstr(why, "rank-00001.bin") != NULL && strstr(why, "reading tensor param/") != NULL,
           "%s", why);
    /* back in place: the same reads succeed */
    CHECK(rename(moved, path) == 0);
    CHECK(weft_ckpt_put_blob(man, "shard/error", zero, sizeof zero) == 0);
    CHECK(ckpt_shard_get_params(man, whole) == 0);
    weft_model_destroy(whole);
    weft_ckpt_free(man);
    small_remove(dir);
}
