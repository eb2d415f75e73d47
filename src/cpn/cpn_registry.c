/* The registry's keys over weft's store. */
#include "cpn/cpn_registry.h"

#include "transport/sock.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpn_reg_connect(const char *addr, const char *secret, store_client **out, char *err,
                    size_t errlen)
{
    char host[SOCK_ADDR_MAX];
    int port;
    if (!addr || sock_split_addr(addr, host, sizeof host, &port) || port <= 0) {
        snprintf(err, errlen, "--registry %s: want host:port", addr ? addr : "(none)");
        return WEFT_EINVAL;
    }
    if (!secret) {
        const char *s = getenv("WEFT_JOB_SECRET");
        secret = s && s[0] ? s : NULL;
    }
    return store_connect(out, host, port, 10, secret, err, errlen);
}

int cpn_reg_publish(store_client *c, const char *name, const char *json)
{
    char key[256];
    void *old = NULL;
    size_t oldlen;
    int won = 0;
    snprintf(key, sizeof key, "cpn/name/%s", name);
    int rc = store_setnx(c, key, "1", 1, &old, &oldlen, &won);
    free(old);
    if (!rc && won) {
        int64_t i;
        rc = store_add(c, "cpn/n", 1, &i);
        snprintf(key, sizeof key, "cpn/idx/%lld", (long long)i);
        if (!rc)
            rc = store_set(c, key, name, strlen(name));
    }
    snprintf(key, sizeof key, "cpn/cluster/%s", name);
    return rc ? rc : store_set(c, key, json, strlen(json));
}

int cpn_reg_beat(store_client *c, const char *name)
{
    char key[256];
    int64_t v;
    snprintf(key, sizeof key, "cpn/beat/%s", name);
    return store_add(c, key, 1, &v);
}

int cpn_reg_counter(store_client *c, const char *key, long long *out)
{
    int64_t v = 0;
    int rc = store_add(c, key, 0, &v);
    *out = v;
    return rc;
}

int cpn_reg_read(store_client *c, const char *key, char **val)
{
    int exists = 0;
    *val = NULL;
    int rc = store_check(c, key, &exists);
    if (rc || !exists)
        return rc;
    void *v;
    size_t len;
    rc = store_get(c, key, &v, &len, 5);
    if (!rc)
        *val = v;
    return rc;
}

void cpn_reg_names_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int cpn_reg_names(store_client *c, char ***names, int *n)
{
    long long count;
    *names = NULL;
    *n = 0;
    int rc = cpn_reg_counter(c, "cpn/n", &count);
    if (rc || count <= 0)
        return rc;
    char **v = calloc((size_t)count, sizeof *v);
    if (!v)
        return WEFT_ENOMEM;
    int got = 0;
    for (long long i = 1; !rc && i <= count; i++) {
        char key[64];
        snprintf(key, sizeof key, "cpn/idx/%lld", i);
        char *name = NULL;
        /* an index just taken may not have its name yet: left out this time */
        rc = cpn_reg_read(c, key, &name);
        if (name)
            v[got++] = name;
    }
    if (rc) {
        cpn_reg_names_free(v, got);
        return rc;
    }
    *names = v;
    *n = got;
    return 0;
}
