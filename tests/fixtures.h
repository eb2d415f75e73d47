/* What several test programs need and each would otherwise write again: a
 * free loopback port, the path of a tool built next to the tests, a whole
 * file in memory. test.h includes it, so every test program has it. */
#ifndef WEFT_TEST_FIXTURES_H
#define WEFT_TEST_FIXTURES_H

#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/sock.h"

/* A TCP port on 127.0.0.1 that nothing listens on (as of the call). */
static inline int fx_free_port(void)
{
    return sock_spare_port();
}

/* $BUILD/tests/test_x -> $BUILD/NAME in buf; 0 if it is executable. */
static inline int fx_tool(const char *name, char *buf, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    snprintf(buf, cap, "%s/../%s", dirname(self), name);
    return access(buf, X_OK);
}

/* The whole file at path, NUL-terminated, in a malloc'd buffer (the
 * caller frees it); its length in *len. NULL if it cannot be read. */
static inline char *fx_slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0) {
        rewind(f);
        b = malloc((size_t)n + 1);
        if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
        if (b)
            b[n] = '\0';
    }
    if (f)
        fclose(f);
    if (len)
        *len = b ? n : -1;
    return b;
}

#endif
