#!/bin/bash
# Point-to-point between two ranks of this host, both ways in the same
# run: through shared memory (WEFT_P2P_SHM=1: a ring, single copy from
# 256 KiB) and over loopback TCP (WEFT_P2P_SHM=0), runs taking turns,
# with memcpy's bandwidth on rank 0 measured in every run (bench/p2p_bw.c:
# lat is half a ping-pong's round trip, bw its size / lat, bibw an
# exchange's both ways). Prints the medians per size.
#
#   bash bench/p2p.sh              (5 runs each way; about a minute idle)
#   bash bench/p2p.sh -R 1         (quick look)
#
# Options: -R N runs each way [5]. BUILD=dir picks weft's build [build].
set -u
REPS=5
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
while getopts "R:h" opt; do
    case $opt in
    R) REPS=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
say() { echo "p2p.sh: $*" >&2; }
[ -x "$B/weftrun" ] && [ -f "$B/libweft.a" ] || { say "build first: make BUILD=$B all"; exit 1; }
work=$(mktemp -d /tmp/weft-p2p-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
libs="$(pkg-config --libs libfabric libssl libcrypto openblas 2>/dev/null ||
    pkg-config --libs libssl libcrypto 2>/dev/null || true)"
cc -O2 -std=c11 -D_GNU_SOURCE -I"$HERE/../include" "$HERE/p2p_bw.c" -o "$work/p2p_bw" \
    "$B/libweft.a" $libs -pthread -lm || { say "p2p_bw did not build"; exit 1; }

echo "p2p.sh: 2 ranks on one host, $REPS runs each way, $(date -u +%FT%TZ)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores"
for rep in $(seq "$REPS"); do
    for shm in 1 0; do
        for range in "-b 8 -e 4096 -f 8" "-b 1048576 -e 16777216 -f 4"; do
            # shellcheck disable=SC2086
            WEFT_P2P_SHM=$shm "$B/weftrun" -n 2 "$work/p2p_bw" $range 2>&1 |
                sed 's/^\[0\] //' | awk -v w="$shm" '$1 ~ /^[0-9]+$/ { print w, $0 }' \
                >>"$work/all"
        done
    done
done
[ -s "$work/all" ] || { say "no figures (see a run by hand)"; exit 1; }

# columns of all: shm size iters lat bw bibw memcpy
med() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
printf "%10s | %9s %9s %9s | %9s %9s %9s | %11s | %9s\n" size "shm lat" "shm bw" "shm bibw" \
    "tcp lat" "tcp bw" "tcp bibw" "memcpy" "shm/cpy"
printf "%10s | %9s %9s %9s | %9s %9s %9s | %11s | %9s\n" "(B)" "(us)" "(GB/s)" "(GB/s)" \
    "(us)" "(GB/s)" "(GB/s)" "(GB/s)" ""
for size in $(awk '{ print $2 }' "$work/all" | sort -n | uniq); do
    col() { awk -v w="$1" -v s="$size" -v c="$2" '$1 == w && $2 == s { print $c }' "$work/all" | med; }
    sl=$(col 1 4) sb=$(col 1 5) sx=$(col 1 6) tl=$(col 0 4) tb=$(col 0 5) tx=$(col 0 6)
    cp=$(awk -v s="$size" '$2 == s { print $7 }' "$work/all" | med)
    ratio=$(awk -v a="$sb" -v b="$cp" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    printf "%10s | %9s %9s %9s | %9s %9s %9s | %11s | %9s\n" "$size" "$sl" "$sb" "$sx" "$tl" "$tb" \
        "$tx" "$cp" "$ratio"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
