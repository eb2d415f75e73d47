#!/bin/sh
# weft-train across two clusters of two ranks (weftrun --clusters 2) with
# the WAN emulated (WEFT_WAN, here only to count its bytes): full sync with
# every --compress, DiLoCo and streaming DiLoCo flat and hierarchical, with
# and without a compressed outer gradient, each lowers the loss; the bytes
# the compressors report are int8's quarter of fp32's and PowerSGD's
# (m+n)r/mn on the matrices it takes; hier sends each rank's slice across
# once, as the emulated WAN counts it; streaming:H:1:0 has diloco:H's
# losses exactly; --outer-lr 1 --outer-momentum 0 turns diloco:H's outer
# step into plain averaging, local:H's losses exactly (so both options
# reach the outer optimiser), and values outside their ranges are refused.
# Under sanitizers (TEST_SCALE >= 10) fewer compressors.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
scale=${TEST_SCALE:-1}
common="--model mlp:784-64-10 --data builtin --train-size 2048 --steps 24 --batch 64
        --no-eval --log-every 100"
. "$(dirname "$0")/train_lib.sh"
export WEFT_WAN=delay=1ms

run() { # name args...: 4 ranks, 2 clusters; its CSV is $dir/name.csv
    name=$1; shift
    if timeout -s KILL 180 "$B/weftrun" --clusters 2 -n 4 "$B/weft-train" $common \
        --metrics "$dir/$name.csv" "$@" >"$dir/$name.out" 2>&1; then
        ok; return 0
    fi
    bad "weft-train $name ($*)"; tail -n 20 "$dir/$name.out" | sed 's/^/    /'
    return 1
}

learns() { # name: the last train loss below 0.8 of the first
    if awk -F, '$3 == "train" { if (!n++) first = $4; last = $4 }
        END { exit !(n > 1 && last < 0.8 * first) }' "$dir/$1.csv"; then
        ok
    else
        bad "$1: the loss did not fall: $(awk -F, '$3 == "train" { printf "%s ", $4 }' "$dir/$1.csv")"
    fi
}

field() { # name key: a number of the report's bytes line
    sed -n "s/.*$2 \([0-9]*\) B.*/\1/p" "$dir/$1.out" | head -n 1
}
sent() { field "$1" "job or across clusters"; }
wan() { field "$1" "wan"; }

ratio_in() { # what a b lo hi: lo <= a / b <= hi
    if awk -v a="$2" -v b="$3" -v lo="$4" -v hi="$5" \
        'BEGIN { exit !(b > 0 && a / b >= lo && a / b <= hi) }'; then
        ok
    else
        bad "$1: $2 / $3 not in [$4, $5]"
    fi
}

specs="fp32 fp16 bf16 int8 int4 topk:0.02 powersgd:4"
[ "$scale" -ge 10 ] && specs="fp32 int8 powersgd:4"
for c in $specs; do
    n=full_$(echo "$c" | tr : _)
    run "$n" --compress "$c" && learns "$n"
done
if [ -f "$dir/full_fp32.out" ] && [ -f "$dir/full_int8.out" ]; then
    # int8: a byte an element and a 4-byte scale per 256
    ratio_in "int8 / fp32 bytes" "$(sent full_int8)" "$(sent full_fp32)" 0.25 0.262
    # the w1 (64 x 784) and w2 (10 x 64) factors at rank 4, the biases whole:
    # (848 + 74) 4 + 74 = 3762 of 50890 elements
    ratio_in "powersgd:4 / fp32 bytes" "$(sent full_powersgd_4)" "$(sent full_fp32)" \
        0.0720 0.0760
fi

# Full sync across clusters: the job's loss and accuracy cross the WAN only
# on the steps the progress line prints (here the last) unless a metrics
# file wants every step; the flat ring makes the bytes repeatable, and each
# of the 23 all-reduces left out sends 2 floats and more across.
if WEFT_ALGO=ring run full_ring && WEFT_ALGO=ring timeout -s KILL 180 "$B/weftrun" --clusters 2 \
    -n 4 "$B/weft-train" $common >"$dir/full_quiet.out" 2>&1; then
    if [ "$(wan full_quiet)" -gt 0 ] && [ "$(wan full_ring)" -ge $(($(wan full_quiet) + 23 * 8)) ]; then
        ok
    else
        bad "full sync without --metrics: $(wan full_quiet) wan B, with: $(wan full_ring)"
    fi
else
    bad "weft-train full sync without --metrics"; tail -n 20 "$dir/full_quiet.out" | sed 's/^/    /'
fi

for m in "diloco:6" "streaming:6:3" "hier:full/diloco:6" "hier:full/streaming:6:3"; do
    n=$(echo "$m" | tr :/ __)
    run "$n" --sync "$m" && learns "$n"
    [ "$scale" -ge 10 ] && continue
    run "${n}_int4" --sync "$m" --compress int4 && learns "${n}_int4"
done
# hier: each rank sends its half of the model across, once an outer step
# (24 / 6 = 4 of them, n = 50890): the sync's count exactly, and what the
# emulated WAN counted after the start, within headers and the last bytes
# its pump has yet to count when the counter is read
if [ -f "$dir/hier_full_diloco_6.out" ]; then
    ratio_in "hier across bytes" "$(sent hier_full_diloco_6)" $((4 * 25445 * 4)) 1 1
    ratio_in "hier wan / across bytes" "$(wan hier_full_diloco_6)" "$(sent hier_full_diloco_6)" \
        0.9 1.05
fi
# streaming:6:3 (fragments of 16963, 16963 and 16964 of the 50890
# elements, outer steps at 2, 4 and 0 mod 6) over 24 steps: fragments 0
# and 1 take 4 outer steps and one last one after the loop; fragment 2's
# fourth is taken at step 24 itself and lands as the blocking step, so it
# takes no fifth. hier: each rank sends half of every fragment.
if [ -f "$dir/streaming_6_3.out" ]; then
    ratio_in "streaming across bytes" "$(sent streaming_6_3)" $((4 * (10 * 16963 + 4 * 16964))) 1 1
fi
if [ -f "$dir/hier_full_streaming_6_3.out" ]; then
    ratio_in "hier streaming across bytes" "$(sent hier_full_streaming_6_3)" \
        $((2 * (10 * 16963 + 4 * 16964))) 1 1
fi
# the two utilisations: forward+backward and the time blocked on the WAN
# are apart on one thread, so the second is never below the first
for n in hier_full_diloco_6 hier_full_streaming_6_3 full_fp32; do
    [ -f "$dir/$n.out" ] || continue
    u=$(sed -n 's/.*strict (forward+backward \/ wall) \([0-9.]*\)%; not blocked on the WAN .* \([0-9.]*\)%$/\1 \2/p' \
        "$dir/$n.out")
    if [ -n "$u" ] && echo "$u" | awk '{ exit !($1 > 0 && $1 <= $2 + 0.1 && $2 <= 100) }'; then
        ok
    else
        bad "$n: utilisations (strict, not blocked on the WAN): '$u'"
    fi
done
if run stream1 --sync streaming:6:1:0; then
    same stream1 diloco_6
fi
if run outer_plain --sync diloco:6 --outer-lr 1 --outer-momentum 0 &&
    run local_6 --sync local:6 --optim adamw --lr 3e-3 --weight-decay 0.01 --min-lr 3e-4; then
    same outer_plain local_6
    # and not the default outer step's (0.7, Nesterov 0.9)
    last() { awk -F, '$3 == "train" { l = $4 } END { print l }' "$dir/$1.csv"; }
    if [ -f "$dir/diloco_6.csv" ] && [ "$(last outer_plain)" = "$(last diloco_6)" ]; then
        bad "--outer-lr 1 --outer-momentum 0: the default outer step's losses"
    else
        ok
    fi
fi
for bad_opt in "--outer-lr 0" "--outer-lr 10.5" "--outer-momentum 1" "--outer-momentum -0.1"; do
    # shellcheck disable=SC2086
    if "$B/weft-train" $common --sync diloco:6 $bad_opt >"$dir/refused.out" 2>&1; then
        bad "weft-train $bad_opt was accepted"
    elif grep -q "want a" "$dir/refused.out"; then
        ok
    else
        bad "weft-train $bad_opt: $(tail -n 1 "$dir/refused.out")"
    fi
done
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
