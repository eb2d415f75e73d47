/* Links between clusters measured with weft's own TCP (docs/CPN.md,
 * "Link matrix"): each reporter runs an endpoint; another cluster's
 * reporter times round trips and a short transfer to it, and reads the
 * kernel's retransmission count for loss, so emulated shaping (tc netem,
 * tbf) shows in every figure. */
#ifndef WEFT_CPN_LINK_H
#define WEFT_CPN_LINK_H

#include <stddef.h>

typedef struct cpn_link_ep cpn_link_ep;

typedef struct {
    double bandwidth_bps, rtt_ms, loss; /* loss: segments retransmitted / sent */
    double bytes;                       /* the transfer timed */
} cpn_link_figures;

/* Listens on host:port (host NULL: every address; port 0: any) from a new
 * thread; *port_out gets the port. secret (NULL or "": WEFT_JOB_SECRET;
 * none there either: no authentication): every client must prove it. */
int cpn_link_serve(cpn_link_ep **out, const char *host, int port, const char *secret,
                   int *port_out, char *err, size_t errlen);
void cpn_link_stop(cpn_link_ep *ep);
/* Measures the link to an endpoint at "host:port", proving the secret
 * (as cpn_link_serve; WEFT_EAUTH when the endpoint refuses); seconds
 * bounds the transfer (the whole takes a little more). */
int cpn_link_measure(const char *addr, const char *secret, double seconds,
                     cpn_link_figures *out, char *err, size_t errlen);

#endif
