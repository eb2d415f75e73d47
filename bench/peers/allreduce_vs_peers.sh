#!/bin/bash
# All-reduce (f32 sum) of weft against its peers on this machine, in one run:
# Open MPI (shared memory, and forced onto TCP), MPICH, Gloo and PyTorch's
# torch.distributed with the gloo backend. Every program gets the same ranks,
# sizes, warm-up and iterations, and times its calls the way weft-bench does
# (warm-up, barrier, timed calls, mean per call, slowest rank). Prints a
# markdown table with the median of the repetitions and peer/weft time ratios.
#
#   bash bench/peers/allreduce_vs_peers.sh                 (2, 4, 8 ranks; 8 B .. 64M)
#   bash bench/peers/allreduce_vs_peers.sh -r "2 4" -e 1M -R 1
#
# Options (defaults in brackets):
#   -r "N ..."  rank counts ["2 4 8"]     -b BYTES  smallest size [8]
#   -e BYTES    largest size [64M]        -f X      size factor [4]
#   -w N        warm-up calls [5]         -n N      timed calls [20]
#   -R N        repetitions, median taken [3]
#   -p "P ..."  peers [openmpi openmpi-tcp mpich gloo torch]
#   -a ALGO     weft algorithm [ring]     -o COL    in-place or out-of-place [in-place]
#   -t SECS     limit per program run [1800]
#   -k DIR      keep the raw outputs in DIR
#   -N          install nothing; skip peers that are missing
# BUILD=dir picks weft's build directory [build]. Needs apt-get (as root or
# through sudo) for peers that are not installed yet.
set -u

RANKS="2 4 8" MIN=8 MAX=64M FACTOR=4 WARMUP=5 ITERS=20 REPS=3
PEERS="openmpi openmpi-tcp mpich gloo torch" ALGO=ring COLUMN=in-place LIMIT=1800
KEEP="" INSTALL=1
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ARGS=$(printf ' %q' "$@")

usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "r:b:e:f:w:n:R:p:a:o:t:k:Nh" opt; do
    case $opt in
    r) RANKS=$OPTARG ;; b) MIN=$OPTARG ;; e) MAX=$OPTARG ;; f) FACTOR=$OPTARG ;;
    w) WARMUP=$OPTARG ;; n) ITERS=$OPTARG ;; R) REPS=$OPTARG ;; p) PEERS=$OPTARG ;;
    a) ALGO=$OPTARG ;; o) COLUMN=$OPTARG ;; t) LIMIT=$OPTARG ;; k) KEEP=$OPTARG ;;
    N) INSTALL=0 ;; *) usage ;;
    esac
done
case $COLUMN in in-place|out-of-place) ;; *) usage ;; esac

say() { echo "peers: $*" >&2; }

# The exact settings of every program; the table header repeats them.
OMPI_FLAGS="--oversubscribe --allow-run-as-root --bind-to none --mca mpi_yield_when_idle 1 --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo"
OMPI_TCP_FLAGS="$OMPI_FLAGS --mca btl tcp,self"
MPICH_FLAGS="-iface lo"
MPICH_ENV="UCX_NET_DEVICES=lo"
TORCH_ENV="GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1"

work=$(mktemp -d /tmp/weft-peers.XXXXXX)
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null; done
    if [ -n "$KEEP" ] && [ -d "$work/raw" ]; then
        mkdir -p "$KEEP" && cp "$work"/raw/* "$KEEP"/ 2>/dev/null && say "raw outputs kept in $KEEP"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$work/raw"

# ---- install and build ------------------------------------------------------

have() {
    case $1 in
    openmpi|openmpi-tcp) command -v mpicc.openmpi && command -v mpirun.openmpi ;;
    mpich) command -v mpicc.mpich && command -v mpiexec.mpich ;;
    gloo) [ -f /usr/include/gloo/allreduce.h ] && command -v g++ ;;
    torch) /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' ;;
    *) return 1 ;;
    esac >/dev/null 2>&1
}
packages() {
    case $1 in
    openmpi|openmpi-tcp) echo openmpi-bin libopenmpi-dev ;;
    mpich) echo mpich libmpich-dev ;;
    gloo) echo libgloo-dev g++ ;;
    torch) echo python3-torch ;;
    esac
}

SKIPPED=""
skip() { say "skipping $1: $2"; SKIPPED="$SKIPPED $1 ($2);"; }

sudo_=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_="sudo -n"
updated=0
ready=""
for p in $PEERS; do
    if [ -n "$(packages "$p")" ] && ! have "$p" && [ "$INSTALL" = 1 ]; then
        if [ $updated = 0 ]; then
            say "apt-get update"
            $sudo_ apt-get update -q >"$work/apt.log" 2>&1 || say "apt-get update failed (see below); trying the install anyway"
            updated=1
        fi
        say "installing $(packages "$p")"
        # shellcheck disable=SC2046
        DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -q $(packages "$p") >>"$work/apt.log" 2>&1 ||
            tail -3 "$work/apt.log" >&2
    fi
    if [ -z "$(packages "$p")" ]; then
        skip "$p" "unknown peer (known: openmpi openmpi-tcp mpich gloo torch)"
    elif have "$p"; then
        ready="$ready $p"
    else
        skip "$p" "not installed: $(packages "$p")"
    fi
done

say "building weft in $B"
if ! make -s -C "$ROOT" -j2 BUILD="$B" "$B/weftrun" "$B/weft-bench" >"$work/make.log" 2>&1; then
    cat "$work/make.log" >&2
    say "cannot build weft"
    exit 1
fi
case $B in /*) WB=$B ;; *) WB=$ROOT/$B ;; esac

build_peer() {
    case $1 in
    openmpi|openmpi-tcp) [ -x "$work/mpi_openmpi" ] ||
        mpicc.openmpi -O2 -o "$work/mpi_openmpi" "$HERE/mpi_allreduce.c" ;;
    mpich) mpicc.mpich -O2 -o "$work/mpi_mpich" "$HERE/mpi_allreduce.c" ;;
    gloo) g++ -std=c++17 -O2 -o "$work/gloo_allreduce" "$HERE/gloo_allreduce.cc" -lgloo -pthread ;;
    torch) true ;;
    esac 2>"$work/cc.log"
}
PEERS=""
for p in $ready; do
    if build_peer "$p"; then PEERS="$PEERS $p"; else cat "$work/cc.log" >&2; skip "$p" "build failed"; fi
done

# ---- sizes --------------------------------------------------------------------

bytes() {
    awk -v s="$1" 'BEGIN { m = 1; u = tolower(substr(s, length(s)))
        if (u == "k") m = 1024; else if (u == "m") m = 1048576; else if (u == "g") m = 1073741824
        if (m > 1) s = substr(s, 1, length(s) - 1)
        printf "%d\n", s * m }'
}
MINB=$(bytes "$MIN") MAXB=$(bytes "$MAX")
# weft-bench's size sequence; the largest size gets a pass of its own when the
# factor steps over it, so every program is asked for exactly the same sizes.
SIZES=$(awk -v lo="$MINB" -v hi="$MAXB" -v f="$FACTOR" 'BEGIN {
    for (s = lo; s <= hi; ) { print s; n = int(s * f); s = (n == s) ? n + 1 : n } }')
PASSES="-b $MINB -e $MAXB -f $FACTOR"
# So do the largest size and 64 MiB (where bench/peers.sh checks its targets)
# when the factor steps over them.
for extra in "$MAXB" 67108864; do
    [ "$extra" -ge "$MINB" ] && [ "$extra" -le "$MAXB" ] || continue
    echo "$SIZES" | grep -qx "$extra" && continue
    PASSES="$PASSES|-b $extra -e $extra -f $FACTOR"
    SIZES=$(printf '%s\n%s\n' "$SIZES" "$extra" | sort -n)
done

# ---- running ------------------------------------------------------------------

# Start n copies of a program with RANK (and the size variable) set, as Gloo and
# torch.distributed expect; rank 0's output is the result.
spawn() {
    local n=$1 sizevar=$2 out=$3 r pids="" rc=0 p
    shift 3
    for ((r = 0; r < n; r++)); do
        if [ $r -eq 0 ]; then
            env RANK=$r "$sizevar=$n" timeout -k 5 "$LIMIT" "$@" >>"$out" 2>>"$out.err" &
        else
            env RANK=$r "$sizevar=$n" timeout -k 5 "$LIMIT" "$@" >/dev/null 2>>"$out.err" &
        fi
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || rc=$?; done
    return $rc
}

# run TOOL N OUT PASS: one launch of one program for one pass of sizes.
run() {
    local tool=$1 n=$2 out=$3 pass=$4 store
    local common="$pass -w $WARMUP -n $ITERS"
    case $tool in
    weft)
        # shellcheck disable=SC2086
        timeout -k 5 "$LIMIT" "$WB/weftrun" -n "$n" "$WB/weft-bench" allreduce $common -a "$ALGO" \
            >>"$out" 2>>"$out.err" ;;
    openmpi)
        # shellcheck disable=SC2086
        timeout -k 5 "$LIMIT" mpirun.openmpi $OMPI_FLAGS -np "$n" "$work/mpi_openmpi" $common \
            >>"$out" 2>>"$out.err" ;;
    openmpi-tcp)
        # shellcheck disable=SC2086
        timeout -k 5 "$LIMIT" mpirun.openmpi $OMPI_TCP_FLAGS -np "$n" "$work/mpi_openmpi" $common \
            >>"$out" 2>>"$out.err" ;;
    mpich)
        # shellcheck disable=SC2086
        timeout -k 5 "$LIMIT" env $MPICH_ENV mpiexec.mpich $MPICH_FLAGS -np "$n" "$work/mpi_mpich" \
            $common >>"$out" 2>>"$out.err" ;;
    gloo)
        store=$(mktemp -d "$work/store.XXXXXX")
        # shellcheck disable=SC2086
        GLOO_STORE=$store spawn "$n" SIZE "$out" "$work/gloo_allreduce" $common ;;
    torch)
        store=$(mktemp -d "$work/store.XXXXXX")
        # shellcheck disable=SC2086
        TORCH_STORE=$store/init GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \
            spawn "$n" WORLD_SIZE "$out" /usr/bin/python3 "$HERE/torch_allreduce.py" $common ;;
    esac
}

# Result rows, whatever printed them ("[0] " is weftrun's rank prefix):
#   tool ranks rep size time_out_of_place wrong time_in_place wrong
collect() {
    sed 's/^\[[0-9]*\] //' "$3" | awk -v t="$1" -v n="$2" -v rep="$4" \
        '$1 !~ /^#/ && NF >= 13 { print t, n, rep, $1, $6, $9, $10, $13 }' >>"$work/results"
    # what weft's auto ran (weft-bench's last column when it chooses)
    [ "$1" = weft ] && sed 's/^\[[0-9]*\] //' "$3" | awk -v n="$2" \
        '$1 !~ /^#/ && NF >= 14 { print n, $1, $NF }' >>"$work/algos"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
: >"$work/results"
: >"$work/algos"
: >"$work/failed"
for ((rep = 1; rep <= REPS; rep++)); do
    for n in $RANKS; do
        for tool in weft $PEERS; do
            out="$work/raw/$tool.n$n.rep$rep.txt"
            say "run $rep/$REPS, $n ranks: $tool"
            rc=0 t=$(date +%s)
            IFS='|'
            for pass in $PASSES; do
                unset IFS
                run "$tool" "$n" "$out" "$pass" || { rc=$?; break; }
            done
            unset IFS
            collect "$tool" "$n" "$out" "$rep"
            say "  $tool took $(($(date +%s) - t)) s"
            if [ $rc -ne 0 ]; then
                why="exit $rc"
                [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after ${LIMIT}s"
                say "$tool at $n ranks (run $rep): $why; last lines:"
                tail -5 "$out.err" >&2
                echo "$tool $n $rep $why" >>"$work/failed"
            fi
        done
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
T1=$(date +%s)

# ---- report -------------------------------------------------------------------

ver_ompi=$(mpirun.openmpi --version 2>/dev/null | head -1)
ver_mpich=$(mpichversion 2>/dev/null | awk -F'\t' '/Version|Device/ { printf "%s%s", s, $2; s = ", " }')
ver_gloo=$(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null)
ver_torch=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)

echo "## all-reduce, f32 sum: weft vs peers"
echo
echo "- command: \`${BUILD:+BUILD=$BUILD }bash bench/peers/allreduce_vs_peers.sh$ARGS\`"
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -sr), load average $LOAD0 before and $LOAD1 after, $((T1 - T0)) s"
echo "- sizes $MIN .. $MAX by x$FACTOR, warm-up $WARMUP, iterations $ITERS for every program;" \
     "median of $REPS run(s) per point; the $COLUMN column of each program"
echo "- time: mean per call of the slowest rank (us); busbw = size / time x 2(n-1)/n (GB/s);" \
     "ratio = peer time / weft time (> 1: weft is faster)"
echo "- weft: \`weftrun -n N weft-bench allreduce -a $ALGO\` (shared memory within the host$([ "${WEFT_SHM:-1}" = 0 ] && echo ": off, WEFT_SHM=0, TCP on 127.0.0.1"))"
for p in $PEERS; do
    case $p in
    openmpi) echo "- openmpi: \`mpirun.openmpi $OMPI_FLAGS -np N mpi_allreduce\` ($ver_ompi; default transport: shared memory, btl vader)" ;;
    openmpi-tcp) echo "- openmpi-tcp: \`mpirun.openmpi $OMPI_TCP_FLAGS -np N mpi_allreduce\` ($ver_ompi; TCP on lo, as weft)" ;;
    mpich) echo "- mpich: \`$MPICH_ENV mpiexec.mpich $MPICH_FLAGS -np N mpi_allreduce\` ($ver_mpich; shared memory within the host; polls while it waits)" ;;
    gloo) echo "- gloo: \`RANK=r SIZE=N GLOO_STORE=dir gloo_allreduce\` (libgloo $ver_gloo; gloo::allreduce, ring, TCP on 127.0.0.1, FileStore rendezvous)" ;;
    torch) echo "- torch: \`$TORCH_ENV RANK=r WORLD_SIZE=N /usr/bin/python3 torch_allreduce.py\` (torch $ver_torch, torch.distributed gloo backend, init_method file://, torch.set_num_threads(1))" ;;
    esac
done
[ -n "$SKIPPED" ] && echo "- skipped:$SKIPPED"
while read -r t n rep why; do
    echo "- $t at $n ranks, run $rep: $why (rows it printed before that are used)"
done <"$work/failed"
# auto's picks, per rank count: size:algorithm, with the runs that took it
if [ -s "$work/algos" ]; then
    sort -n -k1,1 -k2,2 "$work/algos" | uniq -c | awk '{ line[$2] = line[$2] sprintf(" %s:%s(x%d)", $3, $4, $1) }
        END { for (n in line) print "- weft at " n " ranks ran (size:algorithm, runs):" line[n] }' | sort -n -k4
fi
echo

col=5
[ "$COLUMN" = in-place ] && col=7
# The median time per (program, ranks, size), then the table and latency lines.
awk -v col=$col -v ranks="$RANKS" -v peers="weft $PEERS" -v sizes="$(echo "$SIZES" | tr '\n' ' ')" '
function median(k,   m, i, j, v, a) {
    m = cnt[k]
    for (i = 1; i <= m; i++) a[i] = val[k, i]
    for (i = 2; i <= m; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
function cell_t(p, n, s,   k) { k = p SUBSEP n SUBSEP s; return (k in med) ? sprintf("%.1f%s", med[k], bad[k] ? " (#wrong!)" : "") : "n/a" }
function cell_bw(p, n, s,   k) { k = p SUBSEP n SUBSEP s; return (k in med && med[k] > 0) ? sprintf("%.3f", s / med[k] / 1e3 * 2 * (n - 1) / n) : "n/a" }
function ratio(p, n, s,   k, w) { k = p SUBSEP n SUBSEP s; w = "weft" SUBSEP n SUBSEP s
    return (k in med && w in med && med[w] > 0) ? sprintf("%.2f", med[k] / med[w]) : "n/a" }
{
    k = $1 SUBSEP $2 SUBSEP $4
    val[k, ++cnt[k]] = $col
    if ($(col + 1) != 0) bad[k] = 1
}
END {
    for (k in cnt) med[k] = median(k)
    np = split(peers, P, " "); nr = split(ranks, R, " "); ns = split(sizes, S, " ")
    h = "| ranks | size (B) | weft time (us) | weft busbw (GB/s) |"; d = "| ---: | ---: | ---: | ---: |"
    for (i = 2; i <= np; i++) {
        h = h sprintf(" %s time (us) | %s busbw (GB/s) | %s/weft |", P[i], P[i], P[i])
        d = d " ---: | ---: | ---: |"
    }
    print h; print d
    for (a = 1; a <= nr; a++) for (b = 1; b <= ns; b++) {
        n = R[a]; s = S[b]
        line = sprintf("| %d | %d | %s | %s |", n, s, cell_t("weft", n, s), cell_bw("weft", n, s))
        for (i = 2; i <= np; i++)
            line = line sprintf(" %s | %s | %s |", cell_t(P[i], n, s), cell_bw(P[i], n, s), ratio(P[i], n, s))
        print line
    }
    print ""
    for (a = 1; a <= nr; a++) {
        n = R[a]; s = S[1]
        line = sprintf("Latency at %d B, %d ranks: weft %s us", s, n, cell_t("weft", n, s))
        for (i = 2; i <= np; i++)
            line = line sprintf("; %s %s", P[i], ratio(P[i], n, s) == "n/a" ? "n/a" : \
                                cell_t(P[i], n, s) " us (x" ratio(P[i], n, s) ")")
        print line "  "
    }
}' "$work/results"
