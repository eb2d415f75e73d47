#!/bin/sh
# Small-message latency: 8-byte all-reduce at 2, 4 and 8 ranks with the
# automatic algorithm choice, with and without polling before sleeping.
#   sh bench/latency.sh
B=${BUILD:-build}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null || exit 1
echo "| ranks | algorithm (auto) | time (us), WEFT_SPIN_US=50 (default) | time (us), WEFT_SPIN_US=0 |"
echo "| ---: | --- | ---: | ---: |"
for n in 2 4 8; do
    a=$(WEFT_SPIN_US=50 "$B/weftrun" -n $n "$B/weft-bench" allreduce -b 8 -e 8 -w 50 -n 1000 -I 1 | grep -v '#')
    z=$(WEFT_SPIN_US=0 "$B/weftrun" -n $n "$B/weft-bench" allreduce -b 8 -e 8 -w 50 -n 1000 -I 1 | grep -v '#')
    echo "$a" | awk -v n=$n -v z="$(echo "$z" | awk '{print $7}')" '{ printf "| %d | %s | %.1f | %.1f |\n", n, $NF, $7, z }'
done
