#!/bin/sh
# Ring vs naive all-reduce on this machine at 2, 4 and 8 ranks: the seed's
# claim is that ring traffic per rank stays at 2(p-1)/p of the message while
# naive traffic grows as (p-1) times the message.
#
#   sh bench/ring_vs_naive.sh [MAXSIZE]      (default 64M; prints a markdown table)
set -e
B=${BUILD:-build}
MAX=${1:-64M}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in 2 4 8; do
    for a in naive ring; do
        "$B/weftrun" -n $n "$B/weft-bench" allreduce -b 1M -e "$MAX" -f 4 -a $a -w 2 -n 5 \
            > "$out/$a.$n.txt"
    done
done
echo "| ranks | size (B) | naive time (us) | naive busbw (GB/s) | ring time (us) | ring busbw (GB/s) | ring/naive speed | bytes sent per rank: naive | ring |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in 2 4 8; do
    # rows: "[0] size count type op root time algbw busbw wrong ..."
    grep -v '#' "$out/naive.$n.txt" | awk '{print $2, $7, $9, $10}' > "$out/n"
    grep -v '#' "$out/ring.$n.txt" | awk '{print $2, $7, $9, $10}' > "$out/r"
    paste -d' ' "$out/n" "$out/r" | awk -v p=$n '{
        if ($4 != 0 || $8 != 0) bad = " (#wrong!)"; else bad = "";
        printf "| %d | %d | %.0f | %.3f | %.0f | %.3f | %.2fx%s | %.0f | %.0f |\n",
               p, $1, $2, $3, $6, $7, $2 / $6, bad, (p - 1) * $1, 2 * (p - 1) / p * $1 }'
done
