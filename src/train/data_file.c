#include "train/data_file.h"

#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int read_fd(int fd, unsigned char **buf, size_t *n)
{
    size_t cap = 1 << 20, len = 0;
    unsigned char *p = malloc(cap);
    if (!p)
        return WEFT_ENOMEM;
    for (;;) {
        if (len == cap) {
            unsigned char *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                return WEFT_ENOMEM;
            }
            p = q;
            cap *= 2;
        }
        ssize_t r = read(fd, p + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(p);
            return WEFT_EIO;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    *buf = p;
    *n = len;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* posix_spawnp, not popen: no shell, so no quoting of the path. */
static int read_gzip(const char *path, unsigned char **buf, size_t *n)
{
    int fds[2];
    if (!train_data_file_exists(path))
        return WEFT_EIO;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return WEFT_ESYS;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    char *argv[] = { "gzip", "-dc", "--", (char *)path, NULL };
    pid_t pid;
    int rc = posix_spawnp(&pid, "gzip", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return WEFT_ENOTSUP;
    }
    rc = read_fd(fds[0], buf, n);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    int ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (rc == 0 && !ok) {
        free(*buf);
        *buf = NULL;
        /* 127: the spawned child could not exec gzip. */
        rc = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127 ? WEFT_ENOTSUP
                                                                            : WEFT_EIO;
    }
    return rc;
}

/* O_NONBLOCK so that open itself cannot wait: on a FIFO without a writer
 * (reading) or a reader (writing), a plain open blocks forever. Only a
 * regular file is kept, and it is handed back blocking. */
int train_open_regular(const char *path, int flags, int mode)
{
    if (!path)
        return WEFT_EINVAL;
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0)
        return errno == ENXIO || errno == EISDIR ? WEFT_EINVAL : WEFT_EIO;
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? WEFT_EIO : !S_ISREG(st.st_mode) ? WEFT_EINVAL : 0;
    int fl = rc == 0 ? fcntl(fd, F_GETFL) : -1;
    if (rc == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        rc = WEFT_EIO;
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int train_data_read_file(const char *path, unsigned char **buf, size_t *n)
{
    if (!path || !buf || !n)
        return WEFT_EINVAL;
    *buf = NULL;
    *n = 0;
    if (ends_with(path, ".gz"))
        return read_gzip(path, buf, n);
    int fd = train_open_regular(path, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    int rc = read_fd(fd, buf, n);
    close(fd);
    return rc;
}

int train_data_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int train_pread_all(int fd, void *buf, size_t n, uint64_t at)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return WEFT_EIO;
        p += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

int train_pwrite_all(int fd, const void *buf, size_t n, uint64_t at)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return WEFT_EIO;
        p += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}
