/* The rendezvous store: set/get, waiting get, timeouts, concurrent atomic
 * add, check and delete, and a client that talks garbage. */
#include "test.h"

#include "bootstrap/store.h"
#include "core/clock.h"
#include "transport/sock.h"
#include "weft.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static int port;

#define ADDERS 8
#define ADDS 200

static void *adder(void *arg)
{
    store_client *c;
    char err[256];
    long fails = 0;
    (void)arg;
    if (store_connect(&c, "127.0.0.1", port, 10, NULL, err, sizeof err))
        return (void *)1L;
    for (int i = 0; i < ADDS; i++)
        fails += store_add(c, "counter", 1, NULL) != 0;
    store_close(c);
    return (void *)fails;
}

static void *late_setter(void *arg)
{
    store_client *c;
    char err[256];
    (void)arg;
    if (store_connect(&c, "127.0.0.1", port, 10, NULL, err, sizeof err))
        return (void *)1L;
    usleep(200 * 1000);
    long rc = store_set(c, "late", "hello", 5);
    store_close(c);
    return (void *)rc;
}

int main(void)
{
    store_server *srv;
    store_client *c;
    char err[256];
    void *v;
    size_t len;
    int64_t total;
    int exists;
    pthread_t th[ADDERS], late;

    CHECK(store_server_start(&srv, "127.0.0.1", 0, &port, NULL, err, sizeof err) == 0);
    CHECK(store_connect(&c, "127.0.0.1", port, 5, NULL, err, sizeof err) == 0);

    CHECK(store_set(c, "a", "xyz", 3) == 0);
    CHECK(store_get(c, "a", &v, &len, 1) == 0);
    CHECK(len == 3 && memcmp(v, "xyz", 3) == 0);
    free(v);
    CHECK(store_set(c, "a", "", 0) == 0); /* overwrite with empty value */
    CHECK(store_get(c, "a", &v, &len, 1) == 0 && len == 0);
    free(v);

    /* a get on a missing key waits, then times out */
    double t0 = clock_now();
    CHECK(store_get(c, "missing", &v, &len, 0.3) == WEFT_ETIMEDOUT);
    CHECK(clock_now() - t0 >= 0.25);
    CHECK(v == NULL);

    /* a get waits for a key that another client sets later */
    pthread_create(&late, NULL, late_setter, NULL);
    CHECK(store_get(c, "late", &v, &len, 10) == 0 && len == 5 && !memcmp(v, "hello", 5));
    free(v);
    void *lr;
    pthread_join(late, &lr);
    CHECK(lr == NULL);

    for (int i = 0; i < ADDERS; i++)
        pthread_create(&th[i], NULL, adder, NULL);
    long fails = 0;
    for (int i = 0; i < ADDERS; i++) {
        void *r;
        pthread_join(th[i], &r);
        fails += (long)r;
    }
    CHECK(fails == 0);
    CHECK(store_add(c, "counter", 0, &total) == 0);
    CHECKF(total == ADDERS * ADDS, "counter %lld", (long long)total);

    const char *keys[] = { "a", "counter" };
    CHECK(store_wait(c, keys, 2, 1) == 0);
    CHECK(store_check(c, "a", &exists) == 0 && exists == 1);
    CHECK(store_del(c, "a") == 0);
    CHECK(store_check(c, "a", &exists) == 0 && exists == 0);

    /* garbage on the wire: the server drops that client and keeps serving */
    int fd = sock_connect("127.0.0.1", port, clock_now() + 5, err, sizeof err);
    CHECK(fd >= 0);
    char junk[64];
    memset(junk, 0x5a, sizeof junk);
    CHECK(sock_write_full(fd, junk, sizeof junk, clock_now() + 5) == 0);
    char b;
    CHECK(sock_read_full(fd, &b, 1, clock_now() + 5) == WEFT_EPEER);
    close(fd);
    CHECK(store_set(c, "after", "1", 1) == 0);

    store_close(c);
    store_server_stop(srv);
    TEST_DONE();
}
