/* 3D layouts: Megatron's 16-rank example (tp = 2, pp = 4, so dp = 2) gives
 * its groups; coordinates and ranks are inverse for every order; bad
 * orders and sizes are refused. */
#include "test.h"
#include "weft.h"

#include <string.h>

/* The members of rank r's group along dimension dim, in order. */
static void group_of(const weft_layout *l, int r, int dim, int *out)
{
    int c[3];
    weft_layout_coords(l, r, &c[0], &c[1], &c[2]);
    for (int k = 0; k < l->size[dim]; k++) {
        int x[3] = { c[0], c[1], c[2] };
        x[dim] = k;
        out[k] = weft_layout_rank(l, x[0], x[1], x[2]);
    }
}

TEST(megatron_16)
{
    weft_layout l;
    CHECK(weft_layout_init(&l, 16, 2, 4, NULL) == 0);
    CHECK(l.size[0] == 2 && l.size[1] == 2 && l.size[2] == 4);
    static const int tensor[8][2] = { {0,1},{2,3},{4,5},{6,7},{8,9},{10,11},{12,13},{14,15} };
    static const int data[8][2] = { {0,2},{1,3},{4,6},{5,7},{8,10},{9,11},{12,14},{13,15} };
    static const int pipe[4][4] = { {0,4,8,12},{1,5,9,13},{2,6,10,14},{3,7,11,15} };
    int g[4];
    for (int i = 0; i < 8; i++) {
        group_of(&l, tensor[i][0], 0, g);
        CHECKF(g[0] == tensor[i][0] && g[1] == tensor[i][1], "tensor group %d", i);
        group_of(&l, data[i][0], 1, g);
        CHECKF(g[0] == data[i][0] && g[1] == data[i][1], "data group %d: %d,%d", i, g[0], g[1]);
    }
    for (int i = 0; i < 4; i++) {
        group_of(&l, pipe[i][0], 2, g);
        CHECKF(memcmp(g, pipe[i], sizeof g) == 0, "pipeline group %d: %d,%d,%d,%d", i, g[0], g[1],
               g[2], g[3]);
    }
}

TEST(every_order)
{
    static const char *const orders[] = { "tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp",
                                          "pp-tp-dp", "pp-dp-tp" };
    for (int o = 0; o < 6; o++) {
        weft_layout l;
        char buf[16];
        CHECK(weft_layout_init(&l, 24, 2, 3, orders[o]) == 0);
        weft_layout_format(&l, buf, sizeof buf);
        CHECKF(strcmp(buf, orders[o]) == 0, "%s formats as %s", orders[o], buf);
        int seen[24] = { 0 }, ok = 1;
        for (int r = 0; r < 24; r++) {
            int t, d, p;
            weft_layout_coords(&l, r, &t, &d, &p);
            int back = weft_layout_rank(&l, t, d, p);
            ok &= back == r && t < 2 && d < 4 && p < 3;
            if (back >= 0 && back < 24)
                seen[back]++;
        }
        for (int r = 0; r < 24; r++)
            ok &= seen[r] == 1;
        CHECKF(ok, "%s: coordinates and ranks are not inverse", orders[o]);
    }
}

TEST(refused)
{
    weft_layout l;
    CHECK(weft_layout_init(&l, 12, 5, 1, NULL) == WEFT_EINVAL);
    CHECK(weft_layout_init(&l, 8, 2, 2, "tp-tp-pp") == WEFT_EINVAL);
    CHECK(weft_layout_init(&l, 8, 2, 2, "tp-dp") == WEFT_EINVAL);
    CHECK(weft_layout_init(&l, 8, 2, 2, "tp-dp-pp-x") == WEFT_EINVAL);
    CHECK(weft_layout_init(&l, 8, 2, 2, "xx-dp-pp") == WEFT_EINVAL);
    CHECK(weft_layout_init(&l, 8, 0, 2, NULL) == WEFT_EINVAL);
    CHECK(weft_layout_init(&l, 8, 2, 2, "pp-tp-dp") == 0);
    CHECK(weft_layout_rank(&l, 2, 0, 0) == WEFT_EINVAL);
}
