#!/bin/sh
# Cluster churn: weft-train --elastic across 3 clusters of 2 ranks
# (weftrun --elastic --clusters 3, the WAN emulated) with DiLoCo, flat and
# hierarchical. Both ranks of cluster 1 SIGKILL themselves as step 8
# starts (--kill-at), in the middle of the second outer period (H = 6):
# the survivors find it at the outer step of step 11, drop the cluster and
# go on without restart. Each run must finish, report the cluster dropped
# there, end with bit-identical parameters on every rank (the hash rank 0
# prints after the last outer step) and lower the loss; with --restarts 2
# the cluster rejoins at a later outer-step boundary and the job ends with
# all 6 ranks bit-identical. hier drops a cluster that lost one of its
# ranks too (its survivor leaves as a failed rank, and both rejoin), and a
# death during the recovery is a part of it. Flat joiners whose state is
# held back two outer steps (a test hook) are admitted two periods after
# the grow, having replayed those outer steps. Streaming DiLoCo is refused
# with a clear message. Under sanitizers (TEST_SCALE >= 10) flat DiLoCo only.
B=${BUILD:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
scale=${TEST_SCALE:-1}
# rank 0 sleeps a little every step, so that the restarted ranks are
# waiting before the last boundary (a count of boundaries, not a timing)
common="--model mlp:784-64-10 --data builtin --train-size 2048 --batch 60 --steps 60
        --elastic --quiet --log-every 100 --straggle 0:$((scale >= 10 ? 100 : 25))"
export WEFT_WAN=delay=1ms
. "$(dirname "$0")/elastic_lib.sh"

crun() { # name weftrun-args -- weft-train args...: 6 ranks in 3 clusters
    name=$1; shift
    wr=""
    while [ "$1" != "--" ]; do wr="$wr $1"; shift; done
    shift
    if WEFT_TIMEOUT=20 timeout -s KILL 150 "$B/weftrun" --elastic 2:6 --clusters 3 $wr -n 6 \
        "$B/weft-train" $common --metrics "$dir/$name.csv" "$@" >"$dir/$name.out" 2>&1; then
        ok; return 0
    fi
    bad "weft-train $name ($wr $*)"; tail -n 30 "$dir/$name.out" | sed 's/^/    /'
    return 1
}

learns() { # name: rank 0's last train loss below 0.8 of its first
    if awk -F, '$3 == "train" { if (!n++) first = $4; last = $4 }
        END { exit !(n > 40 && last < 0.8 * first) }' "$dir/$1.csv"; then
        ok
    else
        bad "$1: the loss did not fall: $(awk -F, '$3 == "train" { printf "%s ", $4 }' "$dir/$1.csv")"
    fi
}

dropped() { # name: cluster 1 dropped at the outer step of step 11, the job at 4 ranks
    says "$1" "elastic: step 12: rank(s) 2 3 of 6 gone (.* at step 11); cluster 1 dropped; outer steps over 2 cluster(s); 4 ranks now"
    event "$1" shrink
}

at_boundary() { # name: every rejoin at a step that starts an outer period (H = 6)
    steps=$(sed -n 's/.*elastic: step \([0-9]*\): cluster .* rejoined.*/\1/p' "$dir/$1.out")
    if [ -n "$steps" ] && ! echo "$steps" | awk '$1 % 6 { bad = 1 } END { exit !bad }'; then
        ok
    else
        bad "$1: rejoined at step(s) '$steps', not at outer-step boundaries"
    fi
}

modes="diloco:6 hier:full/diloco:6"
[ "$scale" -ge 10 ] && modes="diloco:6"
for m in $modes; do
    n=$(echo "$m" | tr :/ __)
    if crun "$n" -- --sync "$m" --kill-at 2:8,3:8; then
        dropped "$n"; learns "$n"
        says "$n" "elastic: the end: parameters bit-identical on every rank of 4"
    fi
    if crun "${n}_rejoin" --restarts 2 -- --sync "$m" --kill-at 2:8,3:8; then
        dropped "${n}_rejoin"; learns "${n}_rejoin"; event "${n}_rejoin" grow
        # hier admits the cluster whole; flat DiLoCo may take its ranks one
        # boundary apart
        says "${n}_rejoin" "step [0-9]*: cluster 1 rejoined; [12] rank(s) joined as rank 4\.\.[45]; parameters bit-identical on every rank"
        at_boundary "${n}_rejoin"
        says "${n}_rejoin" "elastic: the end: parameters bit-identical on every rank of 6"
    fi
done

# A flat joiner whose state comes late: WEFT_TEST_JOIN_DELAY_OUTERS=2
# makes each joiner look at it only after two outer steps at weight 0 (a
# count, not a timing). The members go on without it: they admit the
# joiners two periods after the grow (the joiners' own line says the step
# of the state), not one; the joiners replayed both outer steps on the
# state and every rank ends bit-identical. 96 steps leave room for a
# restart slow to start on a loaded machine.
if WEFT_TEST_JOIN_DELAY_OUTERS=2 crun late --restarts 2 -- --sync diloco:6 --steps 96 \
    --kill-at 2:8,3:8; then
    adm=$(sed -n 's/.*elastic: step \([0-9]*\): cluster 1 rejoined; .*, 2 outer step(s) at weight 0 replayed on it;.*/\1/p' "$dir/late.out" | head -n 1)
    grew=$(sed -n 's/.*elastic: rank [45]: the state of step \([0-9]*\) taken after 2 outer step(s) at weight 0, which it replayed.*/\1/p' "$dir/late.out" | head -n 1)
    echo "    late state: grown in at step ${grew:-?}, admitted at step ${adm:-?} (2 outer steps replayed)"
    if [ -n "$adm" ] && [ -n "$grew" ] && [ $((adm - grew)) = 12 ]; then
        ok
    else
        bad "late: grown in at '$grew', admitted at '$adm': not two periods (H = 6) apart"
        tail -n 30 "$dir/late.out" | sed 's/^/    /'
    fi
    says late "elastic: the end: parameters bit-identical on every rank of 6"
fi

# hier keeps whole clusters: one rank of cluster 1 killed, its survivor
# (rank 2) leaves as a failure, the cluster is dropped all the same, and
# both are started again and rejoin as one cluster (the later one waited
# for, should they come to different boundaries)
if [ "$scale" -lt 10 ] && crun partial --restarts 2 -- --sync hier:full/diloco:6 --kill-at 3:8; then
    says partial "elastic: rank 2 leaves: its cluster 1 lost rank(s) (step 8, .*); exit status 75"
    says partial "elastic: step 12: rank(s) 3 of 6 gone (.* at step 11); cluster 1 dropped; outer steps over 2 cluster(s); 4 ranks now"
    says partial "cluster 1 rejoined; 2 rank(s) joined as rank 4\.\.5"
    at_boundary partial
    says partial "elastic: the end: parameters bit-identical on every rank of 6"
fi

# a death during the recovery (rank 4, of cluster 2, right after the
# survivors' agreement): both are dropped in one recovery
if [ "$scale" -lt 10 ] && crun during -- --sync diloco:6 --kill-at 2:8,3:8,4:11:recover; then
    says during "elastic: step 12: rank(s) 2 3 4 of 6 gone (.* at step 11); cluster 1 dropped; outer steps over 2 cluster(s); 3 ranks now"
    says during "elastic: the end: parameters bit-identical on every rank of 3"
fi

if "$B/weftrun" -n 2 "$B/weft-train" $common --sync streaming:6:3 >"$dir/stream.out" 2>&1; then
    bad "streaming: --elastic with streaming DiLoCo ran"
else
    ok; says stream "elastic with --sync streaming:6:3 is not supported"
fi
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
