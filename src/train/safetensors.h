/* safetensors files (the format of Hugging Face's model.safetensors): an
 * 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and [begin, end) byte offsets into the data that follows,
 * and an optional "__metadata__" object of strings. Reading validates the
 * whole header against the file before any tensor is read, then reads
 * any element range of a tensor with pread, as float; writing streams
 * tensor by tensor, since the offsets follow from the shapes up front. A
 * set is a directory's model.safetensors, or the shards its
 * model.safetensors.index.json names. */
#ifndef WEFT_TRAIN_SAFETENSORS_H
#define WEFT_TRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
/* A header longer than this is refused (safetensors' own limit). */
#define ST_MAX_HEADER (100u << 20)

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_DTYPE_COUNT
} st_dtype;

const char *st_dtype_name(int dtype);
int st_dtype_size(int dtype);
/* The dtype called name ("F32", "BF16", ...), or -1. */
int st_dtype_find(const char *name);

typedef struct {
    char *name;
    int dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    uint64_t begin, end; /* bytes, from the start of the data */
} st_tensor;

typedef struct {
    int fd;
    char *path;
    uint64_t data_start, data_size;
    int n;
    st_tensor *t;
} st_file;

/* WEFT_EIO (with why, naming path and the byte offset, in err) for a file
 * that is no valid safetensors file, WEFT_ENOMEM. */
int st_open(st_file **out, const char *path, char *err, size_t cap);
void st_close(st_file *f);
/* Index of the tensor called name, or -1. */
int st_find(const st_file *f, const char *name);
/* Elements [first, first + count) of tensor i (row-major) into out, as
 * float: F32, F16, BF16 and F64 are read; other dtypes are WEFT_ENOTSUP. */
int st_read(const st_file *f, int i, size_t first, size_t count, float *out, char *err,
            size_t cap);

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_spec;
typedef struct st_writer st_writer;
/* A file of these tensors, in this order, all of dtype (F32, F16 or BF16),
 * written to path once st_writer_close has seen every element (to a
 * temporary name until then). */
int st_writer_open(st_writer **out, const char *path, const st_spec *specs, int n, int dtype,
                   char *err, size_t cap);
/* The next count elements, continuing where the last call stopped (a
 * tensor may come in pieces, or several in one call). */
int st_writer_put(st_writer *w, const float *x, size_t count);
/* Finishes the file (an error, or a missing element, removes it) and
 * frees w. */
int st_writer_close(st_writer *w, char *err, size_t cap);

/* One or more files read as one. */
typedef struct {
    int n;
    st_file **files;
} st_set;
/* dir/model.safetensors, else the shards of dir/model.safetensors.index.json
 * (each tensor of its weight_map must be in the file it names). */
int st_set_open(st_set **out, const char *dir, char *err, size_t cap);
void st_set_close(st_set *s);
/* The file holding the tensor called name and its index there, or -1. */
int st_set_find(const st_set *s, const char *name, const st_file **f);

#endif
