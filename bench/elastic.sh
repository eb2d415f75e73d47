#!/bin/sh
# Elastic training: 4 ranks train the MLP (784-512-512-10, SGD momentum,
# batch 256) for one epoch of the builtin images under
#   weftrun --elastic 2:4 -n 4 weft-train --elastic
# and this script kills one rank with kill -9 at a random moment of a
# random step (between 10% and 90% of an undisturbed run's training
# time), TRIALS times. Per trial:
# whether the job finished, at how many ranks, its test accuracy against
# an undisturbed run's, rank 0's recovery time (failure seen -> next step
# running, from its "elastic: step ..." line) and the time from the kill
# to the shrink row in the metrics CSV as this script sees it (polled
# every 20 ms; rows before it are written when the CSV's buffer fills). Then a --restarts 1 run (the replacement joins: the job
# ends at 4 ranks, parameters bit-identical), a run with two deaths, and
# one with a death during the recovery from another (weft-train's
# --kill-at test hook; the others are real kill -9s).
#
#   sh bench/elastic.sh                 (BUILD=build, TRIALS=20, ZERO=0)
# A trial whose job ends before its kill (the machine ran faster than for
# the undisturbed run) is run again, up to 3 times.
#   TRIALS=5 ZERO=2 TRAIN_SIZE=20000 sh bench/elastic.sh
B=${BUILD:-build}
TRIALS=${TRIALS:-20}
ZERO=${ZERO:-0}
TRAIN_SIZE=${TRAIN_SIZE:-60000}
[ -x "$B/weft-train" ] || make -s BUILD="$B" "$B/weft-train" "$B/weftrun"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args="--model mlp --data builtin --train-size $TRAIN_SIZE --batch 256 --elastic --zero $ZERO"
steps=$(( (TRAIN_SIZE + 255) / 256 ))

now() { date +%s.%N; }
acc() { sed -n 's/.*test: .*accuracy \([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
ranks() { sed -n 's/.*training took .* s on \([0-9]*\) ranks.*/\1/p' "$1" | tail -n 1; }
recov() { sed -n 's/.*elastic: step .* gone .*recovered in \([0-9.]*\) s.*/\1/p' "$1" | tr '\n' ' '; }

start() { # name weftrun-args...: the job in the background; $pid is weftrun's
    name=$1; shift
    rm -f "$dir/$name.csv"
    WEFT_TIMEOUT=20 "$B/weftrun" --elastic 2:4 "$@" -n 4 "$B/weft-train" $args \
        --metrics "$dir/$name.csv" --log-every 1000 >"$dir/$name.out" 2>&1 &
    pid=$!
}

alive() { # the job runs (a zombie weftrun is not reaped before wait)
    kill -0 $pid 2>/dev/null && [ -z "$(ps -o stat= -p $pid | grep Z)" ]
}

at_time() { # seconds: sleep that long unless the job ends first
    end=$(echo "$(now) + $1" | bc)
    while alive; do
        [ "$(echo "$(now) >= $end" | bc)" = 1 ] && return 0
        sleep 0.02
    done
    return 1
}

at_frac() { # f: wait until fraction f of the undisturbed run's training time has passed
    at_time "$(echo "$boot + $f * $train" | bc -l)"
}

kill_rank() { # name: kill -9 one of weftrun's ranks at random; prints seconds to the shrink row
    victims=$(ps -o pid= --ppid $pid)
    nv=$(echo $victims | wc -w)
    [ "$nv" -gt 0 ] || return 1 # the job ended first
    v=$(echo $victims | cut -d' ' -f$(( $(shuf -i 1-$nv -n 1) )))
    shown=$(grep -c ',shrink,' "$dir/$1.csv" 2>/dev/null)
    t0=$(now)
    kill -9 $v
    while alive; do
        n=$(grep -c ',shrink,' "$dir/$1.csv" 2>/dev/null)
        [ "${n:-0}" -gt "${shown:-0}" ] && break
        sleep 0.02
    done
    echo "$(now) - $t0" | bc
}

echo "# 4 ranks, mlp 784-512-512-10, builtin images ($TRAIN_SIZE, one epoch = $steps steps), batch 256, ZeRO $ZERO"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(now)
start ref
wait $pid
wall=$(echo "$(now) - $t0" | bc)
train=$(sed -n 's/.*training took \([0-9.]*\) s.*/\1/p' "$dir/ref.out")
boot=$(echo "$wall - $train" | bc) # start-up and the final evaluation: no step runs then
ref=$(acc "$dir/ref.out")
echo "undisturbed: accuracy $ref, $(ranks "$dir/ref.out") ranks"
[ -n "$ref" ] || { tail -n 20 "$dir/ref.out"; exit 1; }

printf '%-6s %6s %8s %6s %9s %9s %11s %14s\n' trial step status ranks accuracy delta recovery_s kill_to_row_s
fin=0; close=0; worst=0; rsum=0; rmax=0; rn=0
for i in $(seq 1 $TRIALS); do
    for try in 1 2 3; do # a job that ends before its kill is run again
        f=0.$(shuf -i 10-90 -n 1)
        start t$i
        at_frac
        seen=$(kill_rank t$i) && break
        wait $pid
    done
    wait $pid
    st=$?
    a=$(acc "$dir/t$i.out")
    r=$(recov "$dir/t$i.out")
    d=-
    [ -n "$a" ] && d=$(echo "$a - $ref" | bc -l | sed 's/^\./0./; s/^-\./-0./')
    [ $st = 0 ] && [ -n "$a" ] && fin=$((fin + 1))
    if [ -n "$a" ] && echo "$d" | awk '{ exit !($1 <= 0.005 && $1 >= -0.005) }'; then close=$((close + 1)); fi
    for x in $r; do
        rsum=$(echo "$rsum + $x" | bc -l); rn=$((rn + 1))
        rmax=$(echo "$x $rmax" | awk '{ print ($1 > $2) ? $1 : $2 }')
    done
    k=$(sed -n 's/.*elastic: step \([0-9]*\): rank.*gone.*/\1/p' "$dir/t$i.out" | head -n 1)
    printf '%-6s %6s %8s %6s %9s %9s %11s %14.3f\n' $i "${k:--}" "exit$st" "$(ranks "$dir/t$i.out" | grep . || echo -)" "${a:--}" "$d" "${r:--}" "$seen"
done
echo "finished: $fin/$TRIALS; accuracy within 0.5 points of undisturbed: $close/$TRIALS; rank 0's recovery: mean $(echo "scale=3; $rsum / ($rn + ($rn == 0))" | bc | sed 's/^\./0./') s, max $rmax s over $rn"

# a replacement joins
start restart --restarts 1
f=0.33; at_frac
kill_rank restart >/dev/null
wait $pid
echo "restarts 1: exit $?, ends at $(ranks "$dir/restart.out") ranks, accuracy $(acc "$dir/restart.out"); $(grep -o 'joined as rank .*parameters [^(]*' "$dir/restart.out" | head -n 1)"

# two deaths, at a third and two thirds of the epoch
start two
f=0.3; at_frac
kill_rank two >/dev/null
at_time "$(echo "0.4 * $train" | bc -l)"
kill_rank two >/dev/null
wait $pid
echo "two deaths: exit $?, ends at $(ranks "$dir/two.out") ranks, accuracy $(acc "$dir/two.out"); recoveries $(recov "$dir/two.out")s"

# a death during the recovery from another (weft-train's test hook)
rm -f "$dir/during.csv"
WEFT_TIMEOUT=20 "$B/weftrun" --elastic 2:4 -n 4 "$B/weft-train" $args --log-every 1000 \
    --kill-at 1:$((steps / 2)),3:$((steps / 2)):recover >"$dir/during.out" 2>&1
echo "a death during recovery: exit $?, ends at $(ranks "$dir/during.out") ranks, accuracy $(acc "$dir/during.out"); recoveries $(recov "$dir/during.out")s"
