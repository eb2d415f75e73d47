# Two emulated hosts for the tests and benches that cross a network: two
# network namespaces, each with a veth whose other end is on a bridge in a
# third. Sourced, not run:
#   . tests/netns/two_hosts.sh
#   netns_usable || { echo "skip: ..."; exit 0; }
#   two_hosts TAG OCTET || exit 1   # sets h0, h1, sw and net (host i is $net.i)
# Everything it makes is removed when the script exits, also on failure.

# Root, iproute2 and a kernel that lets us make a namespace.
netns_usable() {
    [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1 && ip netns add weftprobe$$ 2>/dev/null &&
        ip netns del weftprobe$$
}

two_hosts_down() {
    for ns in $h0 $h1 $sw; do ip netns del "$ns" 2>/dev/null; done
}

# TAG (a few letters) keeps two scripts' namespaces apart; OCTET picks the
# 10.OCTET.x.0/24 family, different per script so that two running at once
# never share addresses.
two_hosts() {
    sw=${1}s$$ h0=${1}0$$ h1=${1}1$$
    net=10.$2.$(($$ % 200 + 20))
    trap two_hosts_down EXIT INT TERM
    ip netns add "$sw" && ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up ||
        return 1
    i=1
    for h in $h0 $h1; do
        ip netns add "$h" &&
            ip link add eth0 netns "$h" type veth peer name p$i netns "$sw" &&
            ip -n "$sw" link set p$i master br0 && ip -n "$sw" link set p$i up &&
            ip -n "$h" addr add "$net.$i/24" dev eth0 && ip -n "$h" link set eth0 up &&
            ip -n "$h" link set lo up || return 1
        i=$((i + 1))
    done
}
