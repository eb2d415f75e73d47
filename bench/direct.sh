#!/bin/bash
# The direct all-reduce (single-copy reads between ranks of one host)
# against the ring over shared-memory rings and against what auto picks:
# weft-bench runs alternately (direct, ring, auto, then the next
# repetition) for every rank count, and the median busbw of the runs is
# printed per size, with the load average before and after.
#
#   bash bench/direct.sh                       (2 4 8 ranks, 256K .. 64M, 3 runs)
#   bash bench/direct.sh -r 4 -l 64M -R 5
#
# Options (defaults in brackets):
#   -r "N ..."  rank counts ["2 4 8"]       -l LIST  sizes [256K,1M,4M,16M,64M]
#   -a "A ..."  algorithms ["direct ring auto"]
#   -R N        repetitions, median [3]     -w N     warm-up calls [2]
#   -n N        timed calls [5]             -I 1|2   out-of-place | in-place [2]
# BUILD=dir picks weft's build directory [build].
set -u

RANKS="2 4 8" SIZES="256K,1M,4M,16M,64M" ALGOS="direct ring auto" REPS=3 WARMUP=2 ITERS=5
PLACE=2
B=${BUILD:-build}
usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "r:l:a:R:w:n:I:h" opt; do
    case $opt in
    r) RANKS=$OPTARG ;; l) SIZES=$OPTARG ;; a) ALGOS=$OPTARG ;; R) REPS=$OPTARG ;;
    w) WARMUP=$OPTARG ;; n) ITERS=$OPTARG ;; I) PLACE=$OPTARG ;; *) usage ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null || exit 1
work=$(mktemp -d /tmp/weft-direct.XXXXXX)
trap 'rm -rf "$work"' EXIT

# busbw column: 9 out of place, 13 in place
col=$([ "$PLACE" = 1 ] && echo 9 || echo 13)
echo "# all-reduce f32 sum, $([ "$PLACE" = 1 ] && echo out-of-place || echo in-place)," \
     "-w $WARMUP -n $ITERS, median busbw (GB/s) of $REPS runs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $RANKS; do
    for ((k = 0; k < REPS; k++)); do
        for a in $ALGOS; do
            "$B/weftrun" -n "$n" "$B/weft-bench" allreduce -a "$a" -l "$SIZES" -c 0 \
                -w "$WARMUP" -n "$ITERS" -I "$PLACE" 2>"$work/err" >"$work/out" ||
                { echo "direct.sh: $n ranks, $a failed:" >&2; tail -3 "$work/err" >&2; }
            awk -v n="$n" -v a="$a" -v c="$col" '$2 !~ /#/ && NF > 8 { print n, a, $2, $c }' \
                "$work/out" >>"$work/raw"
        done
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%6s %10s" ranks bytes
for a in $ALGOS; do printf " %9s" "$a"; done
echo
for n in $RANKS; do
    for s in $(awk -v n="$n" '$1 == n { print $3 }' "$work/raw" | sort -n -u); do
        printf "%6s %10s" "$n" "$s"
        for a in $ALGOS; do
            m=$(awk -v n="$n" -v a="$a" -v s="$s" '$1 == n && $2 == a && $3 == s { print $4 }' \
                "$work/raw" | sort -g | awk '{ v[NR] = $1 } END {
                    if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                    else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
            printf " %9s" "$m"
        done
        echo
    done
done
