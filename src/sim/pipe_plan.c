/* A pipeline plan from block costs: the schedule's stash per chunk sets
 * each stage's memory, the partition cuts the blocks under the cap, the
 * chunks' summed costs drive the timed replay. */
#include "sim/pipe_costs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sim_pipe_plan_free(sim_pipe_plan *p)
{
    if (!p)
        return;
    free(p->first);
    free(p->chunk_stash);
    free(p->fwd);
    free(p->bwd_i);
    free(p->bwd_w);
    free(p->out_bytes);
    free(p->stage_bytes);
    free(p->busy);
    free(p->bubble);
    free(p->peak_stash);
    memset(p, 0, sizeof *p);
}

static int alloc_plan(sim_pipe_plan *pl, int k, int p)
{
    size_t K = (size_t)k, P = (size_t)p;
    pl->first = calloc(K + 1, sizeof *pl->first);
    pl->chunk_stash = calloc(K, sizeof *pl->chunk_stash);
    pl->fwd = calloc(K, sizeof *pl->fwd);
    pl->bwd_i = calloc(K, sizeof *pl->bwd_i);
    pl->bwd_w = calloc(K, sizeof *pl->bwd_w);
    pl->out_bytes = calloc(K, sizeof *pl->out_bytes);
    pl->stage_bytes = calloc(K, sizeof *pl->stage_bytes);
    pl->busy = calloc(P, sizeof *pl->busy);
    pl->bubble = calloc(P, sizeof *pl->bubble);
    pl->peak_stash = calloc(P, sizeof *pl->peak_stash);
    return pl->first && pl->chunk_stash && pl->fwd && pl->bwd_i && pl->bwd_w && pl->out_bytes &&
           pl->stage_bytes && pl->busy && pl->bubble && pl->peak_stash ? 0 : WEFT_ENOMEM;
}

int sim_pipe_plan_run(const sim_block_costs *bc, const pipe_spec *spec, const char *partition,
                      double mem_cap, double latency, double bandwidth, sim_pipe_plan *out,
                      char *err, size_t len)
{
    if (!bc || !bc->n || !spec || !out)
        return WEFT_EINVAL;
    memset(out, 0, sizeof *out);
    out->spec = *spec;
    out->k = spec->p * spec->v;
    pipe_sched s;
    int rc = pipe_sched_build(&s, spec);
    if (rc) {
        char nm[32];
        pipe_spec_name(spec, nm, sizeof nm);
        snprintf(err, len, "schedule %s cannot run p=%d m=%d%s", nm, spec->p, spec->m,
                 spec->kind == PIPE_INTERLEAVED ? " (m must be a multiple of p, p >= 2)" : "");
        return rc;
    }
    int k = out->k, n = bc->n;
    pipe_block_cost *pbc = calloc((size_t)n, sizeof *pbc);
    rc = pbc ? alloc_plan(out, k, spec->p) : WEFT_ENOMEM;
    if (!rc)
        rc = pipe_sched_chunk_stash(&s, out->chunk_stash);
    if (!rc) {
        for (int i = 0; i < n; i++)
            pbc[i] = (pipe_block_cost){ bc->b[i].fwd + bc->b[i].bwd_i + bc->b[i].bwd_w,
                                        bc->b[i].act_bytes, bc->b[i].state_bytes };
        pipe_part_problem pb = { pbc, n, k, out->chunk_stash, mem_cap };
        rc = pipe_partition_parse(partition ? partition : "auto", &pb, out->first, err, len);
        for (int j = 0; !rc && j < k; j++) {
            out->stage_bytes[j] = pipe_stage_bytes(&pb, out->first, j);
            for (int i = out->first[j]; i < out->first[j + 1]; i++) {
                out->fwd[j] += bc->b[i].fwd;
                out->bwd_i[j] += bc->b[i].bwd_i;
                out->bwd_w[j] += bc->b[i].bwd_w;
            }
            double ob = bc->b[out->first[j + 1] - 1].out_bytes;
            out->out_bytes[j] = ob > 0 ? ob : 0;
        }
    }
    if (!rc) {
        pipe_costs c = { out->fwd, out->bwd_i, out->bwd_w, out->out_bytes, latency, bandwidth };
        pipe_result r = { 0, out->busy, out->bubble, out->peak_stash };
        rc = pipe_sched_replay(&s, &c, &r);
        out->step = r.step;
        if (rc)
            snprintf(err, len, "the schedule's replay failed");
    }
    free(pbc);
    pipe_sched_free(&s);
    if (rc)
        sim_pipe_plan_free(out);
    return rc;
}
