#!/bin/sh
# weft-train with a mixture-of-experts Llama: losses and gradient norms
# equal to one process (relative 1e-5) at pp 2 (no dropping, no balancing
# losses: capacity and the aux loss are per micro-batch) and dp 2 (with the
# z-loss: a mean over tokens, averaged alike; at pp 2 too, each
# micro-batch's share scaling it), recomputation bit-equal;
# with dropping, shared experts, the sigmoid router and the bias it
# trains. Expert tensor parallelism (--tp 2, each expert's width
# split; SGD as below): losses to 1e-6 relative and every final parameter
# to 1e-6 of its tensor's largest at tp 2, tp 2 x dp 2 and tp 2 x pp 2,
# with and without a shared expert, and at tp 2 with dropping, the
# balancing losses, the sigmoid router and its bias, and with --sp at tp 2
# (with and without a shared expert, with dropping, the balancing losses
# and the bias) and ep 2 x tp 2; a save at tp 2
# resumes on one process and one process's at tp 2 as the run that never
# stopped.
# Expert parallelism (--ep, dp 4; SGD, whose update is linear in the
# gradient, so that a wrong gradient shows in the parameters): losses to
# 1e-6 relative and every final parameter to 1e-6 of its tensor's largest
# at ep 2 (with ZeRO 1), ep 4, ep 2 x pp 2, ep 4 x tp 2, ep 4 x pp 2,
# ep 2 x tp 2 x pp 2 and ep 4 x tp 2 x pp 2 (16 ranks); after one step every
# tensor but the experts' bit-identical to dp 4 without --ep (the dispatch
# adds nothing up: the experts' rows only move); skewed routing (all tokens
# to experts 0 and 1: three ranks of four have none) for 1,000 steps at
# ep 4 with the losses of one process; a rank announcing another capacity is
# an error naming both ranks on every rank, not a stall; --ep refused
# where it does not divide. The GPT's GELU experts (gpt:...,experts=8):
# tp 2, ep 2, ep 2 x tp 2 and tp 2 with --sp (also with dropping and the
# balancing losses) equal to one process alike. Each rank holds its own experts
# only (the parameter and optimiser bytes a rank prints fall by the
# others' experts'), and a save at ep 4 resumes on one process and at
# ep 2 with ZeRO 1 as the run that never stopped; the evaluation at ep 4,
# ep 2 x tp 2 and ep 2 x pp 2 gives the validation loss and answers of
# one process. Under a pipeline too a rank holds its own experts only (at
# ep 2 x tp 2 its experts' tensor slices: the bytes fall by half the
# experts' slice against tp 2 x dp 2; at ep 2 x pp 2 by half the stage's
# experts against pp 2 x dp 2), and the save gathers each expert from
# the replica that holds it. --ep 2 with
# --tp 2 (each expert's width split too): losses and final parameters as
# one process's, with and without a shared expert, and saves across that
# layout and one process. ZeRO 2 and 3 with --ep (each expert's state
# sharded over its replicas): losses and gradient norms as one process's
# at ep 2, ep 4, ep 2 x tp 2 and ep 2 x pp 2, a rank's bytes at ep 2
# ZeRO 3 those of dp 4 ZeRO 3 (their saves: test_train_ckpt_shard.sh; their
# exports: test_train_eval_layout.sh). The balancing bias (bias=1) stepped
# from the loads summed over the replicas: losses and every final
# parameter, the bias too, as one process's at dp 2, ep 2 and pp 2 x dp 2,
# and the balance figure rank 0 prints at dp 2 and ep 2 one process's.
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

# ---- expert parallelism ----
# cmp.py A B TOL: every param/ tensor of checkpoint A within TOL (relative
# to B's largest element) of B's; prints "same NAME" for each tensor that
# is bit-identical, "count N" the tensors that are not the experts'
cat >"$dir/cmp.py" <<'PY'
import struct, sys
def read(path):
    d = open(path, 'rb').read()
    at, out = 32, {}
    for _ in range(struct.unpack_from('<Q', d, 16)[0]):
        nl, n = struct.unpack_from('<I', d, at + 8)[0], struct.unpack_from('<Q', d, at + 80)[0]
        name = d[at + 96:at + 96 + nl].decode()
        at = (at + 96 + nl + 63) // 64 * 64
        if name.startswith('param/'):
            out[name] = d[at:at + n]
        at += n
    return out
a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
bad = not b or sorted(a) != sorted(b)
for k in sorted(b):
    if k not in a:
        continue
    x = struct.unpack('<%df' % (len(a[k]) // 4), a[k])
    y = struct.unpack('<%df' % (len(b[k]) // 4), b[k])
    err = max(abs(p - q) for p, q in zip(x, y)) / (max(abs(v) for v in y) or 1.0)
    if err > tol:
        print('%s: %s relative %.3g' % (sys.argv[1], k, err))
        bad = True
    if a[k] == b[k]:
        print('same', k)
print('count', sum('.experts.' not in k for k in b))
sys.exit(1 if bad else 0)
PY
close() { # name ref: losses within 1e-6 relative, and the final parameters
    if awk -F, 'FNR == 1 { next } NR == FNR { l[$1] = $4; next } $3 == "train" { n++
                d = $4 - l[$1]; if (d < 0) d = -d; if (!($1 in l) || d > 1e-6 * l[$1] + 5e-7) {
                print "step " $1 ": " $4 " vs " l[$1]; bad = 1 } }
                END { exit bad || !n }' "$dir/$2.csv" "$dir/$1.csv" &&
       python3 "$dir/cmp.py" "$dir/$1.wckpt" "$dir/$2.wckpt" 1e-6 >"$dir/$1.cmp"; then
        ok
    else
        bad "$1: differs from $2"; grep -v '^same' "$dir/$1.cmp"
    fi
}
ep8="llama:vocab=256,ctx=32,layers=2,heads=4,kv_heads=2,dim=32,ffn=48,experts=8,topk=2"
common="--quiet --no-eval --optim sgd --momentum 0.9 --lr 0.05 --data builtin --batch 8"
# under sanitizers (TEST_SCALE > 1) fewer steps, and the ZeRO run and the
# bits of one step are left to the plain build
thin=0
[ "${TEST_SCALE:-1}" -gt 1 ] && thin=1
steps=8
[ $thin = 1 ] && steps=4
# ep 2 and 4 against one process, alone and with tp 2 and pp 2 (the 8-
# and 16-rank layouts, a second each here, left to the plain build)
for r in "eref 1" "ep2 4 --ep 2 --zero 1" "ep4 4 --ep 4" "ep2pp2 4 --ep 2 --pp 2" \
    "ep4tp2 8 --ep 4 --tp 2" "ep4pp2 8 --ep 4 --pp 2" "ep2tp2pp2 8 --ep 2 --tp 2 --pp 2" \
    "ep4tp2pp2 16 --ep 4 --tp 2 --pp 2"; do
    set -- $r
    name=$1
    shift
    [ $thin = 1 ] && [ "$1" -gt 4 ] && continue
    [ $thin = 1 ] && [ "$name" = ep2 ] && continue
    run "$name" "$@" --model "$ep8" --steps $steps --save "$dir/$name.wckpt" &&
        [ "$name" != eref ] && close "$name" eref
done

# the balancing bias (bias=1) stepped from the loads summed over the
# replicas the router is replicated over: losses and every final
# parameter, the bias too, as one process's at dp 2, ep 2 (ZeRO 1) and
# pp 2 x dp 2 (each stage over its own replicas); a replica stepping it
# from its own loads leaves another bias (and then other routes)
layouts() { # ref model skip "lay ranks args..." ...: each saved and close to ref
    ref=$1 model=$2 skip=$3
    shift 3
    for r in "$@"; do
        set -- $r
        lay=$1
        shift
        [ $thin = 1 ] && [ "$lay" = "$skip" ] && continue
        run "$lay" "$@" --model "$model" --steps $steps --save "$dir/$lay.wckpt" &&
            close "$lay" "$ref"
    done
}
b8="$ep8,bias=1"
run bref 1 --model "$b8" --steps $steps --save "$dir/bref.wckpt" &&
    layouts bref "$b8" bdp2 "bdp2 2" "bep2 2 --ep 2 --zero 1" "bpp2 4 --pp 2"
# and the balance rank 0 prints each step (weft_model_moe_stats) is that of
# the summed loads the bias stepped from: one process's, not its own half
balance() { # out: rank 0's max/mean figures, one a line
    grep "experts at step [0-9]*: tokens per expert" "$1" | grep -v '^\[[1-9]' |
        sed 's/.*max\/mean \([0-9.]*\).*/\1/'
}
for lay in bdp2 bep2; do
    [ -f "$dir/$lay.out" ] && [ -f "$dir/bref.out" ] || continue
    if [ -n "$(balance "$dir/bref.out")" ] &&
        [ "$(balance "$dir/$lay.out")" = "$(balance "$dir/bref.out")" ]; then
        ok
    else
        bad "$lay: its balance figures differ from one process's"
        balance "$dir/bref.out" >"$dir/bal.ref"
        balance "$dir/$lay.out" | paste - "$dir/bal.ref" | head -n 5
    fi
done

# a save with the experts divided holds the whole model: it resumes on
# one process (and at ep 2 with ZeRO 1) as the run that never stopped
half=$((steps / 2))
if run mid 4 --model "$ep8" --steps $half --ep 4 --save "$dir/mid.wckpt"; then
    run res1 1 --model "$ep8" --steps $steps --resume "$dir/mid.wckpt" \
        --save "$dir/res1.wckpt" && close res1 eref
    [ $thin = 0 ] && run res2 4 --model "$ep8" --steps $steps --resume "$dir/mid.wckpt" \
        --ep 2 --zero 1 --save "$dir/res2.wckpt" && close res2 eref
fi

# ZeRO 2 and 3 with --ep: each expert's state sharded and reduced over
# its replicas, the rest over the data-parallel group: losses to 1e-6
# relative and gradient norms to 1e-5 as one process's at ep 2 (ZeRO 2
# and 3), ep 4 (ZeRO 3: one replica an expert, nothing sharded) and at
# ep 2 x tp 2 and ep 2 x pp 2 (ZeRO 3); an expert gradient missing the
# replicas' average shows in the losses
near() { # name ref
    if awk -F, 'FNR == 1 { next } NR == FNR { l[$1] = $4; g[$1] = $7; next } $3 == "train" {
                n++; d = $4 - l[$1]; if (d < 0) d = -d; e = $7 - g[$1]; if (e < 0) e = -e
                if (!($1 in l) || d > 1e-6 * l[$1] + 5e-7 || e > 1e-5 * g[$1] + 1e-6) {
                print "step " $1 ": " $4 ", " $7 " vs " l[$1] ", " g[$1]; bad = 1 } }
                END { exit bad || !n }' "$dir/$2.csv" "$dir/$1.csv"; then
        ok
    else
        bad "$1: differs from $2"
    fi
}
for r in "ez2 --ep 2 --zero 2" "ez3 --ep 2 --zero 3" "e4z3 --ep 4 --zero 3" \
    "etz3 --ep 2 --tp 2 --zero 3" "epz3 --ep 2 --pp 2 --zero 3"; do
    set -- $r
    name=$1
    shift
    [ $thin = 1 ] && [ "$name" != ez3 ] && continue
    [ -f "$dir/eref.csv" ] && run "$name" 4 "$@" --model "$ep8" --steps $steps &&
        near "$name" eref
done

# ---- expert tensor parallelism ----
# each expert's width split over tp 2, without and with a shared expert:
# losses and every final parameter as one process's at tp 2, tp 2 x dp 2
# and tp 2 x pp 2 (a router input gradient counted on every tp rank, or
# gate gradients not summed over the group, shows here); a save at tp 2
# resumes on one process, and one process's at tp 2
sh8="$ep8,shared=1"
run shref 1 --model "$sh8" --steps $steps --save "$dir/shref.wckpt"
for r in "tp2 2" "tp2dp2 4" "tp2pp2 4 --pp 2"; do
    set -- $r
    lay=$1  # (run sets name)
    shift
    [ $thin = 1 ] && [ "$lay" = tp2dp2 ] && continue
    run "e$lay" "$@" --tp 2 --model "$ep8" --steps $steps --save "$dir/e$lay.wckpt" &&
        close "e$lay" eref
    run "s$lay" "$@" --tp 2 --model "$sh8" --steps $steps --save "$dir/s$lay.wckpt" &&
        close "s$lay" shref
done
# with dropping, the balancing losses, the sigmoid router and its bias:
# every tp rank routes and drops alike, so tp 2 is still one process
dr8="$sh8,capacity=1,aux=0.01,zloss=0.01,router=sigmoid,bias=1"
if run dref 1 --model "$dr8" --steps $steps --save "$dir/dref.wckpt"; then
    run dtp2 2 --model "$dr8" --steps $steps --tp 2 --save "$dir/dtp2.wckpt" &&
        close dtp2 dref
    # sequence parallelism: the same sums, the rows cut over the tensor group
    [ $thin = 0 ] && run dsp2 2 --model "$dr8" --steps $steps --tp 2 --sp \
        --save "$dir/dsp2.wckpt" && close dsp2 dref
fi
run ssp2 2 --model "$sh8" --steps $steps --tp 2 --sp --save "$dir/ssp2.wckpt" &&
    close ssp2 shref
if run tmid 2 --model "$sh8" --steps $half --tp 2 --save "$dir/tmid.wckpt"; then
    run tres1 1 --model "$sh8" --steps $steps --resume "$dir/tmid.wckpt" \
        --save "$dir/tres1.wckpt" && close tres1 shref
fi
if [ $thin = 0 ] && run omid 1 --model "$sh8" --steps $half --save "$dir/omid.wckpt"; then
    run ores2 2 --model "$sh8" --steps $steps --tp 2 --resume "$dir/omid.wckpt" \
        --save "$dir/ores2.wckpt" && close ores2 shref
fi

# ---- expert parallelism with expert tensor parallelism ----
# --ep 2 --tp 2 (4 ranks: dp 2 within each tensor rank): an expert group
# is a tensor rank's data-parallel ranks, each runs its share of the
# width of its experts; losses and every final parameter as one
# process's, with and without a shared expert (a dispatch over the
# tensor group's ranks, or expert gradients reduced over the wrong
# group, fails here); a save at ep 2 x tp 2 resumes on one process, and
# one process's at ep 2 x tp 2
run ep2tp2 4 --ep 2 --tp 2 --model "$ep8" --steps $steps --save "$dir/ep2tp2.wckpt" &&
    close ep2tp2 eref
# with --sp: the router's input gradient joins one tensor rank's part
# before the reduce-scatter, the gate gradients have their own sum
run spep2tp2 4 --ep 2 --tp 2 --sp --model "$ep8" --steps $steps --save "$dir/spep2tp2.wckpt" &&
    close spep2tp2 eref
run sep2tp2 4 --ep 2 --tp 2 --model "$sh8" --steps $steps --save "$dir/sep2tp2.wckpt" &&
    close sep2tp2 shref
if run etmid 4 --model "$sh8" --steps $half --ep 2 --tp 2 --save "$dir/etmid.wckpt"; then
    run etres1 1 --model "$sh8" --steps $steps --resume "$dir/etmid.wckpt" \
        --save "$dir/etres1.wckpt" && close etres1 shref
fi
[ $thin = 0 ] && [ -f "$dir/omid.wckpt" ] &&
    run etres4 4 --model "$sh8" --steps $steps --ep 2 --tp 2 --resume "$dir/omid.wckpt" \
        --save "$dir/etres4.wckpt" && close etres4 shref
# the pipeline's save with divided experts, their optimiser state too (the
# momentum): at ep 2 x tp 2 with ZeRO 1 and at ep 2 x pp 2, resumed on one
# process
for r in "zt --tp 2 --zero 1" "ep --pp 2"; do
    set -- $r
    lay=$1
    shift
    [ $thin = 1 ] && [ "$lay" = zt ] && continue
    run "${lay}mid" 4 --model "$sh8" --steps $half --ep 2 "$@" --save "$dir/${lay}mid.wckpt" &&
        run "${lay}res1" 1 --model "$sh8" --steps $steps --resume "$dir/${lay}mid.wckpt" \
            --save "$dir/${lay}res1.wckpt" && close "${lay}res1" shref
done

# ---- the GPT's GELU experts ----
# losses and every final parameter as one process's at tp 2 (each
# expert's fc and proj cut by the same rows), ep 2 (dp 4), ep 2 x tp 2 and
# tp 2 with --sp (the router's input gradient joining one rank's part
# before the reduce-scatter), and with --sp, dropping, the balancing
# losses and the bias (its proportional step, bias=2)
g8="gpt:vocab=256,ctx=32,layers=2,heads=4,dim=32,experts=8,topk=2,moe_ffn=48"
run gref 1 --model "$g8" --steps $steps --save "$dir/gref.wckpt" &&
    layouts gref "$g8" gep2 "gtp2 2 --tp 2" "gep2 4 --ep 2" "gep2tp2 4 --ep 2 --tp 2" \
        "gsp2 2 --tp 2 --sp"
gd8="$g8,capacity=1,aux=0.01,zloss=0.01,bias=2"
[ $thin = 0 ] && run gdref 1 --model "$gd8" --steps $steps --save "$dir/gdref.wckpt" &&
    run gdsp2 2 --model "$gd8" --steps $steps --tp 2 --sp --save "$dir/gdsp2.wckpt" &&
    close gdsp2 gdref

# one step: the forward and every gradient but the experts' weights' are
# the same arithmetic as without --ep; a rank holds a quarter of the
# experts at ep 4 (2 layers x 8 experts x 3 x ffn 48 x dim 32 floats whole)
mem() { # name: rank 0's parameter and optimiser bytes
    sed -n 's/.*per rank (rank 0): params \([0-9]*\) B, grads [0-9]* B, optimiser \([0-9]*\) B.*/\1 \2/p' \
        "$dir/$1.out"
}
quiet=$common
common=${common#--quiet }  # the figures are in the banner
if [ $thin = 0 ] && run one_dp 4 --model "$ep8" --steps 1 --save "$dir/one_dp.wckpt" &&
   run one_ep 4 --model "$ep8" --steps 1 --ep 4 --save "$dir/one_ep.wckpt"; then
    set -- $(mem one_dp) $(mem one_ep)
    saved=$((2 * 8 * 3 * 48 * 32 * 3 / 4 * 4))
    if [ $# -eq 4 ] && [ $(($1 - $3)) -eq $saved ] && [ $(($2 - $4)) -eq $saved ]; then
        ok
        echo "    parameter + optimiser bytes a rank: $(($1 + $2)) at dp 4, $(($3 + $4)) at ep 4"
    else
        bad "ep 4: a rank's parameter and optimiser bytes do not fall by three quarters of the experts' ($saved): $*"
    fi
    python3 "$dir/cmp.py" "$dir/one_ep.wckpt" "$dir/one_dp.wckpt" 1e-6 >"$dir/one.cmp"
    same=$(grep '^same' "$dir/one.cmp" | grep -vc '\.experts\.')
    if [ "$same" -gt 0 ] && grep -q "^count $same\$" "$dir/one.cmp"; then
        ok
    else
        bad "one step at ep 4: the non-expert tensors are not bit-identical to dp 4"
        cat "$dir/one.cmp"
    fi
fi
# ZeRO 3 at ep 2 (dp 4): a quarter of the rest and half of the group
# rank's experts (a quarter of all of them) a rank, so dp 4's bytes at
# ZeRO 3 without --ep
zbytes() { sed -n 's/.*per rank (rank 0): \(params .* B\); ZeRO formula.*/\1/p' "$dir/$1.out"; }
if [ $thin = 0 ] && run zm_dp 4 --model "$ep8" --steps 1 --zero 3 &&
   run zm_ep 4 --model "$ep8" --steps 1 --zero 3 --ep 2; then
    if [ -n "$(zbytes zm_ep)" ] && [ "$(zbytes zm_ep)" = "$(zbytes zm_dp)" ]; then
        ok
    else
        bad "ZeRO 3 at ep 2: a rank's bytes are not dp 4's: $(zbytes zm_ep) against $(zbytes zm_dp)"
    fi
fi
# under a pipeline: ep 2 x tp 2 against tp 2 x dp 2 (each rank its
# experts' halves of its tensor slice: a quarter of the experts' floats
# whole), ep 2 x pp 2 against pp 2 x dp 2 (rank 0's stage, one of the two
# layers: half its experts)
quarter=$((2 * 8 * 3 * 48 * 32 / 4 * 4))
for r in "tp:--tp 2:$quarter" "pp:--pp 2:$quarter"; do
    lay=${r%%:*}; rest=${r#*:}; args=${rest%%:*}; saved=${rest#*:}
    if run "one_$lay" 4 --model "$ep8" --steps 1 $args &&
       run "one_ep$lay" 4 --model "$ep8" --steps 1 --ep 2 $args; then
        set -- $(mem "one_$lay") $(mem "one_ep$lay")
        if [ $# -eq 4 ] && [ $(($1 - $3)) -eq $saved ] && [ $(($2 - $4)) -eq $saved ]; then
            ok
            echo "    parameter + optimiser bytes a rank: $(($1 + $2)) at $args x dp 2, $(($3 + $4)) at ep 2 $args"
        else
            bad "ep 2 $args: a rank's parameter and optimiser bytes do not fall by its other experts' ($saved): $*"
        fi
    fi
done
common=$quiet

# evaluation under --ep: in the training layout with the same dispatch
# (every rank in step, generating too), the validation loss and the
# answers of one process
if [ $thin = 0 ]; then
    common="$(echo "$quiet" | sed 's/--no-eval //') --eval-prompts 100"
    # the answers shown and the exact-match line, as rank 0 prints them
    answers() { sed -n 's/^\(\[0\] \)\{0,1\}\(  .*\|exact match: .*\)$/\2/p' "$dir/$1.out"; }
    if run evref 1 --model "$ep8" --steps 2; then
        # ep 4 (dp 4); ep 2 x tp 2 and ep 2 x pp 2, where the pipeline's
        # replicas evaluate in step (a replica left out of a round stalls
        # its stage's dispatch; a batch taken twice moves the loss)
        for r in "ev4 --ep 4" "evtp --ep 2 --tp 2" "evpp --ep 2 --pp 2"; do
            set -- $r
            lay=$1
            shift
            run "$lay" 4 --model "$ep8" --steps 2 "$@" || continue
            if awk -F, '$3 == "val" { v[n++] = $4; a[m++] = $5 }
                        END { d = v[0] - v[1]; if (d < 0) d = -d
                              exit n != 2 || d > 1e-6 * v[0] || a[0] != a[1] }' \
                   "$dir/evref.csv" "$dir/$lay.csv" &&
               [ "$(grep -c 'exact match: ' "$dir/$lay.out")" -eq 1 ] &&
               [ "$(answers evref | wc -l)" -eq 6 ] && [ "$(answers "$lay")" = "$(answers evref)" ]; then
                ok
            else
                bad "evaluation at $*: not the loss and answers of one process"
                grep ',val,' "$dir/evref.csv" "$dir/$lay.csv"
            fi
        done
    fi
    common=$quiet
fi

# skewed routing: experts 0 and 1 take every token, ranks 1-3 get none
steps=1000
[ $thin = 1 ] && steps=30
export WEFT_TEST_MOE_SKEW=8
# (plain SGD at a small rate: rounding grows slowest there; 1,000 steps
# differed from one process by 3.7e-7 relative at most, in about 5 s)
slow="--momentum 0 --lr 0.003 --steps $steps --log-every $steps"
if run sref 1 --model "$ep8" $slow && run sep4 4 --model "$ep8" $slow --ep 4; then
    if awk -F, 'FNR == 1 { next } NR == FNR { l[$1] = $4; next } $3 == "train" { n++
                d = $4 - l[$1]; if (d < 0) d = -d; if (d > 1e-6 * l[$1] + 5e-7) bad = 1 }
                END { exit bad || !n }' "$dir/sref.csv" "$dir/sep4.csv" &&
       grep -q "the group's tokens per expert max/mean 4.000" "$dir/sep4.out"; then
        ok
    else
        bad "skewed routing at ep 4: losses differ from one process or the load is not skewed"
        grep "experts at" "$dir/sep4.out" | head -n 4
    fi
fi
unset WEFT_TEST_MOE_SKEW

# a rank announcing another capacity: every rank fails naming 0 and 2
WEFT_TEST_MOE_SKEW_RANK=2 timeout 120 "$B/weftrun" -n 4 "$B/weft-train" $common \
    --model "$ep8" --steps 4 --ep 4 >"$dir/lie.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
   [ "$(grep -c 'ranks 0 and 2 disagree on the expert capacity' "$dir/lie.out")" -eq 4 ]; then
    ok
else
    bad "a capacity disagreement: exit $rc"
    tail -n 8 "$dir/lie.out"
fi

refused() { # what args...: weft-train on 4 ranks exits non-zero saying what
    what=$1
    shift
    "$B/weftrun" -n 4 "$B/weft-train" $common --model "$ep8" --steps 1 "$@" >"$dir/r.out" 2>&1
    if [ $? -ne 0 ] && grep -q "$what" "$dir/r.out"; then ok; else bad "$* not refused"; fi
}
refused "must divide the data-parallel ranks" --ep 3
# saves and resumes at ZeRO 2-3 with --ep: test_train_ckpt_shard.sh; their
# exports: test_train_eval_layout.sh

echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
