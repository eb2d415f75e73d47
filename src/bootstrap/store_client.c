/* Store client: one connection, one request at a time (a mutex lets
 * several threads share it). */
#include "bootstrap/store.h"
#include "bootstrap/store_wire.h"
#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct store_client {
    int fd;
    pthread_mutex_t mu;
    char host[256];
    int port;
    char err[256];
};

int store_connect(store_client **out, const char *host, int port, double timeout_s,
                  char *err, size_t errlen)
{
    store_client *c = calloc(1, sizeof *c);
    if (!c)
        return WEFT_ENOMEM;
    c->fd = sock_connect(host, port, clock_now() + timeout_s, err, errlen);
    if (c->fd < 0) {
        int rc = c->fd;
        free(c);
        return rc;
    }
    pthread_mutex_init(&c->mu, NULL);
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    *out = c;
    return 0;
}

void store_close(store_client *c)
{
    if (!c)
        return;
    close(c->fd);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int store_fd(const store_client *c) { return c->fd; }
const char *store_error(const store_client *c) { return c->err; }

/* One round trip. On success *val (if asked) is malloc'd. */
static int call(store_client *c, int cmd, const char *key, const void *val, size_t len,
                int64_t arg, double wait_s, store_resp *resp, void **out, size_t *outlen)
{
    size_t kl = strlen(key);
    store_req q = { .magic = STORE_MAGIC, .cmd = (uint8_t)cmd, .keylen = (uint32_t)kl,
                    .vallen = len, .arg = arg };
    double dl = clock_now() + wait_s + 30.0;
    int rc;
    if (kl == 0 || kl > STORE_MAX_KEY || len > STORE_MAX_VALUE) {
        snprintf(c->err, sizeof c->err, "store: key or value too large");
        return WEFT_EINVAL;
    }
    pthread_mutex_lock(&c->mu);
    if ((rc = sock_write_full(c->fd, &q, sizeof q, dl)) ||
        (rc = sock_write_full(c->fd, key, kl, dl)) ||
        (len && (rc = sock_write_full(c->fd, val, len, dl))) ||
        (rc = sock_read_full(c->fd, resp, sizeof *resp, dl)))
        goto fail;
    if (resp->magic != STORE_MAGIC || resp->vallen > STORE_MAX_VALUE) {
        rc = WEFT_EPROTO;
        goto fail;
    }
    if (out) {
        char *v = malloc(resp->vallen + 1);
        if (!v) {
            rc = WEFT_ENOMEM;
            goto fail;
        }
        if ((rc = sock_read_full(c->fd, v, resp->vallen, dl))) {
            free(v);
            goto fail;
        }
        v[resp->vallen] = 0;
        *out = v;
        if (outlen)
            *outlen = resp->vallen;
    } else if (resp->vallen) {
        rc = WEFT_EPROTO;
        goto fail;
    }
    pthread_mutex_unlock(&c->mu);
    if (resp->status) {
        if (out) {
            free(*out);
            *out = NULL;
        }
        snprintf(c->err, sizeof c->err, "store %.64s:%d: %s for key '%.100s'", c->host, c->port,
                 weft_strerror(resp->status), key);
    }
    return resp->status;
fail:
    pthread_mutex_unlock(&c->mu);
    snprintf(c->err, sizeof c->err, "store %.64s:%d unreachable: %s (key '%.100s')", c->host,
             c->port, weft_strerror(rc), key);
    return rc == WEFT_EPEER ? WEFT_EPEER : rc;
}

int store_set(store_client *c, const char *key, const void *val, size_t len)
{
    store_resp r;
    return call(c, STORE_SET, key, val, len, 0, 0, &r, NULL, NULL);
}

int store_get(store_client *c, const char *key, void **val, size_t *len, double timeout_s)
{
    store_resp r;
    *val = NULL;
    return call(c, STORE_GET, key, NULL, 0, (int64_t)(timeout_s * 1e3), timeout_s, &r,
                val, len);
}

int store_add(store_client *c, const char *key, int64_t delta, int64_t *result)
{
    store_resp r;
    int rc = call(c, STORE_ADD, key, NULL, 0, delta, 0, &r, NULL, NULL);
    if (!rc && result)
        *result = r.value;
    return rc;
}

int store_check(store_client *c, const char *key, int *exists)
{
    store_resp r;
    int rc = call(c, STORE_CHECK, key, NULL, 0, 0, 0, &r, NULL, NULL);
    if (!rc)
        *exists = (int)r.value;
    return rc;
}

int store_del(store_client *c, const char *key)
{
    store_resp r;
    return call(c, STORE_DEL, key, NULL, 0, 0, 0, &r, NULL, NULL);
}

int store_wait(store_client *c, const char *const *keys, int n, double timeout_s)
{
    double dl = clock_now() + timeout_s;
    for (int i = 0; i < n; i++) {
        void *v;
        double left = dl - clock_now();
        int rc = store_get(c, keys[i], &v, NULL, left > 0 ? left : 0);
        if (rc)
            return rc;
        free(v);
    }
    return 0;
}
