/* Byte-pair merging of one piece: start from its bytes' tokens and merge,
 * again and again, the adjacent pair whose concatenation has the lowest
 * id, the leftmost on a tie, until no adjacent pair makes a token.
 *
 * Short pieces (nearly all of them) take the plain scan with the pairs'
 * ranks kept beside the parts. A long piece (a run of digits, a line of
 * dashes, base64) would make that quadratic, so it keeps its candidate
 * pairs in a min-heap keyed by (rank, position) over a linked list of
 * parts: n log n. Entries left stale by a merge are dropped when popped
 * (the pair at that position no longer has that rank). */
#include "train/bpe.h"

#include <stdlib.h>
#include <string.h>

#define SCAN_MAX 64

size_t bpe_merge_scan(const weft_bpe *b, const unsigned char *s, size_t n, int32_t *out)
{
    int32_t rank[SCAN_MAX];
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        out[i] = b->byte_token[s[i]];
    if (n > SCAN_MAX) { /* no room for the ranks: look each pair up every time */
        size_t m = n;
        for (;;) {
            int32_t best = -1;
            size_t at = 0;
            for (size_t i = 0; i + 1 < m; i++) {
                int32_t r = bpe_pair(b, out[i], out[i + 1]);
                if (r >= 0 && (best < 0 || r < best))
                    best = r, at = i;
            }
            if (best < 0)
                return m;
            out[at] = best;
            memmove(out + at + 1, out + at + 2, (m - at - 2) * sizeof *out);
            m--;
        }
    }
    size_t m = n;
    for (size_t i = 0; i + 1 < m; i++)
        rank[i] = bpe_pair(b, out[i], out[i + 1]);
    for (;;) {
        int32_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] >= 0 && (best < 0 || rank[i] < best))
                best = rank[i], at = i;
        if (best < 0)
            return m;
        out[at] = best;
        memmove(out + at + 1, out + at + 2, (m - at - 2) * sizeof *out);
        memmove(rank + at + 1, rank + at + 2, (m > at + 3 ? m - at - 3 : 0) * sizeof *rank);
        m--;
        if (at > 0)
            rank[at - 1] = bpe_pair(b, out[at - 1], out[at]);
        if (at + 1 < m)
            rank[at] = bpe_pair(b, out[at], out[at + 1]);
    }
}

typedef struct {
    uint64_t *heap;
    size_t len;
} pair_heap;

static void heap_push(pair_heap *h, uint64_t v)
{
    size_t i = h->len++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h->heap[up] <= v)
            break;
        h->heap[i] = h->heap[up];
        i = up;
    }
    h->heap[i] = v;
}

static uint64_t heap_pop(pair_heap *h)
{
    uint64_t top = h->heap[0], v = h->heap[--h->len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && h->heap[c + 1] < h->heap[c])
            c++;
        if (v <= h->heap[c])
            break;
        h->heap[i] = h->heap[c];
        i = c;
    }
    h->heap[i] = v;
    return top;
}

static void push_pair(const weft_bpe *b, pair_heap *h, const int32_t *id, size_t i, size_t j)
{
    int32_t r = bpe_pair(b, id[i], id[j]);
    if (r >= 0)
        heap_push(h, (uint64_t)r << 32 | i);
}

/* id[], next[], prev[] and a heap of up to 3n entries, in b->work. */
static int merge_heap(weft_bpe *b, const unsigned char *s, size_t n, int32_t *out, size_t *count)
{
    if (n > INT32_MAX) /* positions are int32 (and 32 bits of a heap key) */
        return WEFT_EINVAL;
    size_t need = n * (3 * sizeof(int32_t) + 3 * sizeof(uint64_t));
    if (b->work_cap < need) {
        void *w = realloc(b->work, need);
        if (!w)
            return WEFT_ENOMEM;
        b->work = w;
        b->work_cap = need;
    }
    pair_heap h = { b->work, 0 };
    int32_t *id = (int32_t *)(h.heap + 3 * n), *next = id + n, *prev = next + n;
    for (size_t i = 0; i < n; i++) {
        id[i] = b->byte_token[s[i]];
        next[i] = (int32_t)(i + 1);
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(b, &h, id, i, i + 1);
    while (h.len) {
        uint64_t e = heap_pop(&h);
        size_t i = (size_t)(e & 0xffffffffu);
        int32_t r = (int32_t)(e >> 32);
        size_t j = (size_t)next[i];
        if (id[i] < 0 || j >= n || bpe_pair(b, id[i], id[j]) != r)
            continue; /* stale */
        id[i] = r;
        id[j] = -1;
        next[i] = next[j];
        if ((size_t)next[j] < n)
            prev[next[j]] = (int32_t)i;
        if (prev[i] >= 0)
            push_pair(b, &h, id, (size_t)prev[i], i);
        if ((size_t)next[i] < n)
            push_pair(b, &h, id, i, (size_t)next[i]);
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i = (size_t)next[i])
        out[m++] = id[i];
    *count = m;
    return 0;
}

int bpe_merge(weft_bpe *b, const unsigned char *s, size_t n, int32_t *out, size_t *count)
{
    if (n <= SCAN_MAX) {
        *count = bpe_merge_scan(b, s, n, out);
        return 0;
    }
    return merge_heap(b, s, n, out, count);
}
