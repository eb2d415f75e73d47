#!/bin/sh
# Multi-host test: two emulated hosts (network namespaces) joined by a
# bridge, one of them behind a 1 Gbit/s token bucket; 2 ranks per host run
# every collective through weft-bench and must get every element right, and
# large all-reduces with 1 and 2 ranks per host.
# Needs root and iproute2; prints a skip otherwise. Everything it makes is
# removed on exit, also on failure.
B=${BUILD:-build}
. "$(dirname "$0")/two_hosts.sh"
if ! netns_usable; then
    echo "skip: needs root and network namespaces"
    echo "summary: 0 passed, 0 failed"
    exit 0
fi
id=$$
set -e
two_hosts wh 77
# host 1 behind a 1 Gbit/s link (tbf: the kernel here has no netem)
ip netns exec $h1 tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 50ms 2>/dev/null || true
set +e

passed=0; failed=0
port=$((20000 + id % 20000))

# weft-bench on n ranks, the first half in host 0, the rest in host 1: a
# pass when every rank exits 0 and rank 0's results check out.
# across N WHAT BENCH-ARGS...
across() {
    n=$1 what=$2
    shift 2
    port=$((port + 1))
    logs=""
    pids=""
    for r in $(seq 0 $((n - 1))); do
        h=$h0; [ $r -ge $((n / 2)) ] && h=$h1
        log=$(mktemp); logs="$logs $log"
        ip netns exec $h env WEFT_RANK=$r WEFT_WORLD_SIZE=$n WEFT_LOCAL_RANK=$((r % (n / 2))) \
            WEFT_MASTER_ADDR=$net.1 WEFT_MASTER_PORT=$port WEFT_SOCKET_IFNAME=eth0 \
            WEFT_TIMEOUT=60 \
            timeout 120 "$B/weft-bench" "$@" >"$log" 2>&1 &
        pids="$pids $!"
    done
    ok=1
    for p in $pids; do wait $p || ok=0; done
    first=$(echo $logs | cut -d' ' -f1)
    grep -q "Out of bounds values : 0 OK" "$first" || ok=0
    if [ $ok = 1 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $what"
        for l in $logs; do sed 's/^/    /' "$l"; done
    fi
    rm -f $logs
}

for coll in allreduce broadcast reduce allgather reduce_scatter gather scatter alltoall; do
    for algo in naive ring; do
        across 4 "$coll $algo across two hosts" $coll -b 4K -e 1M -f 16 -a $algo -w 1 -n 2
    done
done

# large all-reduces go as wavefronts of 64 KiB chunks across the hosts: the
# ring with one rank per host, hier with two (sizes that are no multiple of
# a chunk); auto picks among them
for job in "2 ring" "2 auto" "4 hier" "4 auto"; do
    n=${job% *} algo=${job#* }
    across $n "large allreduce $algo at $n ranks across two hosts" \
        allreduce -l 65540,1048580,4194308 -a $algo -w 1 -n 2
done

# a rank that names an interface that does not exist gets a clear error
if ip netns exec $h0 env WEFT_RANK=0 WEFT_WORLD_SIZE=2 WEFT_MASTER_ADDR=$net.1 \
    WEFT_MASTER_PORT=$((port + 1)) WEFT_SOCKET_IFNAME=nosuch0 WEFT_CONNECT_TIMEOUT=5 \
    timeout 30 "$B/weft-bench" allreduce -b 8 -e 8 2>&1 | grep -q "nosuch0"; then
    passed=$((passed + 1))
else
    failed=$((failed + 1)); echo "FAIL bad WEFT_SOCKET_IFNAME not reported"
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
