/* Names of errors, dtypes, ops and collectives, and parsers for the names
 * a user may type (environment variables, command lines). The algorithms'
 * names are their table's (coll/algo_names.c). */
#include "core/names.h"

#include <strings.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *weft_strerror(int err)
{
    static const char *const msgs[] = {
        "success",
        "invalid argument",
        "out of memory",
        "system call failed",
        "timed out",
        "peer closed the connection or died",
        "protocol error",
        "peers disagree on the collective or count",
        "missing or contradictory configuration",
        "communicator aborted",
        "not supported",
        "peer failed to prove the job secret",
        "file I/O failed or file malformed",
    };
    if (err > 0 || (size_t)-err >= COUNT(msgs))
        return "unknown error";
    return msgs[-err];
}

const char *weft_version(void)
{
    return WEFT_VERSION_STRING;
}

static const struct {
    const char *name;
    size_t size;
} dtypes[WEFT_DTYPE_COUNT] = {
    [WEFT_F32] = { "f32", 4 },  [WEFT_F64] = { "f64", 8 },
    [WEFT_F16] = { "f16", 2 },  [WEFT_BF16] = { "bf16", 2 },
    [WEFT_I8] = { "i8", 1 },    [WEFT_U8] = { "u8", 1 },
    [WEFT_I32] = { "i32", 4 },  [WEFT_I64] = { "i64", 8 },
};

size_t weft_dtype_size(weft_dtype t)
{
    return (unsigned)t < WEFT_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *weft_dtype_name(weft_dtype t)
{
    return (unsigned)t < WEFT_DTYPE_COUNT ? dtypes[t].name : NULL;
}

static const char *const op_names[WEFT_OP_COUNT] = {
    [WEFT_SUM] = "sum", [WEFT_PROD] = "prod", [WEFT_MIN] = "min",
    [WEFT_MAX] = "max", [WEFT_AVG] = "avg",
};

const char *weft_op_name(weft_op op)
{
    return (unsigned)op < WEFT_OP_COUNT ? op_names[op] : NULL;
}

static const char *const coll_names[WEFT_COLL_KIND_COUNT] = {
    [WEFT_COLL_SEND] = "send",           [WEFT_COLL_RECV] = "recv",
    [WEFT_COLL_BARRIER] = "barrier",     [WEFT_COLL_BROADCAST] = "broadcast",
    [WEFT_COLL_REDUCE] = "reduce",       [WEFT_COLL_ALLREDUCE] = "allreduce",
    [WEFT_COLL_GATHER] = "gather",       [WEFT_COLL_SCATTER] = "scatter",
    [WEFT_COLL_ALLGATHER] = "allgather",
    [WEFT_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [WEFT_COLL_ALLTOALL] = "alltoall",
};

const char *weft_coll_name(weft_coll_kind k)
{
    return (unsigned)k < WEFT_COLL_KIND_COUNT ? coll_names[k] : NULL;
}

/* Other spellings: the value is the enum, the canonical names come from
 * the tables above. */
static const names_alias dtype_aliases[] = {
    { "float", WEFT_F32 },    { "float32", WEFT_F32 }, { "fp32", WEFT_F32 },
    { "double", WEFT_F64 },   { "float64", WEFT_F64 }, { "fp64", WEFT_F64 },
    { "half", WEFT_F16 },     { "float16", WEFT_F16 }, { "fp16", WEFT_F16 },
    { "bfloat16", WEFT_BF16 },
    { "int8", WEFT_I8 },      { "char", WEFT_I8 },
    { "uint8", WEFT_U8 },     { "byte", WEFT_U8 },
    { "int32", WEFT_I32 },    { "int", WEFT_I32 },
    { "int64", WEFT_I64 },    { "long", WEFT_I64 },
};

static const names_alias op_aliases[] = {
    { "product", WEFT_PROD }, { "mean", WEFT_AVG }, { "average", WEFT_AVG },
};

int names_parse(const char *s, const char *const *names, int n, const names_alias *al,
                size_t nal, int *out)
{
    if (!s || !out)
        return WEFT_EINVAL;
    for (int i = 0; i < n; i++)
        if (names[i] && strcasecmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    for (size_t i = 0; i < nal; i++)
        if (al[i].name && strcasecmp(s, al[i].name) == 0) {
            *out = al[i].value;
            return 0;
        }
    return WEFT_EINVAL;
}

int weft_dtype_parse(const char *s, weft_dtype *out)
{
    const char *names[WEFT_DTYPE_COUNT];
    for (int i = 0; i < WEFT_DTYPE_COUNT; i++)
        names[i] = dtypes[i].name;
    int v, rc = names_parse(s, names, WEFT_DTYPE_COUNT, dtype_aliases,
                            COUNT(dtype_aliases), &v);
    if (rc == 0 && out)
        *out = (weft_dtype)v;
    return out ? rc : WEFT_EINVAL;
}

int weft_op_parse(const char *s, weft_op *out)
{
    int v, rc = names_parse(s, op_names, WEFT_OP_COUNT, op_aliases,
                            COUNT(op_aliases), &v);
    if (rc == 0 && out)
        *out = (weft_op)v;
    return out ? rc : WEFT_EINVAL;
}
