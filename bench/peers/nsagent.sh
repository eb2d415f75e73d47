#!/bin/sh
# Remote-shell agent for mpirun (--mca plm_rsh_agent) that reaches emulated
# hosts: network namespaces on this machine. mpirun calls it as
#   nsagent.sh HOST COMMAND...
# and it runs COMMAND inside the namespace that NSAGENT_MAP names for HOST:
#   NSAGENT_MAP="10.78.1.1=weftA 10.78.1.2=weftB"
# Needs root (ip netns exec, unshare).
host=$1
shift
ns=""
for pair in $NSAGENT_MAP; do
    [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}
done
if [ -z "$ns" ]; then
    echo "nsagent: no namespace for host '$host' in NSAGENT_MAP='$NSAGENT_MAP'" >&2
    exit 255
fi
# Each emulated host also gets its own host name (a UTS namespace): Open MPI
# tells on-node peers by name, and the namespaces would otherwise share one.
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"
