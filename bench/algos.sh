#!/bin/sh
# All-reduce (f32 sum, out-of-place) with every algorithm, and with auto, at
# each rank count and size: a table of the time per algorithm, what auto
# chose, and how far auto is from the fastest fixed algorithm measured.
# auto uses the cost model's constants from WEFT_TUNE / WEFT_TUNE_FILE when
# set (bench/calibrate.sh prints them), else its defaults.
#
#   sh bench/algos.sh [-r "2 4 8"] [-b 8] [-e 16M] [-f 4] [-w 5] [-n 20]
#                     [-A "naive ring tree rd rabenseifner"]
# BUILD=dir picks the build directory [build]. One run per algorithm and
# rank count; on a shared machine repeat the script and compare.
set -e
B=${BUILD:-build}
RANKS="2 4 8" MIN=8 MAX=16M FACTOR=4 WARMUP=5 ITERS=20
ALGOS="naive ring tree rd rabenseifner"
while getopts "r:b:e:f:w:n:A:h" opt; do
    case $opt in
    r) RANKS=$OPTARG ;; b) MIN=$OPTARG ;; e) MAX=$OPTARG ;; f) FACTOR=$OPTARG ;;
    w) WARMUP=$OPTARG ;; n) ITERS=$OPTARG ;; A) ALGOS=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
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
# MIN, MIN*FACTOR, ... and MAX itself
LIST=$(awk -v lo="$(bytes "$MIN")" -v hi="$(bytes "$MAX")" -v f="$FACTOR" 'BEGIN {
    for (s = lo; s < hi; s = int(s * f)) printf "%d,", s; printf "%d\n", hi }')

for n in $RANKS; do
    for a in $ALGOS auto; do
        echo "algos: $n ranks, $a" >&2
        "$B/weftrun" -n "$n" "$B/weft-bench" allreduce -a "$a" -l "$LIST" -I 1 \
            -w "$WARMUP" -n "$ITERS" > "$out/$a.$n.txt" || echo "algos: $a at $n ranks failed" >&2
    done
done

echo "## all-reduce time (us) per algorithm, f32 sum, out-of-place"
echo
echo "\`sh bench/algos.sh -r \"$RANKS\" -b $MIN -e $MAX -f $FACTOR -w $WARMUP -n $ITERS\`" \
     "(WEFT_TUNE=${WEFT_TUNE:-unset}; load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
hdr="| ranks | size (B) |" sep="| ---: | ---: |"
for a in $ALGOS; do hdr="$hdr $a |"; sep="$sep ---: |"; done
echo "$hdr auto | auto chose | fastest | auto / fastest |"
echo "$sep ---: | --- | --- | ---: |"
for n in $RANKS; do
    for a in $ALGOS auto; do
        # size time [chosen]; a failed run leaves no rows
        sed 's/^\[[0-9]*\] //' "$out/$a.$n.txt" 2>/dev/null |
            awk -v a="$a" '$1 !~ /^#/ && NF >= 13 { print a, $1, $6, (NF >= 14 ? $14 : "-"), ($9 != 0 && $9 != "N/A") ? "wrong" : "" }'
    done > "$out/rows.$n"
    awk -v n="$n" -v algos="$ALGOS" '
        { t[$1, $2] = $3; if ($1 == "auto") chose[$2] = $4; if ($5 == "wrong") bad[$1, $2] = 1
          if (!($2 in seen)) { seen[$2] = 1; order[++ns] = $2 } }
        END {
            na = split(algos, A, " ")
            for (i = 1; i <= ns; i++) {
                s = order[i]; line = sprintf("| %d | %d |", n, s); best = ""; bt = 0
                for (j = 1; j <= na; j++) {
                    k = A[j] SUBSEP s
                    if (k in t) {
                        line = line sprintf(" %.1f%s |", t[k], (k in bad) ? " (wrong!)" : "")
                        if (best == "" || t[k] < bt) { best = A[j]; bt = t[k] }
                    } else line = line " - |"
                }
                k = "auto" SUBSEP s
                if (k in t)
                    line = line sprintf(" %.1f | %s | %s | %.2f |", t[k], chose[s], best, bt > 0 ? t[k] / bt : 0)
                else
                    line = line " - | - | " best " | - |"
                print line
            }
        }' "$out/rows.$n"
done
