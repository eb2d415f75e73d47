#!/bin/sh
# weft-train --cp (context parallelism): a tiny GPT and a tiny Llama with
# grouped-query attention (4 heads, 2 kv heads), SGD with momentum so that
# a wrong gradient shows in the weights: the losses to 1e-6 relative and
# every final parameter to 1e-6 of its tensor's largest equal one process
# at cp 2, cp 4, cp 2 x dp 2 with ZeRO 1, cp 2 with ZeRO 3 (its shards
# over the cp ranks, which hold one replica), cp 2 x tp 2 (the ring on
# each tensor rank's heads), cp 2 x pp 2 (the GPT's tied embedding on
# both stages) and, for the Llama, cp 2 x tp 2 x dp 2 with ZeRO 1,
# cp 2 x tp 2 x pp 2, cp 4 x tp 2 and cp 4 x pp 2 (the builtin additions
# train on their answers only, so the ranks' chunks count different numbers of
# targets: the loss is the group's mean over its tokens), cp 2 x pp 2
# with ZeRO 3. The final evaluation in the training layout (each group a
# batch's windows, each rank its zig-zag rows) gives one process's
# validation loss to 1e-6 at cp 2, cp 2 x pp 2 with ZeRO 3 and the
# Llama's cp 2 x tp 2 x pp 2 and cp 4 x tp 2, and --eval-only at cp 2
# prints one process's loss. bf16 (the
# ring's products in bf16, its merge fp32) at cp 2 tracks bf16 at one
# process: losses to 1e-4, and every final parameter nearer its own than
# fp32 cp 2's are, by half; its K/V travel in bf16 (the ring's bytes
# 14/16 of fp32's at cp 2). The ring's counters line is printed.
# Refused, saying why: a --seq that 2C does not divide, --cp with --sp,
# --ep, a job that cp x tp does not divide.
# Under sanitizers (TEST_SCALE > 1) cp 2 alone for each model, the
# Llama's cp 2 x tp 2 and cp 2 x pp 2 and its evaluation at cp 2, the
# GPT's bf16, and the refusals.
# TEST_TIMEOUT(240)
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common="--quiet --optim sgd --momentum 0.9 --lr 0.05 --data builtin --batch 4"
. "$(dirname "$0")/train_lib.sh"

# cmp.py A B: every param/ tensor of checkpoint A within 1e-6 (relative to
# B's largest element of it) of B's
cat >"$dir/cmp.py" <<'PY'
import struct, sys
def tensors(path):
    d, out = open(path, 'rb').read(), {}
    at = 32
    for _ in range(struct.unpack_from('<Q', d, 16)[0]):
        name_len = struct.unpack_from('<I', d, at + 8)[0]
        size = struct.unpack_from('<Q', d, at + 80)[0]
        name = d[at + 96:at + 96 + name_len].decode()
        at = (at + 96 + name_len + 63) // 64 * 64
        if name.startswith('param/'):
            out[name] = struct.unpack('<%df' % (size // 4), d[at:at + size])
        at += size
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
bad = not b or sorted(a) != sorted(b)
for k in sorted(b):
    if k in a:
        top = max(abs(v) for v in b[k]) or 1.0
        err = max(abs(p - q) for p, q in zip(a[k], b[k])) / top
        if err > 1e-6:
            print('%s: %s off by %.3g of its largest' % (sys.argv[1], k, err))
            bad = True
print('tensors', len(b))
if len(sys.argv) > 3:  # the largest error of any tensor, relative to its largest
    print('%.9g' % max(max(abs(p - q) for p, q in zip(a[k], b[k])) / (max(abs(v) for v in b[k]) or 1.0)
                        for k in b if k in a))
    sys.exit(0)
sys.exit(1 if bad else 0)
PY
close() { # name ref [val]: losses (and with val the validation loss) within
    # 1e-6 relative, and the final parameters
    if awk -F, -v val="$3" 'FNR == 1 { next } NR == FNR { l[$1 $3] = $4; next }
                $3 == "train" || $3 == "val" { n++; v += $3 == "val"; k = $1 $3
                d = $4 - l[k]; if (d < 0) d = -d; if (!(k in l) || d > 1e-6 * l[k] + 2e-6) {
                print "step " $1 " " $3 ": " $4 " vs " l[k]; bad = 1 } }
                END { exit bad || !n || (val && v != 1) }' "$dir/$2.csv" "$dir/$1.csv" &&
       python3 "$dir/cmp.py" "$dir/$1.wckpt" "$dir/$2.wckpt" >"$dir/$1.cmp"; then
        ok
    else
        bad "$1: differs from $2"; cat "$dir/$1.cmp" 2>/dev/null
    fi
}

thin=0
[ "${TEST_SCALE:-1}" -gt 1 ] && thin=1
steps=6
[ $thin = 1 ] && steps=3
gpt="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=32"
llama="llama:vocab=256,ctx=64,layers=2,heads=4,kv_heads=2,dim=32,ffn=48"
for m in "g $gpt 32" "l $llama 64"; do
    set -- $m
    tag=$1 model=$2 seq=$3
    run "${tag}ref" 1 --model "$model" --seq "$seq" --steps $steps --save "$dir/${tag}ref.wckpt" \
        --no-eval || continue
    # the 8-rank layouts (cp 4 with tp 2 or pp 2, cp 2 x tp 2 with dp 2 or
    # pp 2) on the Llama alone; under sanitizers cp 2 alone and the
    # Llama's cp 2 with tp 2 and with pp 2
    for r in "cp2 2 --cp 2" "cp4 4 --cp 4" "cp2dp2 4 --cp 2 --zero 1" "cp2z3 2 --cp 2 --zero 3" \
             "cp2tp2 4 --cp 2 --tp 2" "cp2pp2 4 --cp 2 --pp 2" "cp2pp2z3 4 --cp 2 --pp 2 --zero 3" \
             "cp2tp2dp2 8 --cp 2 --tp 2 --zero 1" "cp2tp2pp2 8 --cp 2 --tp 2 --pp 2" \
             "cp4tp2 8 --cp 4 --tp 2" "cp4pp2 8 --cp 4 --pp 2"; do
        set -- $r
        name=$tag$1 n=$2
        shift 2
        [ "$tag" = g ] && [ "$n" = 8 ] && continue
        [ $thin = 1 ] && case $name in ${tag}cp2 | lcp2tp2 | lcp2pp2) ;; *) continue ;; esac
        run "$name" "$n" --model "$model" --seq "$seq" --steps $steps --no-eval \
            --save "$dir/$name.wckpt" "$@" --log-every 1 && close "$name" "${tag}ref"
    done
    # the evaluation (the validation loss compared too), after 2 steps of
    # 32 sequences of 32: 32 windows a group's forward, so that the 2000
    # windows take a few dozen rounds; the generating held to 2 prompts
    ev="--seq 32 --steps 2 --batch 32 --eval-prompts 2"
    # under sanitizers the Llama's alone (and the GPT's bf16 below)
    evals="ecp2 2 --cp 2|ecp2pp2z3 4 --cp 2 --pp 2 --zero 3|ecp2tp2pp2 8 --cp 2 --tp 2 --pp 2"
    evals="$evals|ecp4tp2 8 --cp 4 --tp 2"
    [ $thin = 1 ] && evals="ecp2 2 --cp 2"
    [ $thin = 1 ] && [ "$tag" = g ] && evals=
    [ -n "$evals" ] && run "${tag}e1" 1 --model "$model" $ev --save "$dir/${tag}e1.wckpt" || evals=
    IFS='|'
    for r in $evals; do
        IFS=' '
        set -- $r
        name=$tag$1 n=$2
        shift 2
        [ "$tag" = g ] && [ "$n" = 8 ] && continue
        run "$name" "$n" --model "$model" $ev --save "$dir/$name.wckpt" "$@" &&
            close "$name" "${tag}e1" val
    done
    unset IFS
    # --eval-only from that save: cp 2 prints one process's loss (6 digits)
    if [ "$tag" = l ] && [ $thin = 0 ] && [ -f "$dir/${tag}e1.wckpt" ]; then
        for n in 1 2; do
            "$B/weftrun" -n $n "$B/weft-train" --quiet --data builtin --seq 32 --eval-prompts 2 \
                --resume "$dir/${tag}e1.wckpt" --eval-only --cp $n 2>&1 |
                sed -n 's/^\[0\] validation: .*loss //p' >"$dir/eo$n.txt"
        done
        if [ -s "$dir/eo1.txt" ] && cmp -s "$dir/eo1.txt" "$dir/eo2.txt"; then
            ok
        else
            bad "--eval-only at cp 2: $(cat "$dir/eo2.txt") against $(cat "$dir/eo1.txt")"
        fi
    fi
    # bf16: cp 2 against one process, both bf16; fp32's cp 2 the measure
    # of how far a run that did not round as bf16 does lies
    [ $thin = 1 ] && [ "$tag" = l ] && continue
    run "${tag}b1" 1 --model "$model" --seq "$seq" --steps $steps --precision bf16 --no-eval \
        --save "$dir/${tag}b1.wckpt" &&
    run "${tag}b2" 2 --model "$model" --seq "$seq" --steps $steps --precision bf16 --no-eval \
        --save "$dir/${tag}b2.wckpt" --cp 2 --log-every 1 || continue
    # the K/V blocks travel in bf16, the dK/dV sums in fp32: at cp 2 a
    # layer's step sends 3 blocks of K/V (forward, backward's delta and
    # gradients) at 2 bytes and 2 of dK/dV at 4 against fp32's 2 and 2 at
    # 4, 14/16 of fp32's bytes (all in fp32 it would be 20/16)
    mb() { sed -n 's/.*context ring: [0-9.]* steps and \([0-9.]*\) MB.*/\1/p' "$dir/$1.out" | tail -n 1; }
    if [ -f "$dir/${tag}cp2.out" ] &&
       awk -v a="$(mb "${tag}b2")" -v b="$(mb "${tag}cp2")" \
           'BEGIN { r = b > 0 ? a / b : 0; exit !(r > 0.855 && r < 0.895) }'; then
        ok
    else
        bad "${tag}b2: the ring's bytes in bf16, $(mb "${tag}b2") MB a step, are not 14/16 of fp32's $(mb "${tag}cp2") MB"
    fi
    if awk -F, 'FNR == 1 { next } NR == FNR { l[$1] = $4; next } $3 == "train" { n++
                d = $4 - l[$1]; if (d < 0) d = -d; if (!($1 in l) || d > 1e-4 * l[$1]) {
                print "step " $1 ": " $4 " vs " l[$1]; bad = 1 } }
                END { exit bad || !n }' "$dir/${tag}b1.csv" "$dir/${tag}b2.csv"; then
        ok
    else
        bad "${tag}b2: bf16 cp 2's losses off bf16 cp 1's"
    fi
    near=$(python3 "$dir/cmp.py" "$dir/${tag}b2.wckpt" "$dir/${tag}b1.wckpt" max | tail -n 1)
    far=$(python3 "$dir/cmp.py" "$dir/${tag}cp2.wckpt" "$dir/${tag}b1.wckpt" max | tail -n 1)
    if awk -v a="$near" -v b="$far" 'BEGIN { exit !(a + 0 < b / 2) }'; then
        ok
    else
        bad "${tag}b2: bf16 cp 2's parameters off bf16 cp 1's by $near (fp32 cp 2's: $far)"
    fi
done

# the ring's counters, on rank 0's progress lines (2 layers: 2 ring steps
# forward and 2 backward each at cp 2)
if grep -q "context ring: 8.0 steps and" "$dir/gcp2.out"; then
    ok
else
    bad "cp 2: no ring counters line"; tail -n 3 "$dir/gcp2.out"
fi

refused() { # what ranks args...: weft-train exits non-zero saying what
    what=$1 n=$2
    shift 2
    "$B/weftrun" -n "$n" "$B/weft-train" $common --no-eval --model "$gpt" --seq 32 --steps 1 "$@" \
        >"$dir/r.out" 2>&1
    if [ $? -ne 0 ] && grep -q -- "$what" "$dir/r.out"; then
        ok
    else
        bad "$* not refused (want '$what')"; tail -n 3 "$dir/r.out"
    fi
}
refused "must be a multiple of 2 x 4" 4 --cp 4 --seq 20
refused "with --sp: both split the sequence" 4 --cp 2 --tp 2 --sp
refused "must divide the job's ranks (6) over the tensor groups" 6 --cp 2 --tp 2
refused "with --ep 2: not done" 4 --cp 2 --ep 2
refused "must divide the job's ranks" 3 --cp 2

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
