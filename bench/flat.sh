#!/bin/sh
# Small-message latency of the flat algorithm against the others: all-reduce
# (f32 sum, out-of-place) per size and barrier, at each rank count, every
# algorithm run once per repetition in turn (so load that comes and goes hits
# them alike), medians over the repetitions; what auto chose.
#
#   sh bench/flat.sh [-r "2 4 8"] [-l 8,64,512,2K,8K,16K,64K] [-R 3] [-w 100] [-n 2000]
#                    [-A "flat rd tree ring"]
# BUILD=dir picks the build directory [build]. flat runs only sizes a board
# slot holds (16 KiB); barrier compares flat, ring (dissemination), naive.
# -B: large all-reduce instead (flat's pipe): results checked (-c 1), no
# barrier, every size for flat; defaults -r 4 -l 1M,4M,16M,64M -w 2 -n 5
# -A "flat ring direct"; the table adds the median bus bandwidth.
set -e
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
RANKS="2 4 8" LIST=8,64,512,2K,8K,16K,64K REPS=3 WARMUP=100 ITERS=2000
ALGOS="flat rd tree ring"
BIG=0 CHECK=0
for a in "$@"; do [ "$a" = -B ] && BIG=1; done
[ $BIG = 1 ] && RANKS=4 LIST=1M,4M,16M,64M WARMUP=2 ITERS=5 ALGOS="flat ring direct" CHECK=1
while getopts "r:l:R:w:n:A:Bh" opt; do
    case $opt in
    B) ;;
    r) RANKS=$OPTARG ;; l) LIST=$OPTARG ;; R) REPS=$OPTARG ;; w) WARMUP=$OPTARG ;;
    n) ITERS=$OPTARG ;; A) ALGOS=$OPTARG ;; *) sed -n '2,12p' "$0" >&2; exit 2 ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
LIBS="-lpthread -lm $(pkg-config --libs openblas 2>/dev/null || true)"
pkg-config --exists openssl 2>/dev/null && LIBS="$LIBS $(pkg-config --libs openssl)"
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -I"$HERE/../include" "$HERE/barrier_lat.c" "$B/libweft.a" \
    $LIBS -o "$out/barrier_lat"
[ $BIG = 1 ] && FLATLIST=$LIST || FLATLIST=$(echo "$LIST" | tr ',' '\n' | awk '{ s = $1; m = 1; u = tolower(substr(s, length(s)))
    if (u == "k") { m = 1024; s = substr(s, 1, length(s) - 1) }
    if (s * m <= 16384) printf "%s%s", (n++ ? "," : ""), $1 }')
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPS"); do
    for n in $RANKS; do
        for a in $ALGOS auto; do
            l=$LIST
            [ "$a" = flat ] && l=$FLATLIST
            "$B/weftrun" -n "$n" "$B/weft-bench" allreduce -a "$a" -l "$l" -I 1 -w "$WARMUP" \
                -n "$ITERS" -c $CHECK 2>/dev/null | sed 's/^\[[0-9]*\] //' |
                awk -v n="$n" -v a="$a" '$1 !~ /^#/ && NF >= 13 {
                    if ($9 != 0 && $9 != -1) print "WRONG RESULTS:", n, a, $1 > "/dev/stderr"
                    print "allreduce", n, a, $1, $6, (NF >= 14 ? $14 : "-"), $8 }' >> "$out/raw"
        done
        [ $BIG = 1 ] && continue
        for a in flat ring naive auto; do
            "$B/weftrun" -n "$n" "$out/barrier_lat" "$a" "$ITERS" 2>/dev/null |
                sed 's/^\[[0-9]*\] //' | awk '{ print "barrier", $2, $3, 0, $4, "-" }' >> "$out/raw"
        done
    done
done
echo "\`BUILD=$B sh bench/flat.sh $([ $BIG = 1 ] && echo "-B ")-r \"$RANKS\" -l $LIST -R $REPS -w $WARMUP -n $ITERS -A \"$ALGOS\"\`"
echo "(load average $load0 before, $(cut -d' ' -f1-3 /proc/loadavg) after)"
echo
echo "| what | ranks | size (B) | algorithm | median (us) | runs (us) | auto chose | median busbw (GB/s) |"
echo "| --- | ---: | ---: | --- | ---: | --- | --- | ---: |"
sort -k1,1 -k2,2n -k4,4n -k3,3 -s "$out/raw" | awk '
    function flush() {
        if (key == "") return
        m = split(v, x, " "); for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
            if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
        med = m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
        m = split(bw, y, " "); for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
            if (y[j] + 0 < y[i] + 0) { t = y[i]; y[i] = y[j]; y[j] = t }
        bmed = m == 0 ? "-" : sprintf("%.3f", m % 2 ? y[(m + 1) / 2] : (y[m / 2] + y[m / 2 + 1]) / 2)
        split(key, k, SUBSEP)
        printf "| %s | %s | %s | %s | %.1f | %s | %s | %s |\n", k[1], k[2], k[4], k[3], med, v, ch, bmed
    }
    { kk = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4
      if (kk != key) { flush(); key = kk; v = ""; ch = ""; bw = "" }
      v = v (v == "" ? "" : " ") $5; if ($6 != "-") ch = ch (ch == "" ? "" : " ") $6
      if (NF >= 7) bw = bw (bw == "" ? "" : " ") $7 }
    END { flush() }'
