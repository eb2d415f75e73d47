#!/bin/sh
# Real Slurm clusters on this machine, one network namespace each, for the
# compute power network's tests and bench (docs/CPN.md, "The Slurm test").
#
#   sh tests/cpn/slurm_clusters.sh start DIR [N [RATE [LATENCY]]]
#   sh tests/cpn/slurm_clusters.sh stop DIR
#   sh tests/cpn/slurm_clusters.sh check DIR      (srun -N1 hostname on each)
#
# start makes N clusters (2; at most 3) named a, b, c under DIR (a fresh or
# empty folder): cluster X lives in namespace wcX<tag> with one host xh1 at
# $net.K (K = 1, 2, 3) on a bridge in a switch namespace, and this (root)
# namespace joins the bridge at $net.254, so that a launcher here reaches
# every slurmctld and a store here is reachable from every cluster. Every
# cluster has its own munge key, munged socket and slurm.conf (ClusterName
# X, SlurmctldHost xh1($net.K), its own SlurmctldPort and SlurmdPort,
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, no accounting, no
# cgroup plugin, every state and spool folder under DIR/X), and its
# munged, slurmctld and slurmd run in the foreground (-F, -D) in the
# background of this script, in the cluster's namespace. Each cluster's
# link to the bridge is held to RATE (100mbit) by a tbf whose queue may
# hold LATENCY (20ms) of it: the kernel here has no netem, so a fixed
# delay is weft's WEFT_WAN=delay=... where a test wants one.
#
# DIR/clusters.env, for the tests (sourced): TAG, NET, HOSTADDR and per
# cluster X: X_NS, X_ADDR, X_CONF (its slurm.conf: SLURM_CONF=$X_CONF
# sbatch ... reaches that cluster from here or from its namespace).
# stop kills the daemons (pid files under DIR) and deletes the namespaces
# and links; it is safe to run twice and after a failed start.
set -u
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

say() { echo "slurm_clusters: $*" >&2; }

stop() {
    [ -f "$dir/clusters.env" ] && . "$dir/clusters.env"
    for p in "$dir"/*/*.pid; do
        [ -f "$p" ] || continue
        pid=$(cat "$p" 2>/dev/null)
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
    done
    sleep 0.3
    for p in "$dir"/*/*.pid; do
        [ -f "$p" ] || continue
        pid=$(cat "$p" 2>/dev/null)
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
        rm -f "$p"
    done
    if [ -n "${TAG:-}" ]; then
        for x in a b c; do ip netns del "wc$x$TAG" 2>/dev/null; done
        ip netns del "wcs$TAG" 2>/dev/null
        ip link del "wch$TAG" 2>/dev/null
    fi
    return 0
}

# One daemon in the background, in namespace $1 under host name $2 (its
# own UTS namespace: slurmctld must find its SlurmctldHost's name, and all
# clusters share this machine's), its pid in $3, its output in $4.
# nsenter, not ip netns exec: that remounts /sys, hiding /sys/fs/cgroup,
# which slurmd 22.05 looks at (to load its cgroup plugin) even when
# nothing of it is used.
daemon() {
    ns=$1 name=$2 pidf=$3 log=$4
    shift 4
    nsenter --net="/run/netns/$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" \
        "$@" >>"$log" 2>&1 &
    echo $! >"$pidf"
}

conf() { # name addr ctlport dport folder
    cat <<EOF
ClusterName=$1
SlurmctldHost=${1}h1($2)
SlurmctldPort=$3
SlurmdPort=$4
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$5/munge.sock
StateSaveLocation=$5/state
SlurmdSpoolDir=$5/spool
SlurmctldPidFile=$5/slurmctld.pidfile
SlurmdPidFile=$5/slurmd.pidfile
SlurmctldLogFile=$5/slurmctld.log
SlurmdLogFile=$5/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=30
SchedulerType=sched/builtin
MailProg=/bin/true
PlugStackConfig=/dev/null
NodeName=${1}h1 NodeAddr=$2 CPUs=8 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=1024 State=UNKNOWN
PartitionName=main Nodes=${1}h1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

start() {
    n=${3:-2} rate=${4:-100mbit} lat=${5:-20ms}
    [ "$(id -u)" = 0 ] || { say "needs root (network namespaces, tc, slurmd as root)"; exit 3; }
    for p in ip tc munged slurmctld slurmd srun sbatch; do
        command -v "$p" >/dev/null 2>&1 || { say "needs $p (slurmctld slurmd slurm-client munge iproute2)"; exit 3; }
    done
    [ "$n" -ge 1 ] && [ "$n" -le 3 ] || { say "1 to 3 clusters, not $n"; exit 2; }
    mkdir -p "$dir" && chmod 700 "$dir" || exit 1
    tag=$(($$ % 10000))
    net=10.83.$(($$ % 200 + 20))
    sw=wcs$tag
    {
        echo "TAG=$tag"
        echo "NET=$net"
        echo "HOSTADDR=$net.254"
        echo "CLUSTERS=\"$(echo a b c | cut -d' ' -f1-"$n")\""
    } >"$dir/clusters.env"
    ip netns add "$sw" && ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up &&
        ip -n "$sw" link set lo up || { stop; exit 1; }
    # this namespace on the bridge: the launcher's and the store's side
    ip link add "wch$tag" type veth peer name ph netns "$sw" &&
        ip -n "$sw" link set ph master br0 && ip -n "$sw" link set ph up &&
        ip addr add "$net.254/24" dev "wch$tag" && ip link set "wch$tag" up || { stop; exit 1; }
    k=1
    for x in $(echo a b c | cut -d' ' -f1-"$n"); do
        ns=wc$x$tag addr=$net.$k d=$dir/$x
        mkdir -p "$d/state" "$d/spool" && chmod 700 "$d" || { stop; exit 1; }
        ip netns add "$ns" &&
            ip link add eth0 netns "$ns" type veth peer name p$x netns "$sw" &&
            ip -n "$sw" link set "p$x" master br0 && ip -n "$sw" link set "p$x" up &&
            ip -n "$ns" addr add "$addr/24" dev eth0 && ip -n "$ns" link set eth0 up &&
            ip -n "$ns" link set lo up || { stop; exit 1; }
        # the cluster's WAN: its way out and its way in, each held to the rate
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency "$lat" &&
            ip netns exec "$sw" tc qdisc add dev "p$x" root tbf rate "$rate" burst 64kb latency "$lat" ||
            say "tc tbf failed: cluster $x's link is not shaped"
        dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 2>/dev/null && chmod 400 "$d/munge.key"
        conf "$x" "$addr" $((16800 + 10 * k)) $((16801 + 10 * k)) "$d" >"$d/slurm.conf"
        daemon "$ns" "${x}h1" "$d/munged.pid" "$d/munged.out" munged -F --force --socket="$d/munge.sock" \
            --key-file="$d/munge.key" --pid-file="$d/munged.pidfile" \
            --log-file="$d/munged.log" --seed-file="$d/munged.seed"
        {
            echo "${x}_NS=$ns"
            echo "${x}_ADDR=$addr"
            echo "${x}_CONF=$d/slurm.conf"
        } >>"$dir/clusters.env"
        k=$((k + 1))
    done
    for x in $(echo a b c | cut -d' ' -f1-"$n"); do
        d=$dir/$x
        i=0
        while [ ! -S "$d/munge.sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        [ -S "$d/munge.sock" ] || { say "munged of $x did not start: $(tail -n 3 "$d/munged.out")"; stop; exit 1; }
        daemon "wc$x$tag" "${x}h1" "$d/slurmctld.pid" "$d/slurmctld.out" env SLURM_CONF="$d/slurm.conf" \
            slurmctld -D -i -f "$d/slurm.conf"
        daemon "wc$x$tag" "${x}h1" "$d/slurmd.pid" "$d/slurmd.out" env SLURM_CONF="$d/slurm.conf" \
            slurmd -D -N "${x}h1" -f "$d/slurm.conf"
    done
    # up when each node answers idle
    for x in $(echo a b c | cut -d' ' -f1-"$n"); do
        d=$dir/$x
        i=0
        until SLURM_CONF=$d/slurm.conf sinfo -h -o %t 2>/dev/null | grep -q idle; do
            i=$((i + 1))
            if [ $i -ge 150 ]; then
                say "cluster $x did not come up:"
                tail -n 5 "$d/slurmctld.out" "$d/slurmd.out" "$d/slurmctld.log" "$d/slurmd.log" 2>/dev/null >&2
                stop
                exit 1
            fi
            sleep 0.2
        done
    done
    say "$n cluster(s) up under $dir ($net.0/24, $rate per cluster link)"
}

check() {
    . "$dir/clusters.env"
    rc=0
    for x in $CLUSTERS; do
        eval conf_file=\$${x}_CONF ns=\$${x}_NS
        out=$(SLURM_CONF=$conf_file timeout 30 srun -N1 -n1 ip -o -4 addr show dev eth0 2>&1)
        if echo "$out" | grep -q "$(eval echo \$${x}_ADDR)/"; then
            echo "cluster $x: srun ran in $ns: $(SLURM_CONF=$conf_file timeout 30 srun -N1 hostname)"
        else
            echo "cluster $x: srun failed: $out"
            rc=1
        fi
    done
    return $rc
}

case $cmd in
start) start "$@" ;;
stop) stop ;;
check) check ;;
*) say "start, stop or check, not $cmd"; exit 2 ;;
esac
