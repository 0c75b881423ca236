#!/usr/bin/env bash
# What one short one-sided operation costs the CPU on shared memory, mpirt beside Open MPI:
# both run the same OSU loops (mpirt's ports; Open MPI the C port osu_rma.c, as in rma.sh) on
# two ranks of this host under callgrind, and tools/callgrind-busy.py counts the instructions
# run once per iteration (a whole multiple of the 10,100 iterations), so that spinning,
# start-up and window creation drop out; instruction counts repeat under load, unlike timings.
# An iteration is the test's operation (8 bytes) and its synchronisation: put or get and a
# flush, a flush_local, a lock and unlock, a lock_all and unlock_all; in fence and pscw the
# ping-pong's round trip (each rank's epochs and its one operation). Rank 0 is the origin,
# rank 1 the target (in the passive modes its figure is nothing: it sits in a barrier).
#   osu-benches/compare/rma-callgrind.sh [-o OUTDIR] [-t "TEST..."] [-w "KIND..."] [-s "SYNC..."]
#                                        [-r "RUNTIME..."] [-B BINDIR]
# -o: keeps the profiles and writes OUTDIR/rma-callgrind.csv
#     (test,window,sync,runtime,rank,instructions); without it the table is printed only.
# -t: tests (put_latency get_latency fop_latency cas_latency by default; acc_latency and
#     get_acc_latency too where named). -w: window kinds (allocate create dynamic).
# -s: synchronisations (flush flush_local lock lock_all pscw fence). -r: mpirt and/or ompi.
# -B: mpirt's rsrun and OSU ports from BINDIR instead of this tree's build (another commit's,
#     for a before and after).
# Open MPI 4.1 runs allocate windows on its osc sm (as rma.sh: its default there crashes in
# MPI_Compare_and_swap) and create and dynamic ones on what it picks (osc rdma over vader).
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=
tests="put_latency get_latency fop_latency cas_latency"
kinds="allocate create dynamic"
syncs="flush flush_local lock lock_all pscw fence"
runtimes="mpirt ompi"
bin=
while getopts "o:t:w:s:r:B:" opt; do
    case $opt in
        o) keep=$OPTARG ;;
        t) tests=$OPTARG ;;
        w) kinds=$OPTARG ;;
        s) syncs=$OPTARG ;;
        r) runtimes=$OPTARG ;;
        B) bin=$(cd "$OPTARG" && pwd) ;;
        *) echo "usage: $0 [-o OUTDIR] [-t \"TEST...\"] [-w \"KIND...\"] [-s \"SYNC...\"]" \
                "[-r \"RUNTIME...\"] [-B BINDIR]" >&2
           exit 2 ;;
    esac
done
source osu-benches/compare/callgrind-setup.sh
mpicc.openmpi -O2 -o "$out/osu_rma.ompi" osu-benches/compare/osu_rma.c
if [ -z "$bin" ]; then
    case " $runtimes " in
        *" mpirt "*) cargo build --release -q -p launcher -p osu-benches ;;
    esac
    bin=$PWD/target/release
fi
# osu_rma.c runs 10,000 timed iterations after 100 warm-up ones at 8 bytes; the ports are
# told the same.
iterations=10100
source osu-benches/compare/python.sh
# Runs one cell under callgrind, its profiles OUT/TEST.KIND.SYNC.RUNTIME.RANK; a failed run says
# which it was and why, and leaves no profile (its row then says "-").
profile() {
    local test=$1 kind=$2 sync=$3 runtime=$4 name="$out/$1.$2.$3.$4" osc=()
    case $runtime in
        mpirt)
            # A wait that outlasts the spin budget sleeps, and under callgrind (tens of times
            # slower) most would: spin, as a rank that is never descheduled does.
            MPIRT_SPIN_US=100000000 "$bin/rsrun" -n 2 $callgrind \
                --callgrind-out-file="$name.%q{MPIRT_RANK}" "$bin/osu_$test" -w "$kind" \
                -s "$sync" -m 8:8 -i 10000 -x 100 ;;
        ompi)
            [ "$kind" = allocate ] && osc=(--mca osc sm)
            mpirun.openmpi --allow-run-as-root -n 2 --bind-to none "${osc[@]}" $callgrind \
                --callgrind-out-file="$name.%q{OMPI_COMM_WORLD_RANK}" "$out/osu_rma.ompi" \
                "$test" "$kind" "$sync" 8 8 ;;
    esac > "$name.log" 2>&1 || {
        echo "$0: $runtime $test -w $kind -s $sync failed:" >&2
        tail -n 5 "$name.log" >&2
        rm -f "$name".[01]
    }
}
{
    echo "test,window,sync,runtime,rank,instructions"
    for test in $tests; do
        for kind in $kinds; do
            for sync in $syncs; do
                for runtime in $runtimes; do
                    profile "$test" "$kind" "$sync" "$runtime"
                    for rank in 0 1; do
                        n=-
                        if [ -f "$out/$test.$kind.$sync.$runtime.$rank" ]; then
                            n=$($python tools/callgrind-busy.py \
                                "$out/$test.$kind.$sync.$runtime.$rank" $iterations |
                                awk '/whole program/ {print $1}')
                        fi
                        echo "$test,$kind,$sync,$runtime,$rank,$n"
                    done
                done
            done
        done
    done
} > "$out/rma-callgrind.csv"
column -t -s, "$out/rma-callgrind.csv"
