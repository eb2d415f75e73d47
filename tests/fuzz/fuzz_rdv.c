/* libFuzzer target: the rendezvous record every rank reads from the store
 * (coll/rdv_record.h). The decoder must accept or refuse any input without
 * reading out of bounds; what it accepts must be in range and encode back
 * to the very bytes it came from. */
#include "coll/rdv_record.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rdv_record r;
    const char *why;
    char again[RDV_RECORD_MAX];
    size_t n;
    /* an exact-size heap copy, so ASan sees every overread */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (rdv_record_decode(buf, size, &r, &why) == 0) {
        if ((r.shm != 0 && r.shm != 1) || strlen(r.tcp) >= sizeof r.tcp ||
            strlen(r.p2p) >= sizeof r.p2p || strlen(r.host) >= sizeof r.host ||
            strlen(r.ofi) >= sizeof r.ofi || strlen(r.p2p_ofi) >= sizeof r.p2p_ofi)
            abort();
        if (rdv_record_encode(&r, again, sizeof again, &n) || n != size ||
            memcmp(again, buf, size))
            abort();
    } else if (!why) {
        abort();
    }
    free(buf);
    return 0;
}
