/* Reporting a failed operation to the other ranks (comm_notice.h). */
#include "coll/comm_notice.h"

#include "bootstrap/world.h"
#include "coll/comm_watch.h"
#include "coll/exec/exec_shm.h"
#include "coll/exec/live.h"
#include "coll/exec/p2p.h"
#include "core/log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOTICE_GRACE_MS 100
#define STORE_ANSWER_MAX_S 30.0 /* the store client's own default */

void comm_sever(weft_comm *c)
{
    p2p_sever(c->p2p, c->broken ? c->broken : WEFT_EPEER);
    ofi_sever(c->ofi); /* nothing may land in a buffer after the error is reported */
    exec_shm_reap(c, 0);
    for (int i = 0; i < c->size; i++) {
        if (c->net.out_fd && c->net.out_fd[i] >= 0) {
            close(c->net.out_fd[i]);
            c->net.out_fd[i] = -1;
        }
        if (c->net.in_fd && c->net.in_fd[i] >= 0) {
            close(c->net.in_fd[i]);
            c->net.in_fd[i] = -1;
        }
    }
    /* after the close: a sender that makes a segment for this rank from
     * now on sees the end of stream and unlinks it itself */
    exec_shm_reap(c, 1);
}

/* A notice on the watch socket, now or within NOTICE_GRACE_MS: adopt it. */
static int watch_now(weft_comm *c, const frame_hdr *fp, int *rc)
{
    struct pollfd pfd = { .fd = store_fd(c->watch), .events = POLLIN };
    int code, n;
    do
        n = poll(&pfd, 1, NOTICE_GRACE_MS);
    while (n < 0 && errno == EINTR);
    if (n == 1 && (code = comm_watch_fired(c, fp))) {
        *rc = code;
        return 1;
    }
    return 0;
}

/* The store did not answer the failure notice in time: its host is
 * stopped or overwhelmed, and the other ranks cannot learn of this
 * failure from it. Each says so itself: no notice can name the one that
 * froze for them. */
static void store_silent(weft_comm *c)
{
    char msg[sizeof c->err], host[48];
    size_t n = strlen(c->err);
    if (c->store_rank >= 0)
        snprintf(host, sizeof host, "rank %d", c->store_rank);
    else
        snprintf(host, sizeof host, "the host of %.24s", c->store_host);
    snprintf(msg, sizeof msg, "%.*s; and the store (served by %s at %.64s:%d) did not answer "
             "for %.0f s either: %s is stopped or overwhelmed",
             (int)(n < 300 ? n : 300), c->err, host, c->store_host, c->store_port,
             c->timeout_s < STORE_ANSWER_MAX_S ? c->timeout_s : STORE_ANSWER_MAX_S, host);
    memcpy(c->err, msg, sizeof msg);
}

int comm_failed(weft_comm *c, int rc, const frame_hdr *fp)
{
    char key[64], d[200];
    if (!c->fail_learned && (rc == WEFT_EPEER || rc == WEFT_ETIMEDOUT) && c->watch) {
        /* a lost peer or a timeout is often the echo of a failure
         * elsewhere: a notice that reached this rank explains it better
         * (and the store may be gone by now: its rank is done). A
         * mismatch or garbage seen here is first-hand and stays. */
        struct pollfd pfd = { .fd = store_fd(c->watch), .events = POLLIN };
        int code, n;
        /* a peer that let go may have done so because of a notice on its
         * way here too: give it a moment */
        do
            n = poll(&pfd, 1, rc == WEFT_EPEER ? NOTICE_GRACE_MS : 0);
        while (n < 0 && errno == EINTR);
        if (n == 1 && (code = comm_watch_fired(c, fp)))
            rc = code;
    }
    if (c->store) /* the notice path waits on the store no longer than a collective may */
        store_set_answer_timeout(c->store, c->timeout_s < STORE_ANSWER_MAX_S
                                               ? c->timeout_s : STORE_ANSWER_MAX_S);
    /* a store already found not answering (its process stopped) would
     * only keep this rank for another timeout: every rank says so itself */
    int silent = live_store_silent(c);
    if (!c->fail_learned && rc == WEFT_EPEER && c->store_rank >= 0 &&
        c->fail_peer != c->store_rank && c->fail_peer >= 0) {
        /* a peer that let go may have timed out on the store's stopped
         * host, and no notice can come from there: ask, briefly */
        if (!silent)
            silent = live_store_check(c);
        if (silent) {
            char why[200], msg[sizeof c->err];
            frame_describe(fp, d, sizeof d);
            live_store_why(c, why, sizeof why);
            snprintf(msg, sizeof msg, "%s; then rank %d let go of this rank (%d) in %.150s", why,
                     c->fail_peer, c->rank, d);
            memcpy(c->err, msg, sizeof msg);
            c->fail_peer = c->store_rank;
            rc = WEFT_ETIMEDOUT;
        }
    }
    if (!c->fail_learned && c->store && !silent) {
        int posted = 0;
        world_fail_key(c->id, key);
        if (rc == WEFT_EPEER && c->fail_peer >= 0) {
            /* the peer may only have severed its links after failing
             * itself: then its notice is already there and says why */
            void *v = NULL;
            size_t len;
            int g = store_get(c->store, key, &v, &len, 0);
            if (store_broken(c->store) == WEFT_ETIMEDOUT) {
                /* no answer: nothing to learn there; the notice below says so */
            } else if (g == 0) {
                int code = comm_watch_adopt(c, v, len, fp);
                if (code) {
                    rc = code;
                    posted = 1;
                }
            } else if (g != WEFT_ETIMEDOUT && c->watch && watch_now(c, fp, &rc)) {
                /* the store is gone, but the notice reached this rank just
                 * before (its rank exits once everyone has been told) */
                posted = 1;
            } else if (g != WEFT_ETIMEDOUT && c->store_rank >= 0 &&
                       c->fail_peer != c->store_rank) {
                /* no store: the rank that served it is gone, and that is
                 * why this peer let go */
                char msg[sizeof c->err];
                frame_describe(fp, d, sizeof d);
                snprintf(msg, sizeof msg,
                         "rank %d died (the store it served is gone; then rank %d let go of "
                         "this rank (%d) in %.150s)", c->store_rank, c->fail_peer, c->rank, d);
                memcpy(c->err, msg, sizeof msg);
                posted = 1;
            }
            free(v);
        }
        if (!posted) {
            fail_note note = { .code = rc, .witness = c->rank };
            note.culprit = rc == WEFT_EABORTED ? c->rank : c->fail_peer;
            snprintf(note.text, sizeof note.text, "%s", c->err);
            if (world_notice_post(c->store, c->id, &note))
                log_msg(c->loglevel, LOG_INFO, c->rank,
                        "could not tell the other ranks through the store: %s",
                        store_error(c->store));
        }
    }
    if (c->store && store_broken(c->store) == WEFT_ETIMEDOUT)
        store_silent(c);
    if (c->server && c->store && !silent) {
        /* This process serves the store and may exit as soon as this
         * returns: one more round trip lets the server finish handing the
         * notice to every waiting rank first. */
        int exists;
        store_check(c->store, "weft/flush", &exists);
    }
    log_sub(c->loglevel, LOG_WARN, LOG_SUB_COLL, c->rank, "%s: %s", weft_strerror(rc), c->err);
    if ((c->loglevel & 0xff) >= LOG_WARN)
        flight_dump(&c->fl, 2, c->rank, (c->loglevel & 0xff) >= LOG_INFO ? 0 : 4);
    comm_sever(c);
    return rc;
}
