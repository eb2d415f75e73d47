/* Store client: one connection, one request at a time (a mutex lets
 * several threads share it). */
#include "bootstrap/store.h"
#include "bootstrap/store_wire.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "transport/sock.h"
#include "transport/tls.h"
#include "weft.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct store_client {
    int fd;                 /* with TLS: the pump's end, not the socket */
    tls_pump *pump;
    pthread_mutex_t mu;
    char host[256];
    int port;
    char err[256];
    char local_ip[64];      /* this end's address, read before any pump */
    double answer_s;        /* how long the store may take to answer, past any wait */
    int broken;             /* a call that failed halfway: the stream is out of step */
};

#define ANSWER_DEFAULT_S 30.0

/* The connector's half of the challenge-response (core/auth.h); the store
 * answers at once, so a blocking exchange with a deadline is enough. */
static int authenticate(int fd, const char *secret, double deadline, uint8_t key[AUTH_MAC_LEN],
                        char *err, size_t errlen)
{
    static const char bind[] = "weft-store";
    auth_hello h;
    auth_challenge ch;
    uint8_t raw[sizeof ch], proof[AUTH_MAC_LEN];
    const char *why;
    int rc;
    if ((rc = auth_start(&h, AUTH_ROLE_STORE)) ||
        (rc = sock_write_full(fd, &h, sizeof h, deadline))) {
        snprintf(err, errlen, "store authentication: cannot send the hello: %s",
                 weft_strerror(rc));
        return rc;
    }
    if ((rc = sock_read_full(fd, raw, sizeof raw, deadline))) {
        snprintf(err, errlen, "store authentication: the store %s (does it have the same "
                              "WEFT_JOB_SECRET?)",
                 rc == WEFT_EPEER ? "closed the connection" : "did not answer");
        return rc == WEFT_EPEER ? WEFT_EAUTH : rc;
    }
    if (auth_challenge_decode(raw, sizeof raw, &ch, &why)) {
        snprintf(err, errlen, "store authentication: %s", why);
        return WEFT_EAUTH;
    }
    if (auth_answer(secret, &h, &ch, bind, sizeof bind, proof)) {
        snprintf(err, errlen, "store authentication failed: the store does not know the job "
                              "secret (WEFT_JOB_SECRET differs)");
        return WEFT_EAUTH;
    }
    if ((rc = sock_write_full(fd, proof, sizeof proof, deadline))) {
        snprintf(err, errlen, "store authentication: %s", weft_strerror(rc));
        return rc;
    }
    return auth_channel_key(secret, &h, &ch, bind, sizeof bind, key);
}

static int connect_by(store_client **out, const char *host, int port, double timeout_s,
                      double auth_min_s, int retry, const char *secret, char *err,
                      size_t errlen)
{
    store_client *c = calloc(1, sizeof *c);
    double dl = clock_now() + timeout_s;
    uint8_t key[AUTH_MAC_LEN];
    int rc, tls = tls_wanted(err, errlen);
    *out = NULL;
    if (!c)
        return WEFT_ENOMEM;
    if (!auth_compiled())
        secret = NULL; /* as the server does: a build without libcrypto cannot prove */
    if (tls > 0 && !secret) {
        snprintf(err, errlen, "WEFT_TLS=1 needs a job secret (WEFT_JOB_SECRET; weftrun sets one)");
        tls = WEFT_ECONFIG;
    }
    if (tls < 0) {
        free(c);
        return tls;
    }
    c->fd = retry ? sock_connect(host, port, dl, err, errlen)
                  : sock_connect_once(host, port, dl, err, errlen);
    if (c->fd < 0) {
        rc = c->fd;
        free(c);
        return rc;
    }
    if (secret && (rc = authenticate(c->fd, secret,
                                     dl > clock_now() + auth_min_s ? dl : clock_now() + auth_min_s,
                                     key, err, errlen))) {
        close(c->fd);
        free(c);
        return rc;
    }
    if (sock_local_ip(c->fd, c->local_ip, sizeof c->local_ip))
        c->local_ip[0] = 0;
    if (tls > 0) {
        /* the store's answers come through the pump from now on */
        int app;
        if ((rc = tls_pump_new(&c->pump, log_level_from_env(), -1, err, errlen)) ||
            (rc = tls_pump_add(c->pump, c->fd, 0, key, "the store connection", &app, err,
                               errlen))) {
            if (!c->pump)
                close(c->fd);
            tls_pump_free(c->pump, 0);
            free(c);
            return rc;
        }
        c->fd = app;
        sock_set_nonblock(app, 0);
    }
    pthread_mutex_init(&c->mu, NULL);
    c->answer_s = ANSWER_DEFAULT_S;
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    *out = c;
    return 0;
}

int store_connect(store_client **out, const char *host, int port, double timeout_s,
                  const char *secret, char *err, size_t errlen)
{
    /* a busy store may take a while to prove itself: never less than 10 s */
    return connect_by(out, host, port, timeout_s, 10, 1, secret, err, errlen);
}

int store_connect_within(store_client **out, const char *host, int port, double timeout_s,
                         const char *secret, char *err, size_t errlen)
{
    /* one try: a refused connection means the store's process is gone, which
     * a caller asking whether it answers must not take for silence */
    return connect_by(out, host, port, timeout_s, 0, 0, secret, err, errlen);
}

void store_close(store_client *c)
{
    if (!c)
        return;
    close(c->fd);
    tls_pump_free(c->pump, 1.0);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int store_fd(const store_client *c) { return c->fd; }

int store_local_ip(const store_client *c, char *buf, size_t len)
{
    if (!c->local_ip[0])
        return WEFT_ESYS;
    snprintf(buf, len, "%s", c->local_ip);
    return 0;
}
const char *store_error(const store_client *c) { return c->err; }

void store_set_answer_timeout(store_client *c, double s)
{
    if (s > 0)
        c->answer_s = s;
}

int store_broken(const store_client *c) { return c->broken; }

/* One round trip. On success *val (if asked) is malloc'd. */
static int call(store_client *c, int cmd, const char *key, const void *val, size_t len,
                int64_t arg, double wait_s, store_resp *resp, void **out, size_t *outlen)
{
    size_t kl = strlen(key);
    store_req q = { .magic = STORE_MAGIC, .cmd = (uint8_t)cmd, .keylen = (uint32_t)kl,
                    .vallen = len, .arg = arg };
    double dl = clock_now() + wait_s + c->answer_s;
    const char *why = NULL;
    int rc;
    if (kl == 0 || kl > STORE_MAX_KEY || len > STORE_MAX_VALUE) {
        snprintf(c->err, sizeof c->err, "store: key or value too large");
        return WEFT_EINVAL;
    }
    pthread_mutex_lock(&c->mu);
    if (c->broken) {
        /* an answer may still be on its way: what is read next is not ours.
         * The error of the call that broke the stream still says why. */
        pthread_mutex_unlock(&c->mu);
        return c->broken;
    }
    if ((rc = sock_write_full(c->fd, &q, sizeof q, dl)) ||
        (rc = sock_write_full(c->fd, key, kl, dl)) ||
        (len && (rc = sock_write_full(c->fd, val, len, dl))) ||
        (rc = sock_read_full(c->fd, resp, sizeof *resp, dl)))
        goto fail;
    if ((rc = store_resp_decode(resp, sizeof *resp, resp, &why)))
        goto fail;
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
    c->broken = rc;
    pthread_mutex_unlock(&c->mu);
    if (rc == WEFT_ETIMEDOUT)
        snprintf(c->err, sizeof c->err, "store %.64s:%d did not answer within %.0f s (key "
                 "'%.100s')", c->host, c->port, c->answer_s, key);
    else
        snprintf(c->err, sizeof c->err, "store %.64s:%d unreachable: %s%s%s (key '%.100s')",
                 c->host, c->port, weft_strerror(rc), why ? ": " : "", why ? why : "", key);
    return rc;
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

int store_hold(store_client *c, const char *key, const void *val, size_t len)
{
    store_resp r;
    return call(c, STORE_HOLD, key, val, len, 0, 0, &r, NULL, NULL);
}

int store_setnx(store_client *c, const char *key, const void *val, size_t len, void **out,
                size_t *outlen, int *won)
{
    store_resp r;
    int rc;
    *out = NULL;
    rc = call(c, STORE_SETNX, key, val, len, 0, 0, &r, out, outlen);
    if (!rc && won)
        *won = r.value == 1;
    return rc;
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

int store_watch_arm(store_client *c, const char *key)
{
    size_t kl = strlen(key);
    /* a wait of ~30 years: the reply comes when the key is set */
    store_req q = { .magic = STORE_MAGIC, .cmd = STORE_GET, .keylen = (uint32_t)kl,
                    .arg = (int64_t)1 << 40 };
    double dl = clock_now() + 30.0;
    int rc;
    if (kl == 0 || kl > STORE_MAX_KEY)
        return WEFT_EINVAL;
    if ((rc = sock_write_full(c->fd, &q, sizeof q, dl)) ||
        (rc = sock_write_full(c->fd, key, kl, dl)))
        snprintf(c->err, sizeof c->err, "store %.64s:%d unreachable: %s", c->host, c->port,
                 weft_strerror(rc));
    return rc;
}

int store_watch_read(store_client *c, void **val, size_t *len)
{
    store_resp r;
    const char *why;
    double dl = clock_now() + 10.0;
    char *v;
    int rc;
    *val = NULL;
    if ((rc = sock_read_full(c->fd, &r, sizeof r, dl)))
        return rc == WEFT_ETIMEDOUT ? rc : WEFT_EPEER;
    if ((rc = store_resp_decode(&r, sizeof r, &r, &why)))
        return rc;
    if (r.status)
        return r.status;
    if (!(v = malloc(r.vallen + 1)))
        return WEFT_ENOMEM;
    if ((rc = sock_read_full(c->fd, v, r.vallen, dl))) {
        free(v);
        return WEFT_EPEER;
    }
    v[r.vallen] = 0;
    *val = v;
    if (len)
        *len = r.vallen;
    return 0;
}
