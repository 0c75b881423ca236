#!/usr/bin/env bash
# Many ranks on this host (issue 23): time and peak shared memory of mpirt's collectives beside
# Open MPI's (the C port, compare/osu_coll.c, `mpirun --oversubscribe`), interleaved.
#   osu-benches/compare/many-ranks.sh [-r REPEATS] [-n "RANKS..."] [-b "BENCH..."] [-s "BYTES..."]
#       [-i ITERATIONS] [-x BASE_BIN_DIR] [-c OSU_COLL] [-o OUTDIR]
# Defaults: 3 repeats, 64 and 128 ranks, alltoall and allreduce, 8 B and 32 KiB, 100 timed
# iterations a run (10 warm-up) on both sides. -x adds a third contender, mpirt's binaries in
# BASE_BIN_DIR (rsrun and osu_*, e.g. main's target/release), run the same way. -c runs the C
# port built already (compare/bundle.sh's, on a machine without mpicc) instead of building it.
# Each repeat runs every contender once for time alone, then, in the first repeat only, once
# more under compare/shm_peak.py for memory (its sampling costs CPU, so it is kept out of the
# timed runs; memory does not depend on the load). Prints per cell the median time of each
# contender, the median of the paired ratios mpirt/Open MPI (and base/Open MPI), and the peak
# shared memory by kind; the load (`uptime`) before each cell.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=3
rank_counts="64 128"
benches="alltoall allreduce"
sizes="8 32768"
iterations=100
base=
c_port=
out=target/many-ranks
while getopts "r:n:b:s:i:x:c:o:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        n) rank_counts=$OPTARG ;;
        b) benches=$OPTARG ;;
        s) sizes=$OPTARG ;;
        i) iterations=$OPTARG ;;
        x) base=$(realpath "$OPTARG") ;;
        c) c_port=$(realpath "$OPTARG") ;;
        o) out=$OPTARG ;;
        *) sed -n 3,5p "$0" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release
c=osu-benches/compare
if [ -n "$c_port" ]; then
    cp "$c_port" "$out/osu_coll.ompi"
else
    mpicc.openmpi -O2 -o "$out/osu_coll.ompi" $c/osu_coll.c
fi
source $c/python.sh
warmup=$((iterations / 10 > 0 ? iterations / 10 : 1))

# The command of contender $1 for bench $2 at $3 bytes on $4 ranks.
command_of() {
    case $1 in
        mpirt) echo "$bin/rsrun -n $4 $bin/osu_$2 -m $3:$3 -i $iterations -x $warmup" ;;
        base) echo "$base/rsrun -n $4 $base/osu_$2 -m $3:$3 -i $iterations -x $warmup" ;;
        ompi) echo "mpirun.openmpi --allow-run-as-root --oversubscribe -n $4 $out/osu_coll.ompi $2 $3 $3 $iterations" ;;
    esac
}
contenders=(mpirt ompi)
[ -n "$base" ] && contenders=(mpirt base ompi)

# The average latency (us) of the row for $2 bytes in file $1.
latency() { awk -v s="$2" '$1 == s { print $2 }' "$1"; }

for n in $rank_counts; do
    for bench in $benches; do
        for size in $sizes; do
            cell="$bench $size B, $n ranks"
            echo "== $cell; load: $(uptime | sed 's/.*load average: //')"
            for ((r = 0; r < repeats; r++)); do
                for who in "${contenders[@]}"; do
                    f="$out/$bench.$size.$n.$who.$r"
                    $(command_of $who $bench $size $n) > "$f"
                    if ((r == 0)); then
                        $python $c/shm_peak.py -- $(command_of $who $bench $size $n) \
                            > /dev/null 2> "$f.mem"
                    fi
                done
            done
            for who in "${contenders[@]}"; do
                times=$(for ((r = 0; r < repeats; r++)); do
                    latency "$out/$bench.$size.$n.$who.$r" $size
                done | tr '\n' ' ')
                ratios=
                if [ $who != ompi ]; then
                    ratios=$(for ((r = 0; r < repeats; r++)); do
                        echo "$(latency "$out/$bench.$size.$n.$who.$r" $size) $(latency "$out/$bench.$size.$n.ompi.$r" $size)"
                    done | awk '{ print $1 / $2 }' | tr '\n' ' ')
                fi
                $python - "$who" "$times" "$ratios" "$(grep shm_peak "$out/$bench.$size.$n.$who.0.mem")" <<'EOF'
import statistics, sys
who, times, ratios, mem = sys.argv[1:]
times = [float(t) for t in times.split()]
ratios = [float(r) for r in ratios.split()]
line = f"  {who:6} median {statistics.median(times):10.1f} us  runs {' '.join(f'{t:.1f}' for t in times)}"
if ratios:
    line += f"  vs Open MPI {statistics.median(ratios):.2f} (runs {' '.join(f'{r:.2f}' for r in ratios)})"
print(line)
print(f"         {mem}")
EOF
            done
        done
    done
done
