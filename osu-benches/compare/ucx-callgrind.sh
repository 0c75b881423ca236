#!/usr/bin/env bash
# Where mpirt --pml ucx and Open MPI's pml ucx spend instructions per message: both run the
# osu_latency loop at 8 B only (mpirt's port; Open MPI the C port osu_p2p.c, as in ucx.sh) under
# callgrind, counting only inside the send and receive calls, and ucx_callgrind.py prints
# the instructions per message and per polling round, by group of functions (its header says
# how polling is told apart from message work). Instruction counts repeat under load, unlike
# timings.
#   osu-benches/compare/ucx-callgrind.sh [-T "TLS..."] [-k DIR]
# -T: the UCX_TLS settings to profile on, space-separated (default: "sm,self tcp").
# -k: keeps the profiles in DIR (for callgrind_annotate, or ucx_callgrind.py again).
set -euo pipefail
cd "$(dirname "$0")/../.."
tls_list="sm,self tcp"
keep=
while getopts "T:k:" opt; do
    case $opt in
        T) tls_list=$OPTARG ;;
        k) keep=$OPTARG ;;
        *) echo "usage: $0 [-T \"TLS...\"] [-k DIR]" >&2; exit 2 ;;
    esac
done
source osu-benches/compare/callgrind-setup.sh
CARGO_TARGET_DIR=target/ucx cargo build --release --workspace --features mpirt/ucx -q
bin=$PWD/target/ucx/release
for tls in $tls_list; do
    export UCX_TLS=$tls
    key=${tls//,/_}
    rm -f "$out/$key".*.[0-9]*
    # A wait that outlasts the spin budget sleeps, and under callgrind (tens of times slower)
    # many would: spin for the whole run, as Open MPI does.
    MPIRT_SPIN_US=100000000 "$bin/rsrun" --pml ucx -n 2 $callgrind \
        --toggle-collect='mpirt::point_to_point::Source::receive_into_with_tag*' \
        --toggle-collect='mpirt::point_to_point::Destination::send_with_tag*' \
        --callgrind-out-file="$out/$key.mpirt.%p" "$bin/osu_latency" -m 8:8 -i 20000 -x 0 \
        > /dev/null 2>&1
    mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --mca pml ucx --mca osc ^ucx \
        --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS $callgrind \
        --toggle-collect=PMPI_Send --toggle-collect=PMPI_Recv \
        --callgrind-out-file="$out/$key.ompi.%p" "$out/osu_p2p.ompi" latency 8 8 > /dev/null 2>&1
    echo "## UCX_TLS=$tls, 8 B: mpirt 20000 round trips, Open MPI 10100"
    python3 osu-benches/compare/ucx_callgrind.py "$(ls "$out/$key".mpirt.* | paste -sd,)" \
        "$(ls "$out/$key".ompi.* | paste -sd,)"
done
