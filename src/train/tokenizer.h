/* The byte-level tokenizer is declared in weft.h (weft_bytes_*). */
#ifndef WEFT_TRAIN_TOKENIZER_H
#define WEFT_TRAIN_TOKENIZER_H
#include "weft.h"
#endif
