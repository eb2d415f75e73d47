#!/bin/sh
# The same job gives the same bits: three runs of one 4-rank data-parallel
# training job under auto (the default), its gradient all-reduce going
# through auto's trials, give identical losses at every step and identical
# checkpoints, byte for byte. Before trials were held to algorithms with
# the model's pick's bits, the 2.6 MB gradient all-reduce settled on flat,
# ring or Rabenseifner by the clock, and runs differed from step 30 on.
# docs/TUNING.md, "Reproducible results".
# TEST_TIMEOUT(240)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset WEFT_ALGO WEFT_AUTOTUNE WEFT_AUTO_FASTEST WEFT_TUNE WEFT_TUNE_FILE
# the matmul kernel named: auto's choice is timed again whenever other jobs
# pushed this model's line out of the per-host cache, and under ASan the two
# kernels are close enough for the clock to pick either (docs/TUNING.md)
export WEFT_MATMUL=portable
common="--model mlp --data builtin --steps 60 --quiet"
. "$(dirname "$0")/train_lib.sh"

for i in 1 2 3; do
    WEFT_DEBUG=TUNING run "r$i" 4 --save "$dir/r$i.ckpt"
done

# the loss column as written, step by step: any bit that differs in a
# reduction soon shows in its digits
for i in 2 3; do
    [ -f "$dir/r1.csv" ] && [ -f "$dir/r$i.csv" ] || { bad "run $i: no metrics"; continue; }
    if cut -d, -f1,3,4 "$dir/r1.csv" >"$dir/a" && cut -d, -f1,3,4 "$dir/r$i.csv" >"$dir/b" &&
        [ "$(wc -l <"$dir/a")" -gt 60 ] && cmp -s "$dir/a" "$dir/b"; then
        ok
    else
        bad "run $i: losses differ from run 1's"; diff "$dir/a" "$dir/b" | head -n 8 | sed 's/^/    /'
    fi
    if cmp -s "$dir/r1.ckpt" "$dir/r$i.ckpt"; then ok; else bad "run $i: checkpoint differs from run 1's"; fi
done

# the runs went through trials (else this would test the model alone):
# flat against naive, which share an order, where shared memory is on
if [ "${WEFT_SHM:-1}" != 0 ]; then
    if grep -q "bytes measured" "$dir/r1.out"; then ok; else bad "no trial settled in run 1"; fi
fi

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
