#!/usr/bin/env bash
# What an 8-byte message costs the CPU over shared memory, mpirt beside Open MPI: both run the
# same OSU loops (mpirt's ports; Open MPI the C port osu_p2p.c, as in run.sh) under callgrind,
# and tools/callgrind-busy.py counts the instructions run once per message (a whole multiple
# of the message count), so that spinning, start-up and per-window work drop out. Two loops:
# osu_bw's window of 64 messages (110 windows: what bounds the message rate, the receiver's
# and the sender's work per message) and osu_latency's ping-pong (10,100 round trips: each
# rank's work per round trip). Instruction counts repeat under load, unlike timings.
#   osu-benches/compare/shm-callgrind.sh [-o OUTDIR] [-f FEATURES]
# -o: keeps the profiles and writes OUTDIR/callgrind.csv (bench,runtime,rank,instructions),
#     which report.py reads; without it the table is printed only.
# -f: builds mpirt's benchmarks with these cargo features (for example threads, to see what the
#     way to the shared engine costs a program that stays at Single).
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=
features=
while getopts "o:f:" opt; do
    case $opt in
        o) keep=$OPTARG ;;
        f) features=$OPTARG ;;
        *) echo "usage: $0 [-o OUTDIR] [-f FEATURES]" >&2; exit 2 ;;
    esac
done
source osu-benches/compare/callgrind-setup.sh
cargo build --release -q -p launcher -p osu-benches ${features:+--features "$features"}
bin=$PWD/target/release
# osu_p2p.c runs 100 timed windows after 10 warm-up ones, and 10,000 round trips after 100.
windows=110
round_trips=10100
# A wait that outlasts the spin budget sleeps, and under callgrind (tens of times slower) most
# would: spin, as a rank that is never descheduled does.
MPIRT_SPIN_US=100000000 "$bin/rsrun" -n 2 $callgrind --callgrind-out-file="$out/bw.mpirt.%q{MPIRT_RANK}" \
    "$bin/osu_bw" -m 8:8 -i 100 -x 10 > /dev/null 2>&1
MPIRT_SPIN_US=100000000 "$bin/rsrun" -n 2 $callgrind \
    --callgrind-out-file="$out/latency.mpirt.%q{MPIRT_RANK}" \
    "$bin/osu_latency" -m 8:8 -i 10000 -x 100 > /dev/null 2>&1
for bench in bw latency; do
    mpirun.openmpi --allow-run-as-root -n 2 --bind-to none $callgrind \
        --callgrind-out-file="$out/$bench.ompi.%q{OMPI_COMM_WORLD_RANK}" \
        "$out/osu_p2p.ompi" $bench 8 8 > /dev/null 2>&1
done
source osu-benches/compare/python.sh
{
    echo "bench,runtime,rank,instructions"
    for bench in bw latency; do
        count=$round_trips
        [ $bench = bw ] && count=$((windows * 64))
        for runtime in mpirt ompi; do
            for rank in 0 1; do
                n=$($python tools/callgrind-busy.py "$out/$bench.$runtime.$rank" $count |
                    awk '/whole program/ {print $1}')
                echo "$bench,$runtime,$rank,$n"
            done
        done
    done
} > "$out/callgrind.csv"
column -t -s, "$out/callgrind.csv"
