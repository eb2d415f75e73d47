#!/bin/sh
# Parameter server vs ring all-reduce on emulated hosts: every process runs
# in its own network namespace on one bridge, each host's link limited to
# RATE Mbit/s in both directions with tc tbf (egress of the host's eth0 and
# of its port on the bridge), so the link bandwidth B is known and the CPU
# is not the limit. For n = 1..8 workers and k = 1, 2, 4 servers (n + k
# hosts) it measures push+pull time per step of an M-byte tensor (BSP,
# tools/weft-psbench.c), ring all-reduce of the same tensor among the same
# workers in the same run, and prints the bounds M/B (a worker's own link),
# nM/(kB) (the servers' links) and BytePS's 2n(n-1)M/((n^2+kn-2k)B).
#
#   sudo sh bench/ps.sh [SIZE] [RATE_MBIT] [ITERS]     (default 2M 100 3)
#
# Needs root and iproute2; removes everything it made on exit. NMAX (8) and
# KLIST ("1 2 4") choose the grid, CHUNK the chunk size in elements; NOMAKE=1 uses $BUILD/weft-psbench as is.
B=${BUILD:-build}
SIZE=${1:-2M}
RATE=${2:-100}
ITERS=${3:-3}
NMAX=${NMAX:-8}
KLIST=${KLIST:-"1 2 4"}
[ -n "$NOMAKE" ] || make -s -j2 BUILD="$B" "$B/weft-psbench" >/dev/null || exit 1
if [ "$(id -u)" != 0 ] || ! ip netns add wpsprobe$$ 2>/dev/null; then
    echo "bench/ps.sh: needs root and network namespaces" >&2
    exit 1
fi
ip netns del wpsprobe$$
id=$$
sw=wpsw$id
net=10.78.$((id % 200 + 20))
H=$((NMAX + 4))
out=$(mktemp -d)
cleanup() {
    for i in $(seq 0 $((H - 1))); do ip netns del wps$id.$i 2>/dev/null; done
    ip netns del $sw 2>/dev/null
    rm -rf "$out"
}
trap cleanup EXIT INT TERM
set -e
ip netns add $sw
ip -n $sw link add br0 type bridge
ip -n $sw link set br0 up
for i in $(seq 0 $((H - 1))); do
    h=wps$id.$i
    ip netns add $h
    ip link add eth0 netns $h type veth peer name p$i netns $sw
    ip -n $sw link set p$i master br0
    ip -n $sw link set p$i up
    ip -n $h addr add $net.$((i + 1))/24 dev eth0
    ip -n $h link set eth0 up
    ip -n $h link set lo up
    # B each way: out of the host, and from the bridge into it
    ip netns exec $h tc qdisc add dev eth0 root tbf rate ${RATE}mbit burst 32kb latency 100ms
    ip netns exec $sw tc qdisc add dev p$i root tbf rate ${RATE}mbit burst 32kb latency 100ms
done
set +e
port=$((21000 + id % 20000))
echo "| workers n | servers k | M (bytes) | PS push+pull (ms) | ring all-reduce (ms) | M/B (ms) | nM/(kB) (ms) | BytePS bound (ms) | PS / BytePS bound | PS / max(M/B, nM/kB) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for k in $KLIST; do
    for n in $(seq 1 $NMAX); do
        port=$((port + 1))
        w=$((n + k))
        pids=""
        for r in $(seq 0 $((w - 1))); do
            role=worker; [ $r -ge $n ] && role=server
            ip netns exec wps$id.$r env WEFT_RANK=$r WEFT_WORLD_SIZE=$w WEFT_LOCAL_RANK=0 \
                WEFT_HOST_ID=host$r WEFT_MASTER_ADDR=$net.1 WEFT_MASTER_PORT=$port \
                WEFT_SOCKET_IFNAME=eth0 WEFT_JOB_SECRET=psbench$id WEFT_NUM_WORKERS=$n \
                WEFT_NUM_SERVERS=$k WEFT_ROLE=$role WEFT_TIMEOUT=120 WEFT_THREADS=1 \
                timeout 300 "$B/weft-psbench" -s "$SIZE" -n "$ITERS" -w 1 -B "$RATE" ${CHUNK:+-c $CHUNK} \
                >"$out/$r.txt" 2>&1 &
            pids="$pids $!"
        done
        ok=1
        for p in $pids; do wait $p || ok=0; done
        line=$(grep '^ps ' "$out/0.txt")
        if [ $ok = 0 ] || [ -z "$line" ]; then
            echo "| $n | $k | failed: $(cat "$out"/*.txt | tr '\n' ' ' | cut -c1-300) |"
            continue
        fi
        echo "$line" | awk -v rate="$RATE" '{
            n = $2; k = $3; M = $4; ps = $5; ar = $6; mb = $8; bp = $9;
            srv = n * M / k / (rate * 1e6 / 8) * 1e3;
            lo = mb > srv ? mb : srv;
            ars = "-"; if (n > 1) ars = sprintf("%.0f", ar);
            r = "-"; if (bp > 0) r = sprintf("%.2f", ps / bp);
            bps = "-"; if (bp > 0) bps = sprintf("%.0f", bp);
            printf "| %d | %d | %d | %.0f | %s | %.0f | %.0f | %s | %s | %.2f |\n",
                   n, k, M, ps, ars, mb, srv, bps, r, ps / lo }'
    done
done
