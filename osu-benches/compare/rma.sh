#!/usr/bin/env bash
# The one-sided OSU tests of mpirt (its Rust ports) beside Open MPI (compare/osu_rma.c, the
# same loops in C) on two ranks of this host, in one window kind and synchronisation: 8-byte
# put, get, accumulate, fetch_and_op and compare_and_swap latency, and put bandwidth at 1 MiB.
# mpirt runs twice: its shared-memory path and its active messages (MPIRT_WINDOW_PATH=messages).
#   osu-benches/compare/rma.sh [-w create|allocate|dynamic] [-s SYNC] [-r REPEATS]
# Prints a table of the medians of REPEATS runs (default 3). Open MPI 4.1.4 runs allocate
# windows on its osc sm (its default choice there crashes in MPI_Compare_and_swap), and the
# others on what it picks itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
window=allocate
sync=flush
repeats=3
while getopts "w:s:r:" opt; do
    case $opt in
        w) window=$OPTARG ;;
        s) sync=$OPTARG ;;
        r) repeats=$OPTARG ;;
        *) echo "usage: $0 [-w create|allocate|dynamic] [-s SYNC] [-r REPEATS]" >&2; exit 2 ;;
    esac
done
cargo build --release -q -p launcher -p osu-benches
bin=$PWD/target/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.openmpi -O2 -o "$out/osu_rma.ompi" osu-benches/compare/osu_rma.c
osc=()
[ "$window" = allocate ] && osc=(--mca osc sm)
# The value a run prints for its one size.
value() { tail -n 1 | awk '{print $2}'; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
printf "%-12s %8s %14s %14s %14s\n" test size "mpirt shm" "mpirt messages" "Open MPI"
for test in put_latency get_latency acc_latency fop_latency cas_latency put_bw; do
    size=8
    [ "$test" = put_bw ] && size=1048576
    row=()
    for runtime in shm messages ompi; do
        for _ in $(seq "$repeats"); do
            case $runtime in
                shm) "$bin/rsrun" -n 2 "$bin/osu_$test" -w "$window" -s "$sync" -m "$size:$size" ;;
                messages) MPIRT_WINDOW_PATH=messages "$bin/rsrun" -n 2 "$bin/osu_$test" \
                    -w "$window" -s "$sync" -m "$size:$size" ;;
                ompi) mpirun.openmpi --allow-run-as-root -n 2 --bind-to none "${osc[@]}" \
                    "$out/osu_rma.ompi" "$test" "$window" "$sync" "$size" "$size" ;;
            esac | value
        done > "$out/values"
        row+=("$(median < "$out/values")")
    done
    printf "%-12s %8s %14s %14s %14s\n" "$test" "$size" "${row[@]}"
done
