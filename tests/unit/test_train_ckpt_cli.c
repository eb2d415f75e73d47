/* weft-train end to end: a run stopped half-way, saved and resumed writes
 * the same checkpoint, byte for byte, as the uninterrupted run; the metrics
 * file has a row per step. Uses the weft-train binary built beside the
 * tests ($BUILD/weft-train). */
#include "test.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tool[1024], dir[] = "/tmp/weft-test-cli-XXXXXX";

static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s --quiet --no-eval >/dev/null", tool, args);
    return system(cmd);
}

static void check_model(const char *model, int steps, int stop)
{
    char args[2048], full[512], half[512], resumed[512], csv[512];
    snprintf(full, sizeof full, "%s/full.ckpt", dir);
    snprintf(half, sizeof half, "%s/half.ckpt", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.ckpt", dir);
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    snprintf(args, sizeof args, "%s --data builtin --train-size 500 --batch 16 --steps %d "
             "--save %s --metrics %s", model, steps, full, csv);
    CHECK(run(args) == 0);
    snprintf(args, sizeof args, "%s --data builtin --train-size 500 --batch 16 --steps %d "
             "--stop-at %d --save %s", model, steps, stop, half);
    CHECK(run(args) == 0);
    snprintf(args, sizeof args, "--resume %s --save %s", half, resumed);
    CHECK(run(args) == 0);
    long na, nb;
    char *a = fx_slurp(full, &na), *b = fx_slurp(resumed, &nb);
    CHECKF(na > 0 && na == nb && memcmp(a, b, (size_t)na) == 0,
           "%s: resumed checkpoint differs (%ld vs %ld bytes)", model, na, nb);
    free(a);
    free(b);

    weft_ckpt *c = NULL;
    uint64_t step = 0, pos = 0;
    CHECK(weft_ckpt_load(&c, half) == 0);
    CHECK(weft_ckpt_get_u64(c, "train/step", &step) == 0 && step == (uint64_t)stop);
    CHECK(weft_ckpt_get_u64(c, "data/position", &pos) == 0 && pos == (uint64_t)stop * 16);
    weft_ckpt_free(c);

    FILE *f = fopen(csv, "r");
    char line[512];
    int rows = 0, header = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "step,epoch,split,loss", 21) == 0)
            header++;
        else if (strstr(line, ",train,"))
            rows++;
    }
    if (f)
        fclose(f);
    CHECKF(header == 1 && rows == steps, "%d header lines, %d train rows", header, rows);
    remove(full);
    remove(half);
    remove(resumed);
    remove(csv);
}

static void remove_dir(void)
{
    rmdir(dir);
}

TEST_INIT
{
    CHECKF(fx_tool("weft-train", tool, sizeof tool) == 0, "%s not built", tool);
    CHECKF(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
    atexit(remove_dir);
}

/* The start-up line names the auto choice provisional, and the settled
 * choice follows once, after the first step; a kernel told is named as
 * it is. */
static void check_matmul_line(const char *env, const char *model_line, int auto_lines)
{
    char out[512], cmd[4096];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd,
             "env -u WEFT_MATMUL WEFT_PEAK_FILE=%s/peak %s %s --model gpt --layers 1 --heads 2 "
             "--dim 16 --seq 16 --data builtin --train-size 200 --batch 8 --steps 3 --no-eval "
             ">%s 2>/dev/null",
             dir, env, tool, out);
    CHECK(system(cmd) == 0);
    long n;
    char *text = fx_slurp(out, &n), *at = text;
    int lines = 0;
    while (at && (at = strstr(at, "matmul auto after step 1: ")) != NULL) {
        lines++;
        at++;
    }
    CHECKF(text && strstr(text, model_line), "no \"%s\" in:\n%s", model_line, text ? text : "");
    CHECKF(lines == auto_lines, "%d lines of the settled choice, expected %d", lines, auto_lines);
    free(text);
    remove(out);
    char peak[600];
    snprintf(peak, sizeof peak, "%s/peak", dir);
    remove(peak);
    snprintf(peak, sizeof peak, "%s/peak.matmul", dir);
    remove(peak);
}

TEST(matmul_line)
{
    /* auto decides only where there is a choice: with OpenBLAS built in */
    weft_model_config cfg;
    weft_model *m = NULL;
    CHECK(weft_model_config_parse("gpt:vocab=16,ctx=8,layers=1,heads=1,dim=8", &cfg) == 0);
    CHECK(weft_model_create(&m, &cfg, 1) == 0);
    int blas = weft_model_set_matmul(m, "openblas") == 0;
    weft_model_destroy(m);
    if (blas)
        check_matmul_line("", ", matmul auto (provisional: ", 1);
    else
        check_matmul_line("", ", matmul portable, ", 0);
    check_matmul_line("WEFT_MATMUL=portable", ", matmul portable, ", 0);
}

TEST(mlp) { check_model("--model mlp:784-32-10", 10, 4); }
TEST(gpt) { check_model("--model gpt --layers 1 --heads 2 --dim 16 --seq 16", 8, 3); }
