/* safetensors reading and writing. The header is checked whole at open
 * (dtypes, shapes, offsets against the file's size, no two tensors' bytes
 * overlapping), so a read later can only fail on I/O. */
#include "train/safetensors.h"
#include "core/errmsg.h"

#include "core/half.h"
#include "core/json.h"
#include "train/data_file.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    int size;
} dtypes[ST_DTYPE_COUNT] = {
    { "BOOL", 1 }, { "U8", 1 },  { "I8", 1 },   { "F8_E5M2", 1 }, { "F8_E4M3", 1 },
    { "I16", 2 },  { "U16", 2 }, { "F16", 2 },  { "BF16", 2 },    { "I32", 4 },
    { "U32", 4 },  { "F32", 4 }, { "F64", 8 },  { "I64", 8 },     { "U64", 8 },
};

const char *st_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < ST_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

int st_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < ST_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

int st_dtype_find(const char *name)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return i;
    return -1;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    free(f->path);
    free(f);
}

/* One header entry into t; the header's text starts at byte 8. */
static int read_entry(st_file *f, const char *key, const json_value *v, st_tensor *t,
                      char *err, size_t cap)
{
    const json_value *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"),
                     *off = json_get(v, "data_offsets");
    size_t at = 8 + v->offset;
    if (v->type != JSON_OBJ || !dt || dt->type != JSON_STR || !sh || sh->type != JSON_ARR ||
        !off || off->type != JSON_ARR || off->n != 2)
        return errmsg(err, cap, WEFT_EIO,
                      "%s: offset %zu: tensor \"%s\" needs dtype, shape and data_offsets [begin, "
                      "end]", f->path, at, key);
    if ((t->dtype = st_dtype_find(dt->str)) < 0)
        return errmsg(err, cap, WEFT_EIO, "%s: offset %zu: tensor \"%s\" has unknown dtype \"%s\"",
                      f->path, 8 + dt->offset, key, dt->str);
    if (sh->n > ST_MAX_DIMS)
        return errmsg(err, cap, WEFT_EIO, "%s: offset %zu: tensor \"%s\" has %zu dimensions "
                      "(at most %d)", f->path, 8 + sh->offset, key, sh->n, ST_MAX_DIMS);
    t->ndim = (int)sh->n;
    t->numel = 1;
    for (size_t d = 0; d < sh->n; d++) {
        long long x;
        if (json_int(&sh->items[d], 0, 1LL << 40, &x) != 0)
            return errmsg(err, cap, WEFT_EIO, "%s: offset %zu: tensor \"%s\": bad dimension",
                          f->path, 8 + sh->items[d].offset, key);
        t->shape[d] = x;
        if (x && t->numel > (SIZE_MAX >> 4) / (size_t)x)
            return errmsg(err, cap, WEFT_EIO, "%s: tensor \"%s\" is too large", f->path, key);
        t->numel *= (size_t)x;
    }
    long long b, e;
    if (json_int(&off->items[0], 0, 1LL << 52, &b) || json_int(&off->items[1], 0, 1LL << 52, &e))
        return errmsg(err, cap, WEFT_EIO, "%s: offset %zu: tensor \"%s\": bad data_offsets",
                      f->path, 8 + off->offset, key);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (b > e || (uint64_t)e > f->data_size)
        return errmsg(err, cap, WEFT_EIO,
                      "%s: tensor \"%s\": data_offsets [%lld, %lld] outside the %llu data bytes "
                      "the file holds", f->path, key, b, e, (unsigned long long)f->data_size);
    if ((uint64_t)(e - b) != (uint64_t)t->numel * (uint64_t)st_dtype_size(t->dtype))
        return errmsg(err, cap, WEFT_EIO,
                      "%s: tensor \"%s\": data_offsets span %lld bytes, its shape and dtype %s "
                      "need %llu", f->path, key, e - b, dt->str,
                      (unsigned long long)t->numel * (unsigned long long)st_dtype_size(t->dtype));
    if (!(t->name = strdup(key)))
        return WEFT_ENOMEM;
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* Every tensor's bytes apart from every other's (empty ones aside). */
static int check_overlap(const st_file *f, char *err, size_t cap)
{
    st_tensor *s = malloc((size_t)(f->n ? f->n : 1) * sizeof *s);
    if (!s)
        return WEFT_ENOMEM;
    memcpy(s, f->t, (size_t)f->n * sizeof *s);
    qsort(s, (size_t)f->n, sizeof *s, by_begin);
    int rc = 0;
    uint64_t end = 0;
    const char *last = NULL;
    for (int i = 0; i < f->n && rc == 0; i++) {
        if (s[i].begin == s[i].end)
            continue;
        if (last && s[i].begin < end)
            rc = errmsg(err, cap, WEFT_EIO, "%s: tensors \"%s\" and \"%s\" overlap in the data",
                        f->path, last, s[i].name);
        end = s[i].end;
        last = s[i].name;
    }
    free(s);
    return rc;
}

static int read_header(st_file *f, const json_value *h, char *err, size_t cap)
{
    if (h->type != JSON_OBJ)
        return errmsg(err, cap, WEFT_EIO, "%s: the header is not a JSON object", f->path);
    if (!(f->t = calloc(h->n ? h->n : 1, sizeof *f->t)))
        return WEFT_ENOMEM;
    for (size_t i = 0; i < h->n; i++) {
        const json_value *v = &h->items[i];
        if (strcmp(h->keys[i], "__metadata__") == 0) {
            for (size_t k = 0; v->type == JSON_OBJ && k < v->n; k++)
                if (v->items[k].type != JSON_STR)
                    return errmsg(err, cap, WEFT_EIO, "%s: offset %zu: __metadata__ values must "
                                  "be strings", f->path, 8 + v->items[k].offset);
            if (v->type != JSON_OBJ)
                return errmsg(err, cap, WEFT_EIO, "%s: __metadata__ is not an object", f->path);
            continue;
        }
        int rc = read_entry(f, h->keys[i], v, &f->t[f->n], err, cap);
        if (rc)
            return rc;
        f->n++;
    }
    return check_overlap(f, err, cap);
}

/* The 8-byte length and the header's text, checked against the size. */
static int load_header(st_file *f, uint64_t size, char **text, uint64_t *len, char *err,
                       size_t cap)
{
    unsigned char b[8];
    if (size < 8 || train_pread_all(f->fd, b, 8, 0) != 0)
        return errmsg(err, cap, WEFT_EIO, "%s: %llu bytes, too short for a safetensors header",
                      f->path, (unsigned long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    if (n < 2 || n > ST_MAX_HEADER || n > size - 8)
        return errmsg(err, cap, WEFT_EIO,
                      "%s: header length %llu is impossible (the file has %llu bytes after the "
                      "length, the limit is %u)", f->path, (unsigned long long)n,
                      (unsigned long long)(size - 8), ST_MAX_HEADER);
    if (!(*text = malloc((size_t)n)))
        return WEFT_ENOMEM;
    if (train_pread_all(f->fd, *text, (size_t)n, 8) != 0)
        return errmsg(err, cap, WEFT_EIO, "%s: cannot read the header", f->path);
    *len = n;
    return 0;
}

int st_open(st_file **out, const char *path, char *err, size_t cap)
{
    if (!out || !path)
        return WEFT_EINVAL;
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return WEFT_ENOMEM;
    }
    f->fd = train_open_regular(path, O_RDONLY, 0);
    struct stat sb;
    if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
        st_close(f);
        return errmsg(err, cap, WEFT_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    char *text = NULL, jerr[256];
    uint64_t n = 0;
    json_value *h = NULL;
    int rc = load_header(f, (uint64_t)sb.st_size, &text, &n, err, cap);
    if (rc == 0) {
        f->data_start = 8 + n;
        f->data_size = (uint64_t)sb.st_size - 8 - n;
        /* safetensors pads the header with spaces; JSON allows them */
        rc = json_parse(text, (size_t)n, &h, jerr, sizeof jerr);
        if (rc == WEFT_EINVAL)
            rc = errmsg(err, cap, WEFT_EIO, "%s: header (from byte 8): %s", path, jerr);
    }
    if (rc == 0)
        rc = read_header(f, h, err, cap);
    json_free(h);
    free(text);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int st_find(const st_file *f, const char *name)
{
    for (int i = 0; f && name && i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return i;
    return -1;
}

static void convert(int dtype, const unsigned char *src, float *dst, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        const unsigned char *p = src + k * (size_t)st_dtype_size(dtype);
        if (dtype == ST_F32) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            dst[k] = half_bits_f32(u);
        } else if (dtype == ST_F64) {
            uint64_t u = 0;
            for (int i = 7; i >= 0; i--)
                u = u << 8 | p[i];
            double d;
            memcpy(&d, &u, sizeof d);
            dst[k] = (float)d;
        } else {
            uint16_t h = (uint16_t)(p[0] | p[1] << 8);
            dst[k] = dtype == ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
    }
}

int st_read(const st_file *f, int i, size_t first, size_t count, float *out, char *err,
            size_t cap)
{
    if (!f || i < 0 || i >= f->n || (count && !out))
        return WEFT_EINVAL;
    const st_tensor *t = &f->t[i];
    if (first > t->numel || count > t->numel - first)
        return errmsg(err, cap, WEFT_EINVAL, "%s: \"%s\": elements [%zu, %zu) outside its %zu",
                   f->path, t->name, first, first + count, t->numel);
    int dt = t->dtype;
    if (dt != ST_F32 && dt != ST_F16 && dt != ST_BF16 && dt != ST_F64)
        return errmsg(err, cap, WEFT_ENOTSUP, "%s: \"%s\" is %s; weights are read from F32, F16, "
                      "BF16 or F64", f->path, t->name, st_dtype_name(dt));
    size_t es = (size_t)st_dtype_size(dt), chunk = 1u << 16;
    unsigned char *buf = malloc((count < chunk ? count : chunk) * es + 1);
    if (!buf)
        return WEFT_ENOMEM;
    int rc = 0;
    for (size_t k = 0; k < count && rc == 0; k += chunk) {
        size_t n = count - k < chunk ? count - k : chunk;
        uint64_t at = f->data_start + t->begin + (uint64_t)(first + k) * es;
        rc = train_pread_all(f->fd, buf, n * es, at);
        if (rc)
            rc = errmsg(err, cap, WEFT_EIO, "%s: \"%s\": cannot read bytes at %llu (truncated?)",
                        f->path, t->name, (unsigned long long)at);
        else
            convert(dt, buf, out + k, n);
    }
    free(buf);
    return rc;
}

/* ---- writing ---------------------------------------------------------------- */

struct st_writer {
    FILE *f;
    char *path, *tmp;
    int dtype, n, cur;
    size_t *numel;
    size_t done; /* elements of tensor cur written */
    int rc;
};

/* The header's JSON, padded with spaces to a multiple of 8 bytes so that
 * the data starts aligned (as safetensors' own writer does). */
static char *make_header(const st_spec *specs, int n, int dtype, size_t *numel, size_t *len)
{
    size_t cap = 256, used;
    char *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        used = 0;
        uint64_t off = 0;
        #define PUT(...) do { int k_ = snprintf(buf ? buf + used : NULL, buf ? cap - used : 0, \
                                                __VA_ARGS__); used += (size_t)(k_ > 0 ? k_ : 0); } while (0)
        PUT("{");
        for (int i = 0; i < n; i++) {
            size_t nl = 0;
            json_put_str(buf ? buf + used : NULL, buf ? cap - used : 0, &nl, specs[i].name);
            used += nl;
            PUT(":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(dtype));
            size_t ne = 1;
            for (int d = 0; d < specs[i].ndim; d++) {
                PUT("%s%lld", d ? "," : "", (long long)specs[i].shape[d]);
                ne *= (size_t)specs[i].shape[d];
            }
            numel[i] = ne;
            uint64_t end = off + (uint64_t)ne * (uint64_t)st_dtype_size(dtype);
            PUT("],\"data_offsets\":[%llu,%llu]}%s", (unsigned long long)off,
                (unsigned long long)end, i + 1 < n ? "," : "");
            off = end;
        }
        PUT(",\"__metadata__\":{\"format\":\"pt\"}}");
        #undef PUT
        while (used % 8)
            used++;
        if (buf)
            break;
        cap = used + 8;
        if (!(buf = malloc(cap)))
            return NULL;
    }
    size_t text = strlen(buf);
    memset(buf + text, ' ', used - text);
    *len = used;
    return buf;
}

int st_writer_open(st_writer **out, const char *path, const st_spec *specs, int n, int dtype,
                   char *err, size_t cap)
{
    if (!out || !path || n < 0 || (n && !specs) ||
        (dtype != ST_F32 && dtype != ST_F16 && dtype != ST_BF16))
        return WEFT_EINVAL;
    *out = NULL;
    for (int i = 0; i < n; i++)
        if (!specs[i].name || specs[i].ndim < 0 || specs[i].ndim > ST_MAX_DIMS)
            return WEFT_EINVAL;
    st_writer *w = calloc(1, sizeof *w);
    size_t len = 0, plen = strlen(path);
    char *hdr = NULL;
    if (w && (w->numel = calloc((size_t)n + 1, sizeof *w->numel)) &&
        (w->path = strdup(path)) && (w->tmp = malloc(plen + 8)))
        hdr = make_header(specs, n, dtype, w->numel, &len);
    if (!hdr) {
        if (w) {
            free(w->numel);
            free(w->path);
            free(w->tmp);
        }
        free(w);
        return WEFT_ENOMEM;
    }
    snprintf(w->tmp, plen + 8, "%s.tmp", path);
    w->dtype = dtype;
    w->n = n;
    int fd = train_open_regular(w->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    w->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)((uint64_t)len >> (8 * i));
    int rc = w->f && fwrite(lb, 1, 8, w->f) == 8 && fwrite(hdr, 1, len, w->f) == len ? 0 : WEFT_EIO;
    free(hdr);
    if (fd >= 0 && !w->f)
        close(fd);
    if (rc) {
        w->rc = errmsg(err, cap, WEFT_EIO, "%s: cannot write: %s", w->tmp, strerror(errno));
        st_writer_close(w, NULL, 0);
        return rc;
    }
    while (w->cur < w->n && w->numel[w->cur] == 0)
        w->cur++;
    *out = w;
    return 0;
}

int st_writer_put(st_writer *w, const float *x, size_t count)
{
    if (!w || (count && !x))
        return WEFT_EINVAL;
    if (w->rc)
        return w->rc;
    unsigned char buf[4096];
    size_t es = (size_t)st_dtype_size(w->dtype), per = sizeof buf / es;
    while (count > 0) {
        if (w->cur >= w->n)
            return w->rc = WEFT_EINVAL; /* more elements than the tensors hold */
        size_t left = w->numel[w->cur] - w->done, k = count < per ? count : per;
        k = k < left ? k : left;
        for (size_t e = 0; e < k; e++) {
            uint32_t u = w->dtype == ST_F32 ? half_f32_bits(x[e])
                         : w->dtype == ST_F16 ? f32_to_f16(x[e]) : f32_to_bf16(x[e]);
            for (size_t b = 0; b < es; b++)
                buf[e * es + b] = (unsigned char)(u >> (8 * b));
        }
        if (fwrite(buf, es, k, w->f) != k)
            return w->rc = WEFT_EIO;
        x += k;
        count -= k;
        if ((w->done += k) == w->numel[w->cur]) {
            w->done = 0;
            do
                w->cur++;
            while (w->cur < w->n && w->numel[w->cur] == 0);
        }
    }
    return 0;
}

int st_writer_close(st_writer *w, char *err, size_t cap)
{
    if (!w)
        return WEFT_EINVAL;
    int rc = w->rc;
    if (rc == 0 && w->cur < w->n)
        rc = errmsg(err, cap, WEFT_EINVAL, "%s: closed after %d of %d tensors", w->path, w->cur,
                    w->n);
    if (w->f && fclose(w->f) != 0 && rc == 0)
        rc = errmsg(err, cap, WEFT_EIO, "%s: cannot write: %s", w->tmp, strerror(errno));
    if (rc == 0 && rename(w->tmp, w->path) != 0)
        rc = errmsg(err, cap, WEFT_EIO, "%s: cannot rename to %s: %s", w->tmp, w->path,
                    strerror(errno));
    if (rc && w->rc && err && cap && !err[0])
        errmsg(err, cap, rc, "%s: cannot write", w->path);
    if (rc)
        unlink(w->tmp);
    free(w->numel);
    free(w->path);
    free(w->tmp);
    free(w);
    return rc;
}

/* ---- sets of shards ----------------------------------------------------------- */

void st_set_close(st_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        st_close(s->files[i]);
    free(s->files);
    free(s);
}

int st_set_find(const st_set *s, const char *name, const st_file **f)
{
    for (int i = 0; s && i < s->n; i++) {
        int k = st_find(s->files[i], name);
        if (k >= 0) {
            *f = s->files[i];
            return k;
        }
    }
    return -1;
}

/* The shard called file (opened once however many tensors name it). */
static int set_shard(st_set *s, const char *dir, const char *file, st_file **out, char *err,
                     size_t cap)
{
    char path[4096];
    if (strchr(file, '/') || snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return errmsg(err, cap, WEFT_EIO, "%s: bad shard name \"%s\" in the index", dir, file);
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->files[i]->path, path) == 0)
            return (*out = s->files[i], 0);
    st_file **nf = realloc(s->files, (size_t)(s->n + 1) * sizeof *nf);
    if (!nf)
        return WEFT_ENOMEM;
    s->files = nf;
    int rc = st_open(out, path, err, cap);
    if (rc == 0)
        s->files[s->n++] = *out;
    return rc;
}

static int set_index(st_set *s, const char *dir, const char *path, char *err, size_t cap)
{
    unsigned char *text = NULL;
    size_t len = 0;
    json_value *v = NULL;
    char jerr[256];
    int rc = train_data_read_file(path, &text, &len);
    if (rc)
        return errmsg(err, cap, WEFT_EIO, "%s: neither model.safetensors nor a readable "
                      "model.safetensors.index.json", dir);
    rc = json_parse((const char *)text, len, &v, jerr, sizeof jerr);
    free(text);
    if (rc)
        return errmsg(err, cap, WEFT_EIO, "%s: %s", path, jerr);
    const json_value *map = json_get(v, "weight_map");
    if (!map || map->type != JSON_OBJ)
        rc = errmsg(err, cap, WEFT_EIO, "%s: no weight_map object", path);
    for (size_t i = 0; rc == 0 && i < map->n; i++) {
        st_file *f;
        if (map->items[i].type != JSON_STR)
            rc = errmsg(err, cap, WEFT_EIO, "%s: weight_map[\"%s\"] is not a file name", path,
                        map->keys[i]);
        else if ((rc = set_shard(s, dir, map->items[i].str, &f, err, cap)) == 0 &&
                 st_find(f, map->keys[i]) < 0)
            rc = errmsg(err, cap, WEFT_EIO, "%s: \"%s\" is not in %s, where weight_map puts it",
                        path, map->keys[i], map->items[i].str);
    }
    json_free(v);
    return rc;
}

int st_set_open(st_set **out, const char *dir, char *err, size_t cap)
{
    if (!out || !dir)
        return WEFT_EINVAL;
    *out = NULL;
    st_set *s = calloc(1, sizeof *s);
    if (!s)
        return WEFT_ENOMEM;
    char path[4096];
    int rc;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (train_data_file_exists(path)) {
        st_file *f;
        rc = set_shard(s, dir, "model.safetensors", &f, err, cap);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        rc = set_index(s, dir, path, err, cap);
    }
    if (rc) {
        st_set_close(s);
        return rc;
    }
    *out = s;
    return 0;
}
