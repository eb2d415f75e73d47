/* The shrink rows of a run's metrics, read as they come: each look reads
 * only what is new, a row still being written is read at the next look. */
#include "cpn/cpn_loss.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}


/* The shrink rows added to the metrics since byte *off (moved past the
 * last whole line read), the last one's step into *step; -1 when the file
 * is shorter than *off (begun again). The file grows a row a step: each
 * look reads only what is new. */
static long shrink_rows(const char *dir, long *off, long *step)
{
    char path[1200], line[512];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    long n = 0, s;
    if (!f)
        return 0;
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < *off) {
        fclose(f);
        return -1;
    }
    fseek(f, *off, SEEK_SET);
    while (fgets(line, sizeof line, f)) {
        char kind[16];
        int whole = strchr(line, '\n') != NULL;
        int shrink = sscanf(line, "%ld,%*[^,],%15[^,]", &s, kind) == 2 && !strcmp(kind, "shrink");
        while (!whole && fgets(line, sizeof line, f)) /* the rest of a long row */
            whole = strchr(line, '\n') != NULL;
        if (!whole) /* a row still being written: read again next look */
            break;
        if (shrink) {
            n++;
            *step = s;
        }
        *off = ftell(f);
    }
    fclose(f);
    return n;
}

void loss_seen(loss_watch *w, const cpn_launched *ls, int lost, double at)
{
    w->at = at;
    snprintf(w->who, sizeof w->who, "%s", ls[lost].part->cluster);
}

/* Every look: new shrink rows, and the pending loss's answer. */
void loss_check(loss_watch *w, const char *dir)
{
    long step = 0, n = shrink_rows(dir, &w->off, &step);
    if (n < 0) { /* an earlier run's file, begun again */
        w->off = w->rows = w->used = 0;
        n = shrink_rows(dir, &w->off, &step);
    }
    if (n > 0) {
        w->rows += n;
        w->row_at = now_s();
        w->row_step = step;
    }
    if (w->at < 0 || w->rows <= w->used)
        return; /* no row for this loss yet */
    w->used = w->rows;
    double d = w->row_at - w->at;
    if (d >= 0)
        printf("weft-cpn run: the re-plan runs from step %ld, %.1f s after part %s was lost\n",
               w->row_step, d, w->who);
    else
        printf("weft-cpn run: the re-plan runs from step %ld, %.1f s before part %s's launcher "
               "reported it lost\n", w->row_step, -d, w->who);
    w->at = -1;
}

