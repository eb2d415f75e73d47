/* A step's matrix products and the choice made on them (mm_shapes.h). */
#include "train/mm_shapes.h"

#include <stdio.h>
#include <string.h>

void train_mm_shapes_add(mm_shapes *t, int ta, int tb, int M, int N, int K, int acc)
{
    for (int i = 0; i < t->n; i++) {
        mm_shape *s = &t->s[i];
        if (s->ta == ta && s->tb == tb && s->M == M && s->N == N && s->K == K && s->acc == acc) {
            s->count += 1.0;
            return;
        }
    }
    if (t->n == MM_SHAPES_MAX) {
        t->over++;
        return;
    }
    t->s[t->n++] = (mm_shape){ ta, tb, M, N, K, acc, 1.0, MM_PORTABLE };
}

double train_mm_shapes_flops(const mm_shapes *t)
{
    double f = 0.0;
    for (int i = 0; i < t->n; i++)
        f += t->s[i].count * 2.0 * t->s[i].M * t->s[i].N * t->s[i].K;
    return f;
}

int train_mm_choice_route(const mm_choice *c, int ta, int tb, int M, int N, int K, int acc)
{
    for (int i = 0; c->mixed && i < c->route.n; i++) {
        const mm_shape *s = &c->route.s[i];
        if (s->ta == ta && s->tb == tb && s->M == M && s->N == N && s->K == K && s->acc == acc)
            return s->pick;
    }
    return c->backend;
}

const char *train_mm_kernel_name(int b)
{
    return b == MM_OPENBLAS ? "openblas" : "portable";
}

void train_mm_choice_text(const mm_choice *c, char *buf, size_t cap)
{
    if (c->port_s <= 0 || c->blas_s <= 0) {
        snprintf(buf, cap, "%s (%s)", train_mm_kernel_name(c->backend), c->source);
        return;
    }
    double pg = c->flops / c->port_s / 1e9, bg = c->flops / c->blas_s / 1e9;
    int o = c->backend == MM_OPENBLAS, nb = 0;
    for (int i = 0; c->mixed && i < c->route.n; i++)
        nb += c->route.s[i].pick == MM_OPENBLAS;
    char mix[96] = "";
    if (c->mixed)
        snprintf(mix, sizeof mix, "each product on its faster kernel (%d of %d on openblas): ", nb,
                 c->route.n);
    snprintf(buf, cap,
             "%s%s (%.1f GFLOP/s on this model's %d products) over %s (%.1f); each product on its "
             "faster kernel: %.1f; %s",
             mix, train_mm_kernel_name(c->backend), o ? bg : pg, c->shapes, train_mm_kernel_name(!o ? MM_OPENBLAS : MM_PORTABLE),
             o ? pg : bg, c->flops / c->split_s / 1e9, c->source);
    size_t len = strlen(buf);
    if (c->took_s > 0 && len < cap)
        snprintf(buf + len, cap - len, " (timing took %.2f s)", c->took_s);
}
