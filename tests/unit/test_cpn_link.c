/* The link endpoint (src/cpn/cpn_link.c) proves the secret both ways: a
 * reporter with the endpoint's secret measures the link; one with another
 * secret, or none, is closed on without a figure. */
#include "test.h"

#include "core/auth.h"
#include "cpn/cpn_link.h"
#include "weft.h"

static int measure(int port, const char *secret, cpn_link_figures *f)
{
    char addr[64], err[256];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return cpn_link_measure(addr, secret, 0.02, f, err, sizeof err);
}

TEST(link_endpoint_wants_the_secret)
{
    if (!auth_compiled())
        return; /* a build without libcrypto authenticates nothing anywhere */
    unsetenv("WEFT_JOB_SECRET");
    unsetenv("WEFT_WAN");
    cpn_link_ep *ep = NULL;
    char err[256];
    int port = 0;
    CHECK(cpn_link_serve(&ep, "127.0.0.1", 0, "right", &port, err, sizeof err) == 0);
    cpn_link_figures f;
    CHECK(measure(port, "right", &f) == 0);
    CHECK(f.bandwidth_bps > 0 && f.rtt_ms >= 0);
    CHECK(measure(port, "wrong", &f) == WEFT_EAUTH);
    CHECK(f.bandwidth_bps == 0);
    /* no secret: the endpoint's answer to a hello never comes, it closes */
    CHECK(measure(port, NULL, &f) != 0);
    CHECK(measure(port, "right", &f) == 0); /* still serving */
    cpn_link_stop(ep);
}
