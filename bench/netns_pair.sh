# shellcheck shell=bash
# Sourced by the benches that emulate two hosts or clusters (peers_tcp.sh,
# wan_netns.sh): network namespaces $NSA and $NSB joined by one veth pair,
# vA in $NSA with $IPA and vB in $NSB with $IPB (a /24), loopback up in
# both. The sourcing script sets those four names and defines die, and may
# define netns_shape NS DEV, called for each end once it is up (a tc qdisc).

netns_pair_make() {
    local h ns rest dev ip
    ip netns add "$NSA" && ip netns add "$NSB" || die "cannot make network namespaces"
    ip link add vA netns "$NSA" type veth peer name vB netns "$NSB" || die "cannot make the veth pair"
    for h in "$NSA:vA:$IPA" "$NSB:vB:$IPB"; do
        ns=${h%%:*} rest=${h#*:}
        dev=${rest%%:*} ip=${rest#*:}
        ip -n "$ns" addr add "$ip/24" dev "$dev"
        ip -n "$ns" link set "$dev" up
        ip -n "$ns" link set lo up
        if command -v netns_shape >/dev/null; then netns_shape "$ns" "$dev"; fi
    done
}

# Deleting a namespace deletes its veth end and the qdiscs on it.
netns_pair_del() {
    ip netns del "$NSA" 2>/dev/null
    ip netns del "$NSB" 2>/dev/null
}
