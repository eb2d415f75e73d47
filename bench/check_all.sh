#!/bin/sh
# Correctness at benchmark sizes: every collective with every algorithm that
# supports it, 8 ranks, 8 B to 64 MiB (x4), one timed iteration each; prints
# the "Out of bounds values" line of each run (all must say 0 OK).
#   sh bench/check_all.sh [RANKS] [MAXSIZE] [ALGOS]
B=${BUILD:-build}
N=${1:-8}
MAX=${2:-64M}
ALGOS=${3:-"naive ring"}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null || exit 1
status=0
for coll in allreduce broadcast reduce allgather reduce_scatter gather scatter alltoall; do
    for a in $ALGOS; do
        line=$("$B/weftrun" -n "$N" "$B/weft-bench" $coll -b 8 -e "$MAX" -f 4 -a $a -w 0 -n 1 2>&1 |
               grep -E "Out of bounds|has no|error" | head -n 1)
        case "$line" in
        *"has no"*) line="(no $a schedule for $coll)" ;;
        *"0 OK"*) ;;
        *) status=1 ;;
        esac
        printf "%-15s %-13s %s\n" "$coll" "$a" "$line"
    done
done
exit $status
