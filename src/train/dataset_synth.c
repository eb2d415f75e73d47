/* The built-in image task: ten classes of 28x28 "figures", each a few
 * strokes fixed by the seed. A sample redraws its class's figure with every
 * stroke end jittered, the whole figure scaled and shifted, a stray stroke
 * added and pixel noise on top, so a linear model stays well short of what a
 * hidden layer reaches. Samples are generated on demand from (seed, split,
 * index): nothing is stored and any sample can be regenerated anywhere. */
#include "train/data_rng.h"
#include "train/dataset_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { SIDE = 28, CLASSES = 10, STROKES = 4, STREAM_PROTO = 100 };

typedef struct {
    float x0, y0, x1, y1;
} stroke;

typedef struct {
    stroke proto[CLASSES][STROKES];
    uint64_t seed;
    int split;
} synth_data;

static float squared_dist_to_segment(float px, float py, const stroke *s)
{
    float dx = s->x1 - s->x0, dy = s->y1 - s->y0;
    float len2 = dx * dx + dy * dy;
    float t = len2 > 0 ? ((px - s->x0) * dx + (py - s->y0) * dy) / len2 : 0;
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    float ex = s->x0 + t * dx - px, ey = s->y0 + t * dy - py;
    return ex * ex + ey * ey;
}

static void draw(float *img, const stroke *s, float width, float intensity)
{
    /* beyond 4 widths a stroke adds under 0.04% of its ink: skip those pixels */
    float reach = 4 * width, inv = 1.0f / (2 * width * width);
    int x0 = (int)floorf(fminf(s->x0, s->x1) - reach), x1 = (int)ceilf(fmaxf(s->x0, s->x1) + reach);
    int y0 = (int)floorf(fminf(s->y0, s->y1) - reach), y1 = (int)ceilf(fmaxf(s->y0, s->y1) + reach);
    x0 = x0 < 0 ? 0 : x0;
    y0 = y0 < 0 ? 0 : y0;
    x1 = x1 > SIDE - 1 ? SIDE - 1 : x1;
    y1 = y1 > SIDE - 1 ? SIDE - 1 : y1;
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) {
            float d2 = squared_dist_to_segment((float)x, (float)y, s);
            if (d2 > reach * reach)
                continue;
            float v = intensity * expf(-d2 * inv);
            if (v > img[y * SIDE + x])
                img[y * SIDE + x] = v;
        }
}

/* Roughly normal noise, cheap enough for every pixel: the centred sum of
 * four 16-bit uniforms (Irwin-Hall), scaled to unit variance. */
static float pixel_noise(data_rng *r)
{
    uint64_t u = data_rng_u64(r);
    float sum = (float)((u & 0xffff) + (u >> 16 & 0xffff) + (u >> 32 & 0xffff) + (u >> 48));
    return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

static float uniform(data_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)train_data_rng_unit(r);
}

static int synth_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    const synth_data *d = ds->impl;
    data_rng r;
    data_rng_init(&r, d->seed, (uint64_t)d->split + 1, i);
    int c = (int)train_data_rng_below(&r, CLASSES);
    float scale = uniform(&r, 0.85f, 1.15f);
    float sx = uniform(&r, -3, 3), sy = uniform(&r, -3, 3);
    float width = uniform(&r, 0.7f, 1.5f), ink = uniform(&r, 0.6f, 1.0f);
    const float mid = (SIDE - 1) / 2.0f;
    for (int k = 0; k < SIDE * SIDE; k++)
        x[k] = 0;
    for (int k = 0; k < STROKES; k++) {
        const stroke *p = &d->proto[c][k];
        stroke s = {
            mid + (p->x0 - mid) * scale + sx + 1.0f * (float)train_data_rng_normal(&r),
            mid + (p->y0 - mid) * scale + sy + 1.0f * (float)train_data_rng_normal(&r),
            mid + (p->x1 - mid) * scale + sx + 1.0f * (float)train_data_rng_normal(&r),
            mid + (p->y1 - mid) * scale + sy + 1.0f * (float)train_data_rng_normal(&r),
        };
        draw(x, &s, width, ink);
    }
    stroke stray = { uniform(&r, 2, 25), uniform(&r, 2, 25), uniform(&r, 2, 25),
                     uniform(&r, 2, 25) };
    draw(x, &stray, width, uniform(&r, 0.3f, 0.8f));
    for (int k = 0; k < SIDE * SIDE; k++) {
        float v = x[k] + 0.2f * pixel_noise(&r);
        x[k] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    y[0] = c;
    return 0;
}

static void synth_destroy(weft_dataset *ds)
{
    free(ds->impl);
}

int weft_dataset_synth_images(weft_dataset **out, uint64_t seed, int split, uint64_t n)
{
    if (!out || (split != 0 && split != 1) || n == 0)
        return WEFT_EINVAL;
    *out = NULL;
    synth_data *d = calloc(1, sizeof *d);
    if (!d)
        return WEFT_ENOMEM;
    d->seed = seed;
    d->split = split;
    for (int c = 0; c < CLASSES; c++) {
        data_rng r;
        data_rng_init(&r, seed, STREAM_PROTO, (uint64_t)c);
        for (int k = 0; k < STROKES; k++) {
            stroke *s = &d->proto[c][k];
            s->x0 = uniform(&r, 5, 22);
            s->y0 = uniform(&r, 5, 22);
            s->x1 = uniform(&r, 5, 22);
            s->y1 = uniform(&r, 5, 22);
        }
    }
    weft_dataset *ds = train_dataset_alloc(WEFT_DATA_IMAGE, n, SIDE * SIDE, CLASSES,
                                           split ? "builtin-images/test" : "builtin-images/train");
    if (!ds) {
        free(d);
        return WEFT_ENOMEM;
    }
    ds->info.width = ds->info.height = SIDE;
    ds->get = synth_get;
    ds->destroy = synth_destroy;
    ds->impl = d;
    *out = ds;
    return 0;
}
