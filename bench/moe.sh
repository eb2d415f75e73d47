#!/bin/sh
# A mixture-of-experts Llama against the dense one of the same FLOPs per
# token, one process: 8 experts of width 64 with 2 picked a token (plus the
# router) against a dense MLP of width 128; steps a second of each, and
# the balancing bias's effect: max/mean tokens per expert of the least
# balanced block at the last step, with and without bias=1 (sigmoid
# router, no balancing loss). About two minutes in all.
#
#   sh bench/moe.sh [STEPS]     (600)
# BUILD=dir picks the build directory [build].
B=${BUILD:-build}
STEPS=${1:-600}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
base="llama:vocab=256,ctx=64,layers=2,heads=4,dim=64"
args="--data builtin --batch 16 --seq 64 --steps $STEPS --no-eval --optim adamw --lr 0.003"
args="$args --log-every $STEPS --threads 1"
one() { # name model: one run; prints steps/s, final loss, max/mean
    "$B/weft-train" --model "$2" $args --metrics "$dir/$1.csv" >"$dir/$1.out" 2>&1 ||
        { echo "$1: weft-train failed"; tail -n 5 "$dir/$1.out"; return 1; }
    awk -F, -v name="$1" -v steps="$STEPS" 'NR > 1 && $3 == "train" { l = $4; e = $9 }
        END { printf "%-12s %8.1f steps/s  loss %.4f", name, steps / e, l }' "$dir/$1.csv"
    bal=$(sed -n 's/.*max\/mean \([0-9.]*\).*/\1/p' "$dir/$1.out" | tail -n 1)
    echo "  max/mean ${bal:--}"
}
echo "# $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
one dense "$base,ffn=128"
one moe "$base,ffn=64,experts=8,topk=2,router=sigmoid"
one moe_bias "$base,ffn=64,experts=8,topk=2,router=sigmoid,bias=1"
