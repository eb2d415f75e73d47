/* --export from the shards (hf_save.c): model.safetensors written by every
 * rank at once, each its own slices at their offsets, so that no rank
 * holds the whole model. One rank prepares the file (config.json, the
 * header from the whole model's table, the data zeroed) under a temporary
 * name; after a barrier every rank writes its parts; after another one
 * rank renames it into place. */
#ifndef WEFT_TRAIN_HF_SAVE_H
#define WEFT_TRAIN_HF_SAVE_H

#include "weft.h"

#include <stddef.h>

/* Elements [lo, lo + n) of a part's flat parameter buffer. */
typedef struct {
    size_t lo, n;
} hf_range;

/* One rank: dir (made if missing), dir/config.json and
 * dir/model.safetensors.part for the whole model of cfg. */
int hf_export_prepare(const weft_model_config *cfg, const char *dir, char *err, size_t cap);
/* Every rank: the elements of part m inside ranges r[0..nr) (tensors with
 * skip[i] set left out; skip may be NULL) to their places in the file. */
int hf_export_part(weft_model *m, const char *dir, const unsigned char *skip,
                   const hf_range *r, int nr, char *err, size_t cap);
/* One rank, after every part is written: the file renamed into place (or,
 * failed, removed). */
int hf_export_commit(const char *dir, int failed, char *err, size_t cap);

#endif
