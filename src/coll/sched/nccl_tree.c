/* NCCL's trees as a schedule (see nccl.h): per channel, a binary tree over
 * the nodes' head ranks with a chain through each node below its head.
 *
 * Pipelining follows the double binary tree of tree.c: with E more than
 * any depth, a rank at depth d sends partial chunk a up in step a + E - d
 * and receives the final chunk b down in step b + E + d - 1, so every
 * message is sent and received in the same step on both sides, the
 * reduction climbing while the broadcast descends. A head has up to three
 * children (the next rank of its chain and the heads of two nodes): the
 * first child's part is reduced as it arrives, the others wait in SB_TMP
 * slots and are added at the start of the next step. Within a step every
 * rank lists the channels in the same order, which keeps the order of the
 * messages of one pair the same on both sides. */
#include "coll/sched/nccl.h"
#include "coll/sched/tree.h"
#include "coll/sched/util.h"


typedef struct {
    int parent, child[3], nchild, depth;
    uint64_t base, len, nchunks, tmp; /* byte range, chunks, SB_TMP slots */
} ntnode;

/* Rank r's place in channel c's tree. */
static void nt_place(ntnode *t, int r, int c, const sched_nccl *o, int P)
{
    int k = o->ranks_per_node, nodes = (P + k - 1) / k, node = r / k, base = node * k;
    int kn = P - base < k ? P - base : k, h = sched_nccl_head(c, o->channels, kn);
    int i = (r - base - h + kn) % kn; /* place on the node's chain */
    int tr = c % 2, pos = sched_dbtree_pos(node, tr, nodes), l, rr;
    int par = sched_tree_parent(pos, nodes);
    t->nchild = 0;
    t->depth = sched_tree_depth(pos, nodes) + i;
    if (i + 1 < kn)
        t->child[t->nchild++] = base + (h + i + 1) % kn;
    if (i > 0) {
        t->parent = base + (h + i - 1) % kn;
        return;
    }
    /* the head: linked to the heads of the parent and child nodes */
    t->parent = -1;
    if (par >= 0) {
        int pn = sched_dbtree_rank(par, tr, nodes), pb = pn * k;
        int pk = P - pb < k ? P - pb : k;
        t->parent = pb + sched_nccl_head(c, o->channels, pk);
    }
    sched_tree_children(pos, nodes, &l, &rr);
    for (int s = 0; s < 2; s++) {
        int cp = s ? rr : l;
        if (cp < 0)
            continue;
        int cn = sched_dbtree_rank(cp, tr, nodes), cb = cn * k;
        int ck = P - cb < k ? P - cb : k;
        t->child[t->nchild++] = cb + sched_nccl_head(c, o->channels, ck);
    }
}

static uint64_t nt_len(const ntnode *t, uint64_t c, uint64_t C)
{
    uint64_t off = c * C;
    return t->len - off < C ? t->len - off : C;
}

static void nt_step(weft_sched *s, const ntnode *t, int own, uint64_t st, uint64_t C,
                    int64_t E)
{
    /* up: add the waiting parts of chunk a, send it up, take in chunk a+1 */
    int64_t a = (int64_t)st - E + t->depth, b = a + 1;
    if (a >= 0 && (uint64_t)a < t->nchunks) {
        uint64_t off = t->base + (uint64_t)a * C, len = nt_len(t, (uint64_t)a, C);
        for (int i = 1; i < t->nchild; i++)
            sched_reduce(s, SB_RECV, off, SB_TMP, t->tmp + (uint64_t)(i - 1) * C, len);
        if (t->parent >= 0)
            sched_send(s, t->parent, t->nchild ? SB_RECV : own, off, len);
    }
    if (t->nchild && b >= 0 && (uint64_t)b < t->nchunks) {
        uint64_t off = t->base + (uint64_t)b * C, len = nt_len(t, (uint64_t)b, C);
        sched_recv_reduce(s, t->child[0], SB_RECV, off, own, off, len);
        for (int i = 1; i < t->nchild; i++)
            sched_recv(s, t->child[i], SB_TMP, t->tmp + (uint64_t)(i - 1) * C, len);
    }
    /* down: receive chunk d from the parent, pass chunk d-1 on (the root
     * passes on the chunk it completed at the start of this step) */
    int64_t d = (int64_t)st - E - t->depth + 1;
    if (t->parent >= 0 && d >= 0 && (uint64_t)d < t->nchunks)
        sched_recv(s, t->parent, SB_RECV, t->base + (uint64_t)d * C, nt_len(t, (uint64_t)d, C));
    int64_t e = t->parent >= 0 ? d - 1 : (int64_t)st - E;
    if (e >= 0 && (uint64_t)e < t->nchunks)
        for (int i = 0; i < t->nchild; i++)
            sched_send(s, t->child[i], SB_RECV, t->base + (uint64_t)e * C,
                       nt_len(t, (uint64_t)e, C));
}

int sched_nccl_tree(weft_sched *s, const sched_params *p, const sched_nccl *o)
{
    int P = p->nranks, nch = o->channels;
    uint64_t es = p->esize, n = p->count * es, C = chunk_bytes_of(p);
    if (p->kind != WEFT_COLL_ALLREDUCE)
        return WEFT_ENOTSUP;
    if (nch < 1 || nch > 64 || o->ranks_per_node < 1)
        return WEFT_EINVAL;
    int own = p->inplace ? SB_RECV : SB_SEND;
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return 0;
    }
    if (n == 0)
        return 0;
    ntnode t[64];
    uint64_t most = 0, tmp = 0;
    int k = o->ranks_per_node, nodes = (P + k - 1) / k;
    int64_t E = 2 + k;
    while ((1L << (E - 2 - k)) < nodes)
        E++;
    for (int c = 0; c < nch; c++) {
        nt_place(&t[c], p->rank, c, o, P);
        t[c].base = block_start(p->count, nch, c) * es;
        t[c].len = block_len(p->count, nch, c) * es;
        t[c].nchunks = (t[c].len + C - 1) / C;
        t[c].tmp = tmp;
        if (t[c].nchild > 1)
            tmp += (uint64_t)(t[c].nchild - 1) * C;
        if (t[c].nchunks > most)
            most = t[c].nchunks;
    }
    sched_need_tmp(s, tmp);
    /* the last chunk reaches depth d in step nchunks-1 + E + d-1 */
    for (uint64_t st = 0; st < most + 2 * (uint64_t)E + 2; st++) {
        for (int c = 0; c < nch; c++)
            if (t[c].len)
                nt_step(s, &t[c], own, st, C, E);
        sched_end_round(s);
    }
    return 0;
}
