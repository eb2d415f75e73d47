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

static store_server *srv;

/* Each case talks to a server of its own, through client *c. */
static int open_store(store_client **c)
{
    char err[256];
    *c = NULL;
    CHECKF(store_server_start(&srv, "127.0.0.1", 0, &port, NULL, err, sizeof err) == 0, "%s", err);
    CHECKF(store_connect(c, "127.0.0.1", port, 5, NULL, err, sizeof err) == 0, "%s", err);
    return *c ? 0 : -1;
}

static void close_store(store_client *c)
{
    store_close(c);
    store_server_stop(srv);
}

TEST(set_get)
{
    store_client *c;
    void *v;
    size_t len;
    if (open_store(&c))
        return;
    CHECK(store_set(c, "a", "xyz", 3) == 0);
    CHECK(store_get(c, "a", &v, &len, 1) == 0);
    CHECK(len == 3 && memcmp(v, "xyz", 3) == 0);
    free(v);
    CHECK(store_set(c, "a", "", 0) == 0); /* overwrite with empty value */
    CHECK(store_get(c, "a", &v, &len, 1) == 0 && len == 0);
    free(v);
    close_store(c);
}

/* a get on a missing key waits, then times out */
TEST(get_times_out)
{
    store_client *c;
    void *v;
    size_t len;
    if (open_store(&c))
        return;
    double t0 = clock_now();
    CHECK(store_get(c, "missing", &v, &len, 0.3) == WEFT_ETIMEDOUT);
    CHECK(clock_now() - t0 >= 0.25);
    CHECK(v == NULL);
    close_store(c);
}

/* a get waits for a key that another client sets later */
TEST(get_waits)
{
    store_client *c;
    void *v, *lr;
    size_t len;
    pthread_t late;
    if (open_store(&c))
        return;
    pthread_create(&late, NULL, late_setter, NULL);
    CHECK(store_get(c, "late", &v, &len, 10) == 0 && len == 5 && !memcmp(v, "hello", 5));
    free(v);
    pthread_join(late, &lr);
    CHECK(lr == NULL);
    close_store(c);
}

TEST(concurrent_add)
{
    store_client *c;
    pthread_t th[ADDERS];
    int64_t total;
    if (open_store(&c))
        return;
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
    close_store(c);
}

TEST(wait_check_del)
{
    store_client *c;
    int exists;
    int64_t total;
    if (open_store(&c))
        return;
    CHECK(store_set(c, "a", "", 0) == 0);
    CHECK(store_add(c, "counter", 1, &total) == 0);
    const char *keys[] = { "a", "counter" };
    CHECK(store_wait(c, keys, 2, 1) == 0);
    CHECK(store_check(c, "a", &exists) == 0 && exists == 1);
    CHECK(store_del(c, "a") == 0);
    CHECK(store_check(c, "a", &exists) == 0 && exists == 0);
    close_store(c);
}

/* garbage on the wire: the server drops that client and keeps serving */
TEST(garbage)
{
    store_client *c;
    char err[256];
    if (open_store(&c))
        return;
    int fd = sock_connect("127.0.0.1", port, clock_now() + 5, err, sizeof err);
    CHECK(fd >= 0);
    char junk[64];
    memset(junk, 0x5a, sizeof junk);
    CHECK(sock_write_full(fd, junk, sizeof junk, clock_now() + 5) == 0);
    char b;
    CHECK(sock_read_full(fd, &b, 1, clock_now() + 5) == WEFT_EPEER);
    close(fd);
    CHECK(store_set(c, "after", "1", 1) == 0);
    close_store(c);
}
