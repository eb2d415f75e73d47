/* --elastic's test hooks: --kill-at kills launch ranks where a test wants
 * a death (at a step's start, or in a recovery's round), and
 * --trace-samples writes each rank's committed sample ids, from which a
 * test sees every sample of an epoch taken once whatever the membership
 * did (docs/TRAINING.md, "Elastic training"). */
#include "run/run_elastic_hooks.h"

#include "run/run_pipeline.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* One --kill-at entry at a time; NULL at the end, or where one is bad. */
static const char *kill_entry(const char *p, long *rank, long *step, int *recover)
{
    char *end;
    *rank = strtol(p, &end, 10);
    if (end == p || *end != ':')
        return NULL;
    p = end + 1;
    *step = strtol(p, &end, 10);
    if (end == p || *rank < 0 || *step < 0)
        return NULL;
    *recover = strncmp(end, ":recover", 8) == 0;
    end += *recover ? 8 : 0;
    if (*end == ',')
        return end + 1;
    return *end ? NULL : end;
}

int elastic_option(opts *o, const char *key, const char *v, char *err, size_t cap)
{
    if (strcmp(key, "kill-at") == 0) {
        long r, s;
        int rec;
        const char *p = v;
        while (p && *p)
            p = kill_entry(p, &r, &s, &rec);
        if (!p || strlen(v) >= sizeof o->kill_at) {
            snprintf(err, cap, "--kill-at: want RANK:STEP[:recover][,...], not '%s'", v);
            return WEFT_EINVAL;
        }
        strcpy(o->kill_at, v);
        return 1;
    }
    if (strcmp(key, "trace-samples") == 0) {
        if (strlen(v) + 16 >= sizeof o->trace) {
            snprintf(err, cap, "--trace-samples: path too long");
            return WEFT_EINVAL;
        }
        strcpy(o->trace, v);
        return 1;
    }
    return 0;
}

void kill_point(const weft_run *t, long step, int recover)
{
    long r, s;
    int rec;
    const char *p = t->o->kill_at;
    if (t->el.slot < 0)
        return; /* a replacement is not killed again */
    while (p && *p) {
        p = kill_entry(p, &r, &s, &rec);
        if (r == t->el.slot && s == step && rec == recover) {
            fflush(NULL); /* what the run said so far, as a killed process leaves it */
            raise(SIGKILL);
        }
    }
}

/* ---- the sample trace (--trace-samples) ---------------------------------- */

int elastic_trace(weft_run *t, long step, const weft_batch *b)
{
    trace_slot *sl = &t->el.tr;
    if (!t->el.trace || (t->pl && !pipeline_traces(t->pl)))
        return 0;
    uint64_t *ids = realloc(sl->ids, (size_t)(b->n > 0 ? b->n : 1) * sizeof *ids);
    if (!ids)
        return run_fail(t, WEFT_ENOMEM, "out of memory");
    sl->ids = ids;
    memcpy(ids, b->index, (size_t)b->n * sizeof *ids);
    sl->n = b->n;
    sl->step = step;
    return 0;
}

/* Lines "step id view": a step taken again after ZeRO 1-3 went back to it
 * is there twice, and its later view is the one that counts. */
void elastic_commit(weft_run *t, long next)
{
    elastic_state *e = &t->el;
    trace_slot *sl = &e->tr;
    if (!e->trace || sl->step < 0)
        return;
    if (sl->step < next)
        for (int i = 0; i < sl->n; i++)
            fprintf(e->trace, "%ld %llu %lld\n", sl->step, (unsigned long long)sl->ids[i],
                    (long long)e->view);
    fflush(e->trace);
    sl->step = -1;
}
