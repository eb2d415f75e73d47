#!/bin/sh
# weft-train --tp T --pp P over the rest as data parallelism: every
# (tp, pp, dp) with tp*pp*dp <= 8 that a GPT of 4 heads allows, ZeRO 0-3
# along the data-parallel group, 20 steps of losses and gradient norms
# equal to one process (relative 1e-5); a vocabulary of 257 at tp = 2 (a
# padded vocabulary-parallel cross-entropy); the MLP at tp = 2 and 4; the
# tensor-parallel collectives per step are the analytic count (per
# micro-batch: the embedding's 1, 4 per transformer block, the loss's 2,
# the head's 1, the correct count's 2); checkpoints cross layouts (tp 2 x
# pp 2 -> one process, tp 2 x ZeRO 3 -> one process in one file and
# sharded, dp 2 -> tp 4 x pp 2 at ZeRO 3); a model that does
# not split is refused naming why. Under sanitizers (TEST_SCALE > 1) fewer
# layouts run.
# TEST_TIMEOUT(900)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gpt="--model gpt --layers 4 --heads 4 --dim 32 --data builtin --batch 12"
g257="--model gpt:vocab=257,ctx=32,layers=2,heads=4,dim=32 --data builtin --seq 32 --batch 8"
mlp="--model mlp:784-64-64-64-10 --data builtin --train-size 2048 --batch 24"
common="--steps 20 --quiet --no-eval --clip 1 --optim adamw --lr 0.003"
thin=0
[ "${TEST_SCALE:-1}" -gt 1 ] && thin=1

. "$(dirname "$0")/train_lib.sh"

run gpt_ref 1 $gpt
# tp pp dp zero
layouts="2:1:1:0 2:1:2:1 2:1:4:2 2:2:1:0 2:2:2:3 2:4:1:1 4:1:1:0 4:1:2:2 4:2:1:0 1:2:2:3 1:4:2:1"
[ $thin = 1 ] && layouts="2:1:2:1 2:2:2:3 4:2:1:0"
for l in $layouts; do
    IFS=: read -r t p d z <<EOF
$l
EOF
    n=$((t * p * d))
    name="gpt_tp${t}_pp${p}_dp${d}_z$z"
    run "$name" $n $gpt --tp $t --pp $p --zero $z && same "$name" gpt_ref
done

# sequence parallelism
sps="2:1:1 2:2:1 4:1:2"
[ $thin = 1 ] && sps="2:2:1"
for l in $sps; do
    IFS=: read -r t p d <<EOF
$l
EOF
    name="gpt_sp_tp${t}_pp${p}_dp${d}"
    run "$name" $((t * p * d)) $gpt --tp $t --pp $p --sp && same "$name" gpt_ref
done

run g257_ref 1 $g257 && {
    run g257_tp2 2 $g257 --tp 2 && same g257_tp2 g257_ref
    run g257_tp2_pp2 4 $g257 --tp 2 --pp 2 --micro-batches 3 && same g257_tp2_pp2 g257_ref
}
run mlp_ref 1 $mlp && {
    run mlp_tp2 2 $mlp --tp 2 && same mlp_tp2 mlp_ref
    [ $thin = 1 ] || { run mlp_tp4_dp2 8 $mlp --tp 4 --zero 1 && same mlp_tp4_dp2 mlp_ref; }
}

# collectives per step, counted by the model (rank 0 holds every block at pp 1)
if "$B/weftrun" -n 2 "$B/weft-train" $gpt --steps 3 --no-eval --log-every 100 --tp 2 \
        >"$dir/count.out" 2>&1; then
    got=$(sed -n 's/.*per step, rank 0: tp \([0-9.]*\) all-reduces.*/\1/p' "$dir/count.out")
    # 1 + 4*4 + 2 + 1 + 2 = 22 per micro-batch, one micro-batch
    if [ "$got" = "22.0" ]; then ok; else bad "tp collectives per step: '$got', expected 22.0"; fi
else
    bad "count run failed"; tail -n 5 "$dir/count.out" | sed 's/^/    /'
fi
# with --sp: forward 1 + 4*4 + 1 + 2 = 20, backward 1 + 4*4 + 1 + 2*4 + 1 = 27, the correct count's 2
if "$B/weftrun" -n 2 "$B/weft-train" $gpt --steps 3 --no-eval --log-every 100 --tp 2 --sp \
        >"$dir/count_sp.out" 2>&1; then
    got=$(sed -n 's/.*per step, rank 0: tp \([0-9.]*\) all-reduces.*/\1/p' "$dir/count_sp.out")
    if [ "$got" = "49.0" ]; then ok; else bad "tp collectives per step with --sp: '$got', expected 49.0"; fi
else
    bad "sp count run failed"; tail -n 5 "$dir/count_sp.out" | sed 's/^/    /'
fi

# checkpoints across layouts
run ck_a 4 $gpt --tp 2 --pp 2 --stop-at 10 --save "$dir/a.ckpt" &&
    run ck_a 1 --resume "$dir/a.ckpt" && same ck_a gpt_ref
# tp 2 x ZeRO 3 -> one process, one file (each part gathered from its
# replicas' shards before it is sent) and sharded
run ck_z 4 $gpt --tp 2 --zero 3 --stop-at 10 --save "$dir/z.ckpt" &&
    run ck_z 1 --resume "$dir/z.ckpt" && same ck_z gpt_ref
if [ $thin = 0 ]; then
    run ck_zs 4 $gpt --tp 2 --zero 3 --stop-at 10 --save "$dir/zs/" &&
        run ck_zs 1 --resume "$dir/zs/" && same ck_zs gpt_ref
fi
if [ $thin = 0 ]; then
    run ck_b 2 $gpt --stop-at 10 --save "$dir/b.ckpt" &&
        run ck_b 8 --resume "$dir/b.ckpt" --tp 4 --pp 2 --zero 3 && same ck_b gpt_ref
fi

# the memory wall: a GPT of 13.3 MB of AdamW training state against an 8 MB
# budget is refused at one rank with what it needs and a layout that fits,
# and trains at 8 ranks as tp 2 x pp 2 at ZeRO 3 (and at 4 as ZeRO 3);
# tp 2 alone holds its state but not its activations: refused after step 1
wall="--model gpt --layers 4 --heads 4 --dim 128 --data builtin --batch 4 --steps 2 --no-eval --quiet --optim adamw --mem-limit 8000000"
if "$B/weft-train" $wall >"$dir/wall1.out" 2>&1; then
    bad "the memory wall: one rank trained"
elif grep -q "needs 13.3 MB .*the smallest layout that fits: 2 ranks" "$dir/wall1.out"; then
    ok
else
    bad "the memory wall: no message"; tail -n 3 "$dir/wall1.out" | sed 's/^/    /'
fi
if [ $thin = 0 ]; then
    if "$B/weftrun" -n 8 "$B/weft-train" $wall --tp 2 --pp 2 --zero 3 >"$dir/wall8.out" 2>&1; then
        ok
    else
        bad "the memory wall: tp 2 x pp 2 x dp 2 at ZeRO 3 did not train"; tail -n 3 "$dir/wall8.out"
    fi
fi
if "$B/weftrun" -n 4 "$B/weft-train" $wall --zero 3 >"$dir/wall4.out" 2>&1; then ok; else
    bad "the memory wall: ZeRO 3 at 4 ranks did not train"; tail -n 3 "$dir/wall4.out"; fi
if "$B/weftrun" -n 2 "$B/weft-train" $wall --tp 2 >"$dir/wall2.out" 2>&1; then
    bad "the memory wall: tp 2 with its activations passed an 8 MB budget"
elif grep -q "after the first step this rank holds" "$dir/wall2.out"; then
    ok
else
    bad "the memory wall: tp 2: no message"; tail -n 3 "$dir/wall2.out" | sed 's/^/    /'
fi

# --layout auto: the planner's choice under the same budget trains
auto="--model gpt --layers 4 --heads 4 --dim 128 --data builtin --batch 8 --steps 2 --no-eval --optim adamw --mem-limit 8000000 --log-every 100"
if "$B/weftrun" -n 4 "$B/weft-train" $auto --layout auto >"$dir/auto.out" 2>&1 &&
        grep -q "layout auto (of [0-9]* planned" "$dir/auto.out"; then
    ok
else
    bad "--layout auto under an 8 MB budget"; tail -n 3 "$dir/auto.out" | sed 's/^/    /'
fi
# The plan's memory is what weft-train holds: its state by the ZeRO formula
# and a micro-batch's activations, at tp 4 with and without --sp, within
# 2% (the plan had left out backward's scratch, and --sp's gathered
# inputs: tp 4 without --sp, 8.03 MB, was priced at 7.6 and chosen under
# 8 MB where the calibration made it the faster one)
for sp in 0 1; do
    spf=; [ $sp = 1 ] && spf=--sp
    "$B/weftrun" -n 4 "$B/weft-train" $auto --tp 4 $spf --mem-limit 1G >"$dir/mem$sp.out" 2>&1
    held=$(sed -n 's/.*training state [0-9]* B resident, \([0-9]*\) B by the ZeRO formula; activations of a micro-batch \([0-9]*\) B$/\1 \2/p' \
        "$dir/mem$sp.out" | awk '{ print $1 + $2 }')
    planned=$("$B/weft-sim" plan --model gpt:vocab=256,ctx=32,layers=4,heads=4,dim=128 --batch 8 \
        --ranks 4 --cp 0 --ep 0 2>&1 | awk -v sp=$sp '$1 == 4 && $2 == 1 && $3 == 1 && $4 == sp &&
        $7 == 0 { print $13; exit }')
    if [ -n "$held" ] && [ -n "$planned" ] &&
        awk -v h="$held" -v p="$planned" 'BEGIN { exit !(p > 0.98 * h && p < 1.02 * h) }'; then
        ok
    else
        bad "the plan's memory at tp 4, sp $sp: '$planned' B against '$held' B held"
        tail -n 3 "$dir/mem$sp.out" | sed 's/^/    /'
    fi
done

# a model that does not split: 4 heads at tp 3
if "$B/weftrun" -n 3 "$B/weft-train" $gpt --steps 2 --quiet --no-eval --tp 3 >"$dir/no.out" 2>&1; then
    bad "4 heads trained at tp 3"
elif grep -q "does not split in 3" "$dir/no.out"; then
    ok
else
    bad "tp 3 of 4 heads: no message"; tail -n 5 "$dir/no.out" | sed 's/^/    /'
fi

echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
