/* A server's durability: every update is appended to a log (the gradient
 * as applied, with its learning rate) and the log is synced before any
 * reply that reveals the update leaves the server, so an acknowledged
 * push survives a crash. Every ckpt_interval updates (and on request) the
 * whole shard goes into a checkpoint file, after which the log restarts.
 * Recovery loads the checkpoint and replays the log's later records; the
 * optimiser is deterministic, so replay reproduces the state bit for bit.
 * A torn last record (a crash mid-append) was never acknowledged: it is
 * cut off. */
#include "ps/ps_server.h"

#include "core/crc32.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define LOG_MAGIC 0x4c504657u /* "WFPL" */

typedef struct {
    uint32_t magic;
    uint32_t type;  /* LOG_REC_* */
    uint32_t key, idx;
    uint64_t seq;
    uint64_t n;     /* floats that follow */
    uint64_t total;
    float lr;
    uint32_t crc;   /* of this header (crc 0) and the floats */
} log_rec;

_Static_assert(sizeof(log_rec) == 48, "log_rec layout");

static uint32_t rec_crc(const log_rec *h, const void *data)
{
    log_rec t = *h;
    t.crc = 0;
    return crc32_update(crc32_update(0, &t, sizeof t), data, h->n * sizeof(float));
}

/* One record: a (na bytes) then b (nb bytes) as its payload, written whole. */
static int log_write(weft_ps *ps, int type, const ps_chunk *c, const void *a, size_t na,
                     const void *b, size_t nb, float lr)
{
    ps_server *sv = ps->srvst;
    log_rec h;
    memset(&h, 0, sizeof h);
    h.magic = LOG_MAGIC;
    h.type = (uint32_t)type;
    h.key = c->key;
    h.idx = c->idx;
    h.seq = sv->seq + 1;
    h.n = (na + nb) / sizeof(float);
    h.total = c->total;
    h.lr = lr;
    h.crc = crc32_update(0, &h, sizeof h);
    h.crc = crc32_update(crc32_update(h.crc, a, na), b, nb);
    struct iovec iov[3] = { { &h, sizeof h }, { (void *)a, na }, { (void *)b, nb } };
    size_t want = sizeof h + na + nb, done = 0;
    while (done < want) {
        ssize_t w = writev(sv->logfd, iov, 3);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ps_fail(ps, WEFT_EIO, "server %d: cannot append to %s: %s", ps->rank,
                           sv->log_path, strerror(errno));
        done += (size_t)w;
        /* advance the iovecs past what was written */
        for (int i = 0; i < 3; i++) {
            size_t k = (size_t)w < iov[i].iov_len ? (size_t)w : iov[i].iov_len;
            iov[i].iov_base = (uint8_t *)iov[i].iov_base + k;
            iov[i].iov_len -= k;
            w -= (ssize_t)k;
        }
    }
    sv->seq = h.seq;
    sv->dirty = 1;
    sv->since_ckpt++;
    return 0;
}

int ps_ckpt_log(weft_ps *ps, int type, const ps_chunk *c, const float *data, float lr)
{
    if (ps->srvst->logfd < 0)
        return 0;
    /* an update carries the workers' push sequence numbers it brings into
     * effect, in the same record: a replayed update is never applied again
     * when its push is sent again */
    return log_write(ps, type, c, data, c->n * sizeof(float), c->dseq,
                     type == LOG_REC_APPLY ? (size_t)ps->nworkers * sizeof *c->dseq : 0, lr);
}

int ps_ckpt_log_seq(weft_ps *ps, const ps_chunk *c)
{
    if (ps->srvst->logfd < 0)
        return 0;
    return log_write(ps, LOG_REC_SEQ, c, c->dseq, (size_t)ps->nworkers * sizeof *c->dseq, NULL,
                     0, 0);
}

int ps_ckpt_sync(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    if (sv->logfd < 0 || !sv->dirty)
        return 0;
    if (fdatasync(sv->logfd))
        return ps_fail(ps, WEFT_EIO, "server %d: cannot sync %s: %s", ps->rank, sv->log_path,
                       strerror(errno));
    sv->dirty = 0;
    return 0;
}

static void name(char *buf, size_t len, int i, const char *what)
{
    snprintf(buf, len, "ps/c%d/%s", i, what);
}

int ps_ckpt_save(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    weft_ckpt *ck;
    ps_chunk **list;
    char nm[64];
    int rc;
    if (sv->logfd < 0)
        return ps_fail(ps, WEFT_ENOTSUP, "server %d has no checkpoint directory", ps->rank);
    if ((rc = ps_ckpt_sync(ps)))
        return rc;
    if (!(list = malloc((sv->nchunks + 1) * sizeof *list)))
        return WEFT_ENOMEM;
    ps_table_list(sv, list);
    if ((rc = weft_ckpt_new(&ck))) {
        free(list);
        return rc;
    }
    rc = weft_ckpt_put_u64(ck, "ps/server", (uint64_t)ps->rank);
    rc = rc ? rc : weft_ckpt_put_u64(ck, "ps/seq", sv->seq);
    rc = rc ? rc : weft_ckpt_put_u64(ck, "ps/chunks", sv->nchunks);
    for (size_t i = 0; !rc && i < sv->nchunks; i++) {
        ps_chunk *c = list[i];
        int64_t shape[1] = { (int64_t)c->n };
        name(nm, sizeof nm, (int)i, "key");
        rc = weft_ckpt_put_u64(ck, nm, c->key);
        name(nm, sizeof nm, (int)i, "idx");
        rc = rc ? rc : weft_ckpt_put_u64(ck, nm, c->idx);
        name(nm, sizeof nm, (int)i, "total");
        rc = rc ? rc : weft_ckpt_put_u64(ck, nm, c->total);
        name(nm, sizeof nm, (int)i, "version");
        rc = rc ? rc : weft_ckpt_put_u64(ck, nm, (uint64_t)c->version);
        name(nm, sizeof nm, (int)i, "param");
        rc = rc ? rc : weft_ckpt_put_tensor(ck, nm, WEFT_F32, c->param, 1, shape);
        name(nm, sizeof nm, (int)i, "seq");
        rc = rc ? rc : weft_ckpt_put_blob(ck, nm, c->dseq, (size_t)ps->nworkers * sizeof *c->dseq);
        for (int s = 0; !rc && s < weft_optim_state_count(c->opt); s++) {
            char what[16];
            snprintf(what, sizeof what, "state%d", s);
            name(nm, sizeof nm, (int)i, what);
            rc = weft_ckpt_put_tensor(ck, nm, WEFT_F32, weft_optim_state(c->opt, s, NULL), 1,
                                      shape);
        }
    }
    free(list);
    if (!rc)
        rc = weft_ckpt_save(ck, sv->ckpt_path);
    weft_ckpt_free(ck);
    if (rc)
        return ps_fail(ps, rc, "server %d: cannot write checkpoint %s", ps->rank, sv->ckpt_path);
    /* everything logged is now in the checkpoint: the log starts over */
    if (ftruncate(sv->logfd, 0) || fdatasync(sv->logfd))
        return ps_fail(ps, WEFT_EIO, "server %d: cannot truncate %s: %s", ps->rank,
                       sv->log_path, strerror(errno));
    sv->since_ckpt = 0;
    log_sub(ps->loglevel, LOG_INFO, LOG_SUB_NET, ps->world_rank,
            "parameter server %d: checkpoint of %zu chunks at update %llu in %s", ps->rank,
            sv->nchunks, (unsigned long long)sv->seq, sv->ckpt_path);
    return 0;
}

static int load(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    weft_ckpt *ck;
    uint64_t nch;
    char nm[64];
    int rc;
    if (access(sv->ckpt_path, F_OK))
        return 0;
    if ((rc = weft_ckpt_load(&ck, sv->ckpt_path)))
        return ps_fail(ps, rc, "server %d: cannot read checkpoint %s", ps->rank, sv->ckpt_path);
    rc = weft_ckpt_get_u64(ck, "ps/seq", &sv->seq);
    rc = rc ? rc : weft_ckpt_get_u64(ck, "ps/chunks", &nch);
    for (uint64_t i = 0; !rc && i < nch; i++) {
        uint64_t key, idx, total, version;
        weft_ckpt_entry e;
        ps_chunk *c;
        name(nm, sizeof nm, (int)i, "key");
        rc = weft_ckpt_get_u64(ck, nm, &key);
        name(nm, sizeof nm, (int)i, "idx");
        rc = rc ? rc : weft_ckpt_get_u64(ck, nm, &idx);
        name(nm, sizeof nm, (int)i, "total");
        rc = rc ? rc : weft_ckpt_get_u64(ck, nm, &total);
        name(nm, sizeof nm, (int)i, "version");
        rc = rc ? rc : weft_ckpt_get_u64(ck, nm, &version);
        name(nm, sizeof nm, (int)i, "param");
        rc = rc ? rc : weft_ckpt_find(ck, nm, &e);
        if (rc || e.dtype != WEFT_F32 || e.nbytes % 4 || !e.nbytes || key > UINT32_MAX ||
            idx > UINT32_MAX) {
            rc = WEFT_EIO;
            break;
        }
        if ((rc = ps_table_add(ps, (uint32_t)key, (uint32_t)idx, total, e.nbytes / 4, e.data, &c)))
            break;
        c->version = (int64_t)version;
        weft_optim_set_steps(c->opt, c->version);
        name(nm, sizeof nm, (int)i, "seq"); /* absent in older checkpoints: none yet */
        if (!weft_ckpt_find(ck, nm, &e)) {
            if (e.nbytes != (size_t)ps->nworkers * sizeof *c->dseq) {
                rc = WEFT_EIO;
                break;
            }
            memcpy(c->dseq, e.data, e.nbytes);
            memcpy(c->seq, e.data, e.nbytes);
        }
        for (int s = 0; !rc && s < weft_optim_state_count(c->opt); s++) {
            char what[16];
            snprintf(what, sizeof what, "state%d", s);
            name(nm, sizeof nm, (int)i, what);
            rc = weft_ckpt_get_f32(ck, nm, weft_optim_state(c->opt, s, NULL), c->n);
        }
    }
    weft_ckpt_free(ck);
    if (rc)
        return ps_fail(ps, WEFT_EIO, "server %d: checkpoint %s is malformed", ps->rank,
                       sv->ckpt_path);
    return 0;
}

/* Replays the log records after the checkpoint. */
static int replay(weft_ps *ps, int fd)
{
    ps_server *sv = ps->srvst;
    off_t good = 0;
    uint64_t applied = 0;
    float *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        log_rec h;
        ssize_t r = pread(fd, &h, sizeof h, good);
        if (r == 0)
            break;
        if (r != (ssize_t)sizeof h || h.magic != LOG_MAGIC || h.n == 0 ||
            h.n > PS_MAX_CHUNK + 2 * (uint64_t)ps->nworkers ||
            (h.type != LOG_REC_INIT && h.type != LOG_REC_APPLY && h.type != LOG_REC_SEQ))
            goto torn;
        if (h.n > cap) {
            float *nb = realloc(buf, h.n * sizeof(float));
            if (!nb) {
                rc = WEFT_ENOMEM;
                break;
            }
            buf = nb;
            cap = h.n;
        }
        if (pread(fd, buf, h.n * sizeof(float), good + (off_t)sizeof h) !=
                (ssize_t)(h.n * sizeof(float)) ||
            rec_crc(&h, buf) != h.crc)
            goto torn;
        good += (off_t)(sizeof h + h.n * sizeof(float));
        if (h.seq <= sv->seq)
            continue; /* already in the checkpoint */
        ps_chunk *c = ps_table_find(sv, h.key, h.idx);
        if (h.type == LOG_REC_INIT) {
            if (!c && (rc = ps_table_add(ps, h.key, h.idx, h.total, h.n, buf, &c)))
                break;
        } else {
            size_t nseq = (size_t)ps->nworkers * 2; /* floats' worth of sequence numbers */
            size_t nf = h.type == LOG_REC_SEQ ? 0 : c ? c->n : 0;
            if (!c || (h.n != nf && h.n != nf + nseq) || (h.type == LOG_REC_SEQ && h.n != nseq)) {
                rc = ps_fail(ps, WEFT_EIO, "server %d: log %s updates a chunk it never created "
                             "or of another size", ps->rank, sv->log_path);
                break;
            }
            if (nf && (rc = ps_table_apply(c, buf, h.lr)))
                break;
            if (h.n == nf + nseq) {
                memcpy(c->dseq, buf + nf, nseq * sizeof(float));
                memcpy(c->seq, c->dseq, nseq * sizeof(float));
            }
        }
        sv->seq = h.seq;
        applied++;
        continue;
    torn:
        log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
                "parameter server %d: log %s ends in a torn record at byte %lld (a crash "
                "mid-append; it was never acknowledged): cut off",
                ps->rank, sv->log_path, (long long)good);
        if (ftruncate(fd, good))
            rc = ps_fail(ps, WEFT_EIO, "cannot truncate %s", sv->log_path);
        break;
    }
    free(buf);
    if (!rc && (applied || sv->nchunks))
        log_sub(ps->loglevel, LOG_WARN, LOG_SUB_NET, ps->world_rank,
                "parameter server %d resumed: %zu chunks, %llu logged updates replayed, "
                "at update %llu",
                ps->rank, sv->nchunks, (unsigned long long)applied, (unsigned long long)sv->seq);
    return rc;
}

int ps_ckpt_recover(weft_ps *ps)
{
    ps_server *sv = ps->srvst;
    char path[4096];
    int rc, fd;
    sv->logfd = -1;
    if (!ps->cfg.ckpt_dir)
        return 0;
    if (mkdir(ps->cfg.ckpt_dir, 0777) && errno != EEXIST)
        return ps_fail(ps, WEFT_EIO, "cannot create %s: %s", ps->cfg.ckpt_dir, strerror(errno));
    snprintf(path, sizeof path, "%s/ps-server-%d.ckpt", ps->cfg.ckpt_dir, ps->rank);
    sv->ckpt_path = strdup(path);
    snprintf(path, sizeof path, "%s/ps-server-%d.log", ps->cfg.ckpt_dir, ps->rank);
    sv->log_path = strdup(path);
    if (!sv->ckpt_path || !sv->log_path)
        return WEFT_ENOMEM;
    if ((rc = load(ps)))
        return rc;
    fd = open(sv->log_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0)
        return ps_fail(ps, WEFT_EIO, "cannot open %s: %s", sv->log_path, strerror(errno));
    if ((rc = replay(ps, fd))) {
        close(fd);
        return rc;
    }
    sv->logfd = fd;
    return 0;
}

void ps_ckpt_close(ps_server *sv)
{
    if (sv->logfd >= 0)
        close(sv->logfd);
    sv->logfd = -1;
    free(sv->ckpt_path);
    free(sv->log_path);
    sv->ckpt_path = sv->log_path = NULL;
}
