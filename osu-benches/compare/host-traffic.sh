#!/usr/bin/env bash
# What OSU's gather, scatter, reduce-scatter and all-to-all send across the network per call,
# on 8 ranks over the 4 test hosts (../shared/testhosts/ssh-hosts, or $MPIRT_SSH_HOSTS, left
# up): the packets and bytes the hosts' eth0 sent (the kernel's counters, summed over the
# hosts: TCP's segments, ACKs and headers included), per call. The hosts are network
# namespaces of one machine, so their times mean nothing here; the counts do. Each figure is
# the difference between a run of 2*I calls and one of I calls, over I, so that start-up and
# wire-up cancel; OSU's barrier after each call is counted the same way alone (osu_barrier)
# and taken off.
#   osu-benches/compare/host-traffic.sh [-i CALLS] [-x BASE_BIN_DIR] [-s SIZES] [-p PLACEMENT]
# -x: a directory of another build's rsrun and osu_* binaries to count beside this
#     checkout's, as "base". -s: sizes in bytes (default 8 4096 65536). -p: rsrun's -H and
#     --map-by, as "host1:2,host2:2,host3:2,host4:2 node" (the default).
set -euo pipefail
# A run that fails (rsrun could not start its ranks) stops the script, not a figure.
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
calls=200
base=
sizes="8 4096 65536"
placement="host1:2,host2:2,host3:2,host4:2 node"
while getopts "i:x:s:p:" opt; do
    case $opt in
        i) calls=$OPTARG ;;
        x) base=$(realpath "$OPTARG") ;;
        s) sizes=$OPTARG ;;
        p) placement=$OPTARG ;;
        *) echo "usage: $0 [-i CALLS] [-x BASE_BIN_DIR] [-s SIZES] [-p PLACEMENT]" >&2; exit 2 ;;
    esac
done
read -r hosts map <<< "$placement"
cargo build --release -q -p launcher -p osu-benches --bin rsrun --bin osu_gather \
    --bin osu_scatter --bin osu_reduce_scatter --bin osu_alltoall --bin osu_barrier
cfg=${SSH_HOSTS_DIR:-${TMPDIR:-/tmp}/mpirt-testhosts/ssh}/ssh_config
names=$(tr ',' '\n' <<< "$hosts" | cut -d: -f1)

# The packets and bytes every host's eth0 has sent so far, summed.
sent() {
    local packets=0 bytes=0 h
    for h in $names; do
        packets=$((packets + $(ip netns exec "$h" cat /sys/class/net/eth0/statistics/tx_packets)))
        bytes=$((bytes + $(ip netns exec "$h" cat /sys/class/net/eth0/statistics/tx_bytes)))
    done
    echo "$packets $bytes"
}

# The packets and bytes one run of BIN_DIR's benchmark sends: BIN_DIR BENCH ITERATIONS ARGS...
run_once() {
    local bin=$1 bench=$2 iterations=$3 before after
    shift 3
    before=$(sent)
    "$bin/rsrun" -H "$hosts" --map-by "$map" --ssh-args "-F $cfg" -n 8 \
        "$bin/$bench" -i "$iterations" -x 0 "$@" > /dev/null
    after=$(sent)
    read -r p0 b0 <<< "$before"
    read -r p1 b1 <<< "$after"
    echo "$((p1 - p0)) $((b1 - b0))"
}

# Packets and bytes per call (the 2*I run's less the I run's, over I): BIN_DIR BENCH ARGS...
per_call() {
    local bin=$1 bench=$2 short long
    shift 2
    short=$(run_once "$bin" "$bench" "$calls" "$@")
    long=$(run_once "$bin" "$bench" $((2 * calls)) "$@")
    read -r ps bs <<< "$short"
    read -r pl bl <<< "$long"
    echo "$(((pl - ps) / calls)) $(((bl - bs) / calls))"
}

builds=("this $(realpath target/release)")
if [ -n "$base" ]; then builds+=("base $base"); fi
echo "# $placement, 8 ranks, $calls and $((2 * calls)) calls; per call, the barrier taken off"
echo "# build benchmark size packets bytes"
for build in "${builds[@]}"; do
    read -r label bin <<< "$build"
    read -r bp bb <<< "$(per_call "$bin" osu_barrier)"
    echo "$label osu_barrier - $bp $bb"
    for bench in osu_gather osu_scatter osu_reduce_scatter osu_alltoall; do
        for size in $sizes; do
            read -r p b <<< "$(per_call "$bin" "$bench" -m "$size:$size")"
            echo "$label $bench $size $((p - bp)) $((b - bb))"
        done
    done
done
