#!/bin/sh
# Measures the cost model's constants on this machine with weft-bench and
# prints the WEFT_TUNE line to use (docs/TUNING.md):
#   alpha       2 ranks, 8-byte all-reduce by recursive doubling: one round
#   alpha_over  2x as many ranks as cores, 8-byte ring: 2(p-1) rounds
#   msg_over    same ranks, 8-byte naive: one round of p-1 messages
#   msg         (only with at least 3 cores) p = cores, 8-byte naive
#   beta        2 ranks, ring at 256 KiB and 2 MiB: the slope is beta + gamma/2
#               (the sizes where the algorithms' regimes meet; far larger
#               messages leave the caches and see a larger beta)
#   gamma       the reduction kernel (f32 sum, in place) on 16 MiB
# Each weft-bench run is repeated REPS times and the fastest kept, since a
# shared machine only ever adds time.
#
#   sh bench/calibrate.sh [-r REPS] [-o FILE]     (FILE: also write the line,
#                                                  for WEFT_TUNE_FILE)
set -e
B=${BUILD:-build}
REPS=3 OUTFILE=
while getopts "r:o:h" opt; do
    case $opt in
    r) REPS=$OPTARG ;; o) OUTFILE=$OPTARG ;; *) sed -n '2,15p' "$0" >&2; exit 2 ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CORES=$(nproc)

# fastest out-of-place time (seconds) of: ranks algo bytes iters
run() {
    best=
    for i in $(seq "$REPS"); do
        t=$(WEFT_TUNE= WEFT_TUNE_FILE= "$B/weftrun" -n "$1" "$B/weft-bench" allreduce -a "$2" \
                -l "$3" -I 1 -w 5 -n "$4" -c 0 |
            sed 's/^\[[0-9]*\] //' | awk '$1 !~ /^#/ && NF >= 13 { print $6 * 1e-6 }')
        best=$(awk -v a="$best" -v b="$t" 'BEGIN { print ((a == "" || b < a) ? b : a) }')
    done
    echo "$best"
}

alpha=$(run 2 rd 8 400)
echo "calibrate: 2 ranks, rd, 8 B: $alpha s per round" >&2
P=$((2 * CORES))
t=$(run $P ring 8 100)
alpha_over=$(awk -v t="$t" -v p=$P 'BEGIN { print t / (2 * (p - 1)) }')
echo "calibrate: $P ranks, ring, 8 B: $t s, $alpha_over s per round" >&2
t=$(run $P naive 8 100)
msg_over=$(awk -v t="$t" -v a="$alpha_over" -v p=$P 'BEGIN { m = (t - a) / (p - 2); print (m > 0 ? m : 0) }')
echo "calibrate: $P ranks, naive, 8 B: $t s, $msg_over s per further message" >&2
msg=
if [ "$CORES" -ge 3 ]; then
    t=$(run "$CORES" naive 8 200)
    msg=$(awk -v t="$t" -v a="$alpha" -v p="$CORES" 'BEGIN { m = (t - a) / (p - 2); print (m > 0 ? m : 0) }')
    echo "calibrate: $CORES ranks, naive, 8 B: $t s, $msg s per further message" >&2
fi

# gamma: the library's own kernel, seconds per byte reduced
cat > "$tmp/gamma.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "coll/reduce.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void)
{
    size_t n = 4u << 20; /* 16 MiB of f32 */
    float *a = malloc(n * 4), *b = malloc(n * 4);
    double best = 1e9;
    if (!a || !b) return 1;
    for (size_t i = 0; i < n; i++) { a[i] = (float)(i % 7); b[i] = 1.0f; }
    for (int rep = 0; rep < 20; rep++) {
        double t0 = now();
        reduce_apply(a, a, b, n, WEFT_F32, WEFT_SUM);
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("%g\n", best / (double)(n * 4));
    return 0;
}
C
cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc "$tmp/gamma.c" "$B/libweft.a" -lm -pthread \
    $(pkg-config --libs openblas 2>/dev/null) $(pkg-config --libs libcrypto 2>/dev/null) \
    -o "$tmp/gamma"
gamma=$("$tmp/gamma")
echo "calibrate: reduce kernel: $gamma s per byte" >&2

t1=$(run 2 ring 256K 50)
t2=$(run 2 ring 2M 20)
beta=$(awk -v a="$t1" -v b="$t2" -v g="$gamma" 'BEGIN {
    s = (b - a) / (1792 * 1024); x = s - g / 2; print (x > 1e-12 ? x : s) }')
echo "calibrate: 2 ranks, ring, 256 KiB $t1 s, 2 MiB $t2 s: beta $beta s per byte" >&2

line="alpha=$alpha,alpha_over=$alpha_over,msg_over=$msg_over,beta=$beta,gamma=$gamma,cores=$CORES"
[ -n "$msg" ] && line="$line,msg=$msg"
echo "calibrate: load average $(cut -d' ' -f1-3 /proc/loadavg) (a busy machine inflates alpha)" >&2
echo "WEFT_TUNE=\"$line\""
[ -n "$OUTFILE" ] && echo "$line" > "$OUTFILE"
exit 0
