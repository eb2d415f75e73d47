/* A call's post on the flat board, and the check that every rank posted
 * the same call (flat_int.h). */
#include "coll/local/flat_int.h"

#include "coll/exec/callboard.h"
#include "coll/exec/mismatch.h"

static void describe_post(const flat_post *x, const frame_hdr *fp, frame_hdr *h)
{
    *h = *fp;
    h->kind = x->kind;
    h->dtype = x->dtype;
    h->op = x->op;
    h->root = x->root;
    h->count = x->count;
    h->seq = x->opseq;
    h->flags = x->flags;
}

int flat_check_posts(weft_comm *c, struct flat_state *fs, uint64_t k, const frame_hdr *fp)
{
    for (int r = 0; r < c->size; r++) {
        const flat_post *x = &fs->b.ranks[r].post[k & 1];
        frame_hdr h;
        describe_post(x, fp, &h);
        if (!exec_same_call(&h, fp))
            return callboard_mismatch(c, r, &h, fp);
    }
    return 0;
}

void flat_post_call(struct flat_state *fs, int me, uint64_t k, const frame_hdr *fp)
{
    flat_post *x = &fs->b.ranks[me].post[k & 1];
    x->opseq = fp->seq;
    x->count = fp->count;
    x->root = fp->root;
    x->kind = fp->kind;
    x->dtype = fp->dtype;
    x->op = fp->op;
    x->flags = (uint8_t)fp->flags;
    atomic_store(&x->seq, k);
    /* Sequentially consistent: of ranks posting at once, the one whose
     * store comes last sees every post here and rings (if anyone sleeps).
     * The sleepers first: one line every rank only reads, where the posts
     * are p lines, half of them written on another core; a rank that
     * declares itself asleep after this load looks at the posts after */
    if (atomic_load(&fs->b.head->sleepers) && flat_posted(fs, k))
        flat_ring(fs);
}
