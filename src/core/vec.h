/* Growable arrays kept as fields of the struct that owns them (a pointer,
 * a count, a capacity), in the manner of a C library rather than a
 * container type: the owner keeps its own count and element type, and asks
 * for room before it appends.
 *
 *   if ((rc = VEC_RESERVE(l->a, l->cap, (size_t)l->n + 1)))
 *       return rc;
 *   l->a[l->n++] = x;
 *
 * The capacity doubles (from VEC_FIRST when the array is empty) until the
 * count asked for fits, so n appends cost O(n) copying in all. Capacities
 * may be size_t, int or uint32_t fields: the int and uint32_t ones never
 * grow past what their type holds. */
#ifndef WEFT_CORE_VEC_H
#define WEFT_CORE_VEC_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* The capacity an empty array first grows to, in elements. */
#define VEC_FIRST 8

/* Makes the array whose pointer is at items_at (a T **, passed as void *;
 * *cap elements of size bytes each, size > 0) hold at least need elements,
 * with no more than most. 0, or WEFT_ENOMEM with the array and *cap as
 * they were: when realloc fails, or when need exceeds most or need * size
 * does not fit a size_t. The elements past the old capacity are not
 * initialised. (A size of 0 is WEFT_EINVAL.) */
int vec_grow(void *items_at, size_t *cap, size_t need, size_t size, size_t most);

/* vec_grow for a size_t capacity, with nothing to do when need fits. */
static inline int vec_reserve(void *items_at, size_t *cap, size_t need, size_t size)
{
    return need <= *cap ? 0 : vec_grow(items_at, cap, need, size, SIZE_MAX);
}

/* The same for an int capacity (>= 0), which stays at most INT_MAX. */
static inline int vec_reserve_int(void *items_at, int *cap, size_t need, size_t size)
{
    size_t c = (size_t)*cap;
    if (need <= c)
        return 0;
    int rc = vec_grow(items_at, &c, need, size, INT_MAX);
    if (!rc)
        *cap = (int)c;
    return rc;
}

/* The same for a uint32_t capacity, which stays at most UINT32_MAX. */
static inline int vec_reserve_u32(void *items_at, uint32_t *cap, size_t need, size_t size)
{
    size_t c = *cap;
    if (need <= c)
        return 0;
    int rc = vec_grow(items_at, &c, need, size, UINT32_MAX);
    if (!rc)
        *cap = (uint32_t)c;
    return rc;
}

/* VEC_RESERVE(items, cap, need): the reserve that fits cap's type, for the
 * array items (a T * lvalue) of sizeof *items bytes an element. A cap of
 * another type, or an items that is no pointer, does not compile. */
#define VEC_RESERVE(items, cap, need)                                                       \
    _Generic((cap), int: vec_reserve_int, uint32_t: vec_reserve_u32, default: vec_reserve)( \
        &(items), &(cap), (size_t)(need), sizeof *(items))

#endif
