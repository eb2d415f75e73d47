/* Peers' registered regions mapped for the direct all-to-all-v
 * (direct_map.h): a few per peer, the least recently used replaced. */
#include "coll/local/direct_map.h"

#include "core/peer_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* regions kept mapped a peer: the expert dispatch sends from four
 * buffers in turn (forward and backward, dispatch and combine) */
#define MAPS_PER_PEER 4

typedef struct {
    const char *at;   /* NULL: free */
    size_t len;
    int32_t pid;
    direct_region g;
    uint64_t used;    /* the clock when last used */
} one_map;

struct direct_maps {
    int size;
    uint64_t clock;
    one_map e[];      /* size * MAPS_PER_PEER */
};

static void unmap(one_map *x)
{
    if (x->at)
        munmap((void *)(uintptr_t)x->at, x->len);
    memset(x, 0, sizeof *x);
}

void direct_map_free(direct_maps *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->size * MAPS_PER_PEER; i++)
        unmap(&m->e[i]);
    free(m);
}

/* The region g of process pid, mapped read-only into x. */
static int map_region(one_map *x, int32_t pid, const direct_region *g, char *why, size_t n)
{
    char *at;
    size_t len;
    if (peer_map(pid, (int)(uint32_t)g->key, (uint32_t)(g->key >> 32), 0, &at, &len, why, n))
        return -1;
    *x = (one_map){ .at = at, .len = len, .pid = pid, .g = *g };
    return 0;
}

int direct_map_src(direct_maps **m, int size, int q, int32_t pid, const direct_region *g,
                   uint64_t off, uint64_t len, const char **src, char *why, size_t whylen)
{
    if (!*m) {
        *m = calloc(1, sizeof **m + (size_t)size * MAPS_PER_PEER * sizeof(one_map));
        if (!*m) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        (*m)->size = size;
    }
    one_map *row = &(*m)->e[(size_t)q * MAPS_PER_PEER], *x = NULL;
    for (int i = 0; i < MAPS_PER_PEER && !x; i++) {
        if (!row[i].at || row[i].g.key != g->key)
            continue;
        if (row[i].g.gen == g->gen && row[i].pid == pid)
            x = &row[i];
        else
            unmap(&row[i]); /* freed there and its fd slot reused */
    }
    if (!x) {
        x = &row[0];
        for (int i = 1; i < MAPS_PER_PEER; i++)
            if (!x->at ? 0 : (!row[i].at || row[i].used < x->used))
                x = &row[i];
        unmap(x);
        if (map_region(x, pid, g, why, whylen))
            return -1;
    }
    if (off > x->len || len > x->len - off) {
        snprintf(why, whylen, "%llu bytes at %llu lie outside its region of %zu",
                 (unsigned long long)len, (unsigned long long)off, x->len);
        return -1;
    }
    x->used = ++(*m)->clock;
    *src = x->at + off;
    return 0;
}
