#!/bin/sh
# All-reduce between emulated clusters: the flat ring against the
# all-reduce over clusters (weft_cluster_allreduce), each in fp32 and in a
# codec, and auto (the cost model priced with the emulated link's delay and
# rate, WEFT_AUTOTUNE=0: hier over clusters for large messages), at C
# clusters x L ranks on this machine with WEFT_WAN's delay and
# rate on every wan connection (docs/WAN.md; the emulation is weft's own,
# per connection, not a kernel-shaped shared link). Prints per size the
# time (us) and the wan bytes each rank sent per call, and the ratios of
# the flat ring's to the cluster all-reduce's.
#
#   sh bench/wan_allreduce.sh [-C 2] [-L 2] [-w delay=50ms,rate=100mbit]
#                             [-l 8,64K,1M,4M] [-z int8] [-n 3]
# BUILD=dir picks the build directory [build].
set -e
B=${BUILD:-build}
C=2 L=2 WAN=delay=50ms,rate=100mbit LIST=8,64K,1M,4M CODEC=int8 ITERS=3
while getopts "C:L:w:l:z:n:h" opt; do
    case $opt in
    C) C=$OPTARG ;; L) L=$OPTARG ;; w) WAN=$OPTARG ;; l) LIST=$OPTARG ;;
    z) CODEC=$OPTARG ;; n) ITERS=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=$((C * L))

# one run: its name, then weft-bench's flags; keeps size, time, wan bytes
run() {
    name=$1; shift
    WEFT_WAN=$WAN "$B/weftrun" -n $n sh -c \
        "WEFT_CLUSTER=\$((WEFT_RANK / $L)) exec $B/weft-bench allreduce -l $LIST -w 1 -n $ITERS -I 1 -a ring $*" \
        2>&1 | awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $2, $7, $NF }' > "$out/$name"
}
run flat ""
run flat_z "-z $CODEC"
run hier "-H"
run hier_z "-H -z $CODEC"
WEFT_AUTOTUNE=0 run auto "-a auto"

echo "# all-reduce f32 sum, $C clusters x $L ranks, WEFT_WAN=$WAN, $ITERS iterations"
printf "# %10s %12s %12s %12s %12s %12s   %11s %11s %11s %11s %11s   %s\n" size "flat us" \
    "flat $CODEC" "clusters" "clust $CODEC" "auto" "flat wanB" "flat $CODEC" "clusters" \
    "clust $CODEC" "auto" "wanB flat/clusters"
paste "$out/flat" "$out/flat_z" "$out/hier" "$out/hier_z" "$out/auto" | awk -v c="$CODEC" '{
    r = $9 > 0 ? sprintf("%.2f", $3 / $9) : "-"
    printf "  %10s %12.0f %12.0f %12.0f %12.0f %12.0f   %11s %11s %11s %11s %11s   %s\n",
        $1, $2, $5, $8, $11, $14, $3, $6, $9, $12, $15, r }'
