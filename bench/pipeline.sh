#!/bin/sh
# Pipeline parallelism, measured (docs/BENCHMARKS.md, "Pipeline parallelism"):
#
#  1. bubbles: weft-train --pp P for P = 2 and 4, M = 1..16 micro-batches of
#     2 sequences, every schedule, on a GPT of equal blocks; each stage's idle
#     share of the step from the executor's timestamps (weft-train's
#     summary), against (P-1)/(M+P-1) (gpipe, 1f1b) and (P-1)/(V*M+P-1)
#     (interleaved:V); each stage's peak stash against min(P-r, M) (1f1b)
#     and M (gpipe); weft-sim pipeline's step time, replayed on the block
#     costs the run wrote (--pp-costs), against the measured one.
#  2. partitions: a GPT whose embedding and head dominate (vocabulary 8192),
#     auto against uniform and against every partition (P = 2: all 7,
#     measured; P = 4: all 35 by weft-sim on the run's block costs).
#  3. one process: weft-enginebench samples/s of this tree against BASE
#     (default 142d22f, the engine before models were cut into blocks).
#
#   sh bench/pipeline.sh [BASE]     REPS=3 STEPS=12 PS="2 4" MS="1 2 4 8 16"
#
# Every rank runs one matmul thread (WEFT_THREADS=1). On a 2-core machine
# P = 4 runs 4 ranks on 2 cores: stages then wait for a core as well as for
# their peers, which the formulas do not model; P = 2 is the faithful case.
set -e
BASE=${1:-142d22f}
BUILD=${BUILD:-build}
REPS=${REPS:-3}
STEPS=${STEPS:-12}
PS=${PS:-2 4}
MS=${MS:-1 2 4 8 16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
make -s -C "$ROOT" -j2 BUILD="$BUILD" "$BUILD/weftrun" "$BUILD/weft-train" "$BUILD/weft-sim" \
    "$BUILD/weft-enginebench" >/dev/null
tmp=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$tmp/base" >/dev/null 2>&1; rm -rf "$tmp"' EXIT INT TERM
export WEFT_THREADS=1

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# pp P M SCHED MODEL [args]: one run; its output in $tmp/out, block costs in $tmp/costs
pp() {
    p=$1 m=$2 s=$3 model=$4; shift 4
    "$B/weftrun" -n "$p" "$B/weft-train" --model "$model" --data builtin --batch $((2 * m)) \
        --steps "$STEPS" --pp "$p" --micro-batches "$m" --schedule "$s" --no-eval \
        --log-every 100000 --pp-costs "$tmp/costs" "$@" >"$tmp/out" 2>&1
}
# fields of weft-train's summary lines
step_ms() { sed -n 's/.*pipeline step: \([0-9.]*\) ms measured.*/\1/p' "$tmp/out"; }
bubble() { sed -n 's/.*; bubble \([0-9.]*\) measured.*/\1/p' "$tmp/out"; }
stashes() { # "s0 s1 ..." peak stash per stage
    sed -n 's/.*(share of the work predicted\/measured, bubble, peak stash)://p' "$tmp/out" |
        awk '{ for (i = 1; i <= NF; i += 4) printf "%s%s", (i > 1 ? " " : ""), $(i + 3) }'
}
partition() { sed -n 's/.*partition (blocks per chunk): \([0-9,]*\);.*/\1/p' "$tmp/out"; }
sim_ms() { # p m sched partition: weft-sim's step on the run's costs
    "$B/weft-sim" pipeline --p "$1" --m "$2" --schedule "$3" --costs "$tmp/costs" \
        --partition "$4" | sed -n 's/^step_ms \([0-9.]*\).*/\1/p'
}

GPT=gpt:vocab=256,ctx=64,layers=8,heads=4,dim=128
echo "== 1. bubble, stash and weft-sim ($GPT, micro-batches of 2 x 64 tokens, $STEPS steps, median of $REPS)"
printf "%-3s %-3s %-14s %9s %9s %7s  %-12s %-12s %9s %9s %7s\n" P M schedule bubble formula ratio \
    stash want step_ms sim_ms sim/meas
for p in $PS; do
    for m in $MS; do
        for s in gpipe 1f1b interleaved:2 zb; do
            v=1
            case $s in interleaved:*) v=2; [ $((m % p)) -eq 0 ] || continue ;; esac
            bs= ss= ms=
            for r in $(seq "$REPS"); do
                pp "$p" "$m" "$s" "$GPT" || { echo "run failed: P=$p M=$m $s"; tail -5 "$tmp/out"; exit 1; }
                bs="$bs $(bubble)"
                st=$(step_ms)
                ms="$ms $st"
                ss="$ss $(sim_ms "$p" "$m" "$s" "$(partition)")"
                stash=$(stashes)
            done
            b=$(echo $bs | tr ' ' '\n' | median)
            st=$(echo $ms | tr ' ' '\n' | median)
            sm=$(echo $ss | tr ' ' '\n' | median)
            f=$(awk -v p="$p" -v m="$m" -v v="$v" 'BEGIN { printf "%.4f", (p - 1) / (v * m + p - 1) }')
            want=$(awk -v p="$p" -v m="$m" -v s="$s" 'BEGIN {
                for (r = 0; r < p; r++) {
                    w = s == "gpipe" ? m : s == "1f1b" ? (p - r < m ? p - r : m) : "-"
                    printf "%s%s", (r ? " " : ""), w } }')
            [ "$s" = zb ] && f=-
            printf "%-3s %-3s %-14s %9s %9s %7s  %-12s %-12s %9s %9s %7s\n" "$p" "$m" "$s" "$b" "$f" \
                "$(awk -v b="$b" -v f="$f" 'BEGIN { if (f == "-" || f == 0) print "-"; else printf "%.2f", b / f }')" \
                "$(echo $stash | tr ' ' ,)" "$(echo $want | tr ' ' ,)" "$st" "$sm" \
                "$(awk -v a="$sm" -v b="$st" 'BEGIN { printf "%.2f", a / b }')"
        done
    done
done

BIG=gpt:vocab=8192,ctx=64,layers=6,heads=4,dim=64
echo
echo "== 2. partitions ($BIG: 8 blocks, the embedding and head dominate; 1f1b, M = 8)"
run_part() { # p part: median step ms of REPS runs
    ms=
    for r in $(seq "$REPS"); do
        pp "$1" 8 1f1b "$BIG" --pp-partition "$2" || { tail -5 "$tmp/out"; exit 1; }
        ms="$ms $(step_ms)"
    done
    echo $ms | tr ' ' '\n' | median
}
for p in $PS; do
    auto=$(run_part "$p" auto)
    ap=$(partition)
    cp "$tmp/costs" "$tmp/costs.auto"
    uni=$(run_part "$p" uniform)
    up=$(partition)
    printf "P=%s  auto %s: %s ms   uniform %s: %s ms   auto/uniform %.3f\n" "$p" "$ap" "$auto" "$up" "$uni" \
        "$(awk -v a="$auto" -v u="$uni" 'BEGIN { print a / u }')"
    # every partition of 8 blocks into P stages
    parts=$(awk -v p="$p" 'function rec(k, left, pre,   i) {
            if (k == p - 1) { print pre left; return }
            for (i = 1; i <= left - (p - 1 - k); i++) rec(k + 1, left - i, pre i ",") }
        BEGIN { rec(0, 8, "") }')
    if [ "$p" -le 2 ]; then
        best= bestp=
        for q in $parts; do
            t=$(run_part "$p" "$q")
            echo "    measured $q: $t ms"
            if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t bestp=$q; fi
        done
        printf "P=%s  best of all %s measured: %s (%s ms); auto/best %.3f\n" "$p" \
            "$(echo $parts | wc -w)" "$bestp" "$best" "$(awk -v a="$auto" -v b="$best" 'BEGIN { print a / b }')"
    fi
    cp "$tmp/costs.auto" "$tmp/costs"
    best= bestp=
    for q in $parts; do
        t=$(sim_ms "$p" 8 1f1b "$q")
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t bestp=$q; fi
    done
    printf "P=%s  weft-sim over all %s partitions on the auto run's costs: best %s (%s ms), auto %s (%s ms)\n" \
        "$p" "$(echo $parts | wc -w)" "$bestp" "$best" "$ap" "$(sim_ms "$p" 8 1f1b "$ap")"
done

echo
echo "== 3. one process, this tree against $BASE (weft-enginebench, portable matmul, samples/s, median of $REPS)"
git -C "$ROOT" worktree add --detach "$tmp/base" "$BASE" >/dev/null 2>&1
make -s -C "$tmp/base" -j2 BUILD=build build/weft-enginebench >/dev/null
eb() { # build model batch seq
    "$1/weft-enginebench" --model "$2" --batch "$3" --seq "$4" --optim adamw --steps 20 \
        --warmup 3 --matmul portable | sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p'
}
for spec in "mlp:784-512-512-10 256 1" "gpt:vocab=256,ctx=64,layers=4,heads=4,dim=128 8 64"; do
    set -- $spec
    new= old=
    for r in $(seq "$REPS"); do
        old="$old $(eb "$tmp/base/build" "$1" "$2" "$3")"
        new="$new $(eb "$B" "$1" "$2" "$3")"
    done
    o=$(echo $old | tr ' ' '\n' | median)
    n=$(echo $new | tr ' ' '\n' | median)
    printf "%-48s base %8s  this %8s  this/base %.3f\n" "$1" "$o" "$n" \
        "$(awk -v a="$n" -v b="$o" 'BEGIN { print a / b }')"
done
