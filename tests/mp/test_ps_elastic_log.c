/* The server's side of "no acknowledged update lost, none applied twice",
 * driven in one process, message by message: a push sent again (same
 * per-chunk sequence number) is acknowledged and dropped, whether the
 * server still runs, resumed from its log after a crash that came between
 * applying a push and acknowledging it, or resumed from a checkpoint; a
 * BSP push still in the step's sum that comes again on a new connection
 * is acknowledged there once the step completes, and a push of a dead
 * process of the worker is acknowledged to nobody. */
#include "test.h"

#include "core/log.h"
#include "ps/ps_server.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define N 4

typedef struct {
    weft_ps ps;
    char dir[64];
    int peer[2]; /* the workers' ends of the links */
} rig;

static void connect_worker(rig *g, int w)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    ps_wk *k = &g->ps.srvst->wk[w];
    if (k->l.fd >= 0)
        ps_link_close(&k->l);
    if (g->peer[w] >= 0)
        close(g->peer[w]);
    ps_link_init(&k->l, sv[0], w);
    k->state = WK_LIVE;
    k->gen++;
    g->peer[w] = sv[1];
}

static void start(rig *g)
{
    CHECK(ps_server_init(&g->ps) == 0);
    g->peer[0] = g->peer[1] = -1;
    for (int w = 0; w < g->ps.nworkers; w++)
        connect_worker(g, w);
}

static void rig_init(rig *g, const char *mode)
{
    memset(g, 0, sizeof *g);
    g->ps.role = WEFT_PS_ROLE_SERVER;
    g->ps.nworkers = 2;
    g->ps.world_size = 3;
    g->ps.world_rank = 2;
    g->ps.loglevel = LOG_ERROR; /* only what fails */
    weft_ps_config_default(&g->ps.cfg);
    weft_ps_consistency_parse(mode, &g->ps.cfg);
    g->ps.cfg.optim.momentum = 0;
    g->ps.cfg.lr.lr = 1.0f;
    snprintf(g->dir, sizeof g->dir, "/tmp/weft-ps-log-XXXXXX");
    CHECK(mkdtemp(g->dir) != NULL);
    g->ps.cfg.ckpt_dir = g->dir;
    start(g);
}

/* A crash: the state goes, the files stay. */
static void crash(rig *g)
{
    for (int w = 0; w < g->ps.nworkers; w++) {
        close(g->peer[w]);
        g->peer[w] = -1;
    }
    ps_server_free(&g->ps);
}

static void rig_end(rig *g)
{
    char cmd[128];
    crash(g);
    snprintf(cmd, sizeof cmd, "rm -rf %s", g->dir);
    CHECK(system(cmd) == 0);
}

static int handle(rig *g, int w, ps_msg *m, const float *data)
{
    void *payload = NULL;
    if (m->len) {
        payload = malloc(m->len);
        memcpy(payload, data, m->len);
    }
    int rc = ps_rules_handle(&g->ps, w, m, payload);
    if (rc == PARK)
        rc = ps_rules_park(&g->ps, w, m, payload);
    return rc ? rc : ps_ckpt_sync(&g->ps);
}

static void init_chunk(rig *g)
{
    float zero[N] = { 0 };
    ps_msg m = ps_msg_make(PS_INIT);
    m.id = 1;
    m.total = N;
    m.len = sizeof zero;
    CHECK(handle(g, 0, &m, zero) == 0);
}

/* Worker w pushes -2 at element w: +1 under SSP (weight 1/2), BSP a step's
 * average (with both workers: +1 each). */
static int push(rig *g, int w, uint64_t id, uint64_t seq, int64_t clock)
{
    float grad[N] = { 0 };
    grad[w] = -2.0f;
    ps_msg m = ps_msg_make(PS_PUSH);
    m.id = id;
    m.total = seq;
    m.clock = clock;
    m.len = sizeof grad;
    return handle(g, w, &m, grad);
}

/* Acknowledgements with this id queued or held for worker w's link. */
static int acks(rig *g, int w, uint64_t id)
{
    ps_server *sv = g->ps.srvst;
    int n = 0;
    for (ps_out *o = sv->wk[w].l.qh; o; o = o->next)
        n += o->hdr.type == PS_ACK && o->hdr.id == id;
    for (ps_wait *h = sv->held; h; h = h->next)
        n += h->w == w && h->m.type == PS_ACK && h->m.id == id && h->gen == sv->wk[w].gen;
    return n;
}

static float param(rig *g, int i)
{
    return ps_table_find(g->ps.srvst, 0, 0)->param[i];
}

TEST(ssp_resend_dropped_live_log_and_checkpoint)
{
    rig g;
    rig_init(&g, "ssp:1");
    init_chunk(&g);
    CHECK(push(&g, 0, 10, 1, 0) == 0 && push(&g, 0, 11, 2, 1) == 0);
    CHECK(param(&g, 0) == 2.0f);
    /* the same push again (a reconnect): acknowledged, not applied */
    CHECK(push(&g, 0, 12, 2, 1) == 0);
    CHECK(param(&g, 0) == 2.0f && acks(&g, 0, 12) == 1);
    /* push 3 applied and logged; the server dies before the reply leaves */
    CHECK(push(&g, 0, 13, 3, 2) == 0 && param(&g, 0) == 3.0f);
    crash(&g);
    start(&g); /* resumes from the log alone */
    ps_chunk *c = ps_table_find(g.ps.srvst, 0, 0);
    CHECK(c && c->seq[0] == 3 && c->dseq[0] == 3 && c->param[0] == 3.0f);
    CHECK(push(&g, 0, 13, 3, 2) == 0); /* sent again after the reconnect */
    CHECKF(param(&g, 0) == 3.0f, "push 3 applied twice: %g", param(&g, 0));
    CHECK(acks(&g, 0, 13) == 1);
    CHECK(push(&g, 0, 14, 4, 3) == 0 && param(&g, 0) == 4.0f);
    /* the same from a checkpoint (the log is empty after it) */
    CHECK(ps_ckpt_save(&g.ps) == 0);
    crash(&g);
    start(&g);
    CHECK(push(&g, 0, 14, 4, 3) == 0 && param(&g, 0) == 4.0f && acks(&g, 0, 14) == 1);
    CHECK(push(&g, 1, 20, 1, 0) == 0 && param(&g, 1) == 1.0f);
    /* a pull that names push 4 as this worker's last is answered at once */
    ps_msg m = ps_msg_make(PS_PULL);
    m.id = 30;
    m.total = 4;
    m.clock = 1; /* SSP:1 lets clock 1 through with every worker at 0 */
    CHECK(handle(&g, 0, &m, NULL) == 0 && g.ps.srvst->waits == NULL);
    rig_end(&g);
}

TEST(bsp_resend_in_step_acknowledged_on_new_connection)
{
    rig g;
    rig_init(&g, "bsp");
    init_chunk(&g);
    CHECK(push(&g, 0, 10, 1, 0) == 0 && acks(&g, 0, 10) == 0); /* waits for worker 1 */
    /* worker 0's connection breaks and comes back; its push, unanswered,
     * comes again with a new request id */
    connect_worker(&g, 0);
    CHECK(push(&g, 0, 11, 1, 0) == 0);
    CHECK(push(&g, 1, 20, 1, 0) == 0); /* the step completes */
    CHECKF(param(&g, 0) == 1.0f && param(&g, 1) == 1.0f, "step: %g %g", param(&g, 0),
           param(&g, 1));
    CHECK(acks(&g, 0, 11) == 1 && acks(&g, 0, 10) == 0 && acks(&g, 1, 20) == 1);
    /* step 1: worker 1 pushes, then its process dies and a new one takes
     * the rank: the old push counts, its acknowledgement goes nowhere */
    CHECK(push(&g, 1, 21, 2, 1) == 0);
    connect_worker(&g, 1);
    CHECK(push(&g, 0, 12, 2, 1) == 0);
    CHECK(param(&g, 0) == 2.0f && param(&g, 1) == 2.0f);
    CHECK(acks(&g, 1, 21) == 0 && acks(&g, 0, 12) == 1);
    /* the step survives a crash; both pushes of step 2 were unanswered and
     * come again: applied once */
    CHECK(push(&g, 0, 13, 3, 2) == 0);
    crash(&g);
    start(&g);
    ps_chunk *c = ps_table_find(g.ps.srvst, 0, 0);
    CHECK(c && c->version == 2 && c->seq[0] == 2 && c->seq[1] == 2);
    CHECK(push(&g, 0, 13, 3, 2) == 0 && push(&g, 1, 22, 3, 2) == 0);
    CHECK(param(&g, 0) == 3.0f && param(&g, 1) == 3.0f && c->version == 3);
    rig_end(&g);
}
