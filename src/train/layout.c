/* The 3D layout: which job rank is which (tensor rank, replica, stage),
 * from the sizes and an order of the three dimensions, fastest first.
 * Megatron's default is tensor fastest, then data, then pipeline
 * ("tp-dp-pp"): a tensor group is neighbouring ranks (one host, its
 * shared memory), a pipeline's stages are tp*dp ranks apart. */
#include "weft.h"

#include <stdio.h>
#include <string.h>

static int dim_of(const char *s, size_t n)
{
    if (n == 2 && strncmp(s, "tp", 2) == 0)
        return 0;
    if (n == 2 && strncmp(s, "dp", 2) == 0)
        return 1;
    if (n == 2 && strncmp(s, "pp", 2) == 0)
        return 2;
    return -1;
}

int weft_layout_init(weft_layout *l, int world, int tp, int pp, const char *order)
{
    if (!l || world < 1 || tp < 1 || pp < 1 || world % (tp * pp))
        return WEFT_EINVAL;
    memset(l, 0, sizeof *l);
    l->size[0] = tp;
    l->size[1] = world / (tp * pp);
    l->size[2] = pp;
    const char *s = order && *order ? order : "tp-dp-pp";
    int seen = 0;
    for (int k = 0; k < 3; k++) {
        const char *e = strchr(s, '-');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        int d = dim_of(s, n);
        if (d < 0 || (seen & (1 << d)))
            return WEFT_EINVAL;
        seen |= 1 << d;
        l->order[k] = d;
        if (k < 2 && !e)
            return WEFT_EINVAL;
        s = e ? e + 1 : s + n;
    }
    return *s ? WEFT_EINVAL : 0;
}

void weft_layout_coords(const weft_layout *l, int rank, int *tp, int *dp, int *pp)
{
    int c[3];
    for (int k = 0; k < 3; k++) {
        int d = l->order[k];
        c[d] = rank % l->size[d];
        rank /= l->size[d];
    }
    *tp = c[0];
    *dp = c[1];
    *pp = c[2];
}

int weft_layout_rank(const weft_layout *l, int tp, int dp, int pp)
{
    int c[3] = { tp, dp, pp }, rank = 0;
    for (int k = 2; k >= 0; k--) {
        int d = l->order[k];
        if (c[d] < 0 || c[d] >= l->size[d])
            return WEFT_EINVAL;
        rank = rank * l->size[d] + c[d];
    }
    return rank;
}

void weft_layout_format(const weft_layout *l, char *buf, size_t len)
{
    static const char *const names[3] = { "tp", "dp", "pp" };
    snprintf(buf, len, "%s-%s-%s", names[l->order[0]], names[l->order[1]], names[l->order[2]]);
}

/* Each group is the ranks that agree on the other two coordinates; its
 * members are ordered by their own coordinate. */
int weft_layout_split(const weft_layout *l, weft_comm *world, weft_comm **tp, weft_comm **dp,
                      weft_comm **pp)
{
    if (!l || !world)
        return WEFT_EINVAL;
    int t, d, p, rc;
    weft_layout_coords(l, weft_comm_rank(world), &t, &d, &p);
    int T = l->size[0], D = l->size[1];
    rc = weft_comm_split(world, d + D * p, t, tp);
    if (rc == 0)
        rc = weft_comm_split(world, t + T * p, d, dp);
    if (rc == 0)
        rc = weft_comm_split(world, t + T * d, p, pp);
    return rc;
}
