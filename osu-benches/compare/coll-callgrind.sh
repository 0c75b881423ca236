#!/usr/bin/env bash
# What one short collective call costs the CPU, mpirt beside Open MPI: both run OSU's loop
# (mpirt's ports, Open MPI the C port osu_coll.c, as in run.sh: each call followed by a
# barrier) under callgrind, and tools/callgrind-busy.py counts the instructions run once per
# iteration (a whole multiple of the iteration count), so that spinning, start-up and the
# warm-up's extra work drop out; instruction counts repeat under load, unlike timings. The
# figure is a call and its barrier, per rank.
#   osu-benches/compare/coll-callgrind.sh [-o OUTDIR] [-n RANKS] [-m SIZE] [-b "BENCH..."]
# -o: keeps the profiles and writes OUTDIR/coll-callgrind.csv (bench,runtime,rank,instructions);
#     without it the table is printed only. -n: ranks (2). -m: bytes per call (8).
# -b: benchmarks (names without osu_; all nine collectives by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=
ranks=2
size=8
benches="barrier bcast reduce allreduce allgather alltoall gather scatter reduce_scatter"
while getopts "o:n:m:b:" opt; do
    case $opt in
        o) keep=$OPTARG ;;
        n) ranks=$OPTARG ;;
        m) size=$OPTARG ;;
        b) benches=$OPTARG ;;
        *) echo "usage: $0 [-o OUTDIR] [-n RANKS] [-m SIZE] [-b \"BENCH...\"]" >&2; exit 2 ;;
    esac
done
source osu-benches/compare/callgrind-setup.sh
mpicc.openmpi -O2 -o "$out/osu_coll.ompi" osu-benches/compare/osu_coll.c
cargo build --release -q -p launcher -p osu-benches
bin=$PWD/target/release
# osu_coll.c runs 1,000 timed calls after 100 warm-up ones at sizes up to 8 KiB (LARGE),
# 100 after 10 above; the ports are told the same.
if ((size > 8192)); then
    timed=100 warmup=10
else
    timed=1000 warmup=100
fi
iterations=$((timed + warmup))
source osu-benches/compare/python.sh
# Runs a benchmark quietly, keeping its stderr in LOG: a failed run (under set -e) says which
# it was and why before the script ends.
run_quietly() {
    local log=$1
    shift
    if ! "$@" > /dev/null 2> "$log"; then
        echo "$0: failed: $*" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
}
echo "bench,runtime,rank,instructions" > "$out/coll-callgrind.csv"
for bench in $benches; do
    # A wait that outlasts the spin budget sleeps, and under callgrind most would: spin, as
    # a rank that is never descheduled does.
    run_quietly "$out/$bench.mpirt.log" env MPIRT_SPIN_US=100000000 \
        "$bin/rsrun" -n "$ranks" $callgrind \
        --callgrind-out-file="$out/$bench.mpirt.%q{MPIRT_RANK}" \
        "$bin/osu_$bench" -m "$size:$size" -i "$timed" -x "$warmup"
    run_quietly "$out/$bench.ompi.log" mpirun.openmpi --allow-run-as-root --oversubscribe \
        -n "$ranks" --bind-to none $callgrind \
        --callgrind-out-file="$out/$bench.ompi.%q{OMPI_COMM_WORLD_RANK}" \
        "$out/osu_coll.ompi" "$bench" "$size" "$size"
    for runtime in mpirt ompi; do
        for ((rank = 0; rank < ranks; rank++)); do
            n=$($python tools/callgrind-busy.py "$out/$bench.$runtime.$rank" $iterations |
                awk '/whole program/ {print $1}')
            echo "$bench,$runtime,$rank,$n" >> "$out/coll-callgrind.csv"
        done
    done
done
column -t -s, "$out/coll-callgrind.csv"
