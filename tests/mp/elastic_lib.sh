# The helpers of the weft-train --elastic tests (test_train_elastic*.sh):
# run a job under weftrun --elastic with $common, and check its losses
# against the undisturbed run ref, its sample trace, its output and its
# CSV. Sourced with B, dir and common set.
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

run() { # name ranks weftrun-args -- weft-train args...
    name=$1; n=$2; shift 2
    wr=""
    while [ "$1" != "--" ]; do wr="$wr $1"; shift; done
    shift
    rm -f "$dir/$name.ids".*
    if WEFT_TIMEOUT=20 timeout -s KILL 120 "$B/weftrun" --elastic "2:$n" $wr -n "$n" \
        "$B/weft-train" $common --metrics "$dir/$name.csv" --trace-samples "$dir/$name.ids" \
        "$@" >"$dir/$name.out" 2>&1; then
        ok; return 0
    fi
    bad "weft-train $name ($n ranks:$wr $*)"
    # the launcher's and the ranks' own words first: a failure's tail is
    # mostly flight recorders, which say where the others were, not why
    grep -a -v "flight recorder\|  [a-z_]*(count=" "$dir/$name.out" | grep -a -i \
        "weftrun\|elastic\|error\|joined\|timed out\|refused" | head -n 30 | sed 's/^/    /'
    echo "    ..."; tail -n 30 "$dir/$name.out" | sed 's/^/    /'
    return 1
}

same() { # name [ref]: train losses and test accuracy match the undisturbed run's (ref)
    if awk -F, -v name="$1" '
        FNR == 1 { next }
        NR == FNR { loss[$1 "," $3] = $4; acc[$1 "," $3] = $5; next }
        $3 == "train" { if (!(($1 ",train") in loss)) { print name ": step " $1 " not in ref"; bad = 1; next }
                        r = loss[$1 ",train"]; d = $4 - r; if (d < 0) d = -d; checked++
                        if (d > 1e-4 * (r < 0 ? -r : r) + 1e-5) { print name ": step " $1 ": " $4 " vs " r; bad = 1 } }
        $3 == "test" { d = $5 - acc[$1 ",test"]; if (d < 0) d = -d; tested = 1
                       if (d > 0.001) { print name ": test accuracy " $5 " vs " acc[$1 ",test"]; bad = 1 } }
        END { if (checked < 32 || !tested) { print name ": " checked " steps, test " tested; bad = 1 }
              exit bad }' "$dir/${2:-ref}.csv" "$dir/$1.csv"; then
        ok
    else
        bad "$1: losses differ from the undisturbed run"
    fi
}

once() { # name [samples]: every sample id of the epoch (2048) in exactly one committed step
    # lines "step id view": a step taken again (ZeRO 1-3 going back to it)
    # counts in its latest view only
    if cat "$dir/$1.ids".* | awk -v name="$1" -v all="${2:-2048}" '
        { step[NR] = $1; id[NR] = $2; view[NR] = $3; if (!($1 in last) || $3 > last[$1]) last[$1] = $3 }
        END { for (r = 1; r <= NR; r++) if (view[r] == last[step[r]]) { n[id[r]]++; if (id[r] < 0 || id[r] >= all) bad = 1 }
              for (i = 0; i < all; i++) if (n[i] != 1) { print name ": sample " i " seen " n[i] + 0 " times"; bad = 1; break }
              exit bad }'; then
        ok
    else
        bad "$1: not every sample seen once"
    fi
}

says() { # name text: the run's output has it
    if grep -q -- "$2" "$dir/$1.out"; then ok; else bad "$1: no \"$2\" in its output"; tail -n 20 "$dir/$1.out"; fi
}

event() { # name kind: the CSV has a row of that kind
    if grep -q "^[0-9]*,[0-9.]*,$2," "$dir/$1.csv"; then ok; else bad "$1: no $2 row in its CSV"; fi
}

