#!/bin/bash
# weft against Open MPI, MPICH, Gloo and torch.distributed (gloo) on one
# host, in one run: installs the peers from Debian when run as root and they
# are missing, builds the peer programs (bench/peers/), runs them and
# weft-bench alternately (bench/peers/allreduce_vs_peers.sh: every program,
# every rank count, then the next repetition; medians), measures the
# host's memory-copy bandwidth (bench/peers/membw.c) and writes into
# docs/BENCHMARKS.md, between its "peers.sh" markers, the tables of times,
# busbw and peer/weft ratios, the latency lines, the memory bound and the
# issue's targets; and docs/peers_busbw.png, busbw vs size (gnuplot).
#
#   bash bench/peers.sh                  (2, 4, 8 ranks; 8 B .. 256 MiB; 3 runs)
#   bash bench/peers.sh -e 4M -R 1       (a quick run)
#
# Options (defaults in brackets):
#   -e BYTES    largest size [256M]       -r "N ..."  rank counts ["2 4 8"]
#   -f X        size factor [4]           -R N        repetitions, median [3]
#   -w N        warm-up calls [5]         -n N        timed calls [20]
#   -p "P ..."  peers [openmpi mpich gloo torch]
#   -t SECS     limit per program run [1800]
#   -D          leave docs/ alone: print the section only
#   -N          install nothing; skip peers that are missing
# BUILD=dir picks weft's build directory [build].
set -u

MAX=256M RANKS="2 4 8" FACTOR=4 REPS=3 WARMUP=5 ITERS=20 LIMIT=1800
PEERS="openmpi mpich gloo torch" DOCS=1 INSTALL=1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
B=${BUILD:-build}
ARGS=$(printf ' %q' "$@")

usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "e:r:f:R:w:n:p:t:DNh" opt; do
    case $opt in
    e) MAX=$OPTARG ;; r) RANKS=$OPTARG ;; f) FACTOR=$OPTARG ;; R) REPS=$OPTARG ;;
    w) WARMUP=$OPTARG ;; n) ITERS=$OPTARG ;; p) PEERS=$OPTARG ;; t) LIMIT=$OPTARG ;;
    D) DOCS=0 ;; N) INSTALL=0 ;; *) usage ;;
    esac
done
say() { echo "peers.sh: $*" >&2; }

work=$(mktemp -d /tmp/weft-peersh.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# ---- install ------------------------------------------------------------------
PKGS="openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev python3-torch gnuplot"
missing=""
for p in $PKGS; do
    [ "$p" = gnuplot ] && command -v gnuplot >/dev/null && continue # any flavour will do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$INSTALL" = 1 ] && [ "$(id -u)" -eq 0 ]; then
        say "installing$missing"
        apt-get update -q >"$work/apt.log" 2>&1
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >>"$work/apt.log" 2>&1 ||
            { tail -5 "$work/apt.log" >&2; say "install failed; going on with what is there"; }
    else
        say "missing:$missing (run as root to install them)"
    fi
fi

# ---- memory-copy bound ----------------------------------------------------------
cc -O2 -o "$work/membw" "$HERE/peers/membw.c" || exit 1
MEMBW=$("$work/membw" $((64 << 20)))
say "$MEMBW"
TRAFFIC=$(echo "$MEMBW" | sed -n 's/.*traffic \([0-9.]*\) GB\/s.*/\1/p')

# ---- the runs -----------------------------------------------------------------
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
# shellcheck disable=SC2086
BUILD=$B bash "$HERE/peers/allreduce_vs_peers.sh" -r "$RANKS" -b 8 -e "$MAX" -f "$FACTOR" \
    -R "$REPS" -w "$WARMUP" -n "$ITERS" -t "$LIMIT" -a auto -p "$PEERS" \
    $([ "$INSTALL" = 1 ] || echo -N) >"$work/table.md" || { say "the peer run failed"; exit 1; }
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
T1=$(date +%s)

# The table's rows as "ranks size weft_bw peer1_bw ..." (n/a as NaN), and
# the peers' names in its order.
TPEERS=$(grep -m1 '^| ranks |' "$work/table.md" | tr '|' '\n' | sed -n 's/^ *\([a-z0-9-]*\) busbw.*/\1/p' |
         grep -v '^weft$' | tr '\n' ' ')
awk -F'|' '/^\| [0-9]/ {
    gsub(/ /, "")
    line = $2 " " $3 " " ($5 == "n/a" ? "NaN" : $5)
    for (i = 7; i < NF; i += 3) line = line " " ($i == "n/a" ? "NaN" : $i)
    print line }' "$work/table.md" >"$work/rows"

# ---- the plot -------------------------------------------------------------------
PNG=docs/peers_busbw.png
plotted=0
if command -v gnuplot >/dev/null; then
    nr=$(echo $RANKS | wc -w)
    {
        echo "set terminal pngcairo size $((nr * 520)),420 font 'sans,9'"
        echo "set output '$work/plot.png'"
        echo "set multiplot layout 1,$nr title 'all-reduce f32 sum, in place, one host: busbw vs size (median of $REPS runs)'"
        echo "set logscale x 2; set format x '%.0b%B'; set xlabel 'size (bytes)'; set ylabel 'busbw (GB/s)'"
        echo "set key top left; set grid; set datafile missing 'NaN'"
        for n in $RANKS; do
            awk -v n="$n" '$1 == n { $1 = ""; print }' "$work/rows" >"$work/rows.$n"
            cmd="plot '$work/rows.$n' using 1:2 with linespoints lw 2 title 'weft'"
            i=3
            for p in $TPEERS; do
                cmd="$cmd, '' using 1:$i with linespoints title '$p'"
                i=$((i + 1))
            done
            echo "set title '$n ranks'"
            echo "$cmd"
        done
        echo "unset multiplot"
    } >"$work/plot.gp"
    if gnuplot "$work/plot.gp" 2>"$work/gnuplot.log"; then
        plotted=1
    else
        cat "$work/gnuplot.log" >&2
    fi
else
    say "no gnuplot: no plot"
fi

# ---- the targets ----------------------------------------------------------------
# busbw bound of an all-reduce of s bytes on p ranks of one host: it reads p*s
# and writes p*s bytes at least, at the measured traffic rate.
targets() {
    awk -v traffic="$TRAFFIC" -v peers="$TPEERS" '
    BEGIN { np = split(peers, P, " ") }
    { n = $1; s = $2; w[n, s] = $3; for (i = 1; i <= np; i++) bw[P[i], n, s] = $(3 + i); sizes[s] = 1 }
    END {
        p = 4; s = 67108864
        if ((p, s) in w) {
            bound = traffic * (p - 1) / (p * p)
            printf "- 64 MiB, 4 ranks: weft busbw %.3f GB/s = %.0f%% of the memory bound %.2f GB/s (target >= 50%%)", w[p, s], 100 * w[p, s] / bound, bound
            if (bw["openmpi", p, s] > 0) printf "; %.2fx Open MPI (%.3f GB/s; target >= 2x)", w[p, s] / bw["openmpi", p, s], bw["openmpi", p, s]
            print ""
        } else print "- 64 MiB at 4 ranks not measured in this run (-e below 64M or 4 not in -r)"
    }' "$work/rows"
    # 8-byte latency against Open MPI, from the latency lines
    grep '^Latency at 8 B' "$work/table.md" | sed -n 's/^Latency at 8 B, \([0-9]*\) ranks: weft \([0-9.]*\) us.*openmpi \([0-9.]*\) us.*/- 8 B at \1 ranks: weft \2 us, Open MPI \3 us (target: no worse)/p'
}

{
    echo "<!-- peers.sh begin: generated by bench/peers.sh, do not edit by hand -->"
    echo "## All-reduce on one host: weft (shared memory) against its peers"
    echo
    echo "Command: \`${BUILD:+BUILD=$BUILD }bash bench/peers.sh$ARGS\` ($(date -u '+%Y-%m-%d %H:%M UTC'), $((T1 - T0)) s;" \
         "load average $LOAD0 before, $LOAD1 after: the machine is shared, so times carry other jobs' load)."
    echo
    echo "Memory-copy bandwidth of this host (\`bench/peers/membw.c\`, one copier per core, 64 MiB):" \
         "${MEMBW#membw: }. An all-reduce of s bytes on p ranks reads and writes p*s bytes at least, so" \
         "its busbw cannot exceed traffic x (p-1)/p^2."
    echo
    echo "Targets (issue 5):"
    echo
    targets
    echo
    if [ $plotted = 1 ]; then
        echo "![busbw vs size](peers_busbw.png)"
        echo
    fi
    sed 's/^## all-reduce, f32 sum: weft vs peers/### Times, busbw and ratios (peer time \/ weft time: > 1, weft is faster)/' "$work/table.md"
    echo
    echo "<!-- peers.sh end -->"
} >"$work/section.md"

if [ "$DOCS" = 0 ]; then
    cat "$work/section.md"
    exit 0
fi
DOC=$ROOT/docs/BENCHMARKS.md
if grep -q '^<!-- peers.sh begin' "$DOC"; then
    awk -v f="$work/section.md" '
        /^<!-- peers.sh begin/ { while ((getline l < f) > 0) print l; skip = 1; next }
        /^<!-- peers.sh end/ { skip = 0; next }
        !skip { print }' "$DOC" >"$work/doc.md"
else
    { cat "$DOC"; echo; cat "$work/section.md"; } >"$work/doc.md"
fi
cp "$work/doc.md" "$DOC"
[ $plotted = 1 ] && cp "$work/plot.png" "$ROOT/$PNG"
if [ $plotted = 1 ]; then say "wrote $DOC and $ROOT/$PNG"; else say "wrote $DOC"; fi
