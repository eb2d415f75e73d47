#!/bin/sh
# weft-cpn run and status with the local launcher (no root, no scheduler;
# the Slurm launcher is test_cpn_slurm.sh's): a plan of two parts, cluster
# a (2 ranks, 16 samples of 24, speed 1) and b (1 rank, 8, speed 0.5),
# diloco:4. The run ends with both parts done, b at half the steps; the
# secret is readable by its owner only; weft-cpn status reads the same
# table back. With --elastic and --kill-at b:STEP part b is ended mid-run,
# reported lost, and a (one rank there) finishes alone after dropping
# cluster 1; the re-plan gives a the whole batch, status shows it, and
# the run says when the survivor passed the outer step where it dropped b. Plans
# that are not plans are refused with the reason.
B=${BUILD:-build}
dir=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

plan() { # file steps shares-b extra-train-args [ranks-a]
    cat >"$1" <<EOF
{"schema": "weft-cpn-plan/1",
 "job": {"schema": "weft-cpn-job/1", "model": "mlp:784-64-10", "data": "builtin", "steps": $2,
         "global_batch": 24,
         "train_args": ["--train-size", "1024", "--no-eval", "--log-every", "10"$4]},
 "sync": {"mode": "diloco", "H": 4, "compress": "none"},
 "parts": [
  {"cluster": "a", "launcher": "local", "hosts": ["localhost"], "ranks": ${5:-2}, "batch": 16,
   "speed": 1.0},
  {"cluster": "b", "launcher": "local", "hosts": ["localhost"], "ranks": 1, "batch": $3,
   "speed": 0.5}],
 "predicted": {"step_s": 0.01, "total_s": 0.4}}
EOF
}

plan "$dir/plan.json" 40 8 ""
if timeout -s KILL 120 "$B/weft-cpn" run --plan "$dir/plan.json" --dir "$dir/run" \
    --train "$B/weft-train" >"$dir/run.out" 2>&1 &&
    grep -q "part a done (exit 0)" "$dir/run.out" && grep -q "part b done (exit 0)" "$dir/run.out"
then
    ok
else
    bad "weft-cpn run"; sed 's/^/    /' "$dir/run.out"; tail -n 20 "$dir/run"/part-*.out
fi
if [ "$(stat -c %a "$dir/run/secret" 2>/dev/null)" = 600 ]; then ok; else
    bad "the secret's mode: $(stat -c %a "$dir/run/secret" 2>&1)"
fi
"$B/weft-cpn" status --plan "$dir/plan.json" --dir "$dir/run" >"$dir/status.out" 2>&1
if grep -q "^a .*local .*done (exit 0) .* 40/40 " "$dir/status.out" &&
    grep -q "^b .*local .*0.50 done (exit 0) .* 20/20 " "$dir/status.out"; then
    ok
else
    bad "weft-cpn status: $(cat "$dir/status.out")"
fi

# long enough that the watcher (5 looks a second) sees step 20 before the
# end on an idle machine: 400 steps took 0.4 s there
steps=4000; [ "${TEST_SCALE:-1}" -ge 10 ] && steps=800
# a of one rank: the shrink leaves it alone, a job that nobody can join
plan "$dir/elastic.json" $steps 8 ', "--elastic"' 1
timeout -s KILL 120 "$B/weft-cpn" run --plan "$dir/elastic.json" --dir "$dir/el" \
    --train "$B/weft-train" --kill-at b:20 >"$dir/el.out" 2>&1
if grep -q "part b lost" "$dir/el.out" && grep -q "part a done (exit 0)" "$dir/el.out" &&
    grep -q "cluster 1 dropped" "$dir/el/part-a.out" &&
    grep -q "the re-plan runs from step [0-9]*, [0-9.]* s after part b was lost" "$dir/el.out"
then
    ok
else
    bad "a part lost under --elastic"; sed 's/^/    /' "$dir/el.out"; tail -n 20 "$dir/el/part-a.out"
fi
# the re-plan: a, the survivor, takes the whole batch; status shows it
"$B/weft-cpn" status --plan "$dir/elastic.json" --dir "$dir/el" >"$dir/elstatus.out" 2>&1
if grep -q "re-planned at step [0-9]* in [0-9.]* ms (part b lost)" "$dir/el.out" &&
    grep -q '^re-plan: .*"why": "part b lost".*"cluster": "a", "ranks": 1, "batch": 24' \
        "$dir/elstatus.out" && ! grep -q '"cluster": "b"' "$dir/el/replan.json"; then
    ok
else
    bad "the re-plan: $(grep re-plan "$dir/el.out") $(cat "$dir/el/replan.json" 2>&1)"
fi

refused() { # what file expected-text
    if "$B/weft-cpn" run --plan "$2" --dir "$dir/no" >"$dir/no.out" 2>&1; then
        bad "$1: taken"
    elif grep -q "$3" "$dir/no.out"; then
        ok
    else
        bad "$1: $(cat "$dir/no.out")"
    fi
}
plan "$dir/sum.json" 10 9 ""
refused "shares adding up to 25" "$dir/sum.json" "add up to 25, not the job's global_batch 24"
echo '{"schema": "weft-cpn-plan/1", "job": ' >"$dir/cut.json"
refused "a cut plan" "$dir/cut.json" "offset"
sed 's/"local", "hosts": \["localhost"\], "ranks": 1/"slurm", "hosts": ["bh1"], "ranks": 1/' \
    "$dir/plan.json" >"$dir/noconf.json"
refused "slurm without slurm_conf" "$dir/noconf.json" "needs \"slurm_conf\""
echo "summary: $passed passed, $failed failed"
[ $failed = 0 ]
