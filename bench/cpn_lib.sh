# Shared by the bench/cpn*.sh scripts: the planner's view of
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

# The plan $dir/NAME.json run through weft-cpn run into $dir/NAME over the
# emulated link; prints its training seconds (metrics.csv), its wall
# seconds and its last evaluation loss. TAG names the script in a
# failure's message.
cpn_run() { # tag name
    t0=$(date +%s.%N)
    if ! "$B/weft-cpn" run --plan "$dir/$2.json" --dir "$dir/$2" --wan delay=20ms,rate=100mbit \
        --train "$B/weft-train" >"$dir/$2.out" 2>&1; then
        echo "$1: $2 failed:" >&2
        tail -n 20 "$dir/$2.out" "$dir/$2/part-a.out" >&2
        return 1
    fi
    t1=$(date +%s.%N)
    train=$(awk -F, '$3 == "train" { t = $9 } END { print t }' "$dir/$2/metrics.csv")
    evl=$(awk -F, '$3 != "train" && $3 != "split" && $4 != "" { l = $4 } END { print l }' \
        "$dir/$2/metrics.csv")
    echo "$train $(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }') $evl"
}
