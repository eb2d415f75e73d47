/* Store wire format, shared by server and client: the layouts and their
 * validating decoders live with every other wire format in core/frame.h. */
#ifndef WEFT_BOOTSTRAP_STORE_WIRE_H
#define WEFT_BOOTSTRAP_STORE_WIRE_H

#include "core/frame.h"

#endif
