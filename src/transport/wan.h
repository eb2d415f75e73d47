/* An emulated wide-area link, for tests and benchmarks only
 * (WEFT_WAN=delay=50ms,rate=100mbit): every outgoing connection to a rank
 * of another cluster is handed to a pump, as TLS hands its connections
 * (transport/tls.h). Its owner writes to one end of a socketpair; the
 * pump's thread reads what arrives, stamps it, and writes it to the real
 * socket no sooner than the one-way delay after it was read and no faster
 * than the rate (a token bucket), so any test can run "two continents" on
 * one host. The kernel here has no netem, hence this.
 *
 * Which peers are in another cluster comes from above (the communicator
 * learns every rank's WEFT_CLUSTER at rendezvous): the transport only
 * keeps the answer per peer, and counts the bytes it forwards. */
#ifndef WEFT_TRANSPORT_WAN_H
#define WEFT_TRANSPORT_WAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double delay_s;   /* one way */
    double rate_Bps;  /* bytes per second; 0: unlimited */
} wan_cfg;

/* Parses "delay=50ms,rate=100mbit" (either key may be left out; delay in
 * us, ms or s, rate in bit, kbit, mbit, gbit or bps, kbps, mbps, gbps,
 * powers of 1000 as tc counts). NULL when s is acceptable, else what is
 * wrong (the parameter table's check). */
const char *wan_check(const char *s);
int wan_parse(const char *s, wan_cfg *out);

typedef struct wan_net wan_net;
typedef struct wan_count wan_count;

/* cluster[0..size) of every rank (copied); cfg NULL: no emulation, only the
 * classes. share: count bytes together with that net (NULL: alone). */
int wan_net_new(wan_net **out, int rank, int size, const int32_t *cluster, const wan_cfg *cfg,
                int loglevel, wan_net *share);
/* Flushes what the owners wrote (up to flush_s), joins the thread. */
void wan_net_free(wan_net *w, double flush_s);
int wan_cluster_of(const wan_net *w, int peer);
int wan_cluster_count(const wan_net *w);
/* Every rank's cluster numbered 0, 1, ... in order of its first rank (as
 * schedules want host indices), or NULL when there is one cluster. Lives
 * as long as w. */
const int32_t *wan_cluster_index(const wan_net *w);
/* 1 and the emulated link in *cfg when WEFT_WAN is on for w, else 0. */
int wan_emulation(const wan_net *w, wan_cfg *cfg);
/* 1 when peer is in another cluster. */
int wan_is_wan(const wan_net *w, int peer);
/* An outgoing connection that has just become ready: when emulation is on
 * and peer is in another cluster, *fd goes to the pump and is replaced by
 * the owner's end; otherwise nothing changes. 0 or a negative code. */
int wan_take(wan_net *w, int peer, int *fd, char *err, size_t errlen);
/* Bytes the pumps of this net and those sharing its count have written
 * to wan links. */
uint64_t wan_bytes(const wan_net *w);

#endif
