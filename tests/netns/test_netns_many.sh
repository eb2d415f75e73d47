#!/bin/sh
# Many ranks across two emulated hosts (network namespaces on a bridge, as
# test_netns.sh makes them): 24 ranks a host. An all-to-all by naive and by
# the ring has every rank connect to every other at once (47 handshakes
# arriving together, where a table of 16 once pushed members out and read
# as a death), and 48 ranks meet through rank 0's gathered rendezvous
# records; auto's all-reduce and a broadcast run too. Every element is
# checked. Needs root and iproute2; prints a skip otherwise. Everything it
# makes is removed on exit, also on failure.
# TEST_TIMEOUT(300)
B=${BUILD:-build}
PER=${PER:-24}
. "$(dirname "$0")/two_hosts.sh"
if ! netns_usable; then
    echo "skip: needs root and network namespaces"
    echo "summary: 0 passed, 0 failed"
    exit 0
fi
id=$$
two_hosts wm 78 || { echo "summary: 0 passed, 1 failed"; exit 1; }
set +e

passed=0; failed=0
# below the ephemeral range (from 32768): the all-to-alls' thousands of
# connections take source ports from it, and a store port among them is
# busy when the next job binds it
port=$((10000 + id % 20000))
n=$((2 * PER))

# weft-bench on 2 x PER ranks, the first half in host 0; a pass when every
# rank exits 0, rank 0's results check out and no rank says a peer died.
# across WHAT BENCH-ARGS...
across() {
    what=$1
    shift
    port=$((port + 1))
    out=$(mktemp)
    first=$(mktemp)
    pids=""
    for r in $(seq 0 $((n - 1))); do
        h=$h0; [ $r -ge $PER ] && h=$h1
        log=/dev/null; [ $r = 0 ] && log=$first
        ip netns exec $h env WEFT_RANK=$r WEFT_WORLD_SIZE=$n WEFT_LOCAL_RANK=$((r % PER)) \
            WEFT_MASTER_ADDR=$net.1 WEFT_MASTER_PORT=$port WEFT_SOCKET_IFNAME=eth0 \
            WEFT_JOB_SECRET=netns-many-$id WEFT_TIMEOUT=120 \
            timeout 200 "$B/weft-bench" "$@" >"$log" 2>>"$out" &
        pids="$pids $!"
    done
    ok=1
    for p in $pids; do wait $p || ok=0; done
    grep -q "Out of bounds values : 0 OK" "$first" || ok=0
    if grep -q "died\|pushed out" "$out"; then ok=0; fi
    if [ $ok = 1 ]; then
        passed=$((passed + 1))
        echo "ok   $what"
    else
        failed=$((failed + 1))
        echo "FAIL $what"
        sed 's/^/    /' "$first" | tail -n 5
        sed 's/^/    /' "$out" | head -n 30
    fi
    rm -f "$out" "$first"
}

across "alltoall naive, $n ranks on two hosts" alltoall -b 4K -e 4K -a naive -w 1 -n 2
across "alltoall ring, $n ranks on two hosts" alltoall -b 4K -e 4K -a ring -w 1 -n 2
across "allreduce auto, $n ranks on two hosts" allreduce -b 8 -e 64K -f 64 -w 1 -n 2
across "broadcast tree, $n ranks on two hosts" broadcast -b 8 -e 64K -f 64 -a tree -w 1 -n 2
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
