/* Store wire format, shared by server and client. Little-endian hosts only
 * (checked at build time). */
#ifndef WEFT_BOOTSTRAP_STORE_WIRE_H
#define WEFT_BOOTSTRAP_STORE_WIRE_H

#include <stdint.h>

#define STORE_MAGIC 0x53544657u /* "WFTS" */

enum { STORE_SET = 1, STORE_GET, STORE_ADD, STORE_CHECK, STORE_DEL };

typedef struct {
    uint32_t magic;
    uint8_t cmd;
    uint8_t pad[3];
    uint32_t keylen;
    uint32_t pad2;
    uint64_t vallen;
    int64_t arg;      /* GET: timeout in ms; ADD: delta */
} store_req;

typedef struct {
    uint32_t magic;
    int32_t status;   /* 0 or WEFT_E* */
    uint64_t vallen;
    int64_t value;    /* ADD: new value; CHECK: 1 if present */
} store_resp;

_Static_assert(sizeof(store_req) == 32, "store_req layout");
_Static_assert(sizeof(store_resp) == 24, "store_resp layout");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weft's wire formats assume a little-endian host"
#endif

#endif
