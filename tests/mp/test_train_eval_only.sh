#!/bin/sh
# weft-train --eval-only: no step is trained (the checkpoint it starts from
# is what it evaluates, so every layout prints the same validation loss to
# 6 significant digits as one process: tp 2, pp 2 at ZeRO 3, dp 2); the
# loss is the one the training run's closing evaluation printed (to its 4
# decimals); options that would train or save are refused naming them.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=""
. "$(dirname "$0")/train_lib.sh"
gpt="--model gpt:vocab=256,ctx=32,layers=2,heads=2,dim=32 --data builtin --batch 8"

vloss() { # name: the validation line's loss
    sed -n 's/.*validation: .* loss \([0-9.e+-]*\)$/\1/p' "$dir/$1.out" | head -n 1
}

run trained 1 $gpt --steps 6 --save "$dir/m.ckpt" --eval-prompts 0
run one 1 --resume "$dir/m.ckpt" --eval-only --eval-prompts 0
ref=$(vloss one)
case "$ref" in
*.*) ok ;;
*) bad "--eval-only printed no validation loss"; tail -n 5 "$dir/one.out" | sed 's/^/    /' ;;
esac
# six significant digits, and the training run's closing evaluation to its four decimals
if [ "$(echo "$ref" | tr -d '.-' | sed 's/^0*//; s/e.*//' | wc -c)" -eq 7 ] &&
    awk -v a="$ref" -v b="$(vloss trained)" 'BEGIN { d = a - b; exit !(d < 5.1e-5 && d > -5.1e-5) }'; then
    ok
else
    bad "--eval-only's loss $ref against the training run's $(vloss trained)"
fi
if grep -q "^[0-9]*,.*,train," "$dir/one.csv" 2>/dev/null; then
    bad "--eval-only trained a step: $(grep ',train,' "$dir/one.csv" | head -n 2)"
else
    ok
fi
for l in "2 --tp 2" "4 --pp 2 --zero 3" "2"; do
    n=${l%% *}; args=${l#"$n"}
    name=l$(echo "$l" | tr -dc '0-9')
    run "$name" "$n" --resume "$dir/m.ckpt" --eval-only --eval-prompts 0 $args || continue
    if [ "$(vloss "$name")" = "$ref" ]; then
        ok
    else
        bad "--eval-only at $n ranks ($args): $(vloss "$name"), one process: $ref"
    fi
done
if "$B/weft-train" $gpt --eval-only --save "$dir/x.ckpt" >"$dir/refused.out" 2>&1; then
    bad "--eval-only --save ran"
elif grep -q -- "--eval-only.*--save" "$dir/refused.out"; then
    ok
else
    bad "--eval-only --save: no message naming them"; tail -n 3 "$dir/refused.out" | sed 's/^/    /'
fi
echo "summary: $passed passed, $failed failed"
[ $failed -eq 0 ]
