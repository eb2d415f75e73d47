#!/bin/sh
# weft-train --elastic under weftrun --elastic: a rank killed (SIGKILL, by
# weft-train's test-only --kill-at) costs the step it was in, not the job.
# Each run must finish, at the ranks it should end with, with the per-step
# losses of an undisturbed 4-rank run (the global batch is kept, so the
# survivors take the same steps, to fp32 reduction-order tolerance) and
# every sample of the epoch seen exactly once (--trace-samples: the ids of
# every committed step, from every rank). Cases: one death (a middle rank,
# and rank 0, whose successor takes over the report and the CSV); a
# restart that joins, with parameters bit-identical on every rank after
# the join; two deaths in one run; a death during the recovery from
# another; ZeRO-1/2/3 shards recovered from their copies on the next rank
# (rank 0, a middle and the last rank; a restart that joins the sharded
# state; two non-neighbours), and the clear stop when two neighbours die
# together. Under sanitizers (TEST_SCALE >= 10) one death, the restart and
# ZeRO-2.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
scale=${TEST_SCALE:-1}
common="--model mlp:784-64-10 --data builtin --train-size 2048 --batch 64 --optim adamw
        --lr 0.003 --clip 1 --elastic --quiet"
. "$(dirname "$0")/elastic_lib.sh"

run ref 4 -- && once ref
# one rank dies as step 10 starts: the job ends at 3 ranks
if run kill1 4 -- --kill-at 2:10; then
    same kill1; once kill1; event kill1 shrink
    says kill1 "rank 2 killed by signal SIGKILL"
    says kill1 "elastic: step 10: rank(s) 2 of 4 gone"
fi
# the restarted rank joins at the next step; the job ends at 4 ranks.
# Rank 0 sleeps 20 ms a step (the losses are the same): on an idle
# machine the survivors' 24 steps left took less time than a restarted
# process takes to start, and the job ended before it could join.
if run restart 4 --restarts 1 -- --kill-at 1:8 --straggle 0:20; then
    same restart; once restart; event restart shrink; event restart grow
    says restart "joined as rank 3..3; parameters bit-identical on every rank"
fi
# ZeRO-2: rank 0's shards come back from their copy on rank 1
if run z2 4 -- --zero 2 --kill-at 0:10; then
    same z2; once z2
    says z2 "rank(s) 0 of 4 gone"
fi
if [ "$scale" -lt 10 ]; then
    # ZeRO-1, a middle rank; ZeRO-3, the last rank (its copy on rank 0), and
    # the restart that joins the sharded state
    if run z1 4 -- --zero 1 --kill-at 2:10; then same z1; once z1; fi
    if run z3 4 --restarts 1 -- --zero 3 --kill-at 3:10 --straggle 0:20; then
        same z3; once z3
        says z3 "joined as rank 3..3; parameters bit-identical on every rank"
    fi
    # ZeRO-3, two ranks that are not neighbours, the second during recovery
    if run z3two 4 -- --zero 3 --kill-at 1:6,3:6:recover; then
        same z3two; once z3two
        says z3two "rank(s) 1 3 of 4 gone"
    fi
    # two neighbours at once take both copies of a shard: a clear stop
    if WEFT_TIMEOUT=20 timeout -s KILL 120 "$B/weftrun" --elastic 2:4 -n 4 "$B/weft-train" \
        $common --zero 2 --kill-at 1:6,2:6:recover >"$dir/lost.out" 2>&1; then
        bad "lost: two neighbours died with ZeRO-2 and the job finished"
    else
        ok; says lost "two neighbouring ranks died together"
    fi
    # rank 0 dies: rank 1 becomes rank 0, reports and appends to the CSV
    if run kill0 4 -- --kill-at 0:12; then
        same kill0; once kill0; event kill0 shrink
        says kill0 "rank(s) 0 of 4 gone"
    fi
    # two deaths in one run, at steps 6 and 15: the job ends at 2 ranks
    if run two 4 -- --kill-at 1:6,3:15; then
        same two; once two
        says two "elastic: step 15: rank(s) 2 of 3 gone"
    fi
    # a death during the recovery from another: both are gone at once
    if run during 4 -- --kill-at 1:6,2:6:recover; then
        same during; once during
        says during "rank(s) 1 2 of 4 gone"
    fi
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
