/* PowerSGD (Vogels et al.): one step of subspace iteration per call. For a
 * matrix M (rows x cols, with the error kept from the last call added),
 * P = M Q is summed over the ranks, orthogonalised, then Q = M^T P is
 * summed; P Q^T / p approximates the mean of the ranks' M with
 * (rows + cols) r floats sent instead of rows cols. Q is kept as the next
 * call's start (the warm start that makes one iteration enough), and what
 * the approximation misses of this rank's M is kept as its error.
 *
 * Both sums are ring all-reduces of every matrix's factor at once; the
 * elements of no low-rank matrix ride the first one exactly. Every rank
 * computes the orthogonalisation and the product from the same summed
 * bits, so the result is the same everywhere. */
#include "coll/compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Gram-Schmidt on the r columns of P (rows x r, row-major), twice over
 * (once is not orthogonal enough in f32). A column that vanishes stays
 * zero: its share of the approximation is then zero, and the error keeps
 * it. */
static void orthogonalise(float *P, int rows, int r)
{
    for (int j = 0; j < r; j++)
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < j; i++) {
                double d = 0;
                for (int a = 0; a < rows; a++)
                    d += (double)P[(size_t)a * r + i] * P[(size_t)a * r + j];
                for (int a = 0; a < rows; a++)
                    P[(size_t)a * r + j] -= (float)d * P[(size_t)a * r + i];
            }
            double nn = 0;
            for (int a = 0; a < rows; a++)
                nn += (double)P[(size_t)a * r + j] * P[(size_t)a * r + j];
            float inv = nn > 1e-30 ? (float)(1.0 / sqrt(nn)) : 0.0f;
            for (int a = 0; a < rows; a++)
                P[(size_t)a * r + j] *= inv;
        }
}

/* The same start on every rank, without a shared generator: a hash of the
 * position. */
static float start_value(size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (float)((double)(x >> 11) * 0x1p-53 - 0.5);
}

/* Elements of buf that no low-rank matrix covers, in order. fn(i) for each. */
#define FOR_PLAIN(z, i, body)                                                 \
    do {                                                                      \
        size_t i = 0;                                                         \
        for (int m_ = 0; m_ <= (z)->nmat; m_++) {                             \
            const compress_matrix *x_ = m_ < (z)->nmat ? &(z)->mat[m_] : NULL; \
            size_t end_ = x_ ? x_->offset : (z)->count;                       \
            if (x_ && !x_->low_rank)                                          \
                continue;                                                     \
            for (; i < end_; i++)                                             \
                body;                                                         \
            if (x_)                                                           \
                i = x_->offset + (size_t)x_->rows * (size_t)x_->cols;         \
        }                                                                     \
    } while (0)

static size_t plain_count(const weft_compressor *z)
{
    size_t n = 0;
    FOR_PLAIN(z, i, n++);
    return n;
}

static int ring_sum(weft_compressor *z, float *v, size_t n)
{
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = v, .recv = v, .count = n,
                         .dtype = WEFT_F32, .op = WEFT_SUM, .algo = WEFT_ALGO_RING };
    int p = weft_comm_size(z->comm);
    z->sent += compress_ring_bytes(p, weft_comm_rank(z->comm), n, sizeof(float));
    return p > 1 && n ? weft_collective(z->comm, &a) : 0;
}

int compress_powersgd_run(weft_compressor *z, float *buf, weft_op op)
{
    int r = z->spec.rank, p = weft_comm_size(z->comm), rc;
    size_t np = 0, plain = plain_count(z);
    for (int m = 0; m < z->nmat; m++)
        np += z->mat[m].low_rank ? (size_t)z->mat[m].rows * (size_t)r : 0;
    float *a1 = malloc((np + plain + 1) * sizeof *a1), *a2 = malloc((z->q_len + 1) * sizeof *a2);
    if (!a1 || !a2) {
        free(a1);
        free(a2);
        return WEFT_ENOMEM;
    }
    if (!z->q_ready) {
        for (size_t i = 0; i < z->q_len; i++)
            z->q[i] = start_value(i);
        z->q_ready = 1;
    }
    /* M += error; P = M Q; then the plain elements */
    size_t at = 0;
    for (int m = 0; m < z->nmat; m++) {
        const compress_matrix *x = &z->mat[m];
        if (!x->low_rank)
            continue;
        float *M = buf + x->offset, *E = z->err + x->offset, *Q = z->q + x->q_off;
        for (size_t i = 0; i < (size_t)x->rows * (size_t)x->cols; i++)
            M[i] += E[i];
        for (int a = 0; a < x->rows; a++)
            for (int j = 0; j < r; j++) {
                float s = 0;
                for (int b = 0; b < x->cols; b++)
                    s += M[(size_t)a * x->cols + b] * Q[(size_t)b * r + j];
                a1[at + (size_t)a * r + j] = s;
            }
        at += (size_t)x->rows * r;
    }
    FOR_PLAIN(z, i, a1[at++] = buf[i]);
    if ((rc = ring_sum(z, a1, np + plain)))
        goto out;
    /* Q = M^T P, with P orthogonalised */
    at = 0;
    for (int m = 0; m < z->nmat; m++) {
        const compress_matrix *x = &z->mat[m];
        if (!x->low_rank)
            continue;
        float *P = a1 + at, *M = buf + x->offset, *Q = a2 + x->q_off;
        orthogonalise(P, x->rows, r);
        for (int b = 0; b < x->cols; b++)
            for (int j = 0; j < r; j++) {
                float s = 0;
                for (int a = 0; a < x->rows; a++)
                    s += M[(size_t)a * x->cols + b] * P[(size_t)a * r + j];
                Q[(size_t)b * r + j] = s;
            }
        at += (size_t)x->rows * r;
    }
    if ((rc = ring_sum(z, a2, z->q_len)))
        goto out;
    /* approximation of the mean = P Q^T / p; error = this rank's M - it */
    at = 0;
    float scale = op == WEFT_AVG ? 1.0f : (float)p;
    for (int m = 0; m < z->nmat; m++) {
        const compress_matrix *x = &z->mat[m];
        if (!x->low_rank)
            continue;
        float *P = a1 + at, *M = buf + x->offset, *E = z->err + x->offset, *Q = a2 + x->q_off;
        for (size_t i = 0; i < (size_t)x->cols * r; i++)
            Q[i] /= (float)p;
        for (int a = 0; a < x->rows; a++)
            for (int b = 0; b < x->cols; b++) {
                float s = 0;
                for (int j = 0; j < r; j++)
                    s += P[(size_t)a * r + j] * Q[(size_t)b * r + j];
                size_t e = (size_t)a * x->cols + b;
                E[e] = M[e] - s;
                M[e] = s * scale;
            }
        at += (size_t)x->rows * r;
    }
    if (z->q_len)
        memcpy(z->q, a2, z->q_len * sizeof *a2);
    FOR_PLAIN(z, i, buf[i] = op == WEFT_AVG ? a1[at++] / (float)p : a1[at++]);
out:
    free(a1);
    free(a2);
    return rc;
}
