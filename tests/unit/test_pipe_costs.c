/* Block costs for pipeline planning: the cost file, the FLOP estimate and
 * the plan weft-sim pipeline prints. */
#include "test.h"
#include "sim/pipe_costs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(cost_file)
{
    char path[] = "/tmp/weft_pipe_costs_XXXXXX", err[256];
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    sim_block_costs c;
    write_file(path, "# name fwd bi bw act state\nembed 0.001 0 0.0005 100 2000\n\n"
                     "blocks.0 0.002 0.002 0.001 300 4000 64 # with out_bytes\n");
    CHECKF(sim_block_costs_load(path, &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.n == 2 && !strcmp(c.b[1].name, "blocks.0") && c.b[1].out_bytes == 64);
    CHECK(c.b[0].out_bytes < 0 && c.b[0].bwd_w == 0.0005 && c.b[0].state_bytes == 2000);
    sim_block_costs_free(&c);
    write_file(path, "a 1 1 1 1 1\nb 1 1 1\n");
    CHECK(sim_block_costs_load(path, &c, err, sizeof err) == WEFT_EINVAL);
    CHECKF(strstr(err, ":2: want name") != NULL, "%s", err);
    write_file(path, "a 1 -1 1 1 1\n");
    CHECK(sim_block_costs_load(path, &c, err, sizeof err) == WEFT_EINVAL);
    CHECKF(strstr(err, ":1: a negative cost") != NULL, "%s", err);
    write_file(path, "# nothing\n");
    CHECK(sim_block_costs_load(path, &c, err, sizeof err) == WEFT_EINVAL);
    CHECK(strstr(err, "no blocks") != NULL);
    unlink(path);
    CHECK(sim_block_costs_load(path, &c, err, sizeof err) == WEFT_EINVAL);
}

TEST(estimate)
{
    weft_model_config m;
    sim_block_costs c;
    char err[256];
    CHECK(weft_model_config_parse("mlp:784-512-10", &m) == 0);
    CHECK(sim_block_costs_estimate(&m, 32, 0, 1, &c, err, sizeof err) == 0);
    CHECK(c.n == 2);
    /* 2 * 784 * 512 * 32 flops at 1 GFLOP/s */
    CHECK(fabs(c.b[0].fwd - 2.0 * 784 * 512 * 32 / 1e9) < 1e-12);
    CHECK(c.b[0].bwd_i == c.b[0].fwd && c.b[0].bwd_w == c.b[0].fwd);
    CHECK(c.b[1].state_bytes == 16.0 * (512 * 10 + 10));
    sim_block_costs_free(&c);
    CHECK(weft_model_config_parse("gpt:vocab=100,ctx=16,layers=3,heads=2,dim=32", &m) == 0);
    CHECK(sim_block_costs_estimate(&m, 4, 8, 10, &c, err, sizeof err) == 0);
    CHECK(c.n == 5 && !strcmp(c.b[0].name, "embed") && !strcmp(c.b[4].name, "head"));
    double rows = 4 * 8, mm = 2 * 12 * 32.0 * 32 * rows, att = 4.0 * 4 * 8 * 8 * 32;
    CHECK(fabs(c.b[2].fwd - (mm + att) / 1e10) < 1e-15);
    CHECK(fabs(c.b[2].bwd_w - mm / 1e10) < 1e-15);
    CHECK(c.b[0].bwd_i == 0 && c.b[4].out_bytes == 0 && c.b[1].out_bytes == 4 * rows * 32);
    sim_block_costs_free(&c);
    CHECK(sim_block_costs_estimate(&m, 4, 17, 10, &c, err, sizeof err) == WEFT_EINVAL);
    CHECK(sim_block_costs_estimate(&m, 0, 8, 10, &c, err, sizeof err) == WEFT_EINVAL);
}

/* Eight equal blocks on p=4, m=8: the plan replays the closed forms. */
TEST(plan_equal_blocks)
{
    sim_block_cost b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (sim_block_cost){ "b", 1e-3, 1e-3, 1e-3, 1e6, 4e6, 65536 };
    sim_block_costs bc = { b, 8, 8 };
    static const struct { const char *s; double step; } want[] = {
        { "gpipe", 66e-3 }, { "1f1b", 66e-3 }, { "interleaved:2", 57e-3 }, { "zb", 54e-3 },
    };
    char err[256];
    for (int i = 0; i < 4; i++) {
        pipe_spec sp;
        sim_pipe_plan pl;
        CHECK(pipe_spec_parse(want[i].s, 4, 8, &sp) == 0);
        CHECKF(sim_pipe_plan_run(&bc, &sp, "auto", 0, 0, 0, &pl, err, sizeof err) == 0, "%s",
               err);
        CHECKF(fabs(pl.step - want[i].step) < 1e-12, "%s: %g", want[i].s, pl.step);
        for (int j = 0; j < pl.k; j++)
            CHECK(pl.first[j + 1] - pl.first[j] == 8 / pl.k);
        sim_pipe_plan_free(&pl);
    }
    /* 1F1B's stash sets the memory: chunk 0 holds 4 + 2 x 4 MB */
    pipe_spec sp;
    sim_pipe_plan pl;
    CHECK(pipe_spec_parse("1f1b", 4, 8, &sp) == 0);
    CHECK(sim_pipe_plan_run(&bc, &sp, "uniform", 0, 1e-4, 1e9, &pl, err, sizeof err) == 0);
    CHECK(pl.stage_bytes[0] == 8e6 + 4 * 2e6 && pl.chunk_stash[3] == 1);
    CHECK(pl.step > 66e-3);
    sim_pipe_plan_free(&pl);
    CHECK(sim_pipe_plan_run(&bc, &sp, "auto", 9e6, 0, 0, &pl, err, sizeof err) == WEFT_EINVAL);
    CHECKF(strstr(err, "needs at least") != NULL, "%s", err);
    CHECK(pipe_spec_parse("interleaved:2", 4, 6, &sp) == 0);
    CHECK(sim_pipe_plan_run(&bc, &sp, "auto", 0, 0, 0, &pl, err, sizeof err) == WEFT_EINVAL);
    CHECK(strstr(err, "multiple of p") != NULL);
}

/* A Llama priced from its own shape: grouped k and v, the SwiGLU MLP,
 * RMSNorm gains, no biases and no position table; lm_head its own unless
 * tied. */
TEST(estimate_llama)
{
    weft_model_config m;
    sim_block_costs c;
    char err[256];
    CHECK(weft_model_config_parse("llama:vocab=100,ctx=16,layers=3,heads=4,kv_heads=2,dim=32,"
                                  "ffn=40", &m) == 0);
    CHECKF(sim_block_costs_estimate(&m, 4, 8, 10, &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.n == 5 && !strcmp(c.b[0].name, "embed") && !strcmp(c.b[4].name, "head"));
    double D = 32, kv = 16, F = 40, V = 100, H = 4, B = 4, T = 8, rows = B * T;
    double mmp = 2 * D * D + 2 * D * kv + 3 * D * F, block = mmp + 2 * D;
    double mm = 2 * mmp * rows, att = 4.0 * B * T * T * D;
    CHECKF(fabs(c.b[1].fwd - (mm + att) / 1e10) < 1e-15, "%g", c.b[1].fwd);
    CHECK(fabs(c.b[1].bwd_i - (mm + att) / 1e10) < 1e-15);
    CHECK(fabs(c.b[1].bwd_w - mm / 1e10) < 1e-15);
    CHECK(c.b[1].state_bytes == 16 * block && c.b[3].state_bytes == 16 * block);
    /* no position table; the head keeps its norm and lm_head */
    CHECK(c.b[0].state_bytes == 16 * V * D && c.b[4].state_bytes == 16 * (D + V * D));
    double stash = rows * (6 * D + 2 * kv + 3 * F + 2 + 2 * H);
    CHECKF(c.b[2].act_bytes == 4 * stash, "%.0f want %.0f", c.b[2].act_bytes, 4 * stash);
    CHECK(c.b[2].out_bytes == 4 * rows * D && fabs(c.b[4].fwd - 2 * V * D * rows / 1e10) < 1e-15);
    double total = 0;
    for (int i = 0; i < c.n; i++)
        total += c.b[i].state_bytes;
    CHECK(total == 16 * (2 * V * D + 3 * block + D));
    sim_block_costs_free(&c);
    /* tied: the head's weights are the embedding's, counted there once */
    m.tied = 1;
    CHECK(sim_block_costs_estimate(&m, 4, 8, 10, &c, err, sizeof err) == 0);
    CHECK(c.n == 5 && c.b[4].state_bytes == 16 * D && c.b[0].state_bytes == 16 * V * D);
    sim_block_costs_free(&c);
    CHECK(sim_block_costs_estimate(&m, 4, 17, 10, &c, err, sizeof err) == WEFT_EINVAL);
}
