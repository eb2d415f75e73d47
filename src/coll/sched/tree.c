/* Double binary tree schedules (the tree algorithm NCCL introduced in 2.4).
 *
 * Tree 0 is the in-order binary tree over positions 0..p-1: vertex v =
 * position+1, the vertices with lowest set bit 2^b sit at height b, so the
 * leaves are the even positions and the interior the odd ones. Tree 1 maps
 * rank r to position p-1-r (p even) or r+1 mod p (p odd): its interior is
 * tree 0's leaves, so every rank forwards the data of at most one tree and
 * sends and receives about twice the data in all, as the ring does, but over
 * log2(p) hops instead of p.
 *
 * All-reduce: each tree carries half the data in chunks. A node at depth d
 * sends partial chunk c up in global step c + E - d and receives the final
 * chunk c down in step c + E + d - 1, so a message is sent and received in
 * the same step on both sides, the reduction climbing while the broadcast
 * descends. The steps only order the rounds: ranks do not synchronise on
 * them, and a step with nothing to do is no round at all. Within a step both
 * sides list tree 0 before tree 1, which keeps the per-pair message order
 * the same on sender and receiver. */
#include "coll/sched/tree.h"
#include "coll/sched/util.h"

/* Step offset: more than any depth, so that no step is negative. */
#define TREE_E 128

static int lowbit(unsigned v) { return __builtin_ctz(v); }

int sched_tree_root(int p)
{
    unsigned v = 1;
    while ((v << 1) <= (unsigned)p)
        v <<= 1;
    return (int)v - 1;
}

int sched_tree_parent(int pos, int p)
{
    unsigned u = (unsigned)pos + 1, P = (unsigned)p;
    if ((int)u - 1 == sched_tree_root(p))
        return -1;
    for (;;) {
        int b = lowbit(u);
        unsigned up = ((u >> (b + 1)) & 1) ? u - (1u << b) : u + (1u << b);
        if (up <= P)
            return (int)up - 1;
        u = up; /* a missing vertex: its left subtree hangs on its parent */
    }
}

void sched_tree_children(int pos, int p, int *left, int *right)
{
    unsigned v = (unsigned)pos + 1, P = (unsigned)p;
    int b = lowbit(v);
    *left = *right = -1;
    if (b == 0)
        return;
    *left = (int)(v - (1u << (b - 1))) - 1;
    unsigned r = v + (1u << (b - 1));
    while (r > P) { /* descend left until the vertex exists */
        int br = lowbit(r);
        if (br == 0)
            return;
        r -= 1u << (br - 1);
    }
    *right = (int)r - 1;
}

int sched_tree_depth(int pos, int p)
{
    int d = 0;
    while ((pos = sched_tree_parent(pos, p)) >= 0)
        d++;
    return d;
}

int sched_dbtree_pos(int r, int t, int p)
{
    if (t == 0)
        return r;
    return p % 2 == 0 ? p - 1 - r : (r + 1) % p;
}

int sched_dbtree_rank(int pos, int t, int p)
{
    if (t == 0)
        return pos;
    return p % 2 == 0 ? p - 1 - pos : (pos + p - 1) % p;
}

/* One rank's place in one tree. */
typedef struct {
    int parent, child[2], nchild, depth;
    uint64_t base, len, nchunks; /* this tree's byte range and its chunks */
} tnode;

static void tnode_init(tnode *n, int rank, int t, int p, uint64_t base,
                       uint64_t len, uint64_t C)
{
    int pos = sched_dbtree_pos(rank, t, p), l, r;
    int par = sched_tree_parent(pos, p);
    sched_tree_children(pos, p, &l, &r);
    n->parent = par < 0 ? -1 : sched_dbtree_rank(par, t, p);
    n->nchild = 0;
    if (l >= 0)
        n->child[n->nchild++] = sched_dbtree_rank(l, t, p);
    if (r >= 0)
        n->child[n->nchild++] = sched_dbtree_rank(r, t, p);
    n->depth = sched_tree_depth(pos, p);
    n->base = base;
    n->len = len;
    n->nchunks = (len + C - 1) / C;
}

static uint64_t chunk_len(const tnode *n, uint64_t c, uint64_t C)
{
    uint64_t off = c * C;
    return n->len - off < C ? n->len - off : C;
}

/* Where the partial sums of a tree's chunks live on this rank. */
typedef struct {
    int own_buf;     /* this rank's contribution */
    int acc_buf;     /* partial sums (SB_RECV, or SB_TMP slots) */
    int acc_slots;   /* 0: acc_buf at the data offsets; 2: two SB_TMP slots */
    uint64_t tmp_y;  /* SB_TMP offset of the second child's slot */
    uint64_t tmp_x;  /* SB_TMP offset of the two partial-sum slots */
} tplace;

static uint64_t acc_off(const tplace *pl, const tnode *n, uint64_t c, uint64_t C)
{
    return pl->acc_slots ? pl->tmp_x + (c % 2) * C : n->base + c * C;
}

/* Reduction towards the root, step s: combine chunk a = s-E+d (both
 * children's parts arrived in step s-1), send it up, and take in chunk
 * a+1 from the children. */
static void up_step(weft_sched *s, const tnode *n, const tplace *pl,
                    uint64_t step, uint64_t C)
{
    int64_t a = (int64_t)step - TREE_E + n->depth;
    if (n->nchild == 2 && a >= 0 && (uint64_t)a < n->nchunks)
        sched_reduce(s, pl->acc_buf, acc_off(pl, n, (uint64_t)a, C), SB_TMP,
                     pl->tmp_y, chunk_len(n, (uint64_t)a, C));
    if (n->parent >= 0 && a >= 0 && (uint64_t)a < n->nchunks) {
        uint64_t len = chunk_len(n, (uint64_t)a, C);
        if (n->nchild == 0)
            sched_send(s, n->parent, pl->own_buf, n->base + (uint64_t)a * C, len);
        else
            sched_send(s, n->parent, pl->acc_buf, acc_off(pl, n, (uint64_t)a, C), len);
    }
    int64_t b = a + 1;
    if (n->nchild > 0 && b >= 0 && (uint64_t)b < n->nchunks) {
        uint64_t len = chunk_len(n, (uint64_t)b, C);
        sched_recv_reduce(s, n->child[0], pl->acc_buf, acc_off(pl, n, (uint64_t)b, C),
                          pl->own_buf, n->base + (uint64_t)b * C, len);
        if (n->nchild == 2)
            sched_recv(s, n->child[1], SB_TMP, pl->tmp_y, len);
    }
}

/* Broadcast from the root, step s: receive chunk s-E-d+1 from the parent
 * and pass chunk s-E-d (received the step before) to the children. The
 * root passes on the chunk it completed at the start of this step. */
static void down_step(weft_sched *s, const tnode *n, uint64_t step, uint64_t C,
                      int64_t e)
{
    int64_t b = (int64_t)step - e - n->depth + 1;
    if (n->parent >= 0 && b >= 0 && (uint64_t)b < n->nchunks)
        sched_recv(s, n->parent, SB_RECV, n->base + (uint64_t)b * C,
                   chunk_len(n, (uint64_t)b, C));
    int64_t c = n->parent >= 0 ? b - 1 : (int64_t)step - e;
    if (c >= 0 && (uint64_t)c < n->nchunks)
        for (int i = 0; i < n->nchild; i++)
            sched_send(s, n->child[i], SB_RECV, n->base + (uint64_t)c * C,
                       chunk_len(n, (uint64_t)c, C));
}

static int tree_allreduce(weft_sched *s, const sched_params *p)
{
    int P = p->nranks, r = p->rank;
    uint64_t es = p->esize, n = p->count * es, C = chunk_bytes_of(p);
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return 0;
    }
    if (n == 0)
        return 0;
    uint64_t half = (p->count + 1) / 2 * es;
    tnode tn[2];
    tplace pl[2];
    tnode_init(&tn[0], r, 0, P, 0, half, C);
    tnode_init(&tn[1], r, 1, P, half, n - half, C);
    for (int t = 0; t < 2; t++) {
        if (tn[t].depth >= TREE_E)
            return WEFT_EINVAL;
        pl[t] = (tplace){ .own_buf = p->inplace ? SB_RECV : SB_SEND,
                          .acc_buf = SB_RECV, .acc_slots = 0,
                          .tmp_y = (uint64_t)t * C };
        if (tn[t].nchild == 2)
            sched_need_tmp(s, (uint64_t)(t + 1) * C);
    }
    /* the last chunk reaches depth d in step nchunks-1 + E + d-1 */
    uint64_t end = tn[0].nchunks + 2 * (uint64_t)TREE_E + 2;
    for (uint64_t st = 0; st < end; st++) {
        for (int t = 0; t < 2; t++) {
            if (!tn[t].len)
                continue;
            up_step(s, &tn[t], &pl[t], st, C);
            down_step(s, &tn[t], st, C, TREE_E);
        }
        sched_end_round(s);
    }
    return 0;
}

/* This rank's node in the single tree of a rooted collective: positions
 * are shifted so that p->root sits at the tree's root. */
static tnode rooted_node(const sched_params *p, uint64_t n, uint64_t C)
{
    int P = p->nranks, shift = sched_tree_root(P) - p->root;
    int pos = ((p->rank + shift) % P + P) % P;
    int par = sched_tree_parent(pos, P), l, rr;
    sched_tree_children(pos, P, &l, &rr);
    tnode tn = { .parent = par < 0 ? -1 : ((par - shift) % P + P) % P,
                 .nchild = 0, .depth = sched_tree_depth(pos, P), .base = 0, .len = n,
                 .nchunks = (n + C - 1) / C };
    if (l >= 0)
        tn.child[tn.nchild++] = ((l - shift) % P + P) % P;
    if (rr >= 0)
        tn.child[tn.nchild++] = ((rr - shift) % P + P) % P;
    return tn;
}

/* Broadcast: one tree, the root at the tree's root position. */
static int tree_broadcast(weft_sched *s, const sched_params *p)
{
    int P = p->nranks;
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p);
    if (P == 1 || n == 0)
        return 0;
    tnode tn = rooted_node(p, n, C);
    for (uint64_t st = 0; st < tn.nchunks + (uint64_t)TREE_E + 2; st++) {
        down_step(s, &tn, st, C, 0);
        sched_end_round(s);
    }
    return 0;
}

/* Reduce: one tree; partial sums of non-roots wait in SB_TMP slots since
 * their SB_RECV may be absent. */
static int tree_reduce(weft_sched *s, const sched_params *p)
{
    int P = p->nranks;
    uint64_t n = p->count * p->esize, C = chunk_bytes_of(p);
    if (P == 1) {
        sched_copy(s, SB_RECV, 0, SB_SEND, 0, n);
        return 0;
    }
    if (n == 0)
        return 0;
    tnode tn = rooted_node(p, n, C);
    if (tn.depth >= TREE_E)
        return WEFT_EINVAL;
    int root = tn.parent < 0;
    tplace pl = { .own_buf = p->inplace ? SB_RECV : SB_SEND,
                  .acc_buf = root ? SB_RECV : SB_TMP, .acc_slots = root ? 0 : 2,
                  .tmp_y = 0, .tmp_x = C };
    if (tn.nchild == 2)
        sched_need_tmp(s, C);
    if (!root && tn.nchild > 0)
        sched_need_tmp(s, 3 * C);
    for (uint64_t st = 0; st < tn.nchunks + (uint64_t)TREE_E + 2; st++) {
        up_step(s, &tn, &pl, st, C);
        sched_end_round(s);
    }
    return 0;
}

int sched_tree(weft_sched *s, const sched_params *p)
{
    switch (p->kind) {
    case WEFT_COLL_ALLREDUCE: return tree_allreduce(s, p);
    case WEFT_COLL_BROADCAST: return tree_broadcast(s, p);
    case WEFT_COLL_REDUCE: return tree_reduce(s, p);
    default: return WEFT_ENOTSUP;
    }
}
