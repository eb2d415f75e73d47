/* The two store commands weft_comm_shrink's agreement rests on: SETNX
 * (the first writer wins, every caller hears the value that stands) and
 * HOLD (the store sets a key when the holding connection ends, also when
 * that connection is parked in a waiting GET, as a rank's failure watch
 * is). */
#include "test.h"

#include "bootstrap/store.h"
#include "weft.h"

#include <stdlib.h>
#include <string.h>

static store_server *srv;
static int port;

static store_client *client(void)
{
    store_client *c = NULL;
    char err[256];
    CHECK(store_connect(&c, "127.0.0.1", port, 10, NULL, err, sizeof err) == 0);
    return c;
}

TEST_INIT
{
    char err[256];
    CHECK(store_server_start(&srv, "127.0.0.1", 0, &port, NULL, err, sizeof err) == 0);
}

TEST(setnx_first_writer_wins)
{
    store_client *a = client(), *b = client();
    void *v = NULL;
    size_t len = 0;
    int won = -1;
    CHECK(store_setnx(a, "k", "first", 6, &v, &len, &won) == 0);
    CHECK(won == 1 && len == 6 && !strcmp(v, "first"));
    free(v);
    CHECK(store_setnx(b, "k", "second", 7, &v, &len, &won) == 0);
    CHECK(won == 0 && len == 6 && !strcmp(v, "first"));
    free(v);
    CHECK(store_get(b, "k", &v, &len, 0) == 0 && !strcmp(v, "first"));
    free(v);
    store_close(a);
    store_close(b);
}

TEST(hold_set_when_the_connection_ends)
{
    store_client *a = client(), *b = client();
    void *v = NULL;
    int exists = -1;
    CHECK(store_hold(a, "held", "gone", 5) == 0);
    CHECK(store_hold(a, "held2", "gone", 5) == 0); /* replaces the first */
    CHECK(store_check(b, "held2", &exists) == 0 && exists == 0);
    store_close(a);
    CHECK(store_get(b, "held2", &v, NULL, 10) == 0 && v && !strcmp(v, "gone"));
    free(v);
    CHECK(store_check(b, "held", &exists) == 0 && exists == 0);
    store_close(b);
}

TEST(hold_of_a_parked_connection)
{
    store_client *a = client(), *b = client();
    void *v = NULL;
    CHECK(store_hold(a, "parked-held", "gone", 5) == 0);
    CHECK(store_watch_arm(a, "never-set") == 0); /* parked in the server */
    store_close(a);
    /* a waiter on the held key wakes: the close of a parked client is seen */
    CHECK(store_get(b, "parked-held", &v, NULL, 10) == 0 && v && !strcmp(v, "gone"));
    free(v);
    store_close(b);
}
