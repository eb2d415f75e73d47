#!/bin/sh
# Many ranks: every algorithm's results (many_ranks.c) and start-up time
# (startup.c) at each count of RANKS, on this host; with -H, as two emulated
# hosts (network namespaces on a bridge, as tests/netns/test_netns.sh makes
# them; needs root), RANKS per host.
#
#   sh bench/many_ranks.sh [-r 64,128,256] [-H] [-s]   (-s: start-up only)
#
# Runs one job at a time: hundreds of ranks on a few cores are heavy.
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
RANKS=64,128,256 HOSTS=1 ONLY_STARTUP=0
while getopts r:Hs o; do
    case $o in
    r) RANKS=$OPTARG ;; H) HOSTS=2 ;; s) ONLY_STARTUP=1 ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/libweft.a" >/dev/null || exit 1
LIBS="-lpthread -lm $(pkg-config --libs openblas 2>/dev/null || true)"
pkg-config --exists openssl 2>/dev/null && LIBS="$LIBS $(pkg-config --libs openssl)"
for p in many_ranks startup; do
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -I"$HERE/../include" "$HERE/$p.c" "$B/libweft.a" \
        $LIBS -o "$B/$p" || exit 1
done
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

if [ $HOSTS = 1 ]; then
    for n in $(echo "$RANKS" | tr ',' ' '); do
        timeout 900 "$B/weftrun" -n "$n" "$B/startup" || echo "startup at $n ranks failed"
        [ $ONLY_STARTUP = 1 ] ||
            timeout 900 "$B/weftrun" -n "$n" "$B/many_ranks" || echo "many_ranks at $n ranks failed"
    done
    exit 0
fi

# Two namespaces, each with RANKS ranks; rank 0's host serves the store.
. "$HERE/../tests/netns/two_hosts.sh"
id=$$
two_hosts wb 79 || exit 1
port=$((20000 + id % 20000))
for per in $(echo "$RANKS" | tr ',' ' '); do
    n=$((2 * per))
    for prog in startup many_ranks; do
        [ $ONLY_STARTUP = 1 ] && [ $prog = many_ranks ] && continue
        port=$((port + 1))
        pids=""
        out=$(mktemp)
        for r in $(seq 0 $((n - 1))); do
            h=$h0; [ $r -ge $per ] && h=$h1
            ip netns exec $h env WEFT_RANK=$r WEFT_WORLD_SIZE=$n WEFT_LOCAL_RANK=$((r % per)) \
                WEFT_MASTER_ADDR=$net.1 WEFT_MASTER_PORT=$port WEFT_SOCKET_IFNAME=eth0 \
                WEFT_JOB_SECRET=many-ranks-$id timeout 900 "$B/$prog" >>"$out" 2>&1 &
            pids="$pids $!"
        done
        ok=1
        for p in $pids; do wait $p || ok=0; done
        grep -v '^$' "$out" | grep -v 'warn' | head -40
        [ $ok = 1 ] || echo "$prog at 2 x $per ranks failed"
        rm -f "$out"
    done
done
