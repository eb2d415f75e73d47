/* The control layer's registry (docs/CPN.md, "Registry"): keys in weft's
 * store, so that it is authenticated (the job secret) and encrypted
 * (WEFT_TLS=1) as every weft connection is.
 *   cpn/n                 clusters ever registered (a counter)
 *   cpn/idx/I             the I-th's name (1-based)
 *   cpn/name/NAME         claimed once, so a name is indexed once
 *   cpn/cluster/NAME      the description (weft-cpn-cluster/1)
 *   cpn/beat/NAME         heartbeats (a counter the reporter adds to)
 *   cpn/status/NAME       "up AGE" or "down AGE": the serving process's
 *                         view, seconds since the counter last moved
 *   cpn/ep/NAME           the reporter's link endpoint, host:port
 *   cpn/link/FROM/TO      a measured link (one weft-cpn-links/1 entry)
 *   cpn/links/ask         a counter: links are remeasured when it moves */
#ifndef WEFT_CPN_REGISTRY_H
#define WEFT_CPN_REGISTRY_H

#include "bootstrap/store.h"

#include <stddef.h>

/* Connects to "host:port" with secret (NULL: WEFT_JOB_SECRET, if set). */
int cpn_reg_connect(const char *addr, const char *secret, store_client **out, char *err,
                    size_t errlen);
/* Registers name (once) and sets its description. */
int cpn_reg_publish(store_client *c, const char *name, const char *json);
int cpn_reg_beat(store_client *c, const char *name);
/* The registered names, malloc'd array of n malloc'd strings. */
int cpn_reg_names(store_client *c, char ***names, int *n);
void cpn_reg_names_free(char **names, int n);
/* A key's value (malloc'd, NUL-terminated), NULL when absent. */
int cpn_reg_read(store_client *c, const char *key, char **val);
/* A counter's value (0 when absent). */
int cpn_reg_counter(store_client *c, const char *key, long long *out);

#endif
