#!/bin/bash
# All-reduce (f32 sum, in place) over TCP between two emulated hosts: two
# network namespaces joined by one veth pair, optionally behind a token
# bucket. Compares weft-bench with Open MPI (bench/peers/mpi_allreduce.c,
# tcp transport) and holds both against a plain two-stream socket copy
# between the same namespaces (bench/peers/sockcopy.c, one stream each way
# at once, as a ring all-reduce on two ranks sends and receives at once).
# The copy also runs, for reference only, walking 64 MiB buffers instead of
# one 256 KiB buffer, and with 64 KiB socket buffers instead of the
# kernel's autotuned ones: the first is what a 64 MiB all-reduce's memory
# traffic costs a plain copy, the second how much faster the same link is
# when little is in flight.
# The programs take turns in every repetition; the table shows medians.
#
#   sudo bash bench/peers_tcp.sh                  (8 B .. 64M, 3 repetitions)
#   sudo bash bench/peers_tcp.sh -e 1M -R 1       (quick look)
#
# Options (defaults in brackets):
#   -b BYTES  smallest size [8]          -e BYTES  largest size [64M]
#   -f X      size factor [4]            -R N      repetitions, median taken [3]
#   -w N      warm-up calls [3]          -n N      timed calls [10]
#   -r "N .." rank counts, 2 and/or 4 [2 4]; 4 is two ranks per namespace
#   -L RATE   tc tbf limit on both veth ends, e.g. 1gbit [none]
#   -m MiB    bytes each way of the socket copy [512]
#   -a ALGO   weft algorithm [auto]      -t SECS   limit per program run [300]
#   -k DIR    keep the raw outputs in DIR
# With 4 ranks weft runs twice: with shared memory inside a namespace (its
# default) and with WEFT_SHM=0 (TCP between all ranks); Open MPI runs with
# "tcp,vader,self" and with "tcp,self" to match.
# Needs root, iproute2 and Open MPI (mpirun.openmpi, mpicc.openmpi).
# BUILD=dir picks weft's build directory [build].
set -u

MIN=8 MAX=64M FACTOR=4 REPS=3 WARMUP=3 ITERS=10 RANKS="2 4" RATE="" COPY_MIB=512
ALGO=auto LIMIT=300 KEEP=""
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
. "$HERE/netns_pair.sh"
ARGS=$(printf ' %q' "$@")

usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "b:e:f:R:w:n:r:L:m:a:t:k:h" opt; do
    case $opt in
    b) MIN=$OPTARG ;; e) MAX=$OPTARG ;; f) FACTOR=$OPTARG ;; R) REPS=$OPTARG ;;
    w) WARMUP=$OPTARG ;; n) ITERS=$OPTARG ;; r) RANKS=$OPTARG ;; L) RATE=$OPTARG ;;
    m) COPY_MIB=$OPTARG ;; a) ALGO=$OPTARG ;; t) LIMIT=$OPTARG ;; k) KEEP=$OPTARG ;;
    *) usage ;;
    esac
done

say() { echo "peers_tcp: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
command -v ip >/dev/null || die "needs iproute2"
command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null ||
    die "needs Open MPI (Debian: openmpi-bin libopenmpi-dev)"

# ---- the two hosts ----------------------------------------------------------

id=$$
NSA=weftA$id NSB=weftB$id
NET=10.78.$((id % 200 + 20))
IPA=$NET.1 IPB=$NET.2
work=$(mktemp -d /tmp/weft-peers-tcp.XXXXXX)
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    netns_pair_del
    if [ -n "$KEEP" ] && [ -d "$work/raw" ]; then
        mkdir -p "$KEEP" && cp "$work"/raw/* "$KEEP"/ 2>/dev/null && say "raw outputs kept in $KEEP"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$work/raw"

netns_shape() { # ns dev
    if [ -n "$RATE" ]; then
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 50ms ||
            die "cannot limit $2 to $RATE"
    fi
}
netns_pair_make
LINK="veth pair, MTU $(ip -n "$NSA" -o link show vA | sed 's/.* mtu \([0-9]*\).*/\1/'), ${RATE:-no tc limit}"
say "hosts $NSA ($IPA) and $NSB ($IPB): $LINK"

# ---- programs -----------------------------------------------------------------

say "building weft in $B"
make -s -C "$ROOT" -j2 BUILD="$B" "$B/weft-bench" >"$work/make.log" 2>&1 || {
    cat "$work/make.log" >&2; die "cannot build weft"; }
case $B in /*) WB=$B ;; *) WB=$ROOT/$B ;; esac
mkdir -p "$WB"
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -pthread -o "$WB/sockcopy" "$HERE/peers/sockcopy.c" ||
    die "cannot build sockcopy"
mpicc.openmpi -O2 -o "$WB/mpi_allreduce" "$HERE/peers/mpi_allreduce.c" ||
    die "cannot build mpi_allreduce"

bytes() {
    awk -v s="$1" 'BEGIN { m = 1; u = tolower(substr(s, length(s)))
        if (u == "k") m = 1024; else if (u == "m") m = 1048576; else if (u == "g") m = 1073741824
        if (m > 1) s = substr(s, 1, length(s) - 1)
        printf "%d\n", s * m }'
}
MINB=$(bytes "$MIN") MAXB=$(bytes "$MAX")
# weft-bench's size sequence, plus the largest size when the factor steps over it
SIZES=$(awk -v lo="$MINB" -v hi="$MAXB" -v f="$FACTOR" 'BEGIN { last = 0
    for (s = lo; s <= hi; ) { print s; last = s; n = int(s * f); s = (n == s) ? n + 1 : n }
    if (last != hi) print hi }')
LIST=$(echo $SIZES | tr ' ' ,)
LASTSTEP=$(awk -v lo="$MINB" -v hi="$MAXB" -v f="$FACTOR" 'BEGIN { last = 0
    for (s = lo; s <= hi; ) { last = s; n = int(s * f); s = (n == s) ? n + 1 : n } print last }')

OMPI_FLAGS="--allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca plm_rsh_agent $HERE/peers/nsagent.sh --mca oob_tcp_if_include $NET.0/24 --mca btl_tcp_if_include $NET.0/24"
SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# below the ephemeral range (32768 up), where the ranks' own outgoing
# connections could already hold the port a store wants to listen on
port=$((20000 + id % 10000))

# weft N SHM OUT: N ranks, half in each namespace; rank 0's output in OUT
run_weft() {
    local n=$1 shm=$2 out=$3 ppn=$(($1 / 2)) r ns dev pids="" ok=0 p
    port=$((port + 1))
    for r in $(seq 0 $((n - 1))); do
        if [ "$r" -lt "$ppn" ]; then ns=$NSA dev=vA; else ns=$NSB dev=vB; fi
        ip netns exec "$ns" env WEFT_RANK="$r" WEFT_WORLD_SIZE="$n" WEFT_LOCAL_RANK=$((r % ppn)) \
            WEFT_MASTER_ADDR="$IPA" WEFT_MASTER_PORT="$port" WEFT_SOCKET_IFNAME="$dev" \
            WEFT_HOST_ID="$ns" WEFT_JOB_SECRET="$SECRET" WEFT_SHM="$shm" WEFT_TIMEOUT=60 \
            timeout "$LIMIT" "$WB/weft-bench" allreduce -l "$LIST" -I 2 -a "$ALGO" \
            -w "$WARMUP" -n "$ITERS" -J "$out.json" >"$out.$r" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || ok=1; done
    # size, time (us), busbw (GB/s) of the in-place columns, algorithm
    awk '!/^#/ && NF >= 13 { print $1, $10, $12, $14 }' "$out.0" >"$out"
    grep -q "Out of bounds values : 0 OK" "$out.0" || ok=1
    return $ok
}

# ompi N BTL OUT
run_ompi() {
    local n=$1 btl=$2 out=$3 ppn=$(($1 / 2)) ok=0
    : >"$out.raw"
    for pass in "-b $MINB -e $LASTSTEP -f $FACTOR" "-b $MAXB -e $MAXB"; do
        [ "$pass" = "-b $MAXB -e $MAXB" ] && [ "$LASTSTEP" = "$MAXB" ] && continue
        # shellcheck disable=SC2086
        NSAGENT_MAP="$IPA=$NSA $IPB=$NSB" timeout "$LIMIT" ip netns exec "$NSA" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$NSA" \
            mpirun.openmpi $OMPI_FLAGS --mca btl "$btl" -np "$n" --host "$IPA:$ppn,$IPB:$ppn" \
            "$WB/mpi_allreduce" $pass -w "$WARMUP" -n "$ITERS" >>"$out.raw" 2>&1 || ok=1
    done
    awk '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ { print $1, $10, $12 }' "$out.raw" >"$out"
    grep -q "FAILED" "$out.raw" && ok=1
    return $ok
}

# run_copy OUT [sockcopy options]
run_copy() {
    local out=$1
    shift
    port=$((port + 1))
    ip netns exec "$NSB" timeout "$LIMIT" "$WB/sockcopy" -s -p "$port" >"$out.srv" 2>&1 &
    local srv=$!
    ip netns exec "$NSA" timeout "$LIMIT" "$WB/sockcopy" -c "$IPB" -p "$port" -m "$COPY_MIB" "$@" >"$out" 2>&1
    local rc=$?
    wait $srv || rc=1
    return $rc
}

# ---- runs -------------------------------------------------------------------

CONFIGS=""
for n in $RANKS; do
    case $n in
    2) CONFIGS="$CONFIGS 2:1:tcp,self" ;;
    4) CONFIGS="$CONFIGS 4:1:tcp,vader,self 4:0:tcp,self" ;;
    *) die "rank counts are 2 or 4 (one or two per namespace), not $n" ;;
    esac
done

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$(date +%s)
failed=""
for rep in $(seq 1 "$REPS"); do
    say "repetition $rep/$REPS: socket copy"
    run_copy "$work/raw/copy.$rep" || failed="$failed copy.$rep"
    # the same copy walking 64 MiB buffers (an all-reduce of 64 MiB reads
    # and writes memory, not the cache), and with 64 KiB socket buffers
    # (little in flight, so the receiver copies packets still in the cache)
    run_copy "$work/raw/copybig.$rep" -B 64 || failed="$failed copybig.$rep"
    run_copy "$work/raw/copysmall.$rep" -S 64 || failed="$failed copysmall.$rep"
    for cfg in $CONFIGS; do
        n=${cfg%%:*} rest=${cfg#*:}
        shm=${rest%%:*} btl=${rest#*:}
        tag=$n.shm$shm
        # the first of the pair alternates with the repetition
        for prog in $( [ $((rep % 2)) = 1 ] && echo "weft ompi" || echo "ompi weft"); do
            say "repetition $rep/$REPS: $prog, $n ranks$( [ "$prog" = weft ] && echo ", WEFT_SHM=$shm" || echo ", btl $btl")"
            if [ "$prog" = weft ]; then
                run_weft "$n" "$shm" "$work/raw/weft.$tag.$rep" || failed="$failed weft.$tag.$rep"
            else
                run_ompi "$n" "$btl" "$work/raw/ompi.$tag.$rep" || failed="$failed ompi.$tag.$rep"
            fi
        done
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
secs=$(( $(date +%s) - t0 ))
[ -n "$failed" ] && say "failed runs (left out of the medians):$failed"

# ---- table --------------------------------------------------------------------

median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ok_file() { case " $failed " in *" ${1##*/} "*) return 1 ;; esac; [ -s "$1" ]; }

# copy_runs TAG: GB/s per direction of each good run of that copy
copy_runs() {
    local rep f
    for rep in $(seq 1 "$REPS"); do
        f=$work/raw/$1.$rep
        ok_file "$f" && printf ' %s' "$(sed -n 's/.*both \([0-9.]*\) GB\/s.*/\1/p' "$f")"
    done
}
copies=$(copy_runs copy)
COPY=$(echo $copies | tr ' ' '\n' | grep . | median)
copies_big=$(copy_runs copybig)
COPY_BIG=$(echo $copies_big | tr ' ' '\n' | grep . | median)
copies_small=$(copy_runs copysmall)
COPY_SMALL=$(echo $copies_small | tr ' ' '\n' | grep . | median)

# stat PROG TAG SIZE COLUMN: median over the repetitions
stat() {
    local rep f
    for rep in $(seq 1 "$REPS"); do
        f=$work/raw/$1.$2.$rep
        ok_file "$f" && awk -v s="$3" -v c="$4" '$1 == s { print $c }' "$f"
    done | median
}

table() {
    echo "Socket copy (two streams, one each way at once, $COPY_MIB MiB each way, 256 KiB writes): median **$COPY GB/s per direction** (runs:$copies)."
    echo "The socket bound in busbw is that figure at 2 ranks and 1.5 times it at 4 ranks (two hosts must each send n bytes to the other; busbw counts 2(p-1)/p n = 1.5 n)."
    echo "For reference, not the bound: the same copy walking 64 MiB buffers (-B 64) median $COPY_BIG GB/s (runs:$copies_big); with 64 KiB SO_SNDBUF/SO_RCVBUF (-S 64) median $COPY_SMALL GB/s (runs:$copies_small)."
    echo
    echo "| ranks | weft transport | Open MPI btl | size (B) | weft time (us) | weft busbw (GB/s) | Open MPI time (us) | Open MPI busbw (GB/s) | weft/Open MPI busbw | weft % of socket bound | weft algo |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for cfg in $CONFIGS; do
        n=${cfg%%:*} rest=${cfg#*:}
        shm=${rest%%:*} btl=${rest#*:}
        tag=$n.shm$shm
        wt="tcp"; [ "$n" = 4 ] && [ "$shm" = 1 ] && wt="shm in host + tcp"
        for s in $SIZES; do
            a=$(stat weft "$tag" "$s" 2) b=$(stat weft "$tag" "$s" 3)
            c=$(stat ompi "$tag" "$s" 2) d=$(stat ompi "$tag" "$s" 3)
            al=$(for rep in $(seq 1 "$REPS"); do awk -v s="$s" '$1 == s { print $4 }' "$work/raw/weft.$tag.$rep" 2>/dev/null; done | sort -u | tr '\n' / | sed 's,/$,,')
            # The socket bound in busbw: two ranks move n bytes each way per
            # call; two hosts of two ranks must also move n bytes each way
            # between them, and busbw counts 2(p-1)/p n = 1.5 n.
            awk -v n="$n" -v s="$s" -v wt="$wt" -v btl="$btl" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v cp="$COPY" -v al="${al:-?}" 'BEGIN {
                bound = cp * (n == 4 ? 1.5 : 1)
                # same bytes and ranks, so the busbw ratio is the inverse time ratio
                r = (a > 0 && c > 0) ? sprintf("%.2f", c / a) : "n/a"
                p = (bound > 0) ? sprintf("%.0f%%", 100 * b / bound) : "n/a"
                printf "| %d | %s | %s | %s | %.1f | %.3f | %.1f | %.3f | %s | %s | %s |\n", n, wt, btl, s, a, b, c, d, r, p, al }'
        done
    done
    echo
    for cfg in $CONFIGS; do
        n=${cfg%%:*} rest=${cfg#*:}
        shm=${rest%%:*} btl=${rest#*:}
        a=$(stat weft "$n.shm$shm" "$MAXB" 2) b=$(stat weft "$n.shm$shm" "$MAXB" 3) c=$(stat ompi "$n.shm$shm" "$MAXB" 2)
        awk -v n="$n" -v shm="$shm" -v btl="$btl" -v s="$MAXB" -v a="$a" -v b="$b" -v c="$c" -v cp="$COPY" 'BEGIN {
            bound = cp * (n == 4 ? 1.5 : 1)
            printf "At %d B, %d ranks%s vs btl %s: weft busbw %.3f GB/s = %.2fx Open MPI (target 2x: %s), %.0f%% of the socket bound (target 80%%: %s)  \n",
                s, n, (n == 2) ? "" : (shm ? " (weft with shm)" : " (WEFT_SHM=0)"), btl, b, c / a, (c / a >= 2) ? "met" : "not met", 100 * b / bound, (b >= 0.8 * bound) ? "met" : "not met" }'
    done
}
TABLE=$(table)
{
    echo "Command: \`sudo bash bench/peers_tcp.sh$ARGS\` (BUILD=$B)"
    echo
    echo "Run $DATE, $secs s; load average before $LOAD0, after $LOAD1 (2 cores, shared)."
    echo "Link: $LINK. weft-bench allreduce -a $ALGO -I 2 (in place; the last column is what it ran, over the repetitions), Open MPI $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}') mpi_allreduce (in-place column), both f32 sum, -w $WARMUP -n $ITERS, median of $REPS repetitions, programs alternating."
    echo "Open MPI: \`$OMPI_FLAGS\`; its HNP runs in the first namespace."
    [ -n "$failed" ] && echo "Failed runs, left out:$failed"
    echo
    echo "$TABLE"
} | tee "$work/table.md"
[ -n "$KEEP" ] && mkdir -p "$KEEP" && cp "$work/table.md" "$KEEP/"
[ -z "$failed" ]
