#!/bin/bash
# All-reduce (f32 sum, ring, out of place) on this host with every pair on
# the network path (WEFT_SHM=0): weft over its own TCP, weft over
# libfabric's tcp provider (WEFT_NET=ofi), and Open MPI over the same
# provider (--mca pml cm --mca mtl ofi; Open MPI leaves tcp out of its
# ofi providers unless told, mtl_ofi_provider_include) where it runs, at 2 and
# 4 ranks, 8 B to 64 MiB. Prints one table per rank count: busbw (GB/s)
# and time (us) of each, and ofi's ratio to weft's TCP.
# The programs take turns in every repetition; the table shows medians.
#
#   bash bench/ofi.sh                    (8 B .. 64M, 3 repetitions)
#   bash bench/ofi.sh -e 1M -R 1         (quick look)
#
# Options: -b BYTES smallest [8]  -e BYTES largest [64M]  -f X factor [8]
#          -R N repetitions [3]   -n N timed calls [20]   -r "N .." ranks [2 4]
#          -p PROVIDER libfabric provider [tcp]
# Installs Open MPI (openmpi-bin, libopenmpi-dev) when root and missing.
# BUILD=dir picks weft's build directory [build]. P2P=1 then also runs
# bench/p2p_bw.c (half a ping-pong's round trip, and an exchange's
# bandwidth, between pairs of ranks) over weft's TCP and over ofi: the
# point-to-point engine's own endpoint. PIN=1 binds rank r to
# core r mod nproc (weft through taskset, Open MPI with --bind-to core), so
# that two ranks on two cores each keep one and neither waits for the
# scheduler to move it.
set -u
MIN=8 MAX=64M FACTOR=8 REPS=3 ITERS=20 RANKS="2 4" PROV=tcp
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
while getopts "b:e:f:R:n:r:p:h" opt; do
    case $opt in
    b) MIN=$OPTARG ;; e) MAX=$OPTARG ;; f) FACTOR=$OPTARG ;; R) REPS=$OPTARG ;;
    n) ITERS=$OPTARG ;; r) RANKS=$OPTARG ;; p) PROV=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
say() { echo "ofi.sh: $*" >&2; }
work=$(mktemp -d /tmp/weft-ofi-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

if ! command -v mpicc.openmpi >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        openmpi-bin libopenmpi-dev >/dev/null 2>&1 || say "could not install Open MPI"
fi
MPI=""
if command -v mpicc.openmpi >/dev/null &&
    mpicc.openmpi -O2 -o "$work/mpi_allreduce" "$HERE/peers/mpi_allreduce.c" 2>"$work/cc.log"; then
    MPI="$work/mpi_allreduce"
else
    say "no Open MPI: its column stays empty"
fi

W="-b $MIN -e $MAX -f $FACTOR -w 5 -n $ITERS -c 0 -I 1 -a ring"
PINW="" BIND=""
if [ "${PIN:-0}" = 1 ]; then
    # weftrun numbers each rank in WEFT_LOCAL_RANK before it starts the program
    printf '#!/bin/sh\nexec taskset -c $((WEFT_LOCAL_RANK %% %s)) "$@"\n' "$(nproc)" >"$work/pin"
    chmod +x "$work/pin"
    PINW="$work/pin" BIND="--bind-to core:overload-allowed"
fi
# weft-bench and mpi_allreduce print: size count type op root time algbw busbw ...
rows() { sed 's/^\[[0-9]*\] *//' "$1" | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $1, $6, $8 }'; }

for n in $RANKS; do
    for rep in $(seq "$REPS"); do
        WEFT_SHM=0 WEFT_NET=tcp "$B/weftrun" -n "$n" $PINW "$B/weft-bench" allreduce $W \
            >"$work/raw" 2>&1 && rows "$work/raw" >"$work/tcp.$n.$rep"
        WEFT_SHM=0 WEFT_NET=ofi WEFT_OFI_PROVIDER=$PROV "$B/weftrun" -n "$n" $PINW "$B/weft-bench" \
            allreduce $W >"$work/raw" 2>&1 && rows "$work/raw" >"$work/ofi.$n.$rep"
        if [ -n "$MPI" ]; then
            FI_PROVIDER=$PROV timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe \
                -np "$n" $BIND --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$PROV" \
                -x FI_PROVIDER "$MPI" -b "$MIN" -e "$MAX" -f "$FACTOR" -w 5 -n "$ITERS" \
                >"$work/raw" 2>&1 && rows "$work/raw" >"$work/mpi.$n.$rep" ||
                say "Open MPI with mtl ofi ($PROV) did not run at $n ranks: $(tail -n 2 "$work/raw" | tr '\n' ' ')"
        fi
    done
    # per size, the row of the median time over the repetitions
    for k in tcp ofi mpi; do
        cat "$work/$k.$n".* 2>/dev/null | sort -n -k1,1 -k2,2 |
            awk '{ z[NR] = $0; k[NR] = $1 }
                 END { for (i = 1; i <= NR; i = j + 1) { j = i; while (j < NR && k[j + 1] == k[i]) j++
                                                         print z[int((i + j) / 2)] } }' >"$work/$k.$n"
    done
    echo
    echo "all-reduce f32 sum, ring, $n ranks on one host, WEFT_SHM=0, provider $PROV,${PINW:+ pinned,} medians of $REPS ($(uptime | sed 's/.*load/load/'))"
    printf "%10s | %10s %8s | %10s %8s | %10s %8s | %7s %7s\n" bytes "tcp us" busbw \
        "ofi us" busbw "mpi us" busbw "bw o/t" "time o/t"
    touch "$work/mpi.$n"
    awk 'FNR == 1 { f++ }
         f == 1 { t[$1] = $2; tb[$1] = $3; order[++n] = $1 }
         f == 2 { o[$1] = $2; ob[$1] = $3 }
         f == 3 { m[$1] = $2; mb[$1] = $3 }
         END { for (i = 1; i <= n; i++) { z = order[i]
                 printf "%10s | %10.1f %8.3f | %10s %8s | %10s %8s | %7s %7s\n", z, t[z], tb[z],
                   ((z in o) ? sprintf("%.1f", o[z]) : "-"), ((z in o) ? sprintf("%.3f", ob[z]) : "-"),
                   ((z in m) ? sprintf("%.1f", m[z]) : "-"), ((z in m) ? sprintf("%.3f", mb[z]) : "-"),
                   ((z in o) && tb[z] > 0 ? sprintf("%.2f", ob[z] / tb[z]) : "-"),
                   ((z in o) && t[z] > 0 ? sprintf("%.2f", o[z] / t[z]) : "-") } }' \
        "$work/tcp.$n" "$work/ofi.$n" "$work/mpi.$n"
done

if [ "${P2P:-0}" = 1 ]; then
    libs="$(pkg-config --libs libfabric libssl libcrypto openblas 2>/dev/null ||
        pkg-config --libs libfabric libssl libcrypto 2>/dev/null || true)"
    cc -O2 -std=c11 -D_GNU_SOURCE -I"$HERE/../include" "$HERE/p2p_bw.c" -o "$work/p2p_bw" \
        "$B/libweft.a" $libs -pthread -lm || { say "p2p_bw did not build"; exit 1; }
    for n in $RANKS; do
        for net in tcp ofi; do
            for rep in $(seq "$REPS"); do
                echo
                echo "p2p_bw, $n ranks (pairs 0-1, 2-3 ..; rank 0's pair shown), WEFT_NET=$net, provider $PROV,${PINW:+ pinned,} run $rep:"
                WEFT_SHM=0 WEFT_NET=$net WEFT_OFI_PROVIDER=$PROV "$B/weftrun" -n "$n" $PINW \
                    "$work/p2p_bw" -b "$(echo "$MIN" | numfmt --from=iec)" \
                    -e "$(echo "$MAX" | numfmt --from=iec)" -f "$FACTOR" 2>&1 | sed 's/^\[0\] //'
            done
        done
    done
fi
