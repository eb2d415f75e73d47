# Shared by the weft-train shell tests (sourced, not run): counters, one
# job under weftrun with its metrics CSV, and the comparison of two runs.
# The sourcing script sets B (the build folder), dir (a scratch folder)
# and common (arguments every run takes).
passed=0; failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

run() { # name ranks args...: one job; its CSV is $dir/name.csv
    name=$1; n=$2; shift 2
    if [ "$n" = 1 ]; then
        "$B/weft-train" $common --metrics "$dir/$name.csv" "$@" >"$dir/$name.out" 2>&1
    else
        "$B/weftrun" -n "$n" "$B/weft-train" $common --metrics "$dir/$name.csv" "$@" \
            >"$dir/$name.out" 2>&1
    fi
    rc=$?
    [ $rc -eq 0 ] && { ok; return 0; }
    bad "weft-train $name ($n ranks: $*): exit $rc"; tail -n 20 "$dir/$name.out" | sed 's/^/    /'
    return 1
}

same() { # name ref: train losses and gradient norms of name match ref's, row by row
    if awk -F, -v name="$1" '
        FNR == 1 { next }
        NR == FNR { loss[$1] = $4; gn[$1] = $7; next }
        $3 != "train" { next }
        !($1 in loss) { print name ": step " $1 " missing in the reference"; bad = 1; next }
        { checked++
          d = $4 - loss[$1]; if (d < 0) d = -d
          if (d > 1e-5 * loss[$1] + 1e-6) { print name ": step " $1 " loss " $4 " vs " loss[$1]; bad = 1 }
          d = $7 - gn[$1]; if (d < 0) d = -d
          if (d > 1e-5 * gn[$1] + 1e-6) { print name ": step " $1 " grad norm " $7 " vs " gn[$1]; bad = 1 } }
        END { if (!checked) { print name ": no steps"; bad = 1 } exit bad }' "$dir/$2.csv" "$dir/$1.csv"; then
        ok
    else
        bad "$1: differs from $2"
    fi
}
