/* The growth step of core/vec.h, out of line: the reserve that finds room
 * already there is inline, and this runs about log2(n) times per array. */
#include "core/vec.h"

#include "weft.h"

#include <stdlib.h>
#include <string.h>

int vec_grow(void *items_at, size_t *cap, size_t need, size_t size, size_t most)
{
    if (!size)
        return WEFT_EINVAL;
    if (most > SIZE_MAX / size)
        most = SIZE_MAX / size;
    if (need <= *cap)
        return 0;
    if (need > most)
        return WEFT_ENOMEM;
    size_t c = *cap ? *cap : VEC_FIRST;
    while (c < need)
        c = c > most / 2 ? most : 2 * c;
    if (c > most)
        c = most;
    /* The pointer is copied in and out by bytes: items_at holds a T *, and
     * storing through a void ** would break the aliasing rules. */
    void *old, *grown;
    memcpy(&old, items_at, sizeof old);
    if (!(grown = realloc(old, c * size)))
        return WEFT_ENOMEM;
    memcpy(items_at, &grown, sizeof grown);
    *cap = c;
    return 0;
}
