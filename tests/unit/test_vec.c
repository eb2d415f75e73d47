/* The growable array of core/vec.h: capacity doubles from VEC_FIRST until
 * the count asked for fits, a reserve that fits does nothing (not even
 * for an empty array asking for 0), contents survive each move, and a
 * count whose bytes overflow, or that its capacity type cannot hold, is
 * refused with the array and capacity untouched. */
#include "core/vec.h"
#include "test.h"
#include "weft.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    double x, y;
    int tag;
} item;

TEST(growth_doubles)
{
    item *a = NULL;
    size_t cap = 0;
    CHECK(VEC_RESERVE(a, cap, 1) == 0 && a && cap == VEC_FIRST);
    CHECK(VEC_RESERVE(a, cap, VEC_FIRST + 1) == 0 && cap == 2 * VEC_FIRST);
    /* one call may double more than once */
    CHECK(VEC_RESERVE(a, cap, 8 * VEC_FIRST + 1) == 0 && cap == 16 * VEC_FIRST);
    /* room already there: the same array, the same capacity */
    item *before = a;
    CHECK(VEC_RESERVE(a, cap, 3) == 0 && a == before && cap == 16 * VEC_FIRST);
    CHECK(VEC_RESERVE(a, cap, cap) == 0 && a == before && cap == 16 * VEC_FIRST);
    free(a);

    /* a first need above VEC_FIRST doubles up to it */
    a = NULL, cap = 0;
    CHECK(VEC_RESERVE(a, cap, 5 * VEC_FIRST) == 0 && cap == 8 * VEC_FIRST);
    free(a);
}

TEST(reserve_zero)
{
    item *a = NULL;
    size_t cap = 0;
    int icap = 0;
    uint32_t ucap = 0;
    CHECK(VEC_RESERVE(a, cap, 0) == 0 && a == NULL && cap == 0);
    CHECK(VEC_RESERVE(a, icap, 0) == 0 && a == NULL && icap == 0);
    CHECK(VEC_RESERVE(a, ucap, 0) == 0 && a == NULL && ucap == 0);
    CHECK(vec_grow(&a, &cap, 0, sizeof *a, SIZE_MAX) == 0 && a == NULL && cap == 0);
    CHECK(vec_grow(&a, &cap, 1, 0, SIZE_MAX) == WEFT_EINVAL && a == NULL && cap == 0);
}

TEST(overflow_refused)
{
    item *a = NULL;
    size_t cap = 0;
    CHECK(VEC_RESERVE(a, cap, 4) == 0 && cap == VEC_FIRST);
    a[0].tag = 42;
    item *before = a;
    /* need * size past SIZE_MAX */
    CHECK(VEC_RESERVE(a, cap, SIZE_MAX / sizeof *a + 1) == WEFT_ENOMEM);
    CHECK(VEC_RESERVE(a, cap, SIZE_MAX) == WEFT_ENOMEM);
    CHECK(a == before && cap == VEC_FIRST && a[0].tag == 42);

    /* an int capacity never passes INT_MAX, a uint32_t one UINT32_MAX */
    int icap = 0;
    char *c = NULL;
    CHECK(VEC_RESERVE(c, icap, (size_t)INT_MAX + 1) == WEFT_ENOMEM && c == NULL && icap == 0);
    uint32_t ucap = 0;
    CHECK(VEC_RESERVE(c, ucap, (size_t)UINT32_MAX + 1) == WEFT_ENOMEM && c == NULL && ucap == 0);

    /* doubling stops at the most a capacity may be, without wrapping */
    size_t small = 6;
    char *s = NULL;
    CHECK(vec_grow(&s, &small, 7, 1, 10) == 0 && small == 10 && s);
    CHECK(vec_grow(&s, &small, 11, 1, 10) == WEFT_ENOMEM && small == 10 && s);
    free(s);
    free(a);
}

/* A request no allocator grants: realloc fails and the array stays. The
 * sanitizers end the program on such a request instead of failing it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VEC_HUGE_SKIP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VEC_HUGE_SKIP 1
#endif
#endif

TEST(failed_allocation_keeps_array)
{
#ifndef VEC_HUGE_SKIP
    item *a = NULL;
    size_t cap = 0;
    CHECK(VEC_RESERVE(a, cap, 3) == 0);
    a[2].tag = 7;
    item *before = a;
    CHECK(VEC_RESERVE(a, cap, SIZE_MAX / sizeof *a) == WEFT_ENOMEM);
    CHECK(a == before && cap == VEC_FIRST && a[2].tag == 7);
    free(a);
#endif
}

TEST(contents_kept)
{
    item *a = NULL;
    int n = 0, cap = 0, moves = 0;
    for (int i = 0; i < 10000; i++) {
        item *before = a;
        if (VEC_RESERVE(a, cap, (size_t)n + 1)) {
            CHECK(!"reserve failed");
            break;
        }
        moves += a != before;
        a[n++] = (item){ i * 0.5, -i, i };
    }
    CHECK(n == 10000 && cap == 16384);
    CHECK(moves >= 1 && moves <= 12); /* log2(16384 / 8) + 1 growths at most */
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += a[i].x != i * 0.5 || a[i].y != -i || a[i].tag != i;
    CHECK(bad == 0);
    free(a);

    uint32_t un = 0, ucap = 0;
    uint64_t *u = NULL;
    for (uint32_t i = 0; i < 1000; i++) {
        if (VEC_RESERVE(u, ucap, (size_t)un + 1))
            break;
        u[un++] = (uint64_t)i * i;
    }
    CHECK(un == 1000 && ucap == 1024);
    bad = 0;
    for (uint32_t i = 0; i < un; i++)
        bad += u[i] != (uint64_t)i * i;
    CHECK(bad == 0);
    free(u);
}
