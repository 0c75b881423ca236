#!/usr/bin/env bash
# Side by side, in one run: mpirt's OSU ports against the same OSU method in C on Open MPI
# and on MPICH (Debian's packages), interleaved and repeated; medians per message size.
#   osu-benches/compare/run.sh [-r REPEATS] [-n RANKS] [-o OUTDIR] [-b "BENCH..."] [-s WHAT] [-m BYTES] [-t]
# -n: ranks of the collective tests (4), which run on this host only. The collectives are every
# one OSU 7.4 measures, blocking and non-blocking (compare/osu_coll.c), and mpirt's port of
# each. Sizes 1 B to 1 MiB, 4 MiB for the broadcasts and all-reductions.
# -b: only these benchmarks (names without osu_, such as "latency mbw_mr allreduce").
# -m: the collectives' largest size in bytes (a power of two; 1 MiB for all of them is
# issue 23's sweep on a busy host, where 4 ranks and more spend most of their time past it).
# -s: what runs on Open MPI and MPICH: "c", OSU's method in C (compare/osu_p2p.c and
# osu_coll.c; the default), "rsmpi", mpirt's own benchmark source built on rsmpi (feature
# rsmpi, one build per MPI in target/rsmpi-ompi and target/rsmpi-mpich), or "both".
# -t: between two test hosts over TCP instead of two ranks on this host: the network
# namespaces host1 and host2 of ../shared/testhosts/ssh-hosts (or $MPIRT_SSH_HOSTS), started
# over ssh; osu_latency and osu_bw only.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=5
ranks=4
out=
tcp=
only=
what=c
largest=
while getopts "r:n:o:b:s:m:t" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        n) ranks=$OPTARG ;;
        o) out=$OPTARG ;;
        b) only=" $OPTARG " ;;
        s) what=$OPTARG ;;
        m) largest=$OPTARG ;;
        t) tcp=1 ;;
        *) echo "usage: $0 [-r REPEATS] [-n RANKS] [-o OUTDIR] [-b \"BENCH...\"] [-s c|rsmpi|both] [-m BYTES] [-t]" >&2; exit 2 ;;
    esac
done
# Which programs run on the C MPIs: the C ports, the rsmpi builds.
case $what in
    c) c_ports=1 rs_builds= ;;
    rsmpi) c_ports= rs_builds=1 ;;
    both) c_ports=1 rs_builds=1 ;;
    *) echo "$0: -s takes c, rsmpi or both, not '$what'" >&2; exit 2 ;;
esac
out=${out:-target/compare${tcp:+-tcp}}
mkdir -p "$out"

# The comparison needs the C MPIs, matplotlib and (for -s rsmpi) libclang; it says what is
# missing rather than installing system packages itself.
missing=()
command -v mpicc.openmpi >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
command -v mpicc.mpich >/dev/null || missing+=(mpich libmpich-dev)
source osu-benches/compare/python.sh
$python -c "import matplotlib" 2>/dev/null || missing+=(python3-matplotlib)
if [ -n "$rs_builds" ] &&
    ! dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q 'install ok installed'; then
    missing+=(libclang-dev)
fi
if ((${#missing[@]})); then
    echo "$0: missing packages: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
    exit 1
fi
cargo build --release --workspace -q
# Absolute: ranks on the test hosts start in their own working directory.
bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release
if [ -n "$rs_builds" ]; then
    # MPICC picks the MPI rsmpi links. Its build script does not look again when MPICC
    # changes: one target directory per MPI.
    rs_build=(cargo build --release -q -p osu-benches --no-default-features --features rsmpi)
    CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}/rsmpi-ompi MPICC=mpicc.openmpi "${rs_build[@]}"
    CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}/rsmpi-mpich MPICC=mpicc.mpich "${rs_build[@]}"
fi
rs_ompi=${CARGO_TARGET_DIR:-target}/rsmpi-ompi/release
rs_mpich=${CARGO_TARGET_DIR:-target}/rsmpi-mpich/release
c=osu-benches/compare
mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/osu_p2p.ompi" $c/osu_p2p.c
mpicc.mpich -O2 -Wno-stringop-overflow -o "$out/osu_p2p.mpich" $c/osu_p2p.c

if [ -n "$tcp" ]; then
    hosts=${MPIRT_SSH_HOSTS:-$(cd .. && pwd)/shared/testhosts/ssh-hosts}
    if "$hosts" up 2; then
        trap '"$hosts" down' EXIT
    else
        echo "using the test hosts already up (left up)"
    fi
    cfg=${SSH_HOSTS_DIR:-${TMPDIR:-/tmp}/mpirt-testhosts/ssh}/ssh_config
    # Open MPI's and MPICH's launchers take a program, not a command line; Open MPI's remote
    # daemons run it too (tree spawn), so its path is absolute.
    ssh=$(realpath "$out")/ssh
    printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$cfg" > "$ssh"
    chmod +x "$ssh"
    # Open MPI: TCP and self only, on the hosts' network (their eth0 also has an IPv6
    # link-local address, which it would try too). The hosts share this machine's cores, so
    # a rank spinning on its socket starves the kernel's network processing (8 B latency
    # ~4 ms): it is told to yield, as it does by itself when oversubscribed.
    ompi=(mpirun.openmpi --allow-run-as-root -H host1:1,host2:1 --mca plm_rsh_agent "$ssh"
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24
        --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_disable_family 6
        --mca mpi_yield_when_idle 1 -n)
    # MPICH (ch4:ucx): its proxies call back to mpiexec on the bridge; UCX must be held to
    # TCP, or it finds the hosts share memory and uses that.
    mpich=(mpiexec.mpich -launcher ssh -launcher-exec "$ssh" -iface rsbr0
        -hosts host1:1,host2:1 -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 -n)
    rsrun=("$bin/rsrun" -H host1:1,host2:1 --ssh-args "-F $cfg" --transport tcp -n)
    benches=(latency bw)
    collectives=()
else
    mpicc.openmpi -O2 -o "$out/osu_coll.ompi" $c/osu_coll.c
    mpicc.mpich -O2 -o "$out/osu_coll.mpich" $c/osu_coll.c
    mpicc.mpich -O2 -o "$out/hello.mpich" $c/hello.c
    cc -O2 -o "$out/memcpy.bin" $c/memcpy.c
    cc -O2 -o "$out/cma.bin" $c/cma.c
    ompi=(mpirun.openmpi --allow-run-as-root --oversubscribe -n)
    mpich=(mpiexec.mpich -n)
    # Open MPI binds each rank to its own core by default (see mpirun --report-bindings);
    # rsrun does not unless asked. Unbound, a busy host's scheduler may stack both ranks on
    # one CPU, where every wait spins its MPIRT_SPIN_US out before the peer can run.
    rsrun=("$bin/rsrun" --bind-to core -n)
    benches=(latency bw bibw mbw_mr multi_lat)
    collectives=(barrier bcast reduce allreduce allgather allgatherv alltoall alltoallv gather
        gatherv scatter scatterv reduce_scatter reduce_scatter_block)
    collectives+=("${collectives[@]/#/i}")
fi
# Keeps the benchmarks of "$@" that -b names (all without -b).
selected() {
    for bench in "$@"; do
        if [ -z "$only" ] || [[ $only == *" $bench "* ]]; then
            echo "$bench"
        fi
    done
}
mapfile -t benches < <(selected "${benches[@]}")
mapfile -t collectives < <(selected "${collectives[@]}")
# MPICH's ranks poll without yielding: with more ranks than cores one collective benchmark runs
# for many minutes (16-50 ms a call measured), so there it gets a time limit, noted in "limits".
mpich_limit=()
if [ -z "$tcp" ] && [ "$ranks" -gt "$(nproc)" ]; then
    mpich_limit=(timeout "${MPICH_OVERSUBSCRIBED_LIMIT:-120}")
fi
# Runs "$@" (MPICH on the collectives) into file $1 within mpich_limit; a run stopped there
# leaves no file, and a line in "limits" saying so.
mpich_collective() {
    local file=$1
    shift
    if ! "${mpich_limit[@]}" "$@" > "$file"; then
        rm -f "$file"
        echo "MPICH ${file##*/} ($ranks ranks on $(nproc) cores): stopped after ${mpich_limit[1]} s" >> "$out/limits"
    fi
}
echo "before: $(cut -d' ' -f1 /proc/loadavg)" > "$out/load.txt"
rm -f "$out/limits"
for bench in "${benches[@]}"; do
    for ((r = 1; r <= repeats; r++)); do
        "${rsrun[@]}" 2 "$bin"/osu_$bench > "$out/$bench.mpirt.$r"
        if [ -n "$c_ports" ]; then
            "${ompi[@]}" 2 "$out/osu_p2p.ompi" $bench > "$out/$bench.ompi.$r"
            "${mpich[@]}" 2 "$out/osu_p2p.mpich" $bench > "$out/$bench.mpich.$r"
        fi
        if [ -n "$rs_builds" ]; then
            "${ompi[@]}" 2 "$rs_ompi"/osu_$bench > "$out/$bench.ompi-rs.$r"
            "${mpich[@]}" 2 "$rs_mpich"/osu_$bench > "$out/$bench.mpich-rs.$r"
        fi
    done
done
for bench in "${collectives[@]}"; do
    case $bench in
        bcast | allreduce | ibcast | iallreduce) max=$((4 << 20)) ;;
        *) max=$((1 << 20)) ;;
    esac
    max=${largest:-$max}
    for ((r = 1; r <= repeats; r++)); do
        if [ -x "$bin/osu_$bench" ]; then
            "${rsrun[@]}" "$ranks" "$bin"/osu_$bench -m "1:$max" > "$out/$bench.mpirt.$r"
        fi
        if [ -n "$c_ports" ]; then
            "${ompi[@]}" "$ranks" "$out/osu_coll.ompi" $bench $max > "$out/$bench.ompi.$r"
            mpich_collective "$out/$bench.mpich.$r" "${mpich[@]}" "$ranks" "$out/osu_coll.mpich" $bench $max
        fi
        # The rsmpi builds have every port but osu_ireduce_scatter (rsmpi 0.8 has no
        # MPI_Ireduce_scatter).
        if [ -n "$rs_builds" ] && [ -x "$rs_ompi/osu_$bench" ]; then
            # The same sizes as the others (OSU's default stops at 1 MiB).
            "${ompi[@]}" "$ranks" "$rs_ompi"/osu_$bench -m "1:$max" > "$out/$bench.ompi-rs.$r"
            mpich_collective "$out/$bench.mpich-rs.$r" "${mpich[@]}" "$ranks" "$rs_mpich"/osu_$bench -m "1:$max"
        fi
    done
done
if [ -z "$tcp" ]; then
    for ((r = 1; r <= repeats; r++)); do
        for who in mpirt mpich; do
            # Seconds with microseconds, start and end, one launch a line.
            start=$EPOCHREALTIME
            if [ $who = mpirt ]; then
                "${rsrun[@]}" 8 "$bin"/hello > /dev/null
            else
                "${mpich[@]}" 8 "$out/hello.mpich" > /dev/null
            fi
            echo "$start $EPOCHREALTIME" >> "$out/launch.$who"
        done
        "$out/memcpy.bin" >> "$out/memcpy.txt"
        "$out/cma.bin" >> "$out/cma.txt"
    done
fi
echo "after: $(cut -d' ' -f1 /proc/loadavg)" >> "$out/load.txt"
$python $c/report.py "$out" "$repeats" "${benches[@]}" "${collectives[@]}"
