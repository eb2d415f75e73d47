#!/bin/sh
# Training across emulated clusters (docs/WAN.md, docs/BENCHMARKS.md): C
# clusters of L ranks on this machine (weftrun --clusters), every wan link
# delayed and rate-limited by WEFT_WAN, the same samples for every mode:
#   full       full sync, flat ring (WEFT_ALGO=ring), +- --compress int8
#   full-hier  full sync, hierarchical all-reduce (WEFT_ALGO=hier)
#   diloco     diloco:H over the whole job
#   hier       hier:full/diloco:H, +- the outer gradient in int8 / int4
#   stream     hier:full/streaming:H:F:T, +- int4
# Per row: the final test accuracy (mlp) or validation loss (gpt), the wan
# bytes each rank sent (mean over ranks, counted by WEFT_WAN), full sync's
# bytes over the row's, the wall time of training and rank 0's two
# utilisations: util% strict (forward + backward seconds over the wall
# time) and nowan% (1 - the seconds rank 0's training thread was blocked on
# communication across clusters over the wall time: OpenDiLoCo's and
# INTELLECT-1's compute utilisation). With VERBOSE=1 each row is followed by
# rank 0's wall time by phase.
#
#   sh bench/wan.sh   (BUILD=build, CLUSTERS="4", DELAYS="50", RATE=100mbit,
#                      L=2, MODELS="mlp", STEPS=120, H=30, F=3, T=10,
#                      BATCH=1024, ROWS="full full8 fullh diloco hier hier8
#                      hier4 stream stream4")
# The whole sweep: CLUSTERS="2 4" DELAYS="10 50 200" MODELS="mlp gpt".
# DARGS: more weft-train arguments for the DiLoCo rows only (e.g. DARGS="--lr
# 8e-3", the inner learning rate, or DARGS="--outer-lr 1.0 --outer-momentum
# 0.8", DiLoCo's outer step; full sync keeps its own).
# mlpbig (mlp:784-1024-1024-10) has compute enough per step to hide an
# outer all-reduce: MODELS=mlpbig ROWS="hier4 stream4" for utilisation.
# The full sync rows set the bytes ratio's reference (without them: none).
set -e
B=${BUILD:-build}
CLUSTERS=${CLUSTERS:-4}
DELAYS=${DELAYS:-50}
RATE=${RATE:-100mbit}
L=${L:-2}
MODELS=${MODELS:-mlp}
STEPS=${STEPS:-120}
H=${H:-30}
F=${F:-3}
T=${T:-10}
ROWS=${ROWS:-full full8 fullh diloco hier hier8 hier4 stream stream4}
[ -x "$B/weft-train" ] || make -s -j2 BUILD="$B" "$B/weft-train" "$B/weftrun"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

model_args() {
    case $1 in
    mlpbig) echo "--model mlp:784-1024-1024-10 --data builtin --train-size 32768 --batch ${BATCH:-1024}" ;;
    mlp) echo "--model mlp:784-128-10 --data builtin --train-size 32768 --batch ${BATCH:-1024}" ;;
    gpt) echo "--model gpt --layers 2 --dim 64 --heads 4 --data builtin --batch 32" ;;
    esac
}

echo "# load average $(cut -d' ' -f1-3 /proc/loadavg); $STEPS steps; H=$H F=$F T=$T; rate $RATE"
printf '%-3s %-6s %-4s %-10s %-6s %9s %12s %9s %8s %6s %6s\n' C delay net mode codec quality \
    wan_B/rank full/row wall_s util% nowan%
for m in $MODELS; do
    args="$(model_args $m) --steps $STEPS --threads 1 --log-every 1000"
    for C in $CLUSTERS; do
        for d in $DELAYS; do
            full_wan=
            row() { # key mode codec algo args...
                case " $ROWS " in *" $1 "*) ;; *) return 0 ;; esac
                key=$1 name=$2 codec=$3 algo=$4
                shift 4
                f="$out/$m.$C.$d.$name.$codec"
                WEFT_WAN=delay=${d}ms,rate=$RATE WEFT_ALGO=$algo \
                    "$B/weftrun" --clusters "$C" -n $((C * L)) "$B/weft-train" $args "$@" \
                    >"$f" 2>&1 || { echo "$name $codec: failed"; tail -n 5 "$f"; return 0; }
                wan=$(sed -n 's/.*wan \([0-9]*\) B sent.*/\1/p' "$f")
                wall=$(sed -n 's/.*training took \([0-9.]*\) s.*/\1/p' "$f")
                util=$(sed -n 's/.*compute utilisation (rank 0): \([0-9.]*\)%.*/\1/p' "$f")
                nowan=$(sed -n 's/.*not blocked on the WAN (.*) \([0-9.]*\)%$/\1/p' "$f")
                if [ "$m" != gpt ]; then
                    q=$(sed -n 's/.*accuracy \([0-9.]*\) .*/\1/p' "$f" | tail -n 1)
                else
                    q=$(sed -n 's/^.*validation: .*loss \([0-9.]*\).*/\1/p' "$f" | tail -n 1)
                fi
                [ -n "$full_wan" ] || [ "$key" != full ] || full_wan=$wan
                ratio=$(awk -v a="$full_wan" -v b="$wan" \
                    'BEGIN { if (a == "" || b <= 0) print "-"; else printf "%.1f", a / b }')
                printf '%-3s %-6s %-4s %-10s %-6s %9s %12s %9s %8s %6s %6s\n' "$C" "${d}ms" "$m" \
                    "$name" "$codec" "$q" "$wan" "$ratio" "$wall" "$util" "${nowan:--}"
                [ "${VERBOSE:-0}" = 0 ] || sed -n 's/^\[0\] \(rank 0.s wall time of training\)/#   \1/p' "$f"
            }
            row full full - ring
            row full8 full int8 ring --compress int8
            row fullh full-hier - hier
            row diloco diloco - auto --sync diloco:$H $DARGS
            row hier hier - auto --sync hier:full/diloco:$H $DARGS
            row hier8 hier int8 auto --sync hier:full/diloco:$H --compress int8 $DARGS
            row hier4 hier int4 auto --sync hier:full/diloco:$H --compress int4 $DARGS
            row stream stream - auto --sync hier:full/streaming:$H:$F:$T $DARGS
            row stream4 stream int4 auto --sync hier:full/streaming:$H:$F:$T --compress int4 $DARGS
        done
    done
done
