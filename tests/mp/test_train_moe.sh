#!/bin/sh
# weft-train with a mixture-of-experts Llama: losses and gradient norms
# equal to one process (relative 1e-5) at pp 2 (no dropping, no balancing
# losses: capacity and the aux loss are per micro-batch) and dp 2 (with the
# z-loss: a mean over tokens, averaged alike; at pp 2 too, each
# micro-batch's share scaling it), recomputation bit-equal;
# with dropping, shared experts, the sigmoid router and the bias it
# trains; tp 2 refused (experts are not split).
# TEST_TIMEOUT(300)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
base="llama:vocab=256,ctx=32,layers=4,heads=4,kv_heads=2,dim=32,ffn=48,experts=4,topk=2"
common="--steps 12 --quiet --no-eval --clip 1 --optim adamw --lr 0.003 --data builtin --batch 8"

. "$(dirname "$0")/train_lib.sh"

run ref 1 --model "$base" && {
    run pp2 2 --model "$base" --pp 2 && same pp2 ref
    run recompute 1 --model "$base" --recompute && same recompute ref
}
run zref 1 --model "$base,zloss=0.01" &&
    run z_dp2 2 --model "$base,zloss=0.01" && same z_dp2 zref &&
    run z_pp2 2 --model "$base,zloss=0.01" --pp 2 && same z_pp2 zref

# dropping, shared experts, sigmoid scores, the bias: trains, finite losses
full="$base,capacity=1,shared=1,moe_ffn=24,router=sigmoid,bias=1,aux=0.01,zloss=0.001"
if run full 2 --model "$full" --steps 30; then
    if awk -F, 'NR > 1 && $3 == "train" { n++; if ($4 != $4 + 0 || $4 > 1e3) bad = 1; l = $4 }
                NR > 1 && $3 == "train" && n == 1 { f = $4 }
                END { exit (bad || n < 30 || l >= f) }' "$dir/full.csv"; then
        ok
    else
        bad "full: losses not finite or not falling"; head -n 5 "$dir/full.csv"
    fi
fi

# experts are whole on every rank: tensor parallelism is refused, saying so
"$B/weftrun" -n 2 "$B/weft-train" $common --model "$base" --tp 2 >"$dir/tp.out" 2>&1
if [ $? -ne 0 ] && grep -q "tp 2" "$dir/tp.out"; then ok; else bad "tp 2 not refused"; fi

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
