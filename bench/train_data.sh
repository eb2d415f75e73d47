#!/bin/sh
# weft-train end to end: Fashion-MNIST accuracy after one epoch, the built-in
# tasks, and checkpoint/resume identity through the command line.
#   BUILD=build sh bench/train_data.sh [fmnist|builtin|resume|all]
# Fashion-MNIST comes from Debian's dataset-fashion-mnist
# (/usr/share/datasets/fashion-mnist, or $WEFT_FASHION_MNIST).
set -e
BUILD=${BUILD:-build}
WHAT=${1:-all}
T=$BUILD/weft-train
make -s BUILD="$BUILD" "$T" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

acc() { sed -n 's/.*accuracy \([0-9.]*\).*/\1/p' | tail -n 1; }

if [ "$WHAT" = fmnist ] || [ "$WHAT" = all ]; then
    echo "## MLP 784-512-512-10, Fashion-MNIST, 1 epoch, batch 256, SGD lr 0.1 momentum 0.9"
    for sched in cosine constant; do
        for seed in 1 2 3 4 5; do
            a=$($T --model mlp --data fashion-mnist --epochs 1 --batch 256 --optim sgd \
                   --lr 0.1 --momentum 0.9 --schedule $sched --seed $seed --quiet | acc)
            echo "schedule $sched seed $seed: test accuracy $a"
        done
    done
fi

if [ "$WHAT" = builtin ] || [ "$WHAT" = all ]; then
    echo "## MLP on the built-in images (defaults: 1 epoch of 60000)"
    $T --model mlp --data builtin --log-every 1000 2>&1 | grep -E "^(model|test|step 235)"
    echo "## GPT on the built-in additions (defaults)"
    $T --model gpt --data builtin --log-every 100000 2>&1 | grep -vE "^(data|optim)"
fi

if [ "$WHAT" = resume ] || [ "$WHAT" = all ]; then
    echo "## resume: 40 steps + 40 steps against 80 steps, same checkpoint bytes?"
    for m in mlp gpt; do
        $T --model $m --data builtin --steps 80 --save "$tmp/full.ckpt" --quiet --no-eval
        $T --model $m --data builtin --steps 80 --stop-at 40 --save "$tmp/half.ckpt" --quiet --no-eval
        $T --resume "$tmp/half.ckpt" --save "$tmp/resumed.ckpt" --quiet --no-eval
        if cmp -s "$tmp/full.ckpt" "$tmp/resumed.ckpt"; then
            echo "$m: identical ($(wc -c <"$tmp/full.ckpt") bytes)"
        else
            echo "$m: DIFFERENT"
        fi
    done
fi
