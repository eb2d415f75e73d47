#include "transport/tls.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tls_wanted(char *err, size_t errlen)
{
    int on, rc = param_read_int(PARAM_tls, &on, err, errlen);
    if (rc || !on)
        return rc;
    if (!tls_compiled()) {
        snprintf(err, errlen, "WEFT_TLS=1, but this build of weft has no TLS (rebuild with "
                              "OpenSSL's libssl: Debian libssl-dev)");
        return WEFT_ECONFIG;
    }
    return 1;
}

#ifndef WEFT_HAVE_LIBSSL

int tls_compiled(void) { return 0; }

int tls_pump_new(tls_pump **out, int loglevel, int rank, char *err, size_t errlen)
{
    *out = NULL;
    snprintf(err, errlen, "this build of weft has no TLS (libssl)");
    return WEFT_ENOTSUP;
}

int tls_pump_add(tls_pump *p, int net_fd, int is_server, const uint8_t key[TLS_KEY_LEN],
                 const char *what, int *app_fd, char *err, size_t errlen)
{
    snprintf(err, errlen, "this build of weft has no TLS (libssl)");
    return WEFT_ENOTSUP;
}

void tls_pump_free(tls_pump *p, double flush_s) { (void)p; }

#else

#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/ssl.h>

#define BUF_BYTES (256u * 1024u) /* per direction per link */

static const unsigned char psk_identity[] = "weft-job-psk-1";
static const unsigned char aes128gcm[2] = { 0x13, 0x01 }; /* TLS_AES_128_GCM_SHA256 */

typedef struct tlink {
    SSL *ssl;
    int net, app;            /* TCP socket (TLS records), owner's data */
    uint8_t key[TLS_KEY_LEN];
    char what[64];
    int shaking;             /* handshake not yet done */
    int net_eof, app_eof;    /* no more will come from that side */
    int app_gone;            /* the owner closed its end: drop what comes in */
    short net_ev, app_ev;    /* what to wait for before the next step */
    uint8_t *in, *out;       /* net -> app, app -> net */
    size_t in_off, in_len, out_off, out_len;
    struct tlink *next;
} tlink;

struct tls_pump {
    SSL_CTX *ctx;
    pthread_t thread;
    int started;
    int wake[2];
    pthread_mutex_t mu;
    tlink *queue;             /* added, not yet taken by the thread */
    int stop;
    double flush_s;
    int loglevel, rank;
};

int tls_compiled(void) { return 1; }

static SSL_SESSION *psk_session(SSL *ssl, const uint8_t *key)
{
    const SSL_CIPHER *c = SSL_CIPHER_find(ssl, aes128gcm);
    SSL_SESSION *s = c ? SSL_SESSION_new() : NULL;
    if (!s || !SSL_SESSION_set1_master_key(s, key, TLS_KEY_LEN) ||
        !SSL_SESSION_set_cipher(s, c) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

static int use_psk(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                   SSL_SESSION **sess)
{
    tlink *l = SSL_get_app_data(ssl);
    const SSL_CIPHER *c = SSL_CIPHER_find(ssl, aes128gcm);
    *sess = NULL;
    *id = NULL;
    *idlen = 0;
    if (!c || (md && SSL_CIPHER_get_handshake_digest(c) != md))
        return 1;
    if (!(*sess = psk_session(ssl, l->key)))
        return 0;
    *id = psk_identity;
    *idlen = sizeof psk_identity - 1;
    return 1;
}

static int find_psk(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    tlink *l = SSL_get_app_data(ssl);
    *sess = NULL;
    if (idlen != sizeof psk_identity - 1 || memcmp(id, psk_identity, idlen))
        return 1; /* not ours: the handshake fails for want of a certificate */
    return (*sess = psk_session(ssl, l->key)) != NULL;
}

static void link_free(tlink *l)
{
    if (l->ssl)
        SSL_free(l->ssl);
    if (l->net >= 0)
        close(l->net);
    if (l->app >= 0)
        close(l->app);
    OPENSSL_cleanse(l->key, sizeof l->key);
    free(l->in);
    free(l->out);
    free(l);
}

static void ssl_why(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, buf, len);
    else
        snprintf(buf, len, "%s", errno ? strerror(errno) : "connection closed");
    ERR_clear_error();
}

/* What the last SSL call on l wants before it can go on: sets *ev and
 * returns 0, or returns -1 when the session is over. */
static int ssl_wait(tlink *l, int r, short *ev)
{
    switch (SSL_get_error(l->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        *ev = POLLIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        *ev = POLLOUT;
        return 0;
    default:
        return -1;
    }
}

/* Moves what can move without blocking. Returns 1 while the tlink lives,
 * 0 when it is done (and may be freed). */
static int step(tls_pump *p, tlink *l)
{
    int progress;
    short rd_ev = 0, wr_ev = 0;
    if (l->shaking) {
        ERR_clear_error();
        errno = 0;
        int r = SSL_do_handshake(l->ssl);
        if (r != 1) {
            if (ssl_wait(l, r, &l->net_ev) == 0) {
                l->app_ev = 0;
                return 1;
            }
            char why[160];
            ssl_why(why, sizeof why);
            log_sub(p->loglevel, LOG_WARN, LOG_SUB_AUTH, p->rank,
                    "TLS handshake on %s failed: %s", l->what, why);
            return 0;
        }
        l->shaking = 0;
        const char *group = OBJ_nid2sn(SSL_get_negotiated_group(l->ssl));
        log_sub(p->loglevel, LOG_DEBUG, LOG_SUB_AUTH, p->rank, "TLS 1.3 up on %s (%s, %s)",
                l->what, SSL_get_cipher(l->ssl), group ? group : "?");
    }
    do {
        progress = 0;
        /* network to owner: a record holds at most 16 KiB, so gather
         * several per hand-over and the owner wakes once for them */
        while (!l->net_eof && l->in_off == 0 && l->in_len < BUF_BYTES) {
            ERR_clear_error();
            int r = SSL_read(l->ssl, l->in + l->in_len, (int)(BUF_BYTES - l->in_len));
            if (r > 0) {
                l->in_len += (size_t)r;
                progress = 1;
                continue;
            }
            if (ssl_wait(l, r, &rd_ev)) {
                l->net_eof = 1; /* close_notify, end of stream or reset: all the same */
                ERR_clear_error();
                progress = 1;
            }
            break;
        }
        if (l->in_off < l->in_len) {
            if (l->app_gone) {
                l->in_off = l->in_len = 0;
                progress = 1;
            } else {
                ssize_t n = send(l->app, l->in + l->in_off, l->in_len - l->in_off,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n > 0) {
                    l->in_off += (size_t)n;
                    if (l->in_off == l->in_len)
                        l->in_off = l->in_len = 0;
                    progress = 1;
                } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    l->app_gone = 1;
                    progress = 1;
                }
            }
        }
        /* owner to network */
        if (!l->app_eof && l->out_len == 0) {
            ssize_t n = recv(l->app, l->out, BUF_BYTES, MSG_DONTWAIT);
            if (n > 0) {
                l->out_off = 0;
                l->out_len = (size_t)n;
                progress = 1;
            } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                l->app_eof = 1;
                progress = 1;
            }
        }
        if (l->out_off < l->out_len) {
            ERR_clear_error();
            int r = SSL_write(l->ssl, l->out + l->out_off, (int)(l->out_len - l->out_off));
            if (r > 0) {
                l->out_off += (size_t)r;
                if (l->out_off == l->out_len)
                    l->out_off = l->out_len = 0;
                progress = 1;
            } else if (ssl_wait(l, r, &wr_ev)) {
                /* the network side is gone: nothing more can be sent */
                ERR_clear_error();
                l->out_off = l->out_len = 0;
                l->app_eof = l->net_eof = 1;
                progress = 1;
            }
        }
    } while (progress && !(l->net_eof && l->in_len == 0) &&
             !(l->app_eof && l->out_len == 0));
    if (l->net_eof && l->in_len == 0)
        return 0; /* the owner reads end of stream once its end closes */
    if (l->app_eof && l->out_len == 0) {
        ERR_clear_error();
        SSL_shutdown(l->ssl); /* best effort: a close_notify, then the socket goes */
        return 0;
    }
    l->net_ev = 0;
    if (!l->net_eof && l->in_len == 0)
        l->net_ev |= rd_ev;
    if (l->out_off < l->out_len)
        l->net_ev |= wr_ev;
    l->app_ev = 0;
    if (!l->app_eof && l->out_len == 0)
        l->app_ev |= POLLIN;
    if (l->in_off < l->in_len && !l->app_gone)
        l->app_ev |= POLLOUT;
    return 1;
}

static void *run(void *arg)
{
    tls_pump *p = arg;
    tlink *links = NULL;
    sigset_t pipe_sig;
    /* libssl writes with write(2): a peer that is gone must read as EPIPE
     * here, not kill the process. A SIGPIPE raised by this thread's write
     * stays pending on this thread, which never takes it. */
    sigemptyset(&pipe_sig);
    sigaddset(&pipe_sig, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL);
    struct pollfd *pf = NULL;
    size_t pfcap = 0;
    double stop_at = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->queue) {
            tlink *l = p->queue;
            p->queue = l->next;
            l->next = links;
            links = l;
        }
        int stopping = p->stop;
        if (stopping && stop_at == 0)
            stop_at = clock_now() + p->flush_s;
        pthread_mutex_unlock(&p->mu);
        size_t nl = 0;
        for (tlink **pp = &links; *pp;) {
            tlink *l = *pp;
            if (!step(p, l)) {
                *pp = l->next;
                link_free(l);
                continue;
            }
            nl++;
            pp = &l->next;
        }
        if (stopping && (!links || clock_now() >= stop_at))
            break;
        if (2 * nl + 1 > pfcap) {
            size_t cap = 2 * nl + 16;
            struct pollfd *np = realloc(pf, cap * sizeof *np);
            if (!np) {
                usleep(1000);
                continue;
            }
            pf = np;
            pfcap = cap;
        }
        size_t n = 0;
        pf[n++] = (struct pollfd){ .fd = p->wake[0], .events = POLLIN };
        for (tlink *l = links; l; l = l->next) {
            /* a socket waited on for nothing is left out: its hang-up
             * would wake this thread again and again for nothing */
            pf[n++] = (struct pollfd){ .fd = l->net_ev ? l->net : -1, .events = l->net_ev };
            pf[n++] = (struct pollfd){ .fd = l->app_ev ? l->app : -1, .events = l->app_ev };
        }
        int r = poll(pf, n, stopping ? 50 : -1);
        if (r > 0 && pf[0].revents) {
            char b[64];
            while (read(p->wake[0], b, sizeof b) > 0) {
            }
        }
    }
    while (links) {
        tlink *l = links;
        links = l->next;
        link_free(l);
    }
    free(pf);
    return NULL;
}

int tls_pump_new(tls_pump **out, int loglevel, int rank, char *err, size_t errlen)
{
    tls_pump *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p)
        return WEFT_ENOMEM;
    p->loglevel = loglevel;
    p->rank = rank;
    p->wake[0] = p->wake[1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, NULL); /* as core/auth.c: threads outlive main() */
    p->ctx = SSL_CTX_new(TLS_method());
    if (!p->ctx || !SSL_CTX_set_min_proto_version(p->ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_ciphersuites(p->ctx, "TLS_AES_128_GCM_SHA256")) {
        snprintf(err, errlen, "cannot set up TLS 1.3 (libssl)");
        tls_pump_free(p, 0);
        return WEFT_ESYS;
    }
    /* no session tickets: every connection gets its own key anyway */
    SSL_CTX_set_num_tickets(p->ctx, 0);
    SSL_CTX_set_mode(p->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* read whatever the socket has, not one record header at a time */
    SSL_CTX_set_read_ahead(p->ctx, 1);
    SSL_CTX_set_default_read_buffer_len(p->ctx, 128 * 1024);
    if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        tls_pump_free(p, 0);
        return WEFT_ESYS;
    }
    int e = pthread_create(&p->thread, NULL, run, p);
    if (e) {
        snprintf(err, errlen, "cannot start the TLS thread: %s%s", strerror(e),
                 e == EAGAIN ? " (threads: RLIMIT_NPROC or kernel.threads-max reached)" : "");
        tls_pump_free(p, 0);
        return WEFT_ESYS;
    }
    p->started = 1;
    *out = p;
    return 0;
}

int tls_pump_add(tls_pump *p, int net_fd, int is_server, const uint8_t key[TLS_KEY_LEN],
                 const char *what, int *app_fd, char *err, size_t errlen)
{
    int sv[2];
    tlink *l = calloc(1, sizeof *l);
    if (!l || !(l->in = malloc(BUF_BYTES)) || !(l->out = malloc(BUF_BYTES))) {
        if (l) {
            free(l->in);
            free(l);
        }
        close(net_fd);
        snprintf(err, errlen, "out of memory");
        return WEFT_ENOMEM;
    }
    l->net = net_fd;
    l->app = -1;
    memcpy(l->key, key, TLS_KEY_LEN);
    snprintf(l->what, sizeof l->what, "%s", what);
    l->shaking = 1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        link_free(l);
        return WEFT_ESYS;
    }
    l->app = sv[1];
    int big = 1 << 20;
    for (int i = 0; i < 2; i++) {
        setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
        setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    }
    fcntl(net_fd, F_SETFL, fcntl(net_fd, F_GETFL) | O_NONBLOCK);
    if (!(l->ssl = SSL_new(p->ctx)) || !SSL_set_fd(l->ssl, net_fd)) {
        snprintf(err, errlen, "cannot start a TLS session (libssl)");
        close(sv[0]);
        link_free(l);
        return WEFT_ESYS;
    }
    SSL_set_app_data(l->ssl, l);
    if (is_server) {
        SSL_set_psk_find_session_callback(l->ssl, find_psk);
        SSL_set_accept_state(l->ssl);
    } else {
        SSL_set_psk_use_session_callback(l->ssl, use_psk);
        SSL_set_connect_state(l->ssl);
    }
    pthread_mutex_lock(&p->mu);
    l->next = p->queue;
    p->queue = l;
    pthread_mutex_unlock(&p->mu);
    if (write(p->wake[1], "n", 1) < 0) {
        /* full: a wake-up is pending already */
    }
    *app_fd = sv[0];
    return 0;
}

void tls_pump_free(tls_pump *p, double flush_s)
{
    if (!p)
        return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        p->flush_s = flush_s;
        pthread_mutex_unlock(&p->mu);
        if (write(p->wake[1], "s", 1) < 0) {
            /* full: a wake-up is pending already */
        }
        pthread_join(p->thread, NULL);
    }
    while (p->queue) {
        tlink *l = p->queue;
        p->queue = l->next;
        link_free(l);
    }
    if (p->wake[0] >= 0) {
        close(p->wake[0]);
        close(p->wake[1]);
    }
    SSL_CTX_free(p->ctx);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

#endif
