#!/bin/sh
# bf16 training tracks fp32: the GPT and the Llama, trained on the same
# data from the same weights with --precision bf16 (bf16 products in the
# linear layers and attention, fp32 master weights, norms, softmax and
# loss) and with fp32, end with mean training losses over their last
# fifth within 1% of each other, and not the same bits (the bf16 products
# ran). 500 steps; 150 under sanitizers (TEST_SCALE > 1). The learning
# rate is one at which neither run breaks through the task's plateau at
# a step of its own (at 0.003 one precision sometimes does, dozens of
# steps before the other, and then their losses differ by a few percent
# for a while, whichever is the more exact).
# TEST_TIMEOUT(300)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
steps=500
[ "${TEST_SCALE:-1}" -gt 1 ] && steps=150
common="--data builtin --batch 8 --steps $steps --quiet --no-eval --optim adamw --lr 0.001"
export WEFT_THREADS=1

. "$(dirname "$0")/train_lib.sh"

close() { # name: the two runs' mean loss over the last fifth within 1%, not equal
    if awk -F, -v from=$((steps - steps / 5)) -v name="$1" '
        FNR == 1 || $3 != "train" || $1 <= from { next }
        NR == FNR { a += $4; na++; next }
        { b += $4; nb++ }
        END { if (!na || na != nb) { print name ": " na " and " nb " steps"; exit 1 }
              a /= na; b /= nb; d = a - b; if (d < 0) d = -d
              printf "%s: mean loss over the last %d steps fp32 %.5f, bf16 %.5f (%.3f%%)\n",
                     name, na, a, b, 100 * d / a
              exit !(d <= 0.01 * a && a != b) }' "$dir/$1_fp32.csv" "$dir/$1_bf16.csv"; then
        ok
    else
        bad "$1: bf16 does not track fp32"
    fi
}

for m in gpt:vocab=256,ctx=32,layers=2,heads=4,dim=64 \
         llama:vocab=256,ctx=32,layers=2,heads=4,kv_heads=2,dim=64,ffn=128; do
    arch=${m%%:*}   # run sets $name
    run "${arch}_fp32" 1 --model "$m" --precision fp32 &&
        run "${arch}_bf16" 1 --model "$m" --precision bf16 && close "$arch"
done

echo "summary: $passed passed, $failed failed"
[ "$failed" = 0 ]
