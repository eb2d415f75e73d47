#!/bin/sh
# Measures weft's ring all-reduce on this machine at 2, 4 and 8 ranks from
# 8 B to 64 MiB: the validation set of weft-sim's "host" preset
# (docs/SIMULATION.md, "This host"). Each point is the median of REPS runs
# of weft-bench (each run itself a mean over its timed iterations), so that
# one run disturbed by another process does not move the figure.
#
# Writes $OUT (default docs/sim/host-measured.dat: ranks, bytes, median
# time in us, the load average when the point was taken) and prints
# weft-sim's prediction beside each point. Timing runs hold
# /tmp/weft-bench.lock so that no two benchmarks on this machine overlap.
# Run it on an idle machine: other work only adds time, so the stored set
# keeps, per point, the lower median of two such runs (OUT=/tmp/run1 ...,
# then merge; docs/sim/host-measured.dat's header says how it was made).
#
# RANKS and SIZES (space-separated) re-measure single points; with
# MAXLOAD, each point waits (up to 20 minutes) for the 1-minute load
# average to fall below it, so that a point replaced in the stored set is
# one taken on a quiet machine (the load printed is the one before the
# point, the benchmark's own ranks not yet counted).
#
# usage: [OUT=FILE] [RANKS="2 4"] [SIZES="8 1K"] [MAXLOAD=1.5] bench/sim_calibrate.sh [BUILD_DIR] [REPS]
set -e
cd "$(dirname "$0")/.."
B=${1:-${BUILD:-build}}
REPS=${2:-5}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" "$B/weft-sim" >/dev/null
OUT=${OUT:-docs/sim/host-measured.dat}
mkdir -p "$(dirname "$OUT")"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "# ranks bytes median_us load1 (weft-bench allreduce -a ring, median of $REPS runs; $(date -u +%Y-%m-%d), $(nproc) cores)" > "$OUT"
for n in ${RANKS:-2 4 8}; do
    for s in ${SIZES:-8 1K 64K 1M 16M 64M}; do
        if [ -n "$MAXLOAD" ]; then
            w=0
            while [ $w -lt 120 ] && ! awk -v m="$MAXLOAD" '{ exit !($1 < m) }' /proc/loadavg; do
                sleep 10
                w=$((w + 1))
            done
        fi
        load=$(cut -d' ' -f1 /proc/loadavg)
        case $s in
        16M|64M) it="-w 1 -n 3" ;;
        1M) it="-w 3 -n 10" ;;
        *) it="-w 20 -n 200" ;;
        esac
        : > "$tmp"
        r=0
        while [ $r -lt "$REPS" ]; do
            flock /tmp/weft-bench.lock "$B/weftrun" -n $n "$B/weft-bench" allreduce -l $s \
                -a ring -I 1 $it | grep -v '#' | awk 'NF >= 7 { print $2, $7 }' >> "$tmp"
            r=$((r + 1))
        done
        bytes=$(awk 'NR == 1 { print $1 }' "$tmp")
        med=$(awk '{ print $2 }' "$tmp" | sort -g |
              awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
        echo "$n $bytes $med $load" | tee -a "$OUT"
        echo "#   runs: $(awk '{ printf "%s ", $2 }' "$tmp")" >&2
    done
done
"$B/weft-sim" validate --set host
