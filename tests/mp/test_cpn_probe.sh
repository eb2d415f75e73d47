#!/bin/sh
# weft-cpn's resource and control layers on this host: probe at 2 ranks
# writes a cluster description whose measured peaks, all-reduce
# constants and step times of the job's model (--job) are > 0 and whose
# declared facts say so; a registry (weft-cpn
# serve, with a secret) takes two clusters' reports, measures the link
# between them, marks the one that stops heartbeating down after T
# seconds, refuses a client without the secret, and plan reads it. The
# link between the two goes through weft's WAN emulation (docs/WAN.md),
# whose delay and rate the figures must show.
B=${BUILD:-build}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
dir=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

# --- probe at 2 ranks, the job's model timed on each --------------------
cat >"$dir/job.json" <<'EOF'
{"schema": "weft-cpn-job/1", "model": "gpt:vocab=256,ctx=32,layers=2,heads=2,dim=32",
 "data": "builtin", "steps": 100, "global_batch": 8, "seq": 32, "qos": {"objective": "time"}}
EOF
if timeout -s KILL 120 "$B/weftrun" -n 2 "$B/weft-cpn" probe --name a --job "$dir/job.json" \
    --declare price_per_core_hour=0.04 --declare gco2_per_kwh=120 \
    --declare available_until=2099-01-01T00:00:00Z --out "$dir/a.json" >"$dir/probe.out" 2>&1
then ok; else bad "probe at 2 ranks"; sed 's/^/    /' "$dir/probe.out"; fi

if "$PY" - "$dir/a.json" <<'EOF' >"$dir/check.out" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
m = d["metrics"]
assert d["schema"] == "weft-cpn-cluster/1" and d["name"] == "a", d
assert d["hosts"] and all(h["cores"] >= 1 and h["mem_bytes"] > 0 for h in d["hosts"]), d["hosts"]
for k in ("peak_fp32_gflops_per_core", "allreduce_alpha_us", "allreduce_beta_gbps"):
    assert m[k]["value"] > 0 and m[k]["source"] == "measured", (k, m[k])
for k in ("price_per_core_hour", "gco2_per_kwh", "available_until"):
    assert m[k]["source"] == "declared", (k, m[k])
assert m["price_per_core_hour"]["value"] == 0.04
assert m["speed"]["value"] == 1 and m["speed"]["source"] == "nominal"
for k in ("train_sample_s", "train_update_s"):
    assert m[k]["value"] > 0 and m[k]["source"] == "measured", (k, m[k])
assert m["train_fixed_s"]["value"] >= 0
assert d["calibrated_for"] == {"model": "gpt:vocab=256,ctx=32,layers=2,heads=2,dim=32",
                               "seq": 32}, d["calibrated_for"]
s = d["score"]
assert all(0 < v <= 1 for v in s["L1"].values()) and 0 < s["L2"] <= 1, s
EOF
then ok; else bad "probe's JSON"; sed 's/^/    /' "$dir/check.out"; fi

if "$B/weft-cpn" probe --name x --declare colour=blue >"$dir/bad.out" 2>&1; then
    bad "an unknown declared fact accepted"
elif grep -q "colour=blue" "$dir/bad.out"; then ok
else bad "the refusal names the fact"; fi

# --- the registry -------------------------------------------------------
"$B/weft-cpn" probe --name b --no-allreduce --declare speed=0.5 --out "$dir/b.json" \
    >/dev/null 2>&1 || bad "probe alone"
"$B/weft-cpn" serve --listen 127.0.0.1:0 --secret s3 --down-after 1 --for 60 \
    >"$dir/serve.out" 2>&1 &
spid=$!
port=
for _ in $(seq 50); do
    port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$dir/serve.out")
    [ -n "$port" ] && break
    sleep 0.1
done
R=127.0.0.1:$port
# a keeps reporting; b reports 3 times then stops; their link is an
# emulated WAN (20 ms each way, 100 Mbit/s) that the measurement must see
timeout 60 env WEFT_WAN=delay=20ms,rate=100mbit "$B/weft-cpn" report --registry "$R" \
    --secret s3 --cluster "$dir/a.json" --every 0.2 --count 150 --link-seconds 0.1 >"$dir/ra.out" 2>&1 &
apid=$!
timeout 60 env WEFT_WAN=delay=20ms,rate=100mbit "$B/weft-cpn" report --registry "$R" \
    --secret s3 --cluster "$dir/b.json" --every 0.2 --count 3 --link-seconds 0.1 >"$dir/rb.out" 2>&1 &
bpid=$!
sleep 0.4
if "$B/weft-cpn" links --registry "$R" --secret s3 --refresh --wait 20 >"$dir/links.json" \
    2>"$dir/links.err" &&
    "$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "weft-cpn-links/1"
ab = [l for l in d["links"] if l["from"] == "a" and l["to"] == "b"]
assert ab and ab[0]["source"] == "measured", d
assert 0 < ab[0]["bandwidth_bps"] <= 1.2e8 and ab[0]["rtt_ms"] >= 38, ab
' "$dir/links.json" 2>>"$dir/links.err"
then ok; else bad "links"; sed 's/^/    /' "$dir/links.json" "$dir/links.err"; fi
wait "$bpid"
sleep 2.5
"$B/weft-cpn" clusters --registry "$R" --secret s3 >"$dir/clusters.out" 2>&1
if grep -q "^a  *up" "$dir/clusters.out" && grep -q "^b  *down" "$dir/clusters.out"; then ok
else bad "b down after its heartbeats stop, a up"; sed 's/^/    /' "$dir/clusters.out"; fi

if "$B/weft-cpn" clusters --registry "$R" --secret wrong >"$dir/nosecret.out" 2>&1; then
    bad "a client without the secret served"
else ok; fi

if "$B/weft-cpn" plan --registry "$R" --secret s3 --job "$dir/job.json" >"$dir/plan.json" \
    2>"$dir/plan.err" &&
    "$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "weft-cpn-plan/1"
assert [p["cluster"] for p in d["parts"]] == ["a"], d["parts"]   # b is down
assert sum(p["batch"] for p in d["parts"]) == 8 and d["predicted"]["total_s"] > 0
assert d["predicted"]["compute_from"] == "measured", d["predicted"]   # a timed the job
' "$dir/plan.json" 2>>"$dir/plan.err"
then ok; else bad "plan from the registry"; sed 's/^/    /' "$dir/plan.json" "$dir/plan.err"; fi

kill "$apid" 2>/dev/null
wait "$apid" 2>/dev/null
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
