/* RMSNorm, rotary embedding, SwiGLU and the plain token embedding of a
 * Llama (layers_llama.h), written to give transformers' fp32 results: the
 * same operations in the same order where the order changes the bits. */
#include "train/layers_llama.h"

#include <math.h>
#include <string.h>

void train_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, int rows,
                           int c, float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * c;
        float *o = out + (size_t)r * c;
        float ss = 0.0f;
        for (int i = 0; i < c; i++)
            ss += x[i] * x[i];
        float s = 1.0f / sqrtf(ss / (float)c + eps);
        rstd[r] = s;
        for (int i = 0; i < c; i++)
            o[i] = w[i] * (x[i] * s);
    }
}

void train_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in,
                            const float *w, const float *rstd, int rows, int c)
{
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * c, *d = dout + (size_t)r * c;
        float *dx = din + (size_t)r * c, s = rstd[r];
        /* y = w x s with s = (mean(x^2) + eps)^-1/2, so
         * dx = s (w d) - x s^3 mean(w d x) */
        float dot = 0.0f;
        for (int i = 0; i < c; i++) {
            dot += w[i] * d[i] * x[i];
            dw[i] += d[i] * x[i] * s;
        }
        float k = dot / (float)c * s * s * s;
        for (int i = 0; i < c; i++)
            dx[i] += w[i] * d[i] * s - x[i] * k;
    }
}

void train_rope_tables(float *cos_t, float *sin_t, int T, int hs, float theta)
{
    int half = hs / 2;
    for (int i = 0; i < half; i++) {
        /* theta ** (2i / hs), inverted, as torch does it in fp32 */
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
        for (int t = 0; t < T; t++) {
            float f = (float)t * inv;
            cos_t[(size_t)t * half + i] = cosf(f);
            sin_t[(size_t)t * half + i] = sinf(f);
        }
    }
}

/* dir 1: x1 c - x2 s | x2 c + x1 s (forward); -1: the inverse rotation. */
static void rope(float *x, const float *cos_t, const float *sin_t, int rows, int T, int stride,
                 int heads, int hs, float dir)
{
    int half = hs / 2;
    for (int r = 0; r < rows; r++) {
        const float *c = cos_t + (size_t)(r % T) * half, *s = sin_t + (size_t)(r % T) * half;
        for (int h = 0; h < heads; h++) {
            float *a = x + (size_t)r * stride + (size_t)h * hs, *b = a + half;
            for (int i = 0; i < half; i++) {
                float x1 = a[i], x2 = b[i], si = dir * s[i];
                a[i] = x1 * c[i] - x2 * si;
                b[i] = x2 * c[i] + x1 * si;
            }
        }
    }
}

void train_rope_forward(float *x, const float *cos_t, const float *sin_t, int rows, int T,
                        int stride, int heads, int hs)
{
    rope(x, cos_t, sin_t, rows, T, stride, heads, hs, 1.0f);
}

void train_rope_backward(float *dx, const float *cos_t, const float *sin_t, int rows, int T,
                         int stride, int heads, int hs)
{
    /* a rotation's transpose is the rotation by minus the angle */
    rope(dx, cos_t, sin_t, rows, T, stride, heads, hs, -1.0f);
}

void train_swiglu_forward(float *h, const float *gu, int rows, int f)
{
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * f, *u = g + f;
        float *o = h + (size_t)r * f;
        for (int i = 0; i < f; i++)
            o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void train_swiglu_backward(float *dgu, const float *dh, const float *gu, int rows, int f)
{
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * f, *u = g + f, *d = dh + (size_t)r * f;
        float *dg = dgu + (size_t)r * 2 * f, *du = dg + f;
        for (int i = 0; i < f; i++) {
            float sg = 1.0f / (1.0f + expf(-g[i])), silu = g[i] * sg;
            du[i] = d[i] * silu;
            /* silu' = s (1 + g (1 - s)) */
            dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
        }
    }
}

void train_token_embedding_forward(float *out, const int32_t *tok, const float *wte, int lo, int n,
                                   int rows, int c)
{
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * c;
        int w = tok[r] - lo;
        if (w >= 0 && w < n)
            memcpy(o, wte + (size_t)w * c, sizeof(float) * (size_t)c);
        else
            memset(o, 0, sizeof(float) * (size_t)c);
    }
}

void train_token_embedding_backward(float *dwte, const float *dout, const int32_t *tok, int lo,
                                    int n, int rows, int c)
{
    for (int r = 0; r < rows; r++) {
        int w = tok[r] - lo;
        if (w < 0 || w >= n)
            continue;
        float *d = dwte + (size_t)w * c;
        const float *g = dout + (size_t)r * c;
        for (int i = 0; i < c; i++)
            d[i] += g[i];
    }
}
