# Shared by bench/cpn.sh and bench/cpn_quality.sh: the planner's view of
# two clusters on this machine, one core each, probed with the job (its
# model's forward, backward and update timed on one thread), speeds 1 and
# 0.5 declared, the link as WEFT_WAN's emulation makes it (100 Mbit/s,
# 40 ms round trip). Needs $B and $dir, and $dir/job.json written; leaves
# clusters.json, links.json and the plan in plan.json there. With
# PRICE_A and PRICE_B set, each cluster declares that price a core-hour.
cpn_two_clusters() {
    "$B/weft-cpn" probe --name p --job "$dir/job.json" --out "$dir/p.json" >/dev/null 2>&1 ||
        return 1
    cluster() { # name speed [price]
        /usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))
c["name"]=sys.argv[2]; c["hosts"]=[{"name": "localhost", "addr": "127.0.0.1", "cores": 1}]
c["metrics"]["speed"]={"value": float(sys.argv[3]), "source": "declared"}
if sys.argv[4]:
    c["metrics"]["price_per_core_hour"]={"value": float(sys.argv[4]), "source": "declared"}
c.pop("score", None); print(json.dumps(c))' "$dir/p.json" "$1" "$2" "$3"
    }
    echo "[$(cluster a 1 "${PRICE_A:-}"), $(cluster b 0.5 "${PRICE_B:-}")]" >"$dir/clusters.json"
    echo '{"schema": "weft-cpn-links/1", "links": [
  {"from": "a", "to": "b", "bandwidth_bps": 1e8, "rtt_ms": 40, "loss": 0},
  {"from": "b", "to": "a", "bandwidth_bps": 1e8, "rtt_ms": 40, "loss": 0}]}' >"$dir/links.json"
    "$B/weft-cpn" plan --clusters "$dir/clusters.json" --job "$dir/job.json" \
        --links "$dir/links.json" >"$dir/plan.json"
}
