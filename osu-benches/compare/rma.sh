#!/usr/bin/env bash
# The one-sided OSU tests of mpirt (its Rust ports) beside Open MPI and MPICH
# (compare/osu_rma.c, the same loops in C) on two ranks of this host, in one window kind and
# synchronisation, at every size from 8 B to 1 MiB (the atomics at their 8 bytes): put, get,
# accumulate and get_accumulate latency, fetch_and_op and compare_and_swap latency, put and get
# bandwidth and put bidirectional bandwidth (which synchronises with pscw, OSU 7.4's default,
# or fence when -s names it: OSU's offers no other; the table says each test's). mpirt runs on its shared-memory path, and with -a on its
# active messages too (MPIRT_WINDOW_PATH=messages): there a passive-target operation waits for
# the target, which sits in a barrier (asleep in its PML once it has waited past its spin, woken
# by the operation's messages), so each costs the target's wake-up.
# With -o PROVIDER, mpirt runs over libfabric instead (--transport ofi on that provider, built
# with the ofi feature into target/ofi): its windows by fi_write, fi_read and fi_atomic
# (MPIRT_WINDOW_PATH=rdma) and by active messages over the same transport (=messages: what a
# window over OFI did before it had one-sided operations, and does on a provider without RMA),
# beside Open MPI over TCP (--mca btl self,tcp --mca osc pt2pt: its osc rdma refuses both its
# libfabric BTL on tcp;ofi_rxm, "unreachable proc", and its TCP BTL, which have no RDMA here);
# the table
# adds paired ratios (each repeat's figure over the run beside it, then their median).
#   osu-benches/compare/rma.sh [-a] [-u TLS | -o PROVIDER] [-w create|allocate|dynamic] [-s SYNC]
#                              [-r REPEATS] [-m MAX] [-t TESTS]
# Runs are interleaved (each repeat runs every test on every runtime in turn, so that a burst
# of load on the shared machine falls on all of them alike), and the table gives each size's
# median of REPEATS runs (default 3). A run that fails or outlasts 300 s prints "-". Open MPI
# 4.1.4 runs allocate windows on its osc sm (its default choice there crashes in
# MPI_Compare_and_swap), and the others on what it picks itself; MPICH is what the system's
# mpirun.mpich runs (4.0.2, ch4:ucx here).
# -u TLS: instead, mpirt on its UCX PML (rsrun --pml ucx) beside Open MPI's pml ucx with osc
# ucx, both on UCX_TLS=TLS: mpirt's windows on UCX's RMA (ucp_put_nbx, ucp_get_nbx,
# ucp_atomic_op_nbx; MPIRT_WINDOW_PATH=rdma, never the shared-memory mapping) and, as the
# before, on active messages over the UCX PML (MPIRT_WINDOW_PATH=messages, the default
# there, and the only way windows went before UCX's RMA). -u does not combine with -a. mpirt is built with the ucx feature into target/ucx
# (or CARGO_TARGET_DIR, where set).
set -euo pipefail
cd "$(dirname "$0")/../.."
window=allocate
sync=flush
repeats=3
max=1048576
tests="put_latency get_latency acc_latency get_acc_latency fop_latency cas_latency put_bw get_bw put_bibw"
runtimes="shm ompi mpich"
tls=
all=
provider=
while getopts "au:o:w:s:r:m:t:" opt; do
    case $opt in
        a) all=1 runtimes="shm messages ompi mpich" ;;
        u) tls=$OPTARG ;;
        o) provider=$OPTARG; runtimes="ofi ofimsg ompitcp" ;;
        w) window=$OPTARG ;;
        s) sync=$OPTARG ;;
        r) repeats=$OPTARG ;;
        m) max=$OPTARG ;;
        t) tests=$OPTARG ;;
        *) echo "usage: $0 [-a] [-u TLS | -o PROVIDER] [-w create|allocate|dynamic] [-s SYNC] [-r REPEATS] [-m MAX] [-t TESTS]" >&2
           exit 2 ;;
    esac
done
if [ -n "$tls" ] && [ -n "$all" ]; then
    echo "$0: -a and -u do not combine (-u runs the UCX PML's RMA and its active messages)" >&2
    exit 2
fi
if [ -n "$tls" ]; then
    runtimes="ucx_messages ucx ompi_ucx"
    export UCX_TLS=$tls
    target=${CARGO_TARGET_DIR:-target/ucx}
    CARGO_TARGET_DIR=$target cargo build --release -q -p launcher -p osu-benches \
        --features osu-benches/ucx
    # CARGO_TARGET_DIR may be absolute or relative to the repository's root (cd above).
    case $target in
        /*) bin=$target/release ;;
        *) bin=$PWD/$target/release ;;
    esac
elif [ -n "$provider" ]; then
    target=${CARGO_TARGET_DIR:-target/ofi}
    CARGO_TARGET_DIR=$target cargo build --release -q -p launcher -p osu-benches \
        --features osu-benches/ofi
    case $target in
        /*) bin=$target/release ;;
        *) bin=$PWD/$target/release ;;
    esac
else
    cargo build --release -q -p launcher -p osu-benches
    bin=$PWD/target/release
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.openmpi -O2 -o "$out/osu_rma.ompi" osu-benches/compare/osu_rma.c
mpicc.mpich -O2 -o "$out/osu_rma.mpich" osu-benches/compare/osu_rma.c
osc=()
[ "$window" = allocate ] && osc=(--mca osc sm)
# The synchronisation TEST runs with: -s's, but put_bibw offers only pscw and fence.
sync_of() {
    if [ "$1" = put_bibw ] && [ "$sync" != fence ]; then echo pscw; else echo "$sync"; fi
}
# One run's rows ("SIZE VALUE"), or nothing where it failed.
run() {
    local test=$1 runtime=$2 min=8 top=$max s
    s=$(sync_of "$test")
    case $test in fop_latency | cas_latency) top=8 ;; esac
    case $runtime in
        shm) timeout 300 "$bin/rsrun" -n 2 "$bin/osu_$test" -w "$window" -s "$s" -m "$min:$top" ;;
        messages) MPIRT_WINDOW_PATH=messages timeout 300 "$bin/rsrun" -n 2 "$bin/osu_$test" \
            -w "$window" -s "$s" -m "$min:$top" ;;
        ucx) MPIRT_WINDOW_PATH=rdma timeout 300 "$bin/rsrun" --pml ucx -n 2 "$bin/osu_$test" \
            -w "$window" -s "$s" -m "$min:$top" ;;
        ucx_messages) MPIRT_WINDOW_PATH=messages timeout 300 "$bin/rsrun" --pml ucx -n 2 \
            "$bin/osu_$test" -w "$window" -s "$s" -m "$min:$top" ;;
        # Open MPI 4.1 turns its UCX components down unless UCX offers an RDMA transport
        # (opal_common_ucx_tls, _devices): told to take any, it runs on UCX_TLS as mpirt does.
        ompi_ucx) timeout 300 mpirun.openmpi --allow-run-as-root -n 2 --bind-to none \
            --mca pml ucx --mca osc ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
            -x UCX_TLS "$out/osu_rma.ompi" "$test" "$window" "$s" "$top" "$min" ;;
        ompi) timeout 300 mpirun.openmpi --allow-run-as-root -n 2 --bind-to none "${osc[@]}" \
            "$out/osu_rma.ompi" "$test" "$window" "$s" "$top" "$min" ;;
        mpich) timeout 300 mpirun.mpich -n 2 "$out/osu_rma.mpich" "$test" "$window" "$s" "$top" \
            "$min" ;;
        ofi | ofimsg)
            local path=rdma
            [ "$runtime" = ofimsg ] && path=messages
            MPIRT_WINDOW_PATH=$path timeout 300 "$bin/rsrun" -n 2 --transport ofi \
                --ofi-provider "$provider" "$bin/osu_$test" -w "$window" -s "$s" -m "$min:$top" ;;
        ompitcp) timeout 300 mpirun.openmpi --allow-run-as-root -n 2 --bind-to none --mca pml ob1 \
            --mca btl self,tcp --mca osc pt2pt "$out/osu_rma.ompi" "$test" "$window" "$s" "$top" \
            "$min" ;;
    esac 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1, $2}' || true
}
for r in $(seq "$repeats"); do
    for test in $tests; do
        for runtime in $runtimes; do
            run "$test" "$runtime" > "$out/$test.$runtime.$r"
        done
    done
done
# The median of the values of SIZE in the files given.
median() {
    local size=$1
    shift
    awk -v s="$size" '$1 == s {print $2}' "$@" | sort -g |
        awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'
}
# The median over the repeats of each repeat's value of SIZE in runtime A's file over B's
# (paired: both runs of a repeat ran back to back).
paired() {
    local size=$1 test=$2 a=$3 b=$4 r
    for r in $(seq "$repeats"); do
        join <(awk -v s="$size" '$1 == s' "$out/$test.$a.$r") \
            <(awk -v s="$size" '$1 == s' "$out/$test.$b.$r") | awk '$3 > 0 {print $2 / $3}'
    done | sort -g | awk '{v[NR]=$1} END {if (NR) printf "%.2f", v[int((NR+1)/2)]; else print "-"}'
}
echo "# window $window${tls:+, UCX_TLS=$tls}, median of $repeats interleaved runs${provider:+, mpirt over libfabric $provider}"
echo "# latency in us, bandwidth in MB/s"
declare -A title=([shm]="mpirt shm" [messages]="mpirt messages" [ompi]="Open MPI" [mpich]=MPICH
    [ucx]="mpirt ucx rma" [ucx_messages]="mpirt ucx msgs" [ompi_ucx]="Open MPI osc ucx"
    [ofi]="mpirt fi_write" [ofimsg]="mpirt messages" [ompitcp]="Open MPI pt2pt")
printf "%-16s %-11s %8s" test sync size
for runtime in $runtimes; do printf " %15s" "${title[$runtime]}"; done
[ -n "$provider" ] && printf " %15s %15s" "after/before" "mpirt/ompi"
echo
for test in $tests; do
    sizes=$(cat "$out/$test".*.* | awk '{print $1}' | sort -n | uniq)
    for size in $sizes; do
        printf "%-16s %-11s %8s" "$test" "$(sync_of "$test")" "$size"
        for runtime in $runtimes; do
            printf " %15s" "$(median "$size" "$out/$test.$runtime".*)"
        done
        if [ -n "$provider" ]; then
            printf " %15s %15s" "$(paired "$size" "$test" ofi ofimsg)" \
                "$(paired "$size" "$test" ofi ompitcp)"
        fi
        echo
    done
done
