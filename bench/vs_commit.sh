#!/bin/sh
# This tree's weft against an earlier commit's, in the same run: the
# all-reduce times weft-bench reports at 8 B and 64 MiB (the sizes
# bench/peers.sh's targets use) and weft-train's data-parallel throughput
# (the weft side of bench/ddp_vs_torch.sh: MLP, global batch 256, the
# steps after 5 warm-up ones), and at 4 ranks a GPT at tp 2 x pp 2 (4
# layers, width 64, 1f1b, global batch 32; PPSTEPS steps after 3 warm-up
# ones). The two builds take turns, REPS rounds, and the table gives
# medians and this tree / base.
#
#   sh bench/vs_commit.sh [BASE]     (BASE: a commit, default HEAD~1;
#                                     REPS=5 RANKS="2 4" STEPS=200 ALGO=auto)
# ALGO=flat (say) holds the all-reduces to one algorithm: auto's measured
# choice between close candidates can differ from run to run on a loaded
# host, and then the two builds time different algorithms.
# P2P=1 also runs bench/p2p_bw.c (ping-pong and exchange between two
# ranks), built against each tree's libweft.a.
# BUILD=dir is this tree's build directory [build]; the base is built in a
# temporary worktree, removed at the end.
set -e
BASE=${1:-HEAD~1}
BUILD=${BUILD:-build}
REPS=${REPS:-5}
RANKS=${RANKS:-2 4}
STEPS=${STEPS:-200}
PPSTEPS=${PPSTEPS:-40}
ALGO=${ALGO:-auto}
P2P=${P2P:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$tmp/base" >/dev/null 2>&1; rm -rf "$tmp"' EXIT INT TERM
rev=$(git -C "$ROOT" rev-parse --short "$BASE")
git -C "$ROOT" worktree add --detach "$tmp/base" "$rev" >/dev/null 2>&1
make -s -C "$tmp/base" -j2 BUILD=build build/weftrun build/weft-bench build/weft-train >/dev/null
make -s -C "$ROOT" -j2 BUILD="$BUILD" "$BUILD/weftrun" "$BUILD/weft-bench" "$BUILD/weft-train" >/dev/null
case $BUILD in /*) NEW=$BUILD ;; *) NEW=$ROOT/$BUILD ;; esac
OLD=$tmp/base/build

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# us per call, out of place, of weft-bench's row for the one size
bench() { # build ranks size warmup iters
    "$1/weftrun" -n "$2" "$1/weft-bench" allreduce -l "$3" -w "$4" -n "$5" -I 1 -a "$ALGO" 2>/dev/null |
        awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $7; exit }'
}
took() { sed -n 's/.*training took \([0-9.]*\) s.*/\1/p' "$1"; }
train() { # build ranks steps out
    "$1/weftrun" -n "$2" "$1/weft-train" --model mlp --batch 256 --no-eval --data builtin \
        --log-every 100000 --steps "$3" >"$4" 2>/dev/null
}
throughput() { # build ranks
    train "$1" "$2" 5 "$tmp/a"
    train "$1" "$2" $((STEPS + 5)) "$tmp/b"
    awk -v a="$(took "$tmp/a")" -v b="$(took "$tmp/b")" -v s="$STEPS" \
        'BEGIN { printf "%.1f\n", s * 256 / (b - a) }'
}
train3d() { # build steps out
    "$1/weftrun" -n 4 "$1/weft-train" --model gpt --layers 4 --dim 64 --heads 4 --batch 32 \
        --tp 2 --pp 2 --no-eval --data builtin --log-every 100000 --steps "$2" >"$3" 2>/dev/null
}
throughput3d() { # build
    train3d "$1" 3 "$tmp/a"
    train3d "$1" $((PPSTEPS + 3)) "$tmp/b"
    awk -v a="$(took "$tmp/a")" -v b="$(took "$tmp/b")" -v s="$PPSTEPS" \
        'BEGIN { printf "%.1f\n", s * 32 / (b - a) }'
}

echo "base $rev, this tree $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src include tools || echo ' + changes'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $RANKS; do
    for k in 1 2 3 4 5 6 7 8; do : > "$tmp/r$k"; done
    r=1
    while [ "$r" -le "$REPS" ]; do
        # alternate which build goes first, so neither always meets a warmer machine
        if [ $((r % 2)) -eq 1 ]; then order="new old"; else order="old new"; fi
        for w in $order; do
            if [ "$w" = new ]; then b=$NEW; o=0; p=7; else b=$OLD; o=3; p=8; fi
            bench "$b" "$n" 8 200 2000 >> "$tmp/r$((o + 1))"
            bench "$b" "$n" 64M 2 10 >> "$tmp/r$((o + 2))"
            throughput "$b" "$n" >> "$tmp/r$((o + 3))"
            [ "$n" = 4 ] && throughput3d "$b" >> "$tmp/r$p"
        done
        r=$((r + 1))
    done
    for k in 1 2 3 4 5 6 7 8; do eval "m$k=\$(median < \"\$tmp/r$k\")"; done
    echo
    echo "$n ranks, medians of $REPS, all-reduce algorithm $ALGO"
    echo "| measure | this tree | base | this / base |"
    echo "| --- | ---: | ---: | ---: |"
    awk -v a="$m1" -v b="$m4" 'BEGIN { printf "| all-reduce 8 B (us) | %s | %s | %.3f |\n", a, b, a / b }'
    awk -v a="$m2" -v b="$m5" 'BEGIN { printf "| all-reduce 64 MiB (us) | %s | %s | %.3f |\n", a, b, a / b }'
    awk -v a="$m3" -v b="$m6" 'BEGIN { printf "| weft-train samples/s | %s | %s | %.3f |\n", a, b, a / b }'
    [ "$n" = 4 ] &&
        awk -v a="$m7" -v b="$m8" 'BEGIN { printf "| weft-train tp 2 x pp 2 GPT samples/s | %s | %s | %.3f |\n", a, b, a / b }'
done
if [ "$P2P" = 1 ]; then
    libs=$(pkg-config --libs libssl libcrypto openblas 2>/dev/null || pkg-config --libs libssl libcrypto 2>/dev/null || true)
    for w in new old; do
        if [ "$w" = new ]; then b=$NEW; i=$ROOT/include; else b=$OLD; i=$tmp/base/include; fi
        cc -O2 -std=c11 -D_GNU_SOURCE -I"$i" "$ROOT/bench/p2p_bw.c" -o "$tmp/p2p_$w" \
            "$b/libweft.a" $libs -pthread -lm
    done
    for w in new old; do
        if [ "$w" = new ]; then b=$NEW; else b=$OLD; fi
        echo
        echo "p2p_bw, 2 ranks, $([ "$w" = new ] && echo this tree || echo "base $rev"):"
        "$b/weftrun" -n 2 "$tmp/p2p_$w" -b 8 -e 67108864 -f 8 2>/dev/null | sed 's/^\[0\] //'
    done
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
