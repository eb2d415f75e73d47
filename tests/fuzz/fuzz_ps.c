/* libFuzzer target: the parameter server's message decoder. It must
 * reject or accept any input without reading out of bounds, and what it
 * accepts must be safe to act on: a known type, a payload length within
 * limits that is whole floats (error text aside) and only where the type
 * carries one. */
#include "ps/ps_wire.h"
#include "weft.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why;
    ps_msg m;
    /* an exact-size heap copy, so ASan sees every overread */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (ps_msg_decode(buf, size, &m, &why) == 0) {
        int t = m.type;
        if (!((t >= PS_INIT && t <= PS_REQ_LAST) || (t >= PS_ACK && t <= PS_REPLY_LAST)))
            abort();
        if (m.clock < 0)
            abort();
        if (t == PS_ERR) {
            if (m.len > PS_ERR_MAX || m.status >= 0)
                abort();
        } else {
            if (m.len % 4 || m.len > PS_MAX_PAYLOAD || m.status != 0)
                abort();
            if (m.len && t != PS_INIT && t != PS_PUSH && t != PS_DATA)
                abort();
        }
        if (!ps_msg_name(t))
            abort();
    }
    free(buf);
    return 0;
}
