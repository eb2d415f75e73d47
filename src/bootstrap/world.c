#include "bootstrap/world.h"

#include "core/clock.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void world_host_id(const char *override, char out[64])
{
    if (override && *override)
        snprintf(out, 64, "%.63s", override);
    else if (gethostname(out, 64) != 0)
        snprintf(out, 64, "localhost");
    out[63] = 0;
}

int world_is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "localhost") || !strcmp(host, "::1");
}

static void record_key(uint64_t id, int rank, char key[96])
{
    snprintf(key, 96, "weft/%016llx/addr/%d", (unsigned long long)id, rank);
}

void world_records_free(char **recs, int size)
{
    for (int i = 0; recs && i < size; i++)
        free(recs[i]);
    free(recs);
}

int world_exchange(store_client *s, uint64_t id, int rank, int size, const char *rec,
                   double timeout_s, char ***recs, int *missing, char *err, size_t errlen)
{
    char key[96];
    double deadline = clock_now() + timeout_s;
    int rc;
    *recs = NULL;
    *missing = -1;
    record_key(id, rank, key);
    if ((rc = store_set(s, key, rec, strlen(rec) + 1))) {
        snprintf(err, errlen, "%s", store_error(s));
        return rc;
    }
    char **all = calloc((size_t)size, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory");
        return WEFT_ENOMEM;
    }
    for (int i = 0; i < size; i++) {
        void *v;
        size_t len;
        double left = deadline - clock_now();
        record_key(id, i, key);
        rc = store_get(s, key, &v, &len, left > 0 ? left : 0);
        if (rc) {
            if (rc == WEFT_ETIMEDOUT)
                *missing = i;
            snprintf(err, errlen, "%s", rc == WEFT_ETIMEDOUT ? "timed out" : store_error(s));
            world_records_free(all, size);
            return rc;
        }
        all[i] = v; /* the store sends the NUL with the value */
        if (!len || all[i][len - 1]) {
            snprintf(err, errlen, "rank %d's record is not text", i);
            world_records_free(all, size);
            return WEFT_EPROTO;
        }
    }
    *recs = all;
    return 0;
}

int world_number_hosts(const char *const *ids, int size, int32_t *host)
{
    int n = 0;
    for (int i = 0; i < size; i++) {
        int j = 0;
        while (j < i && strcmp(ids[i], ids[j]))
            j++;
        host[i] = j < i ? host[j] : n++;
    }
    return n;
}

void world_fail_key(uint64_t id, char key[64])
{
    snprintf(key, 64, "weft/%016llx/failed", (unsigned long long)id);
}

int world_notice_post(store_client *s, uint64_t id, const fail_note *f)
{
    char key[64], val[FAIL_NOTE_MAX + 40];
    world_fail_key(id, key);
    int n = fail_note_encode(f, val, sizeof val);
    return store_set(s, key, val, (size_t)n);
}
