#!/bin/sh
# weft-train --elastic with --pp/--tp under weftrun --elastic: a replica is
# one tp x pp group, and a death drops the dead rank's replica. Its
# survivors leave the job (exit 0, with a line naming the dead rank); the
# other replica rebuilds the layout over dp - 1 and takes the failed step
# again: the job ends with the per-step losses of an undisturbed run of the
# same layout (the global batch is kept) and every sample of the epoch seen
# once. Cases: pp 2 x dp 2, a rank of the second replica killed (and one of
# the first, rank 0, whose replica's survivor leaves while the other
# replica's first rank takes over the report); tp 2 x dp 2; a death during
# the recovery (the leaving replica's survivor); pp 2 x dp 3 down to two
# replicas; tp 2 x dp 2 x pp 2 down to one replica; and the clear stop when
# the recovery kills the last whole replica; what is refused (ZeRO 1 with
# --pp, one replica, a restart that would join). Under sanitizers
# (TEST_SCALE >= 10) the first case and the refusals.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
scale=${TEST_SCALE:-1}
base="--model mlp:784-64-64-10 --data builtin --train-size 2048 --batch 64 --optim adamw
      --lr 0.003 --clip 1 --elastic --quiet"
common="$base --pp 2 --micro-batches 2"

. "$(dirname "$0")/elastic_lib.sh"

refuses() { # name text weft-train args...: the launch stops at once, saying text
    name=$1; text=$2; shift 2
    if WEFT_TIMEOUT=20 timeout -s KILL 60 "$B/weftrun" --elastic 2:4 -n 4 "$B/weft-train" \
        $base "$@" >"$dir/$name.out" 2>&1; then
        bad "$name: the job ran"
    else
        ok; says "$name" "$text"
    fi
}

# layout tp-dp-pp (tensor fastest): pp 2 x dp 2 is ranks 0, 1 stage 0 and
# 2, 3 stage 1; replica 0 = ranks 0 and 2, replica 1 = ranks 1 and 3
run ref 4 -- && once ref
if run kill3 4 -- --kill-at 3:10; then
    same kill3; once kill3; event kill3 shrink
    says kill3 "rank 3 killed by signal SIGKILL"
    says kill3 "elastic: rank 1 leaves: its replica lost rank 3"
    # weftrun names a rank that ends otherwise than with status 0
    if grep -q "rank 1 exited" "$dir/kill3.out"; then bad "kill3: rank 1 did not exit 0"; else ok; fi
    says kill3 "elastic: step 10: rank(s) 3 of 4 gone"
    says kill3 "1 left with their replica(s); 2 ranks now, 4 micro-batch(es) a step"
fi
if [ "$scale" -lt 10 ]; then
    # rank 0 (the lead) dies: rank 2 leaves, ranks 1 and 3 go on and report
    if run kill0 4 -- --kill-at 0:12; then
        same kill0; once kill0; event kill0 shrink
        says kill0 "elastic: rank 2 leaves: its replica lost rank 0"
        says kill0 "elastic: step 12: rank(s) 0 of 4 gone"
    fi
    # the leaving replica's survivor dies too, during the recovery
    if run during 4 -- --kill-at 3:6,1:6:recover; then
        same during; once during
        says during "elastic: step 6: rank(s) 1 3 of 4 gone"
    fi
    # tp 2 x dp 2: replica 0 = ranks 0, 1; replica 1 = ranks 2, 3
    common="$base --tp 2"
    run tpref 4 -- && once tpref
    if run tpkill 4 -- --kill-at 1:8; then
        same tpkill tpref; once tpkill
        says tpkill "elastic: rank 0 leaves: its replica lost rank 1"
    fi
    # tp 2 x dp 2 x pp 2 (rank = tensor + 2 x (replica + 2 x stage)): rank 6
    # dies, ranks 2, 3 and 7 leave
    common="$base --tp 2 --pp 2 --micro-batches 2"
    run ref8 8 -- && once ref8
    if run kill8 8 -- --kill-at 6:10; then
        same kill8 ref8; once kill8
        for r in 2 3 7; do says kill8 "elastic: rank $r leaves: its replica lost rank 6"; done
        says kill8 "3 left with their replica(s); 4 ranks now"
    fi
    # pp 2 x dp 3 (rank = replica + 3 x stage): rank 4 dies, rank 1 leaves,
    # two replicas go on (their states broadcast over the new data group)
    # with 3 micro-batches a step instead of 2
    common="--model mlp:784-64-64-10 --data builtin --train-size 1920 --batch 60 --optim adamw
            --lr 0.003 --clip 1 --elastic --quiet --pp 2 --micro-batches 2"
    run ref6 6 -- && once ref6 1920
    if run kill6 6 -- --kill-at 4:9; then
        same kill6 ref6; once kill6 1920
        says kill6 "elastic: rank 1 leaves: its replica lost rank 4"
        says kill6 "rank(s) 4 of 6 gone"
        says kill6 "4 ranks now, 3 micro-batch(es) a step"
    fi
    # a rank of each replica gone: nothing whole is left
    common="$base --pp 2 --micro-batches 2"
    if WEFT_TIMEOUT=20 timeout -s KILL 120 "$B/weftrun" --elastic 2:4 -n 4 "$B/weft-train" \
        $common --kill-at 3:6,0:6:recover >"$dir/none.out" 2>&1; then
        bad "none: both replicas broken and the job finished"
    else
        ok; says none "every replica lost a rank"
    fi
fi
refuses zero1 "takes --zero 0" --pp 2 --zero 1
refuses one "needs 2 replicas at least" --pp 2 --tp 2
if WEFT_TIMEOUT=20 timeout -s KILL 120 "$B/weftrun" --elastic 2:4 --restarts 1 -n 4 \
    "$B/weft-train" $common --kill-at 3:4 >"$dir/join.out" 2>&1; then
    says join "joining a --pp/--tp job is not supported"
else
    bad "join: the job failed"; tail -n 20 "$dir/join.out" | sed 's/^/    /'
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
