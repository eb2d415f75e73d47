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

TEST(mlp) { check_model("--model mlp:784-32-10", 10, 4); }
TEST(gpt) { check_model("--model gpt --layers 1 --heads 2 --dim 16 --seq 16", 8, 3); }
