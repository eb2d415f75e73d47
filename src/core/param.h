/* The parameter table: every WEFT_* variable the library reads, declared
 * once in core/param_table.h with its type, default and doc.
 *
 * A param_set holds one value of each, with where it came from. It is
 * filled once (param_load: defaults, then the environment) by whoever owns
 * a handle — a communicator keeps its own, a parameter server its own — and
 * read from there, so nothing parses a variable twice or per call, and
 * there is no process-wide copy. A bad value is an error naming the
 * variable and what it accepts, never the default in disguise.
 *
 * Code with no handle to hang a set on (a transport's setup, the store,
 * tools) reads one entry with param_read_*: the same names, aliases,
 * default and checks. */
#ifndef WEFT_CORE_PARAM_H
#define WEFT_CORE_PARAM_H

#include <stddef.h>

#include "weft.h"

/* Longest string value, terminator included. */
#define PARAM_STR_MAX 1024

enum { PARAM_SECRET = 1 << 0, PARAM_BYTES = 1 << 1, PARAM_ABOVE = 1 << 2 };

typedef enum { PARAM_T_INT, PARAM_T_DBL, PARAM_T_STR, PARAM_T_ENUM, PARAM_T_ALGO } param_type;

typedef enum {
    PARAM_SRC_DEFAULT = 0, /* nothing set it */
    PARAM_SRC_ENV,         /* the environment: its name or an alias */
    PARAM_SRC_CONFIG       /* a weft_config (or other caller) said so */
} param_source;

typedef enum {
#define PARAM_INT(f, ...) PARAM_##f,
#define PARAM_DBL(f, ...) PARAM_##f,
#define PARAM_STR(f, ...) PARAM_##f,
#define PARAM_ENUM(f, ...) PARAM_##f,
#define PARAM_ALGO(f, ...) PARAM_##f,
#include "core/param_table.h"
#undef PARAM_INT
#undef PARAM_DBL
#undef PARAM_STR
#undef PARAM_ENUM
#undef PARAM_ALGO
    PARAM_COUNT
} param_id;

typedef struct param_set {
#define PARAM_INT(f, ...) int f;
#define PARAM_DBL(f, ...) double f;
#define PARAM_STR(f, ...) char f[PARAM_STR_MAX];
#define PARAM_ENUM(f, ...) int f;
#define PARAM_ALGO(f, ...) weft_algo f;
#include "core/param_table.h"
#undef PARAM_INT
#undef PARAM_DBL
#undef PARAM_STR
#undef PARAM_ENUM
#undef PARAM_ALGO
    unsigned char src[PARAM_COUNT]; /* param_source of each */
    signed char via[PARAM_COUNT];   /* the alias that set it (index); -1: its own name */
} param_set;

/* One row of the table. */
typedef struct {
    const char *name;
    const char *aliases; /* comma-separated, "" for none */
    const char *dflt;    /* as text */
    const char *words;   /* PARAM_T_ENUM: "a|b|c" */
    const char *(*check)(const char *v); /* PARAM_T_STR: NULL or a validator */
    const char *doc;
    param_type type;
    int flags;
    double lo, hi;
    size_t off;          /* of the value in param_set */
} param_info;

const param_info *param_info_of(param_id id);
/* The entry called name (its own name, not an alias); NULL if none. */
const param_info *param_find(const char *name);
const char *param_source_name(param_source s); /* "default", "environment", "config" */

/* Every entry from its default, then from the environment. On a bad value
 * WEFT_ECONFIG, and err (cap bytes) says e.g. "WEFT_SHM=yes: expected 0 or
 * 1"; *p then holds the entries before it and defaults after. */
int param_load(param_set *p, char *err, size_t cap);
/* Entry id from text (as if its variable said so), recording src. */
int param_set_text(param_set *p, param_id id, const char *text, param_source src, char *err,
                   size_t cap);
/* The effective value as text (a secret as "(set)" or "(none)"). */
void param_format(const param_set *p, param_id id, char *buf, size_t cap);

/* One entry read from the environment, with the checks of param_load; the
 * default when unset. err NULL: a failure's message goes to stderr. */
int param_read_int(param_id id, int *out, char *err, size_t cap);
int param_read_dbl(param_id id, double *out, char *err, size_t cap);
/* *out points into the environment, or at the default. */
int param_read_str(param_id id, const char **out, char *err, size_t cap);
/* The variable's raw text in the environment (its name, then its aliases;
 * empty counts as unset), NULL if none: for callers that must point into
 * the environment. */
const char *param_env(param_id id);

/* What no single entry can say alone: a rank without a size (or a size
 * without a rank), a rank not below the size. WEFT_ECONFIG with err naming
 * the variable as it was set (an alias too), its value and what is allowed. */
int param_check_job(const param_set *p, char *err, size_t cap);

/* The log threshold (core/log.h's log_level_parse) from a set's
 * WEFT_DEBUG and WEFT_DEBUG_SUBSYS, or, where there is no set to read,
 * from the environment. */
int log_level_of(const param_set *p);
int log_level_from_env(void);

/* Under WEFT_DEBUG=INIT (loglevel from log_level_of): one line per entry,
 * "WEFT_X = v (source)". Rank 0 lists them all; other ranks only those set
 * by the environment or a config, since defaults are the same everywhere. */
void param_log(const param_set *p, int loglevel, int rank);

/* The environment, then over it the fields cfg carries (rank, size, local
 * rank, store address and port, store serving, interface, algorithm,
 * timeouts, secret): what a communicator made from cfg runs with. A cfg
 * field left at its default gives the table's default; one equal to the
 * environment's value keeps "environment" as its source. */
int param_from_config(param_set *p, const weft_config *cfg, char *err, size_t cap);

#endif
