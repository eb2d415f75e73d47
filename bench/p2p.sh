#!/bin/bash
# Point-to-point between two ranks of this host, four ways in the same
# run: through shared memory as it ships (WEFT_P2P_SHM=1: a ring per
# pair, the sender's and the receiver's copies under way at once), the
# same between weft_mem_alloc'd buffers (p2p_bw -r, columns "reg": from
# 256 KiB one copy out of the sender's pages into the receiver's, from
# WEFT_P2P_SHARE (1 MiB) the receiver and the waiting sender each copying
# chunks of it; the 1 MiB and up sizes only; REG_SHARE=0 runs them with
# the receiver copying alone), the ring's with single copy from 256 KiB
# (WEFT_SHM_CMA=2: process_vm_readv; columns "cma") and over loopback TCP
# (WEFT_P2P_SHM=0), runs taking turns, with one copy's bandwidth on
# rank 0 measured in every run (column "copy": the faster of memcpy and
# a copy with non-temporal stores, as weft's own from half the
# last-level cache on; column "copy2": the same copy taking turns
# between two pairs of buffers, as a ping-pong's round trip copies two
# payloads into two destinations, the like-for-like bound of "reg" where
# two payloads outgrow the last-level cache and one does not (16 MiB on
# the EPYC guest; at 4 MiB it reads below what the ping-pong moves);
# column "xcopy": one copy whose source a thread on the other CPU has
# just written, as a payload comes from the sender's core where copy's
# comes from the copying core's own caches; the target compares with
# "copy", reg/cp2 and reg/xcp are shown beside it;
# bench/p2p_bw.c: lat is half a
# ping-pong's round trip, bw its size / lat, bibw an exchange's both
# ways; each the median of 5 passes within the run). Prints the medians
# of the runs per size, then the same run's bounds for
# 1, 4 and 16 MiB without weft (bench/cacheline_rtt.c -b: memcpy, a bare
# two-copy ring between the two processes, process_vm_readv) and a cache
# line's round trip between the two CPUs.
#
#   bash bench/p2p.sh              (5 runs each way; a minute or two idle)
#   bash bench/p2p.sh -R 1         (quick look)
#
# Options: -R N runs each way [5]. BUILD=dir picks weft's build [build];
# REG_SHARE=bytes sets WEFT_P2P_SHARE for the "reg" runs [1M].
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
cc -O2 -o "$work/rtt" "$HERE/cacheline_rtt.c" || { say "cacheline_rtt did not build"; exit 1; }

echo "p2p.sh: 2 ranks on one host, $REPS runs each way, $(date -u +%FT%TZ)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores"
for rep in $(seq "$REPS"); do
    for way in shm reg cma tcp; do
        shm=1 cma=1 ranges=("-b 8 -e 4096 -f 8" "-b 1048576 -e 16777216 -f 4") reg=
        [ $way = cma ] && cma=2
        [ $way = tcp ] && shm=0
        [ $way = reg ] && reg=-r ranges=("-b 1048576 -e 16777216 -f 4")
        for range in "${ranges[@]}"; do
            # -r's columns 8-10 are the registered buffers' lat, bw, bibw
            # shellcheck disable=SC2086
            WEFT_P2P_SHARE=${REG_SHARE:-1M} WEFT_P2P_SHM=$shm WEFT_SHM_CMA=$cma "$B/weftrun" -n 2 "$work/p2p_bw" $range $reg \
                2>&1 | sed 's/^\[0\] //' |
                awk -v w="$way" '$1 ~ /^[0-9]+$/ {
                    if (w == "reg") print w, $1, $2, $7, $8, $9, $6, $10, $11; else print w, $0 }' \
                >>"$work/all"
        done
    done
done
[ -s "$work/all" ] || { say "no figures (see a run by hand)"; exit 1; }

# columns of all: way size iters lat bw bibw memcpy [copy2 xcopy: reg's]
med() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
f="%10s | %8s %8s %8s | %8s %8s %8s | %8s %8s %8s | %8s %8s %8s | %8s %8s %8s | %7s %7s %7s %7s %7s\n"
# shellcheck disable=SC2059
printf "$f" size "shm lat" "shm bw" "bibw" "reg lat" "reg bw" "bibw" "cma lat" "cma bw" "bibw" \
    "tcp lat" "tcp bw" "bibw" copy copy2 xcopy "shm/cp" "reg/cp" "cma/cp" "reg/cp2" "reg/xcp"
# shellcheck disable=SC2059
printf "$f" "(B)" "(us)" "(GB/s)" "(GB/s)" "(us)" "(GB/s)" "(GB/s)" "(us)" "(GB/s)" "(GB/s)" \
    "(us)" "(GB/s)" "(GB/s)" "(GB/s)" "(GB/s)" "(GB/s)" "" "" "" "" ""
for size in $(awk '{ print $2 }' "$work/all" | sort -n | uniq); do
    col() { awk -v w="$1" -v s="$size" -v c="$2" '$1 == w && $2 == s { print $c }' "$work/all" | med; }
    cp=$(awk -v s="$size" '$2 == s { print $7 }' "$work/all" | med)
    cp2=$(col reg 8)
    xcp=$(col reg 9)
    # shellcheck disable=SC2059
    printf "$f" "$size" "$(col shm 4)" "$(col shm 5)" "$(col shm 6)" "$(col reg 4)" \
        "$(col reg 5)" "$(col reg 6)" "$(col cma 4)" "$(col cma 5)" "$(col cma 6)" \
        "$(col tcp 4)" "$(col tcp 5)" "$(col tcp 6)" "$cp" "$cp2" "$xcp" \
        "$(div "$(col shm 5)" "$cp")" "$(div "$(col reg 5)" "$cp")" "$(div "$(col cma 5)" "$cp")" \
        "$(div "$(col reg 5)" "$cp2")" "$(div "$(col reg 5)" "$xcp")"
done
# the ring's bound depends on where the host put the two CPUs: a cache
# line's round trip between them says which placement this run had
echo "placement: $("$work/rtt" -n 20000 -r "$REPS" -c 0,1 2>&1)"
for size in 1048576 4194304 16777216; do
    echo "bound: $("$work/rtt" -b $size -r "$REPS")"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
