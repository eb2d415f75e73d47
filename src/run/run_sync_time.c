/* Where rank 0's wall time of training goes, phase by phase, and the two
 * utilisations the end-of-run report gives:
 *   strict: forward + backward seconds over the wall time;
 *   not blocked on the WAN: 1 - (seconds the training thread stood still
 *   for communication across clusters) / wall time, the figure OpenDiLoCo
 *   and INTELLECT-1 report as compute utilisation.
 * What counts as blocked on the WAN depends on the mode: the outer steps'
 * waits (blocking reductions, and joining a streaming one not yet done)
 * where there is an outer step; the whole parameter sync of the other
 * averaging modes; and, in full sync over a job that spans clusters, all
 * of its step but the optimiser's own arithmetic, since every gradient
 * all-reduce crosses the WAN. */
#include "run/run_sync_time.h"

#include "run/run_churn.h"

#include <stdarg.h>
#include <stdio.h>

static const outer_sync *outer_of(const train_sync *s)
{
    if (s->churn)
        return s->churn->outer;
    return s->sy ? sync_outer_of(s->sy) : NULL;
}

void sync_time_mark(train_sync *s)
{
    outer_times ot;
    outer_time(outer_of(s), &ot);
    s->loop_outer[0] = ot.post_s;
    s->loop_outer[1] = ot.wait_s;
    s->loop_outer[2] = ot.apply_s;
}

/* Seconds the training thread was blocked on the WAN; *what names it. */
static double wan_blocked(const train_sync *s, const char **what)
{
    const outer_sync *o = outer_of(s);
    double zwait = weft_zero_wait_s(s->z);
    if (o) {
        outer_times ot;
        outer_time(o, &ot);
        *what = "the outer steps' reductions across clusters";
        return ot.wait_s;
    }
    if (s->sy) {
        *what = "the parameter sync";
        return s->after_s + s->final_s;
    }
    *what = "the gradient communication over the job";
    return s->step_s - (s->optim_s - zwait) + s->final_s;
}

void sync_time_report(const weft_run *t, double train_s)
{
    const train_sync *s = &t->sync;
    double zwait = weft_zero_wait_s(s->z), loop_wan = 0;
    int clusters = s->comm ? weft_comm_cluster_count(s->comm) : 1;
    const outer_sync *o = outer_of(s);
    char line[1024];
    size_t len = 0, cap = sizeof line;
    run_line_add(line, cap, &len,
        "rank 0's wall time of training, %.2f s: data %.2f, forward+backward %.2f, "
        "waiting for gradients (%s) %.2f, optimiser %.2f", train_s, t->load_s, t->compute_s,
        s->sy || s->churn ? "inside the cluster" : "over the job", zwait, s->optim_s - zwait);
    double accounted = t->load_s + t->compute_s + s->step_s + s->final_s;
    if (o) {
        const double *l = s->loop_outer;
        loop_wan = l[1];
        run_line_add(line, cap, &len,
            ", outer steps: posting %.2f, blocked on the reduction across %.2f, applying "
            "%.2f, other %.2f", l[0], l[1], l[2], s->after_s - l[0] - l[1] - l[2]);
    } else if (s->sy || s->churn) {
        run_line_add(line, cap, &len, ", parameter sync %.2f", s->after_s);
    }
    run_line_add(line, cap, &len, ", rest of the step %.2f", s->step_s - s->optim_s - s->after_s);
    if (o) {
        outer_times ot;
        outer_time(o, &ot);
        run_line_add(line, cap, &len, ", after the loop %.2f (blocked on the reduction across %.2f)",
            s->final_s, ot.wait_s - loop_wan);
    } else {
        run_line_add(line, cap, &len, ", after the loop %.2f", s->final_s);
    }
    run_line_add(line, cap, &len, ", the rest (loop, logging) %.2f\n", train_s - accounted);
    run_say(t, WEFT_RUN_OUT, "%s", line);
    const char *what = "";
    double blocked = clusters > 1 ? wan_blocked(s, &what) : 0;
    len = 0;
    run_line_add(line, cap, &len, "utilisation (rank 0): strict (forward+backward / wall) %.1f%%",
        train_s > 0 ? 100 * t->compute_s / train_s : 0);
    if (clusters > 1)
        run_line_add(line, cap, &len, "; not blocked on the WAN (1 - %s / wall) %.1f%%\n", what,
            train_s > 0 ? 100 * (1 - blocked / train_s) : 0);
    else
        run_line_add(line, cap, &len, "; one cluster: no WAN\n");
    run_say(t, WEFT_RUN_OUT, "%s", line);
}
