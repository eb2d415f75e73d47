/* weft_run_config_set: every key weft-train takes, by its long name; bad
 * values refused with a message naming the option; flags without a value;
 * and weft_run_config_check's refusals of options that contradict each
 * other. */
#include "test.h"
#include "weft.h"

#include <string.h>

/* One key: a value it takes and one it refuses (NULL: none to try). */
typedef struct {
    const char *key, *good, *bad;
} key_case;

static const key_case keys[] = {
    { "model", "gpt", NULL },
    { "data", "builtin", NULL },
    { "optim", "adamw", "adam" },
    { "precision", "bf16", "fp16" },
    { "schedule", "constant", "linear" },
    { "steps", "10", "-1" },
    { "epochs", "0.5", "x" },
    { "batch", "64", "0" },
    { "lr", "0.01", "-1" },
    { "min-lr", "0.001", "y" },
    { "momentum", "0.8", "-0.5" },
    { "weight-decay", "0.1", "z" },
    { "clip", "1", "-2" },
    { "warmup", "5", "1e9" },
    { "seed", "7", "seven" },
    { "data-seed", "3", "-3" },
    { "seq", "16", "0" },
    { "digits", "3", "10" },
    { "layers", "2", "0" },
    { "heads", "2", "300" },
    { "dim", "32", "0" },
    { "train-size", "1000", "0" },
    { "format", "plain", "sideways" },
    { "save", "/tmp/x.ckpt", NULL },
    { "resume", "/tmp/x.ckpt", NULL },
    { "metrics", "/tmp/x.csv", NULL },
    { "save-every", "5", "-5" },
    { "stop-at", "3", "0" },
    { "log-every", "2", "two" },
    { "threads", "1", "5000" },
    { "eval-prompts", "10", "-1" },
    { "bucket-mb", "25", "-1" },
    { "zero", "2", "4" },
    { "accum", "2", "0" },
    { "sync", "diloco:5", "sometimes" },
    { "compress", "int8", "zip" },
    { "outer-lr", "0.5", "20" },
    { "outer-momentum", "0.5", "1" },
    { "mode", "ps", "mp" },
    { "consistency", "ssp:2", "eventual" },
    { "pp", "2", "0" },
    { "tp", "2", "2000" },
    { "order", "dp-tp-pp", "tp-tp-pp" },
    { "micro-batches", "4", "0" },
    { "pp-schedule", "gpipe", "fifo" },
    { "pp-partition", "auto", NULL },
    { "pp-memory", "2G", "-1" },
    { "layout", "auto", "manual" },
    { "mem-limit", "64M", "lots" },
    { "pp-costs", "/tmp/costs.csv", NULL },
    { "straggle", "1:20", "1" },
    { "kill-at", "1:5:recover", "x" },
    { "trace-samples", "/tmp/trace", NULL },
};

static const char *const flags[] = { "no-eval", "sp", "recompute", "quiet", "elastic",
                                     "save-cached" };

static weft_run_config *fresh(void)
{
    weft_run_config *c = NULL;
    CHECK(weft_run_config_new(&c) == 0 && c);
    return c;
}

TEST(every_key_takes_its_value)
{
    weft_run_config *c = fresh();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int rc = weft_run_config_set(c, keys[i].key, keys[i].good);
        CHECKF(rc == 0, "%s %s: %d %s", keys[i].key, keys[i].good, rc,
               weft_run_config_error(c));
    }
    weft_run_config_free(c);
}

TEST(bad_values_name_their_option)
{
    weft_run_config *c = fresh();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!keys[i].bad)
            continue;
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", keys[i].key);
        int rc = weft_run_config_set(c, keys[i].key, keys[i].bad);
        const char *e = weft_run_config_error(c);
        CHECKF(rc == WEFT_EINVAL, "%s %s: rc %d", keys[i].key, keys[i].bad, rc);
        CHECKF(strstr(e, opt) != NULL, "%s %s: '%s' does not name %s", keys[i].key,
               keys[i].bad, e, opt);
    }
    weft_run_config_free(c);
}

TEST(known_messages)
{
    weft_run_config *c = fresh();
    CHECK(weft_run_config_set(c, "optim", "adam") == WEFT_EINVAL);
    CHECK(strcmp(weft_run_config_error(c), "--optim: want sgd or adamw, not 'adam'") == 0);
    CHECK(weft_run_config_set(c, "steps", "x") == WEFT_EINVAL);
    CHECK(strcmp(weft_run_config_error(c),
                 "--steps: bad value 'x' (want an integer in 0..1099511627776)") == 0);
    char longer[2000];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK(weft_run_config_set(c, "data", longer) == WEFT_EINVAL);
    CHECK(strcmp(weft_run_config_error(c), "--data: value too long") == 0);
    /* --schedule names a pipeline schedule too */
    CHECK(weft_run_config_set(c, "schedule", "1f1b") == 0);
    weft_run_config_free(c);
}

TEST(flags_take_no_value)
{
    weft_run_config *c = fresh();
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        CHECKF(weft_run_config_set(c, flags[i], NULL) == 0, "%s: %s", flags[i],
               weft_run_config_error(c));
        CHECK(weft_run_config_set(c, flags[i], "1") == WEFT_EINVAL);
        CHECK(strstr(weft_run_config_error(c), flags[i]) != NULL);
    }
    /* a key that takes a value, given none */
    CHECK(weft_run_config_set(c, "steps", NULL) == WEFT_EINVAL);
    CHECK(strcmp(weft_run_config_error(c), "bad argument '--steps'") == 0);
    weft_run_config_free(c);
}

TEST(unknown_keys)
{
    weft_run_config *c = fresh();
    CHECK(weft_run_config_set(c, "nope", "1") == WEFT_ENOTSUP);
    CHECK(strcmp(weft_run_config_error(c), "unknown option '--nope'") == 0);
    CHECK(weft_run_config_set(c, "help", NULL) == WEFT_ENOTSUP);
    CHECK(weft_run_config_set(c, NULL, "1") == WEFT_EINVAL);
    CHECK(weft_run_config_set(NULL, "steps", "1") == WEFT_EINVAL);
    weft_run_config_free(c);
}

/* Options that contradict each other, and the message each gives. */
static void contradicts(const char *const *kv, int joining, const char *want)
{
    weft_run_config *c = fresh();
    for (int i = 0; kv[i]; i += 2)
        CHECKF(weft_run_config_set(c, kv[i], kv[i + 1]) == 0, "%s: %s", kv[i],
               weft_run_config_error(c));
    int rc = weft_run_config_check(c, joining);
    CHECKF(rc == WEFT_ECONFIG && strstr(weft_run_config_error(c), want), "%s: rc %d, '%s'",
           want, rc, weft_run_config_error(c));
    weft_run_config_free(c);
}

TEST(checks_of_options_together)
{
    weft_run_config *c = fresh();
    CHECK(weft_run_config_check(c, 0) == 0);
    weft_run_config_free(c);
    contradicts((const char *[]){ "steps", "5", "epochs", "1", NULL }, 0,
                "give --steps or --epochs, not both");
    contradicts((const char *[]){ "layout", "auto", "tp", "2", NULL }, 0,
                "--layout auto chooses");
    contradicts((const char *[]){ "outer-lr", "0.5", NULL }, 0,
                "--outer-lr and --outer-momentum are DiLoCo's");
    contradicts((const char *[]){ "pp", "2", "mode", "ps", NULL }, 0,
                "--mode ps keeps it whole");
    contradicts((const char *[]){ "tp", "2", "sync", "local:4", NULL }, 0,
                "the model's parts take --sync full");
    contradicts((const char *[]){ "pp", "2", "accum", "2", NULL }, 0,
                "micro-batches are --micro-batches");
    contradicts((const char *[]){ "pp-partition", "uniform", NULL }, 0,
                "need --pp 2 or more");
    contradicts((const char *[]){ "micro-batches", "2", NULL }, 0, "need --pp or --tp");
    contradicts((const char *[]){ "sp", NULL, NULL }, 0, "it needs --tp 2 or more");
    contradicts((const char *[]){ "elastic", NULL, "pp", "2", NULL }, 1,
                "joining a --pp/--tp job is not supported");
    /* the same options, not joining: nothing against them */
    c = fresh();
    CHECK(weft_run_config_set(c, "elastic", NULL) == 0 && weft_run_config_set(c, "pp", "2") == 0);
    CHECK(weft_run_config_check(c, 0) == 0);
    weft_run_config_free(c);
}
