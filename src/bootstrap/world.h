/* World membership over the rendezvous store: the record each rank
 * publishes so the others can find it, the host it runs on, and the
 * failure notice a failing rank leaves for the rest. Nothing here knows
 * of collectives; the communicator (coll/comm_rdv.c) is built on it. */
#ifndef WEFT_BOOTSTRAP_WORLD_H
#define WEFT_BOOTSTRAP_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/store.h"
#include "core/frame.h"

/* This host's identity: override (WEFT_HOST_ID, which lets one machine
 * stand for several hosts in tests) when set, else the host name. */
void world_host_id(const char *override, char out[64]);
/* Loopback addresses: a job on one machine. */
int world_is_loopback(const char *host);

/* Claim rank of communicator id, publish this rank's record (text), then
 * read all size records in rank order, within timeout_s in all. *recs gets
 * an array of size malloc'd strings (world_records_free). Each record also
 * carries its rank's world size, pid and host name, so that these fail
 * with WEFT_ECONFIG, err naming both sides: a second process claiming a
 * rank (it is refused; the first keeps its place), and a rank whose world
 * size differs from this one's. WEFT_ETIMEDOUT: *missing is the first rank
 * that never arrived. err says why. */
int world_exchange(store_client *s, uint64_t id, int rank, int size, const char *rec,
                   double timeout_s, char ***recs, int *missing, char *err, size_t errlen);
void world_records_free(char **recs, int size);
/* For the rank that serves the store, after world_exchange failed: wait
 * (up to timeout_s) until every other rank of size has read the records
 * too, so that each can say what is wrong rather than that the store is
 * gone. */
int world_linger(store_client *s, uint64_t id, int rank, int size, double timeout_s);

/* Host index of every rank from their host ids, numbered from 0 in
 * order of first appearance; returns the number of hosts. */
int world_number_hosts(const char *const *ids, int size, int32_t *host);

/* The store key under which communicator id's failure notice lies. */
void world_fail_key(uint64_t id, char key[64]);
/* The key the store sets when rank's membership of communicator id ends
 * (its watch connection closes: store_hold). */
void world_gone_key(uint64_t id, int rank, char key[64]);
/* Leave notice f for communicator id's other ranks. */
int world_notice_post(store_client *s, uint64_t id, const fail_note *f);

#endif
