/* weft-store: a standalone rendezvous store, for jobs whose rank 0 should
 * not serve it (set WEFT_STORE_EXTERNAL=1 in the ranks' environment).
 *
 *   weft-store [--host ADDR] [--port PORT]      (default: all addresses, 29500)
 *
 * Prints "listening on PORT" and serves until killed. */
#include "cli_args.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *host = NULL;
    int port = 29500, bound = 0, rc;
    char err[256];
    weft_store_server *s;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && i + 1 < argc)
            host = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            if (cli_int("weft-store", "--port", argv[++i], 0, 65535, &port))
                return 2;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: weft-store [--host ADDR] [--port PORT]   (PORT 0: any free port)\n");
            return 0;
        } else {
            fprintf(stderr, "usage: weft-store [--host ADDR] [--port PORT]\n");
            return 2;
        }
    }
    if ((rc = weft_store_server_create(&s, host, port, &bound, err, sizeof err))) {
        fprintf(stderr, "weft-store: %s\n", err);
        return 1;
    }
    printf("listening on %d\n", bound);
    fflush(stdout);
    return weft_store_server_run(s) ? 1 : 0;
}
