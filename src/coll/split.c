/* weft_comm_split: the ranks of a color become a communicator, ordered by
 * key, then by their old rank. */
#include "coll/comm_child.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t color, key;
} split_entry;

/* The library's own exchanges run the ring whatever algorithm the caller
 * forced: a forced algorithm may not apply to the layout (flat across
 * hosts), and these must work wherever the communicator does. */
static int own_allgather(weft_comm *c, const void *send, void *recv, size_t count,
                         weft_dtype t)
{
    weft_coll_args a = { .kind = WEFT_COLL_ALLGATHER, .send = send, .recv = recv,
                         .count = count, .dtype = t, .algo = WEFT_ALGO_RING };
    return weft_collective(c, &a);
}

/* Every member's addresses to every rank of c: the libfabric part (two
 * thirds of the record) only where some rank has one, since these bytes
 * cross whatever links c spans, the WAN's too. */
static int split_exchange(void *arg, weft_comm *c, weft_comm *child, const comm_addr *mine,
                          comm_addr *all)
{
    size_t head = offsetof(comm_addr, ofi), tail = sizeof *mine - head;
    char *buf = malloc((size_t)c->size * tail);
    int rc, any = 0;
    (void)arg;
    (void)child;
    if (!buf)
        return comm_fail(c, WEFT_ENOMEM, "split: out of memory");
    if (!(rc = own_allgather(c, mine, buf, head, WEFT_U8)))
        for (int i = 0; i < c->size; i++) {
            memcpy(&all[i], buf + (size_t)i * head, head);
            any |= all[i].has_ofi;
        }
    if (!rc && any && !(rc = own_allgather(c, (const char *)mine + head, buf, tail, WEFT_U8)))
        for (int i = 0; i < c->size; i++)
            memcpy((char *)&all[i] + head, buf + (size_t)i * tail, tail);
    free(buf);
    return rc;
}

/* The members of color in (key, old rank) order; returns their count.
 * Insertion sort keeps it stable. */
static int members_of(const split_entry *all, int size, int color, int *members)
{
    int n = 0;
    for (int i = 0; i < size && color >= 0; i++) {
        if (all[i].color != color)
            continue;
        int j = n++;
        while (j > 0 && all[members[j - 1]].key > all[i].key) {
            members[j] = members[j - 1];
            j--;
        }
        members[j] = i;
    }
    return n;
}

int weft_comm_split(weft_comm *c, int color, int key, weft_comm **out)
{
    split_entry me = { color < 0 ? -1 : color, key }, *all;
    int *members = NULL, n, newrank = -1, rc;
    uint64_t salt[2];
    if (!c || !out)
        return WEFT_EINVAL;
    *out = NULL;
    all = malloc((size_t)c->size * sizeof *all);
    members = malloc((size_t)c->size * sizeof *members);
    if (!all || !members) {
        rc = comm_fail(c, WEFT_ENOMEM, "split: out of memory");
        goto out;
    }
    if ((rc = own_allgather(c, &me, all, 2, WEFT_I32)))
        goto out;
    n = members_of(all, c->size, me.color, members);
    for (int i = 0; i < n; i++)
        if (members[i] == c->rank)
            newrank = i;
    salt[0] = c->split_seq++;
    salt[1] = (uint64_t)me.color;
    comm_child_plan plan = { .exchange = split_exchange, .members = members, .what = "split" };
    rc = comm_child_make(c, newrank, n, comm_derive_id(c->id, salt, sizeof salt), &plan, out);
out:
    free(all);
    free(members);
    return rc;
}
