/* libFuzzer target: the store's decoders for requests (header alone and a
 * whole message with key and value) and for replies. */
#include "core/frame.h"
#include "weft.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why;
    store_req q;
    store_resp r;
    static char key[STORE_MAX_KEY + 1];
    const void *val;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (store_req_decode(buf, size, &q, &why) == 0 &&
        (q.keylen == 0 || q.keylen > STORE_MAX_KEY || q.vallen > STORE_MAX_VALUE))
        abort();
    if (store_msg_decode(buf, size, &q, key, &val, &why) == 0) {
        const uint8_t *v = val;
        if (strlen(key) != q.keylen || v < buf || v + q.vallen != buf + size)
            abort();
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < q.vallen; i++)
            sink ^= v[i];
        (void)sink;
    }
    if (store_resp_decode(buf, size, &r, &why) == 0 &&
        (r.status > 0 || r.vallen > STORE_MAX_VALUE))
        abort();
    free(buf);
    return 0;
}
