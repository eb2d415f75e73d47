#!/bin/sh
# Does auto pick well? All-reduce (f32 sum, out of place) with every fixed
# algorithm and with auto, at each rank count (one host) and size; the
# programs alternate, each is run REPS times and the median kept. Prints per
# rank count a table of median times (us), auto's pick, the best fixed
# algorithm and auto/best, marks with '*' the points where auto is more than
# TOL times the best, and a summary line
#   auto within 10% of best at N of M points
# A size at which an algorithm fails (e.g. "not supported") is left out
# ('-'); hier is the ring on one host and is not run.
# auto uses the constants of WEFT_TUNE / WEFT_TUNE_FILE when set (weft-tune
# writes them), else the library's defaults.
#
#   sh bench/auto_vs_best.sh [-r "2 4 8"] [-b 8] [-e 64M] [-f 4] [-l LIST]
#                            [-R REPS] [-A "naive ring ..."] [-T 1.10] [-q]
#   -l LIST  sizes instead of -b/-e/-f, e.g. 8,64K,4M;  -R REPS (3)
#   -q       quick: 2 and 8 ranks, 8 B, 8 KiB, 512 KiB, 8 MiB, one rep
# BUILD=dir picks the build directory [build]. Iterations per call size:
# up to 64 KiB 5 warm-up + 50 timed, up to 1 MiB 2 + 10, up to 8 MiB
# 1 + 4, above 1 + 2 (so that 64 MiB naive at 8 ranks stays affordable).
set -e
B=${BUILD:-build}
RANKS="2 4 8" MIN=8 MAX=64M FACTOR=4 LIST= REPS=3 TOL=1.10
ALGOS="naive ring tree rd rabenseifner direct flat"
while getopts "r:b:e:f:l:R:A:T:qh" opt; do
    case $opt in
    r) RANKS=$OPTARG ;; b) MIN=$OPTARG ;; e) MAX=$OPTARG ;; f) FACTOR=$OPTARG ;;
    l) LIST=$OPTARG ;; R) REPS=$OPTARG ;; A) ALGOS=$OPTARG ;; T) TOL=$OPTARG ;;
    q) RANKS="2 8" LIST=8,8K,512K,8M REPS=1 ;;
    *) sed -n '2,21p' "$0" >&2; exit 2 ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bytes() {
    awk -v s="$1" 'BEGIN { m = 1; u = tolower(substr(s, length(s)))
        if (u == "k") m = 1024; else if (u == "m") m = 1048576; else if (u == "g") m = 1073741824
        if (m > 1) s = substr(s, 1, length(s) - 1)
        printf "%d\n", s * m }'
}
if [ -n "$LIST" ]; then
    SIZES=$(echo "$LIST" | tr ',' '\n' | while read -r s; do bytes "$s"; done | tr '\n' ' ')
else # MIN, MIN*FACTOR, ... and MAX itself
    SIZES=$(awk -v lo="$(bytes "$MIN")" -v hi="$(bytes "$MAX")" -v f="$FACTOR" 'BEGIN {
        for (s = lo; s < hi; s = int(s * f)) printf "%d ", s; printf "%d\n", hi }')
fi
# size tiers: "lo hi warm-up iterations"
tiers() {
    printf '%s\n' "0 65536 5 50" "65537 1048576 2 10" "1048577 8388608 1 4" \
        "8388609 1099511627776 1 2"
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "# auto_vs_best: all-reduce f32 sum, ranks: $RANKS, reps: $REPS, load average $(load)"
echo "# constants: WEFT_TUNE='${WEFT_TUNE:-}' WEFT_TUNE_FILE='${WEFT_TUNE_FILE:-}'" \
    "WEFT_SHM='${WEFT_SHM:-}'"
# run ALGO on N ranks at the sizes LIST (comma-separated) with W warm-up and
# IT timed calls, appending "algo rep size us picked" to $out/t.N. When the
# run fails (flat, say, refuses messages above its board slot) each size
# it did not report is run alone (a rank killed after another failed may
# not have flushed its last lines), and a size that fails alone is written
# to $out/failed.N as "algo size" and not tried again.
run1() {
    "$B/weftrun" --no-prefix --timeout 300 -n "$2" "$B/weft-bench" allreduce \
        -a "$1" -l "$3" -I 1 -c 0 -w "$4" -n "$5" >"$out/run" 2>"$out/err"
    st=$?
    awk -v a="$1" -v rep="$6" '$1 !~ /^#/ && NF >= 13 {
        print a, rep, $1, $6, (NF >= 14 ? $NF : "-") }' "$out/run" >>"$out/t.$2"
    return $st
}
bench() {
    run1 "$@" && return 0
    done_sizes=$(awk '$1 !~ /^#/ && NF >= 13 { print $1 }' "$out/run" | tr '\n' ' ')
    for s in $(echo "$3" | tr ',' ' '); do
        case " $done_sizes " in *" $s "*) continue ;; esac
        run1 "$1" "$2" "$s" "$4" "$5" "$6" && continue
        echo "auto_vs_best: $2 ranks: $1 at $s B failed, left out:" \
            "$(grep -v '^#' "$out/err" | grep -v '^weftrun' | head -1)" >&2
        echo "$1 $s" >>"$out/failed.$2"
    done
}

for n in $RANKS; do
    : > "$out/failed.$n"
    rep=1
    while [ "$rep" -le "$REPS" ]; do
        tiers | while read -r lo hi w it; do
            for a in $ALGOS auto; do
                list=$(for s in $SIZES; do
                    [ "$s" -ge "$lo" ] && [ "$s" -le "$hi" ] && ! grep -qx "$a $s" "$out/failed.$n" &&
                        printf "%s," "$s"; done; true)
                [ -n "$list" ] || continue
                echo "auto_vs_best: $n ranks, rep $rep, $a, ${list%,}" >&2
                bench "$a" "$n" "${list%,}" "$w" "$it" "$rep"
            done
        done
        rep=$((rep + 1))
    done
done

for n in $RANKS; do
    [ -s "$out/t.$n" ] || continue
    echo
    echo "## $n ranks (median of $REPS, us; load average now $(load))"
    awk -v algos="$ALGOS" -v tol="$TOL" -v n="$n" '
    function median(key,   i, j, m, x, v) {
        m = cnt[key]
        for (i = 1; i <= m; i++) v[i] = val[key, i]
        for (i = 2; i <= m; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
        return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    {
        key = $1 SUBSEP $3; val[key, ++cnt[key]] = $4
        if (!($3 in seen)) { seen[$3] = 1; sizes[++ns] = $3 }
        if ($1 == "auto" && index("/" pick[$3] "/", "/" $5 "/") == 0)
            pick[$3] = pick[$3] == "" ? $5 : pick[$3] "/" $5
    }
    END {
        na = split(algos, al, " ")
        printf "%10s", "bytes"
        for (i = 1; i <= na; i++) printf " %12s", al[i]
        printf " %12s %-14s %-12s %6s\n", "auto", "auto picked", "best", "ratio"
        for (s = 1; s <= ns; s++) {
            sz = sizes[s]; best = -1; bname = "-"
            printf "%10d", sz
            for (i = 1; i <= na; i++) {
                k = al[i] SUBSEP sz
                if (!(k in cnt)) { printf " %12s", "-"; continue }
                m = median(k); printf " %12.1f", m
                if (best < 0 || m < best) { best = m; bname = al[i] }
            }
            k = "auto" SUBSEP sz
            if (!(k in cnt) || best <= 0) { printf " %12s\n", "-"; continue }
            m = median(k); r = m / best; pts++
            if (r <= tol) ok++
            printf " %12.1f %-14s %-12s %6.2f%s\n", m, pick[sz], bname, r, (r > tol ? " *" : "")
        }
        printf "# %d ranks: auto within %d%% of best at %d of %d points\n", n,
            (tol - 1) * 100 + 0.5, ok, pts
        print pts, ok > "/dev/stderr"
    }' "$out/t.$n" 2>>"$out/summary"
done
awk -v tol="$TOL" '{ m += $1; n += $2 } END {
    printf "\nauto within %d%% of best at %d of %d points\n", (tol - 1) * 100 + 0.5, n, m }' \
    "$out/summary"
echo "# load average at the end: $(load)"
