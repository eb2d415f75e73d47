/* The rendezvous store's server as include/weft.h offers it, for
 * launchers and standalone stores: bootstrap/store.h's server behind a
 * public handle, and transport's spare port to serve it on. */
#include "bootstrap/store.h"
#include "transport/sock.h"
#include "weft.h"

#include <stdlib.h>

struct weft_store_server {
    store_server *s;
};

static int wrap(weft_store_server **out, store_server *s)
{
    weft_store_server *w = malloc(sizeof *w);
    if (!w) {
        store_server_stop(s);
        return WEFT_ENOMEM;
    }
    w->s = s;
    *out = w;
    return 0;
}

int weft_store_server_start(weft_store_server **out, const char *host, int port, int *port_out,
                            const char *secret, char *err, size_t errlen)
{
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    store_server *s;
    int rc = store_server_start(&s, host, port, port_out, secret, err, errlen);
    return rc ? rc : wrap(out, s);
}

int weft_store_server_create(weft_store_server **out, const char *host, int port,
                             int *port_out, char *err, size_t errlen)
{
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    store_server *s;
    int rc = store_server_create(&s, host, port, port_out, err, errlen);
    return rc ? rc : wrap(out, s);
}

int weft_store_server_run(weft_store_server *s)
{
    return s ? store_server_run(s->s) : WEFT_EINVAL;
}

void weft_store_server_stop(weft_store_server *s)
{
    if (!s)
        return;
    store_server_stop(s->s);
    free(s);
}

int weft_spare_port(int *port)
{
    if (!port)
        return WEFT_EINVAL;
    int p = sock_spare_port();
    if (p < 0)
        return WEFT_ESYS;
    *port = p;
    return 0;
}
