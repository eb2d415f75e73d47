/* Whole-file reads for datasets, with gzip support that needs no zlib. */
#ifndef WEFT_TRAIN_DATA_FILE_H
#define WEFT_TRAIN_DATA_FILE_H

#include <stddef.h>

/* Reads path into a malloc'ed buffer. A name ending in ".gz" is piped
 * through `gzip -dc` (found on PATH; WEFT_ENOTSUP if it cannot be run,
 * WEFT_EIO if it fails). */
int train_data_read_file(const char *path, unsigned char **buf, size_t *n);

/* 1 if path names an existing regular file. */
int train_data_file_exists(const char *path);

#endif
