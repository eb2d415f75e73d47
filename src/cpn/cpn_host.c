/* This host, as probe reports it. */
#include "cpn/cpn_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The IPv4 address of WEFT_SOCKET_IFNAME's interface (the one weft's
 * connections use), else of the first interface up that is not loopback,
 * else loopback's. */
static void host_addr(char *buf, size_t cap)
{
    const char *want = getenv("WEFT_SOCKET_IFNAME");
    struct ifaddrs *ifs = NULL;
    snprintf(buf, cap, "127.0.0.1");
    if (getifaddrs(&ifs) != 0)
        return;
    for (int pass = 0; pass < 2; pass++)
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                continue;
            int match = want && want[0] ? !strcmp(i->ifa_name, want)
                                        : !(i->ifa_flags & IFF_LOOPBACK);
            if (pass == 0 && !match)
                continue;
            if (pass == 1 && (i->ifa_flags & IFF_LOOPBACK) == 0)
                continue;
            const struct sockaddr_in *a = (const struct sockaddr_in *)i->ifa_addr;
            inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)cap);
            freeifaddrs(ifs);
            return;
        }
    freeifaddrs(ifs);
}

void cpn_host_probe(cpn_host *out)
{
    memset(out, 0, sizeof *out);
    if (gethostname(out->name, sizeof out->name) != 0)
        snprintf(out->name, sizeof out->name, "localhost");
    out->name[sizeof out->name - 1] = 0;
    host_addr(out->addr, sizeof out->addr);
    cpu_set_t set;
    CPU_ZERO(&set);
    out->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (out->cores < 1) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        out->cores = n > 0 ? (int)n : 1;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->mem_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}
