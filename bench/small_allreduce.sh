#!/bin/bash
# The small all-reduce against Open MPI on this host, in one run: 8 B and
# 64 MiB all-reduce (f32 sum, out-of-place) at 4 and 8 ranks, weft-bench
# and Open MPI's mpi_allreduce (bench/peers/mpi_allreduce.c, timed the way
# weft-bench times: warm-up, barrier, timed calls, mean per call, slowest
# rank) taking turns, which goes first alternating by repetition; then the
# median of the repetitions and weft's time over Open MPI's. The floor
# goes with it: a cache line's round trip between two cores
# (bench/cacheline_rtt.c) measured in the same run, and the same with
# both processes on one core, yielding (a rank's wait when the host has
# more ranks than cores).
#
#   bash bench/small_allreduce.sh                   (about 1-2 minutes idle)
#   bash bench/small_allreduce.sh -r "2 4 8" -R 7
#
# Options (defaults in brackets):
#   -r "N ..."  rank counts ["4 8"]        -R N   repetitions, median [5]
#   -n N        timed 8 B calls [2000]     -w N   8 B warm-up calls [200]
#   -s "B ..."  small sizes [8]            -L     leave out 64 MiB
#   -a "A ..."  weft's algorithms, a column each [auto]; e.g. "auto flat":
#               flat by name runs the engine's whole path, what auto ran
#               for 8 B before the small path
#   -P          pin rank r (weft's and Open MPI's alike) to CPU r % CPUs,
#               so both run the same even placement (taskset)
#   -F          run both at real-time priority (chrt -f 1; root): the
#               other jobs of a loaded machine then do not take the
#               ranks' turns, which makes figures comparable under load
# BUILD=dir picks weft's build directory [build]. Installs Open MPI from
# Debian (openmpi-bin libopenmpi-dev) when run as root and it is missing.
set -u

RANKS="4 8" REPS=5 ITERS=2000 WARM=200 SMALL=8 LARGE=1 ALGOS=auto PIN=0 RT=0
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
B=${BUILD:-build}
usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "r:R:n:w:s:a:LPFh" opt; do
    case $opt in
    r) RANKS=$OPTARG ;; R) REPS=$OPTARG ;; n) ITERS=$OPTARG ;; w) WARM=$OPTARG ;;
    s) SMALL=$OPTARG ;; a) ALGOS=$OPTARG ;; L) LARGE=0 ;; P) PIN=1 ;; F) RT=1 ;; *) usage ;;
    esac
done
say() { echo "small_allreduce: $*" >&2; }

# as bench/peers/allreduce_vs_peers.sh runs Open MPI: shared memory (vader),
# ranks yielding when idle as weft's do on a host with more ranks than cores
OMPI_FLAGS="--oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1 --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo"

work=$(mktemp -d /tmp/weft-smallar.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

if ! command -v mpicc.openmpi >/dev/null || ! command -v mpirun.openmpi >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        say "installing openmpi-bin libopenmpi-dev"
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev; } \
            >"$work/apt.log" 2>&1 || { tail -3 "$work/apt.log" >&2; exit 1; }
    else
        say "Open MPI is missing (apt-get install openmpi-bin libopenmpi-dev)"; exit 1
    fi
fi
make -s -C "$ROOT" -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >"$work/make.log" 2>&1 ||
    { cat "$work/make.log" >&2; say "cannot build weft in $B"; exit 1; }
WB=$(cd "$ROOT/$B" && pwd)
mpicc.openmpi -O2 -o "$work/mpi" "$HERE/peers/mpi_allreduce.c" || exit 1
cc -O2 -o "$work/rtt" "$HERE/cacheline_rtt.c" || exit 1
# what each rank runs under: its launcher's rank picks the CPU
PRE="" WRAP=""
if [ "$RT" = 1 ]; then
    chrt -f 1 true 2>/dev/null || { say "-F: chrt -f 1 refused (root needed)"; exit 1; }
    PRE="chrt -f 1"
fi
if [ "$PIN" = 1 ]; then
    WRAP="$work/pin"
    printf '#!/bin/sh
r=${WEFT_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
exec taskset -c $((r %% %d)) "$@"
' \
        "$(nproc)" >"$WRAP"
    chmod +x "$WRAP"
fi

# one run: prints the out-of-place microseconds per call of the size
run() { # prog ranks bytes warm iters (prog: weft-ALGO or openmpi)
    local out
    if [ "$1" != openmpi ]; then
        out=$(timeout -k 5 300 $PRE "$WB/weftrun" -n "$2" $WRAP "$WB/weft-bench" allreduce -b "$3" -e "$3" \
            -w "$4" -n "$5" -a "${1#weft-}" 2>&1)
    else
        out=$(timeout -k 5 300 $PRE mpirun.openmpi $OMPI_FLAGS -np "$2" $WRAP "$work/mpi" -b "$3" -e "$3" \
            -w "$4" -n "$5" 2>&1)
    fi
    echo "$out" | sed 's/^\[[0-9]*\] //' | awk '!/^#/ && NF >= 6 && $1 ~ /^[0-9]+$/ {
        if ($9 != 0) bad = 1; t = $6 } END { if (bad || t == "") print "FAIL"; else print t }'
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
RTT=$($PRE "$work/rtt" -n 100000 -r 5 -c 0,1 2>&1)
RTTY=$($PRE "$work/rtt" -n 10000 -r 5 -c 0,0 -y 2>&1)
cases=""
for n in $RANKS; do
    for s in $SMALL; do cases="$cases $n:$s:$WARM:$ITERS"; done
    [ "$LARGE" = 1 ] && cases="$cases $n:67108864:2:5"
done
for rep in $(seq 1 "$REPS"); do
    order="$(for a in $ALGOS; do printf 'weft-%s ' "$a"; done)openmpi"
    [ $((rep % 2)) = 0 ] && order="openmpi $(for a in $ALGOS; do printf 'weft-%s ' "$a"; done)"
    for cs in $cases; do
        IFS=: read -r n s w i <<<"$cs"
        for prog in $order; do
            t=$(run "$prog" "$n" "$s" "$w" "$i")
            echo "$prog $n $s $t" >>"$work/times"
            say "rep $rep: $prog, $n ranks, $s B: $t us"
        done
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
med() { awk -v p="$1" -v n="$2" -v s="$3" '$1 == p && $2 == n && $3 == s && $4 != "FAIL" { print $4 }' "$work/times" | median; }
head="| ranks | size |" rule="| ---: | ---: |"
for a in $ALGOS; do head="$head weft $a (us) |"; rule="$rule ---: |"; done
head="$head Open MPI (us) |" rule="$rule ---: |"
for a in $ALGOS; do head="$head weft $a / Open MPI |"; rule="$rule ---: |"; done
echo "$head runs |"
echo "$rule ---: |"
for cs in $cases; do
    IFS=: read -r n s w i <<<"$cs"
    mt=$(med openmpi "$n" "$s")
    fails=$(awk -v n="$n" -v s="$s" '$2 == n && $3 == s && $4 == "FAIL"' "$work/times" | wc -l)
    size="$s B"
    [ "$s" -ge 1048576 ] && size="$((s >> 20)) MiB"
    row="| $n | $size |" ratios=""
    for a in $ALGOS; do
        wt=$(med "weft-$a" "$n" "$s")
        row="$row $(awk -v w="$wt" 'BEGIN { printf "%.2f", w }') |"
        ratios="$ratios $(awk -v w="$wt" -v m="$mt" 'BEGIN { printf "%.2fx", (m > 0 ? w / m : 0) }') |"
    done
    echo "$row $(awk -v m="$mt" 'BEGIN { printf "%.2f", m }') |$ratios $REPS$([ "$fails" -gt 0 ] && echo " ($fails failed)") |"
done
echo
echo "- floor: $RTT; $RTTY"
echo "- weft: \`weftrun -n N weft-bench allreduce -b S -e S -w W -n I -a ALGO\` ($ALGOS); Open MPI: \`mpirun.openmpi $OMPI_FLAGS -np N mpi_allreduce -b S -e S -w W -n I\` ($(mpirun.openmpi --version 2>/dev/null | head -1)); 8 B: -w $WARM -n $ITERS, 64 MiB: -w 2 -n 5; median of $REPS, order alternating"
[ "$PIN$RT" != 00 ] && echo "- both launched$([ "$RT" = 1 ] && echo " at real-time priority (chrt -f 1)")$([ "$PIN" = 1 ] && echo ", rank r pinned to CPU r % $(nproc) (taskset)")"
echo "- $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load average $LOAD0 before, $LOAD1 after"
