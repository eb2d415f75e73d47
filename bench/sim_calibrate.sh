#!/bin/sh
# Calibrates weft-sim's "host" topology from weft's own transport on this
# machine: a 2-rank ring all-reduce of 8 B gives the per-message cost, one of
# 64 MB the bandwidth. Writes docs/sim/host.topo, to use as
#   weft-sim allreduce --topo docs/sim/host.topo --ranks 2,4,8 --size 8 --size 64M
# and prints it. The built-in "host" preset stays a placeholder until its
# numbers are copied from such a run on a quiet machine.
#
# The model of a 2-rank ring all-reduce of S bytes (two rounds, S/2 each):
#   T(8 B)  = 2 (o + L)                 -> o = L = T8 / 4 (not separable here)
#   T(S)    = T(8 B) + S / bw           -> bw = S / (T(S) - T(8 B))
# usage: bench/sim_calibrate.sh [BUILD_DIR]
set -e
cd "$(dirname "$0")/.."
B=${1:-${BUILD:-build}}
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" "$B/weft-sim" >/dev/null
t8=$("$B/weftrun" -n 2 "$B/weft-bench" allreduce -b 8 -e 8 -a ring -w 20 -n 200 |
     grep -v '#' | awk 'NR == 1 { print $7 }')
t64=$("$B/weftrun" -n 2 "$B/weft-bench" allreduce -b 64M -e 64M -a ring -w 2 -n 5 |
      grep -v '#' | awk 'NR == 1 { print $7 }')
mkdir -p docs/sim
awk -v t8="$t8" -v t64="$t64" -v date="$(date -u +%Y-%m-%d)" 'BEGIN {
    o = t8 / 4; bw = 67108864 / ((t64 - t8) * 1e3);
    printf "name host\n";
    printf "note calibrated %s by bench/sim_calibrate.sh: 8 B in %.2f us, 64 MB in %.0f us\n", date, t8, t64;
    printf "ranks_per_node 64\nnodes_per_pod 1\npods_per_cluster 1\nclusters 1\n";
    printf "link intra lat_us %.3f bw_GBps %.3f ovh_us %.3f\n", o, bw, o;
    printf "compute reduce_GBps 4 copy_GBps 8 local_us 1\n";
}' > docs/sim/host.topo
cat docs/sim/host.topo
"$B/weft-sim" allreduce --topo docs/sim/host.topo --ranks 2 --algo ring --size 8 --size 64M
