/* Whole-file reads for datasets, with gzip support that needs no zlib. */
#ifndef WEFT_TRAIN_DATA_FILE_H
#define WEFT_TRAIN_DATA_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Reads path into a malloc'ed buffer. A name ending in ".gz" is piped
 * through `gzip -dc` (found on PATH; WEFT_ENOTSUP if it cannot be run,
 * WEFT_EIO if it fails). */
int train_data_read_file(const char *path, unsigned char **buf, size_t *n);

/* Opens path with flags (O_RDONLY, or O_WRONLY | O_CREAT ...) without ever
 * blocking in open: a file descriptor, WEFT_EINVAL when path is not a
 * regular file (FIFO, device, directory, socket), WEFT_EIO when it cannot
 * be opened. */
int train_open_regular(const char *path, int flags, int mode);

/* n bytes at offset at, through short reads and EINTR: 0, or WEFT_EIO
 * (an error or the end of the file first). Safe from several threads. */
int train_pread_all(int fd, void *buf, size_t n, uint64_t at);
/* The same for writing n bytes at offset at. */
int train_pwrite_all(int fd, const void *buf, size_t n, uint64_t at);

/* 1 if path names an existing regular file. */
int train_data_file_exists(const char *path);

#endif
