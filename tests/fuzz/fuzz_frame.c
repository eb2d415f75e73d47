/* libFuzzer target: every decoder for what arrives on a data connection
 * (frame header, hello, authentication messages) and the failure notice
 * ranks read from the store. A decoder must reject or accept any input
 * without reading out of bounds, and what it accepts must be in range. */
#include "core/flight.h"
#include "core/frame.h"
#include "weft.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why;
    frame_hdr h;
    hello_msg hm;
    auth_hello ah;
    auth_challenge ac;
    fail_note note;
    char d[200];
    /* an exact-size heap copy, so ASan sees every overread */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (frame_decode(buf, size, &h, &why) == 0) {
        if (h.kind < WEFT_COLL_SEND || h.kind >= WEFT_COLL_KIND_COUNT ||
            h.dtype >= WEFT_DTYPE_COUNT || h.op >= WEFT_OP_COUNT || h.algo >= WEFT_ALGO_COUNT)
            abort();
        frame_describe(&h, d, sizeof d);
    }
    int members = size ? 1 + data[0] % 64 : 1;
    if (frame_hello_decode(buf, size, members, &hm, &why) == 0 &&
        (hm.src < 0 || hm.src >= members || hm.dst < 0 || hm.dst >= members))
        abort();
    auth_hello_decode(buf, size, &ah, &why);
    auth_challenge_decode(buf, size, &ac, &why);
    if (fail_note_decode(buf, size, members, &note, &why) == 0) {
        if (note.culprit < -1 || note.culprit >= members || strlen(note.text) >= sizeof note.text)
            abort();
    }
    free(buf);
    return 0;
}
