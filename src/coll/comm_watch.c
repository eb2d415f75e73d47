/* Failure notices that reach a rank through its watch (comm_watch.h). */
#include "coll/comm_watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int comm_watch_fd(const weft_comm *c)
{
    return c->watch ? store_fd(c->watch) : -1;
}

int comm_watch_adopt(weft_comm *c, const void *v, size_t len, const frame_hdr *fp)
{
    fail_note note;
    const char *why;
    char d[200], msg[sizeof c->err];
    if (fail_note_decode(v, len, c->size, &note, &why))
        return 0;
    frame_describe(fp, d, sizeof d);
    if (note.witness == c->rank)
        snprintf(msg, sizeof msg, "%.400s", note.text);
    else
        snprintf(msg, sizeof msg, "%.300s [reported by rank %d; this rank (%d) was in %.150s]",
                 note.text, note.witness, c->rank, d);
    memcpy(c->err, msg, sizeof msg);
    c->fail_learned = 1;
    return note.code;
}

int comm_watch_fired(weft_comm *c, const frame_hdr *fp)
{
    void *v = NULL;
    size_t len = 0;
    int rc = store_watch_read(c->watch, &v, &len), code = 0;
    if (rc == 0)
        code = comm_watch_adopt(c, v, len, fp);
    free(v);
    if (rc != 0 || code == 0) {
        /* the store went away: that alone is no failure (its rank may be
         * done); the data connections will tell */
        store_close(c->watch);
        c->watch = NULL;
    }
    return code;
}
