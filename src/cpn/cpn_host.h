/* This host's facts for a cluster description: name, the address its
 * peers reach it at, the cores this process may run on, memory. */
#ifndef WEFT_CPN_HOST_H
#define WEFT_CPN_HOST_H

#include "cpn/cpn_cluster.h"

/* Never fails: an unknown fact reads "" or 0 (cores at least 1). */
void cpn_host_probe(cpn_host *out);

#endif
