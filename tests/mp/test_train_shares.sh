#!/bin/sh
# Clusters of unequal size and speed in one job (docs/TRAINING.md, "Uneven
# shares and speeds"). Full sync over two clusters (2 ranks and 1) with
# --batch-shares 16,8 follows one process on the same global batch of 24
# step by step (losses and gradient norms, 1e-5); shares that do not add up
# to the batch are refused. DiLoCo with speeds 0.5 and 1 and even shares:
# the slow cluster takes half the inner steps per outer step and half the
# steps in all, the fast one all of them, under diloco:4 and under
# streaming:4:1:4 (its overlap halved too); with shares in proportion to
# the speeds (16,8) both take every step. Every run lowers the loss. The
# fast rank's seconds blocked on the outer reduction are printed, not
# asserted.
# TEST_TIMEOUT(240)
B=${BUILD:-build}
dir=$(mktemp -d)
trap '[ -n "$KEEP" ] || rm -rf "$dir"' EXIT
steps=12

common="--model mlp:784-128-10 --data builtin --train-size 1024 --batch 24 --no-eval
        --log-every 100 --seed 3"
. "$(dirname "$0")/train_lib.sh"

# full sync: 2 + 1 ranks in two clusters against one process
run one 1 --steps "$steps"
if "$B/weftrun" --clusters 2 -n 3 "$B/weft-train" $common --steps "$steps" \
    --batch-shares 16,8 --metrics "$dir/shares.csv" >"$dir/shares.out" 2>&1; then
    ok
    same shares one
else
    bad "weft-train --batch-shares 16,8 on 3 ranks in 2 clusters"
    tail -n 20 "$dir/shares.out" | sed 's/^/    /'
fi
# and 1 + 2 ranks (the small cluster first) with shares 6,18
printf '#!/bin/sh\nWEFT_CLUSTER=$((WEFT_RANK > 0)) exec "%s/weft-train" "$@"\n' "$B" >"$dir/c12.sh"
if "$B/weftrun" -n 3 sh "$dir/c12.sh" $common --steps "$steps" --batch-shares 6,18 \
    --metrics "$dir/shares2.csv" >"$dir/shares2.out" 2>&1; then
    ok
    same shares2 one
else
    bad "weft-train --batch-shares 6,18"; tail -n 20 "$dir/shares2.out" | sed 's/^/    /'
fi
if "$B/weftrun" --clusters 2 -n 2 "$B/weft-train" $common --steps 2 --batch-shares 16,4 \
    >"$dir/refused.out" 2>&1; then
    bad "--batch-shares 16,4 with --batch 24 was taken"
elif grep -q "add up to 20, not --batch 24" "$dir/refused.out"; then
    ok
else
    bad "--batch-shares 16,4: $(tail -n 1 "$dir/refused.out")"
fi

# DiLoCo, cluster speeds from each rank's WEFT_CLUSTER (wrapper below)
cat >"$dir/speed.sh" <<EOF
#!/bin/sh
speed=1
[ "\$WEFT_CLUSTER" = "\$SLOW" ] && speed=0.5
exec "$B/weft-train" "\$@" --speed \$speed
EOF
dsteps=$((steps * 2))
diloco() { # name slow-cluster shares sync
    if SLOW=$2 "$B/weftrun" --clusters 2 -n 2 sh "$dir/speed.sh" $common --steps "$dsteps" \
        --sync "$4" --batch-shares "$3" --metrics "$dir/$1.csv" >"$dir/$1.out" 2>&1; then
        ok
    else
        bad "diloco $1"; tail -n 20 "$dir/$1.out" | sed 's/^/    /'; return 1
    fi
    # the least loss of the second half: a dozen steps of a few samples are noisy
    if awk -F, '$3 == "train" { l[n++] = $4 }
        END { m = l[n - 1]; for (i = int(n / 2); i < n; i++) if (l[i] < m) m = l[i]
              exit !(n > 1 && m < 0.9 * l[0]) }' "$dir/$1.csv"; then
        ok
    else
        bad "$1: the loss did not fall: $(awk -F, '$3 == "train" { printf "%s ", $4 }' "$dir/$1.csv")"
    fi
}
rows() { awk -F, '$3 == "train"' "$dir/$1.csv" | wc -l; }
# rank 0 slow: it reports its own period and steps
if diloco slow0 0 12,12 diloco:4; then
    if grep -q "speed 0.5: 2 inner steps per outer step (of 4), $steps steps" "$dir/slow0.out" &&
        [ "$(rows slow0)" -eq "$steps" ]; then
        ok
    else
        bad "slow rank 0: $(grep speed "$dir/slow0.out") $(rows slow0) rows"
    fi
fi
# rank 0 fast, streaming: all its steps, and how long it stood at the outer steps
if diloco fast0 1 12,12 streaming:4:1:4; then
    if [ "$(rows fast0)" -eq "$dsteps" ] && ! grep -q "^.0. speed" "$dir/fast0.out" &&
        grep -q "^.1. speed 0.5: 2 inner steps per outer step (of 4), $steps steps" \
            "$dir/fast0.out"; then
        ok
    else
        bad "fast rank 0: $(rows fast0) rows"
    fi
    echo "fast rank 0: $(grep -o 'blocked on the reduction across [0-9.]*' "$dir/fast0.out" |
        head -n 1) s of $(grep -o 'forward+backward [0-9.]*' "$dir/fast0.out" | head -n 1) s"
fi
# shares in proportion to the speeds: every period takes as long already
if diloco balanced 1 16,8 diloco:4; then
    if [ "$(rows balanced)" -eq "$dsteps" ] && ! grep -q "speed 0.5:" "$dir/balanced.out"; then
        ok
    else
        bad "shares 16,8 at speeds 1, 0.5: $(grep speed "$dir/balanced.out") $(rows balanced) rows"
    fi
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
