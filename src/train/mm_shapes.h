/* The matrix products of a training step (each shape with how often a
 * step runs it) and the choice of kernel made on them: plain data that
 * the matmul context records and routes by, and that MM_AUTO's timing
 * (mm_choose.h) fills. */
#ifndef TRAIN_MM_SHAPES_H
#define TRAIN_MM_SHAPES_H

#include <stddef.h>
#include <stdint.h>

/* The kernels: MM_AUTO times both on the model's products (mm_auto.h). */
enum { MM_AUTO = 0, MM_PORTABLE = 1, MM_OPENBLAS = 2 };

enum { MM_SHAPES_MAX = 48 };

typedef struct {
    int ta, tb, M, N, K, acc;   /* acc: beta 1 (weight gradients) */
    double count;               /* runs per step */
    int pick;                   /* the kernel it ran faster on (train_mm_choose) */
} mm_shape;

typedef struct {
    mm_shape s[MM_SHAPES_MAX];
    int n;
    int over;   /* shapes that did not fit (counted, not timed) */
} mm_shapes;

/* Counts one run of a shape (a new one takes the next free entry). */
void train_mm_shapes_add(mm_shapes *t, int ta, int tb, int M, int N, int K, int acc);
double train_mm_shapes_flops(const mm_shapes *t);

typedef struct {
    int backend;                  /* the choice (for a mixed one, the faster for all) */
    int mixed;                    /* route says each product's kernel */
    mm_shapes route;              /* mixed: the shapes, each with its pick */
    double port_s, blas_s;        /* a step's products on each (0: not timed) */
    double split_s;               /* each shape on its faster kernel */
    double flops;                 /* a step's products' FLOPs */
    int shapes;
    double took_s;                /* the timing's cost (0: not timed now) */
    char source[320];             /* "measured now", "kept in FILE", "WEFT_MATMUL", ... */
} mm_choice;

/* A mixed choice's kernel for one product: its pick when route has the
 * shape, else the choice's backend. */
int train_mm_choice_route(const mm_choice *c, int ta, int tb, int M, int N, int K, int acc);

/* "openblas" or "portable". */
const char *train_mm_kernel_name(int backend);

/* One line for logs: "openblas (71.2 GFLOP/s on this model's 15 products)
 * over portable (66.0), measured now". */
void train_mm_choice_text(const mm_choice *c, char *buf, size_t cap);

#endif
