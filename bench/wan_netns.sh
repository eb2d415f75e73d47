#!/bin/bash
# All-reduce between two clusters over a kernel-shaped WAN: two network
# namespaces, one per cluster of two ranks (ranks 0-1 in A, 2-3 in B),
# joined by a veth pair whose both ends are limited by tc (tbf at RATE,
# netem for DELAY one way where the kernel has netem). Inside a namespace
# the ranks talk over shared memory as usual; every byte between the
# clusters crosses the one shaped link, shared by all pairs, as on a real
# WAN (unlike WEFT_WAN's per-connection emulation, docs/WAN.md).
# Five all-reduces (f32 sum, out of place) side by side: weft's flat ring
# over the 4 ranks, weft's all-reduce over clusters (-H), the same with a
# codec (-H -z CODEC), weft's auto (the cost model with the wan constants
# weft-tune measures over this link first: hier over clusters for large
# messages), and Open MPI's MPI_Allreduce (bench/peers/
# mpi_allreduce.c, btl tcp,vader,self, run across the namespaces as
# bench/peers_tcp.sh runs it). Prints one table: per size each one's time,
# Open MPI's time over each weft variant's, and the wan bytes per rank per
# call (weft's own count; at the large sizes also the kernel's veth count).
#
#   sudo bash bench/wan_netns.sh                      (100mbit, 50ms)
#   sudo bash bench/wan_netns.sh -L 1gbit -D 10ms -S 16M
#
# Options (defaults in brackets):
#   -L RATE   tbf rate on each veth end [100mbit]
#   -D TIME   one-way delay: netem delay, or without netem tbf's latency [50ms]
#   -s LIST   small sizes, one run each program [8,64,512,4K,32K,256K,2M]
#   -S LIST   large sizes, one run per size [16M,64M]
#   -w N -n N warm-up and timed calls at the small sizes [2 5]
#   -W N -N N warm-up and timed calls at the large sizes [1 3]
#   -z CODEC  codec of the third variant [int8]
#   -t SECS   limit per program run [300]        -k DIR  keep raw outputs
#   -u        no WEFT_WAN for weft: no wan byte count, and no pump thread
#             between weft and its wan sockets (the count costs a thread hop)
# Without netem (this machine's kernel has none) the link has no fixed
# delay: tbf's latency is only how long a packet may wait in its queue
# (the queue holds RATE x TIME plus the burst), so a loaded link adds up to
# TIME, an idle one nothing. The script says which it got.
# Needs root, iproute2, Open MPI (mpirun.openmpi, mpicc.openmpi).
# BUILD=dir picks weft's build directory [build].
set -u

RATE=100mbit DELAY=50ms SMALL=8,64,512,4K,32K,256K,2M LARGE=16M,64M
WS=2 NS=5 WL=1 NL=3 CODEC=int8 LIMIT=300 KEEP="" COUNT=delay=0us
B=${BUILD:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
. "$HERE/netns_pair.sh"
ARGS=$(printf ' %q' "$@")

usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "L:D:s:S:w:n:W:N:z:t:k:uh" opt; do
    case $opt in
    L) RATE=$OPTARG ;; D) DELAY=$OPTARG ;; s) SMALL=$OPTARG ;; S) LARGE=$OPTARG ;;
    w) WS=$OPTARG ;; n) NS=$OPTARG ;; W) WL=$OPTARG ;; N) NL=$OPTARG ;;
    z) CODEC=$OPTARG ;; t) LIMIT=$OPTARG ;; k) KEEP=$OPTARG ;; u) COUNT="" ;;
    *) usage ;;
    esac
done

say() { echo "wan_netns: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
HAVE_MPI=1
command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null || {
    HAVE_MPI=0; say "no Open MPI (Debian: openmpi-bin libopenmpi-dev): its column stays empty"; }

# ---- the two clusters ---------------------------------------------------------

id=$$
NSA=wnA$id NSB=wnB$id
NET=10.79.$((id % 200 + 20))
IPA=$NET.1 IPB=$NET.2
work=$(mktemp -d /tmp/weft-wan-netns.XXXXXX)
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    netns_pair_del
    if [ -n "$KEEP" ] && [ -d "$work/raw" ]; then
        mkdir -p "$KEEP" && cp -r "$work"/raw/. "$KEEP"/ 2>/dev/null && say "raw outputs kept in $KEEP"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$work/raw"

SHAPE=""
netns_shape() { # ns dev
    # tbf at the root limits the rate; netem under it delays what tbf lets
    # out. netem's queue must hold what the rate carries in the delay.
    tc -n "$1" qdisc add dev "$2" root handle 1: tbf rate "$RATE" burst 256kb latency "$DELAY" ||
        die "cannot limit $2 to $RATE"
    if tc -n "$1" qdisc add dev "$2" parent 1:1 handle 10: netem delay "$DELAY" limit 100000 2>"$work/netem.err"; then
        SHAPE="tbf rate $RATE burst 256kb + netem delay $DELAY, each direction"
    else
        SHAPE="tbf rate $RATE burst 256kb latency $DELAY, each direction; no netem in this kernel ($(head -1 "$work/netem.err")), so no fixed delay: tbf's latency only bounds the queue"
    fi
}
netns_pair_make
say "clusters $NSA ($IPA, ranks 0-1) and $NSB ($IPB, ranks 2-3): $SHAPE"
# the kernel's count of what crossed the link, both directions
veth_bytes() {
    echo $(( $(ip netns exec "$NSA" cat /sys/class/net/vA/statistics/tx_bytes) +
             $(ip netns exec "$NSB" cat /sys/class/net/vB/statistics/tx_bytes) ))
}
# packets tbf dropped on both ends so far: a queue too short for the
# streams' windows shows here, and TCP backs off on each drop
tbf_drops() {
    echo $(( $(tc -n "$NSA" -s qdisc show dev vA | awk '/dropped/ { gsub(",", ""); d += $7 } END { print d + 0 }') +
             $(tc -n "$NSB" -s qdisc show dev vB | awk '/dropped/ { gsub(",", ""); d += $7 } END { print d + 0 }') ))
}

# ---- programs -----------------------------------------------------------------

say "building weft in $B"
make -s -C "$ROOT" -j2 BUILD="$B" "$B/weft-bench" "$B/weft-tune" >"$work/make.log" 2>&1 || {
    cat "$work/make.log" >&2; die "cannot build weft"; }
case $B in /*) WB=$B ;; *) WB=$ROOT/$B ;; esac
if [ "$HAVE_MPI" = 1 ]; then
    mpicc.openmpi -O2 -o "$WB/mpi_allreduce" "$HERE/peers/mpi_allreduce.c" ||
        die "cannot build mpi_allreduce"
fi

OMPI_FLAGS="--allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca plm_rsh_agent $HERE/peers/nsagent.sh --mca oob_tcp_if_include $NET.0/24 --mca btl_tcp_if_include $NET.0/24 --mca btl tcp,vader,self"
SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# below the ephemeral range, where the ranks' own outgoing connections
# could already hold the port the store wants
port=$((20000 + id % 10000))

# weft OUT LIST WARM ITERS FLAGS..: rank 0's rows "size time wanbytes" in OUT.
# WEFT_WAN=delay=0us adds no delay and no rate (the kernel shapes the
# link); it is there for weft's count of the bytes sent to the other cluster
# (-u leaves it out).
run_weft() {
    local out=$1 list=$2 warm=$3 iters=$4
    shift 4
    run_ranks "$out" weft-bench allreduce -l "$list" -I 1 -c 1 -w "$warm" -n "$iters" "$@"
    awk '!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $NF }' "$out.0" >"$out"
    grep -q "Out of bounds values : 0 OK" "$out.0"
}

# run_ranks OUT PROG ARGS..: the 4 ranks of weft's PROG across the
# namespaces, rank r's output in OUT.r; EXTRA_ENV (VAR=VAL ...) for each.
run_ranks() {
    local out=$1 prog=$2 r ns dev pids="" ok=0 p
    shift 2
    port=$((port + 1))
    for r in 0 1 2 3; do
        if [ "$r" -lt 2 ]; then ns=$NSA dev=vA; else ns=$NSB dev=vB; fi
        ip netns exec "$ns" env WEFT_RANK="$r" WEFT_WORLD_SIZE=4 WEFT_LOCAL_RANK=$((r % 2)) \
            WEFT_CLUSTER=$((r / 2)) ${COUNT:+WEFT_WAN=$COUNT} \
            WEFT_MASTER_ADDR="$IPA" WEFT_MASTER_PORT="$port" WEFT_SOCKET_IFNAME="$dev" \
            WEFT_HOST_ID="$ns" WEFT_JOB_SECRET="$SECRET" WEFT_TIMEOUT=120 ${EXTRA_ENV:-} \
            timeout "$LIMIT" "$WB/$prog" "$@" >"$out.$r" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || ok=1; done
    return $ok
}

# ompi OUT MIN MAX FACTOR WARM ITERS: rows "size time" (out of place)
run_ompi() {
    local out=$1 ok=0
    [ "$HAVE_MPI" = 1 ] || return 1
    NSAGENT_MAP="$IPA=$NSA $IPB=$NSB" timeout "$LIMIT" ip netns exec "$NSA" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$NSA" \
        mpirun.openmpi $OMPI_FLAGS -np 4 --host "$IPA:2,$IPB:2" \
        "$WB/mpi_allreduce" -b "$2" -e "$3" -f "$4" -w "$5" -n "$6" -c 1 >"$out.raw" 2>&1 || ok=1
    awk '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ { print $1, $6 }' "$out.raw" >"$out"
    grep -q "FAILED" "$out.raw" && ok=1
    [ -s "$out" ] || ok=1
    return $ok
}

bytes() {
    awk -v s="$1" 'BEGIN { m = 1; u = tolower(substr(s, length(s)))
        if (u == "k") m = 1024; else if (u == "m") m = 1048576; else if (u == "g") m = 1073741824
        if (m > 1) s = substr(s, 1, length(s) - 1)
        printf "%d\n", s * m }'
}
SMALLB=$(for s in $(echo "$SMALL" | tr , ' '); do bytes "$s"; done)
LARGEB=$(for s in $(echo "$LARGE" | tr , ' '); do bytes "$s"; done)

# ---- runs -----------------------------------------------------------------------

VARIANTS=${VARIANTS:-flat hier hierz auto ompi} # VARIANTS="auto ompi" runs only those
flags() {
    case $1 in
    flat) echo "-a ring" ;; hier) echo "-H" ;; hierz) echo "-H -z $CODEC" ;; auto) echo "-a auto" ;;
    esac
}
# auto prices the link with what weft-tune measures on it (alpha_wan,
# beta_wan), the trial calls off (WEFT_AUTOTUNE=0: the model's choice, every call)
say "weft-tune across the link"
run_ranks "$work/raw/tune" weft-tune -t 6 || say "weft-tune failed (auto gets the defaults)"
TUNE=$(grep -o 'alpha_wan=[^,"]*,beta_wan=[^,"]*' "$work/raw/tune.0" | head -1)
say "wan constants: ${TUNE:-none measured}"
vflags() { [ "$1" = auto ] && echo "WEFT_AUTOTUNE=0 ${TUNE:+WEFT_TUNE=$TUNE}"; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$(date +%s)
failed=""
# small sizes: one run of each program; Open MPI's -b/-e/-f must list the
# same sizes, so it gets one run per size there too when they are not a
# geometric series
for v in $VARIANTS; do
    say "$v: sizes $SMALL"
    if [ "$v" = ompi ]; then
        : >"$work/raw/ompi.small"
        for s in $SMALLB; do
            run_ompi "$work/raw/ompi.s$s" "$s" "$s" 2 "$WS" "$NS" || failed="$failed ompi.$s"
            cat "$work/raw/ompi.s$s" >>"$work/raw/ompi.small"
        done
    else
        # shellcheck disable=SC2046
        EXTRA_ENV=$(vflags "$v") run_weft "$work/raw/$v.small" "$SMALL" "$WS" "$NS" $(flags "$v") || failed="$failed $v.small"
    fi
done
# large sizes: one run per size and program, so the kernel's veth count
# of the run (start-up aside) is that size's traffic
for s in $LARGEB; do
    for v in $VARIANTS; do
        say "$v: $s B"
        k0=$(veth_bytes) d0=$(tbf_drops)
        if [ "$v" = ompi ]; then
            run_ompi "$work/raw/ompi.l$s" "$s" "$s" 2 "$WL" "$NL" || failed="$failed ompi.$s"
            calls=$((2 * (WL + NL + 1)))   # out of place and in place, each + 1 checked call
        else
            # shellcheck disable=SC2046
            EXTRA_ENV=$(vflags "$v") run_weft "$work/raw/$v.l$s" "$s" "$WL" "$NL" $(flags "$v") || failed="$failed $v.$s"
            calls=$((WL + NL + 1))
            [ "$v" = hierz ] && calls=$((WL + NL))   # a lossy codec's result is not checked
            [ "$v" = auto ] && calls=$((calls + 16)) # weft-bench warms auto up with 16 more (TRIAL_MAX_CALLS)
        fi
        k1=$(veth_bytes)
        say "$v: $s B: $(( $(tbf_drops) - d0 )) packets dropped by tbf"
        echo $(( (k1 - k0) / 4 / calls )) >"$work/raw/$v.k$s"
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
secs=$(( $(date +%s) - t0 ))
[ -n "$failed" ] && say "failed runs:$failed"

# ---- table ----------------------------------------------------------------------

# col VARIANT SIZE FIELD: from the small run or that size's own run
col() {
    local f
    for f in "$work/raw/$1.small" "$work/raw/$1.l$2"; do
        [ -s "$f" ] && awk -v s="$2" -v c="$3" '$1 == s { print $c; exit }' "$f"
    done | head -1
}
kern() { cat "$work/raw/$1.k$2" 2>/dev/null; }
# the algorithm auto ran at a size: weft-bench's algo column, rank 0
pick() {
    local f
    for f in "$work/raw/auto.small.0" "$work/raw/auto.l$1.0"; do
        [ -s "$f" ] && awk -v s="$1" '!/^#/ && $1 == s { print $(NF - 1); exit }' "$f"
    done | head -1
}
human() { awk -v s="$1" 'BEGIN { if (s >= 1048576) printf "%g MiB", s / 1048576; else if (s >= 1024) printf "%g KiB", s / 1024; else printf "%d B", s }'; }

table() {
    echo "| size | flat ring (ms) | clusters (ms) | clusters $CODEC (ms) | auto (ms) | auto's algorithm | Open MPI (ms) | Open MPI / flat | Open MPI / clusters | Open MPI / clusters $CODEC | Open MPI / auto | wan B/rank flat | clusters | clusters $CODEC | auto | Open MPI |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for s in $SMALLB $LARGEB; do
        a=$(col flat "$s" 2) b=$(col hier "$s" 2) c=$(col hierz "$s" 2) d=$(col auto "$s" 2) m=$(col ompi "$s" 2)
        wa=$(col flat "$s" 3) wb=$(col hier "$s" 3) wc=$(col hierz "$s" 3) wd=$(col auto "$s" 3)
        [ -n "$COUNT" ] || wa=- wb=- wc=- wd=-
        ka=$(kern flat "$s") kb=$(kern hier "$s") kc=$(kern hierz "$s") kd=$(kern auto "$s") km=$(kern ompi "$s")
        al=$(pick "$s")
        awk -v h="$(human "$s")" -v a="${a:-0}" -v b="${b:-0}" -v c="${c:-0}" -v d="${d:-0}" -v m="${m:-0}" \
            -v wa="${wa:--}" -v wb="${wb:--}" -v wc="${wc:--}" -v wd="${wd:--}" -v al="${al:--}" \
            -v ka="$ka" -v kb="$kb" -v kc="$kc" -v kd="$kd" -v km="$km" '
            function ms(x) { return x > 0 ? sprintf("%.2f", x / 1000) : "-" }
            function ratio(x) { return (x > 0 && m > 0) ? sprintf("%.2f", m / x) : "-" }
            function w(x, k) { return k == "" ? x : x " (k " k ")" }
            BEGIN {
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", h,
                    ms(a), ms(b), ms(c), ms(d), al, ms(m), ratio(a), ratio(b), ratio(c), ratio(d),
                    w(wa, ka), w(wb, kb), w(wc, kc), w(wd, kd), km == "" ? "-" : "(k " km ")" }'
    done
    echo
    for s in $LARGEB; do
        d=$(col auto "$s" 2) m=$(col ompi "$s" 2)
        awk -v h="$(human "$s")" -v d="${d:-0}" -v m="${m:-0}" -v s="$s" -v L="$RATE" 'BEGIN {
            r = L + 0; u = tolower(L); sub(/^[0-9.]+/, "", u)
            if (u == "kbit") r *= 1e3; else if (u == "mbit") r *= 1e6; else if (u == "gbit") r *= 1e9
            if (d > 0) printf "At %s: auto %.2fx Open MPI; the link busy %.0f%% of the call in each direction (%d B each way over %s, the least two clusters can send)  \n",
                h, (m > 0) ? m / d : 0, 100 * (s * 8 / r) / (d / 1e6), s, L }'
        b=$(col hier "$s" 2) c=$(col hierz "$s" 2) m=$(col ompi "$s" 2)
        awk -v h="$(human "$s")" -v b="${b:-0}" -v c="${c:-0}" -v m="${m:-0}" -v z="$CODEC" 'BEGIN {
            if (b > 0 && m > 0)
                printf "At %s: all-reduce over clusters %.2fx Open MPI in fp32 (target 2x: %s), %.2fx with %s (%s)  \n",
                    h, m / b, (m / b >= 2) ? "met" : "not met", (c > 0) ? m / c : 0, z, (c > 0 && m / c >= 2) ? "met" : "not met"
            else
                printf "At %s: no comparison (a run failed)  \n", h }'
    done
}
TABLE=$(table)
{
    echo "Command: \`sudo bash bench/wan_netns.sh$ARGS\` (BUILD=$B)"
    echo
    echo "Run $DATE, $secs s; load average before $LOAD0, after $LOAD1 ($(nproc) cores, shared)."
    echo "Link: veth pair, $SHAPE. 2 clusters x 2 ranks, shared memory inside a cluster."
    echo "weft-tune across the link: ${TUNE:-nothing measured}; auto runs with WEFT_AUTOTUNE=0 WEFT_TUNE=$TUNE."
    echo "weft-bench allreduce -I 1 (out of place), f32 sum; flat: -a ring; clusters: -H; clusters $CODEC: -H -z $CODEC; auto: -a auto; ${COUNT:+WEFT_WAN=$COUNT (no delay, no rate: only the count)}${COUNT:-no WEFT_WAN (no weft wan count)}."
    echo "Open MPI $(mpirun.openmpi --version 2>/dev/null | head -1 | awk '{print $NF}') mpi_allreduce (out-of-place column), \`--mca btl tcp,vader,self\`, its HNP in the first namespace."
    echo "Calls: -w $WS -n $NS at $SMALL (one run per program), -w $WL -n $NL at $LARGE (one run per size); times are the mean per timed call of the slowest rank."
    echo "Wan bytes per rank per call: weft's own count (weft_comm_wan_bytes, payload and frame headers); (k N): the kernel's veth bytes of that size's whole run (both directions, TCP/IP headers, start-up and checked calls included) over 4 ranks and the calls made."
    [ -n "$failed" ] && echo "Failed runs:$failed"
    echo
    echo "$TABLE"
} | tee "$work/table.md"
[ -n "$KEEP" ] && mkdir -p "$KEEP" && cp "$work/table.md" "$KEEP/"
[ -z "$failed" ]
