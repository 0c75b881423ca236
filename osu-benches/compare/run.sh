#!/usr/bin/env bash
# Side by side, in one run: mpirt's OSU ports against the same OSU method in C on Open MPI
# and on MPICH (Debian's packages), interleaved and repeated; medians per message size.
#   osu-benches/compare/run.sh [-r REPEATS] [-o OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=5
out=target/compare
while getopts "r:o:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        o) out=$OPTARG ;;
        *) echo "usage: $0 [-r REPEATS] [-o OUTDIR]" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"

if ! command -v mpicc.openmpi >/dev/null || ! command -v mpicc.mpich >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev mpich libmpich-dev
fi
cargo build --release --workspace -q
bin=${CARGO_TARGET_DIR:-target}/release
c=osu-benches/compare
mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/osu_p2p.ompi" $c/osu_p2p.c
mpicc.mpich -O2 -Wno-stringop-overflow -o "$out/osu_p2p.mpich" $c/osu_p2p.c
mpicc.mpich -O2 -o "$out/hello.mpich" $c/hello.c
cc -O2 -o "$out/memcpy.bin" $c/memcpy.c
cc -O2 -o "$out/cma.bin" $c/cma.c

ompi=(mpirun.openmpi --allow-run-as-root --oversubscribe -n)
mpich=(mpiexec.mpich -n)
# Open MPI binds each rank to its own core by default (see mpirun --report-bindings); rsrun
# does not unless asked. Unbound, a busy host's scheduler may stack both ranks on one CPU,
# where every wait spins its MPIRT_SPIN_US out before the peer can run (100 us a message).
rsrun=("$bin/rsrun" --bind-to core -n)
for bench in latency bw bibw; do
    for ((r = 1; r <= repeats; r++)); do
        "${rsrun[@]}" 2 "$bin"/osu_$bench > "$out/$bench.mpirt.$r"
        "${ompi[@]}" 2 "$out/osu_p2p.ompi" $bench > "$out/$bench.ompi.$r"
        "${mpich[@]}" 2 "$out/osu_p2p.mpich" $bench > "$out/$bench.mpich.$r"
    done
done
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
python3 $c/report.py "$out" "$repeats"
