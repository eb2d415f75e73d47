#!/bin/sh
# What WEFT_TLS=1 costs: all-reduce over TCP (WEFT_SHM=0, so same-host
# ranks do not bypass the network path) without and with TLS, at 2 and 4
# ranks; out-of-place time and bus bandwidth, median of 3 runs each.
#   sh bench/tls.sh
B=${BUILD:-build}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null || exit 1
SIZES=${SIZES:-8,64K,1M,16M,64M}
export WEFT_SHM=0
run() { # run N TLS: "size time busbw" lines, median time of 3 runs per size
    for i in 1 2 3; do
        WEFT_TLS=$2 "$B/weftrun" -n "$1" "$B/weft-bench" allreduce -l "$SIZES" -w 3 -n 10 -I 1 |
            grep -v '#' | awk '{ print $2, $7, $9 }'
    done | sort -k1,1n -k2,2n | awk '{ n[$1]++; if (n[$1] == 2) print }'
}
echo "| ranks | size (B) | plain: time (us) | plain: busbw (GB/s) | TLS: time (us) | TLS: busbw (GB/s) | TLS / plain time |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in 2 4; do
    run $n 0 >/tmp/weft-tls-plain.$$
    run $n 1 >/tmp/weft-tls-tls.$$
    awk -v n=$n 'NR == FNR { t[$1] = $2; b[$1] = $3; next }
        ($1 in t) { printf "| %d | %d | %.1f | %.3f | %.1f | %.3f | %.1f |\n", n, $1, t[$1], b[$1], $2, $3, $2 / t[$1] }' \
        /tmp/weft-tls-plain.$$ /tmp/weft-tls-tls.$$
    rm -f /tmp/weft-tls-plain.$$ /tmp/weft-tls-tls.$$
done
