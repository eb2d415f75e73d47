#!/bin/sh
# weft-cpn run across two real Slurm clusters on this machine
# (tests/cpn/slurm_clusters.sh: one network namespace, munge and
# slurmctld + slurmd each, links held to 100 Mbit/s by tbf, 20 ms of delay
# from WEFT_WAN since the kernel has no netem). A plan written here puts a
# tiny GPT on both, DiLoCo with H = 4: cluster a (2 ranks, 12 samples of
# each batch of 16, speed 1: 6 a rank) and cluster b (1 rank, 4 samples,
# speed 0.5: a step as long as 8 at full speed, so 3 inner steps per outer
# step). weft-cpn run submits each part with
# sbatch to its cluster's slurmctld (its SLURM_CONF); the job ends, both
# parts exit 0, the loss falls, weft-cpn status shows both done. Then the
# same with --elastic (600 steps) and part b cancelled (scancel) mid-run: docs/CPN.md
# says cluster a goes on alone from the next outer step and finishes, and
# the status shows b failed; and b made slow (--straggle), whose re-planned
# shares the running job takes at an outer step. Needs root, Slurm and munge (Debian:
# slurmctld slurmd slurm-client munge); prints a skip otherwise. The
# daemons are started and stopped here.
# TEST_TIMEOUT(180)
B=${BUILD:-build}
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
skip() { echo "skip: $*"; echo "summary: 0 passed, 0 failed"; exit 0; }

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, tc, slurmd)"
for p in ip tc nsenter unshare munged slurmctld slurmd sbatch srun squeue scancel sinfo; do
    command -v $p >/dev/null 2>&1 || skip "needs $p (apt-get install slurmctld slurmd slurm-client munge)"
done
ip netns add wcprobe$$ 2>/dev/null && ip netns del wcprobe$$ || skip "cannot make network namespaces"

dir=$(mktemp -d)
here=$(cd "$(dirname "$0")/../cpn" && pwd)
cleanup() { sh "$here/slurm_clusters.sh" stop "$dir/sc" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"; }
trap cleanup EXIT INT TERM
if ! setsid sh "$here/slurm_clusters.sh" start "$dir/sc" 2 100mbit 20ms </dev/null >"$dir/start.out" 2>&1
then
    cat "$dir/start.out"
    bad "the two Slurm clusters did not start"
    echo "summary: $passed passed, $failed failed"
    exit 1
fi
. "$dir/sc/clusters.env"
if sh "$here/slurm_clusters.sh" check "$dir/sc" >"$dir/check.out" 2>&1; then ok; else
    bad "srun on each cluster: $(cat "$dir/check.out")"
fi

steps=40
[ "${TEST_SCALE:-1}" -ge 10 ] && steps=24
plan() { # file steps extra-train-args (a JSON list's inside)
    cat >"$1" <<EOF
{"schema": "weft-cpn-plan/1",
 "job": {"schema": "weft-cpn-job/1", "model": "gpt:vocab=256,ctx=16,layers=1,heads=2,dim=32",
         "data": "builtin", "steps": $2, "global_batch": 16, "seq": 16,
         "train_args": ["--no-eval", "--log-every", "4", "--train-size", "2048"$3]},
 "sync": {"mode": "diloco", "H": 4, "compress": "none"},
 "parts": [
  {"cluster": "a", "launcher": "slurm", "slurm_conf": "$a_CONF", "hosts": ["ah1"], "ranks": 2,
   "layout": {"tp": 1, "pp": 1, "dp": 2, "zero": 0, "schedule": "1f1b"}, "batch": 12, "speed": 1.0},
  {"cluster": "b", "launcher": "slurm", "slurm_conf": "$b_CONF", "hosts": ["bh1"], "ranks": 1,
   "layout": {"tp": 1, "pp": 1, "dp": 1, "zero": 0, "schedule": "1f1b"}, "batch": 4, "speed": 0.5}],
 "predicted": {"step_s": 0.05, "total_s": 2.0}}
EOF
}
cpnrun() { # name plan args...
    name=$1 p=$2
    shift 2
    timeout -s KILL 120 "$B/weft-cpn" run --plan "$p" --dir "$dir/$name" --host "$HOSTADDR" \
        --ifname eth0 --wan delay=20ms --timeout 100 --train "$B/weft-train" "$@" \
        >"$dir/$name.out" 2>&1
}
show() { sed 's/^/    /' "$dir/$1.out"; for f in "$dir/$1"/part-*.out; do echo "  $f:"; tail -n 15 "$f" | sed 's/^/    /'; done; }

plan "$dir/plan.json" $steps ""
if cpnrun whole "$dir/plan.json" && grep -q "part a done (exit 0)" "$dir/whole.out" &&
    grep -q "part b done (exit 0)" "$dir/whole.out"; then
    ok
else
    bad "weft-cpn run over both clusters"; show whole
fi
# both parts went through sbatch, each to its own cluster
if grep -q "part a: 2 rank(s) from rank 0 via slurm (sbatch)" "$dir/whole.out" &&
    grep -q "part b: 1 rank(s) from rank 2 via slurm (sbatch)" "$dir/whole.out" &&
    grep -q "^done (exit 0) job [0-9]" "$dir/whole/part-b.state"; then
    ok
else
    bad "the parts' launch: $(grep 'part [ab]:' "$dir/whole.out")"
fi
if awk -F, '$3 == "train" { if (!n++) first = $4; last = $4 }
    END { exit !(n > 1 && last < 0.8 * first) }' "$dir/whole/metrics.csv" 2>/dev/null; then
    ok
else
    bad "the loss did not fall: $(awk -F, '$3 == "train" { printf "%s ", $4 }' "$dir/whole/metrics.csv" 2>/dev/null)"
fi
# the slow cluster took three quarters of the steps, 3 a period
"$B/weft-cpn" status --plan "$dir/plan.json" --dir "$dir/whole" >"$dir/status.out" 2>&1
if grep -q "^a .*done (exit 0) .* $steps/$steps " "$dir/status.out" &&
    grep -q "^b .*done (exit 0) .* $((steps * 3 / 4))/$((steps * 3 / 4)) " "$dir/status.out"; then
    ok
else
    bad "weft-cpn status: $(cat "$dir/status.out")"
fi

# a cluster lost: elastic DiLoCo drops it at the outer step, the other finishes
# long enough that the part is cancelled well before the end (progress is
# written twice a second)
plan "$dir/plan_el.json" 600 ', "--elastic"'
# (--speed-drift 0: the speed trigger, its own case below, re-planned this
# one once before the loss, with steps too short to measure apart)
cpnrun lost "$dir/plan_el.json" --kill-at b:8 --speed-drift 0
if grep -q "part b lost" "$dir/lost.out" && grep -q "part a done (exit 0)" "$dir/lost.out" &&
    grep -q "cluster 1 dropped" "$dir/lost/part-a.out"; then
    ok
else
    bad "part b cancelled mid-run"; show lost
fi
"$B/weft-cpn" status --plan "$dir/plan_el.json" --dir "$dir/lost" >"$dir/status_lost.out" 2>&1
if grep -q "^b .*failed" "$dir/status_lost.out" && grep -q "^a .*done (exit 0) .* 600/600 " \
    "$dir/status_lost.out"; then
    ok
else
    bad "weft-cpn status after the loss: $(cat "$dir/status_lost.out")"
fi

# the speed trigger through Slurm: b's rank (rank 2) sleeps 50 ms a step
# (--straggle, the same math), far slower than the plan says against a;
# weft-cpn run re-plans the shares by the measured rates (b's falls) and
# the running job takes them at an outer-step boundary, every rank at the
# same step (each says its own), the outer step weighing each by its
# samples. 100 steps of b take 5 s at least, whatever the machine.
plan "$dir/plan_sp.json" 100 ', "--elastic", "--straggle", "2:50"'
cpnrun speed "$dir/plan_sp.json"
line() { sed -n "s/.*elastic: rank $1: batch shares re-planned [0-9]* time(s) while running, \(.*\); outer weight .*/\1/p" "$dir/speed/part-$2.out"; }
r0=$(line 0 a) r1=$(line 1 a) r2=$(line 2 b)
G=$(sed -n 's/^\([0-9]*\) [0-9]*,[0-9]*$/\1/p' "$dir/speed/progress.shares")
sa=$(sed -n 's/^[0-9]* \([0-9]*\),[0-9]*$/\1/p' "$dir/speed/progress.shares")
sb=$(sed -n 's/^[0-9]* [0-9]*,\([0-9]*\)$/\1/p' "$dir/speed/progress.shares")
from=$(sed -n "s/.*elastic: step \([0-9]*\): batch shares by cluster $sa,$sb from here on (re-plan $G, the same clusters).*/\1/p" "$dir/speed/part-a.out")
if grep -q "re-planned at step [0-9]* in .*(the parts' speeds measured [0-9.]*x apart against the plan's: part b the slowest)" "$dir/speed.out" &&
    [ -n "$sb" ] && [ "$sb" -lt 4 ] && [ $((sa + sb)) = 16 ] && [ -n "$from" ] && [ $((from % 4)) = 0 ] &&
    [ "$r0" = "the last from step $from (re-plan $G): 0:$sa,1:$sb" ] &&
    [ "$r1" = "$r0" ] && [ "$r2" = "$r0" ] && grep -q "part b done (exit 0)" "$dir/speed.out" &&
    grep -q "parameters bit-identical on every rank of 3" "$dir/speed/part-a.out"; then
    ok
    echo "    speed: shares 12,4 to $sa,$sb from step $from (re-plan $G)"
else
    bad "a part slower than planned, through Slurm (shares '$sa,$sb', from '$from'; ranks '$r0' '$r1' '$r2')"; show speed
fi
cat "$dir/status.out" "$dir/status_lost.out"
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
