#!/usr/bin/env bash
# Side by side, in one run: mpirt's multi-threaded ports (osu_latency_mt, osu_mbw_mr_mt; built
# with the feature `threads`) against the same loops in C (compare/osu_mt.c) on Open MPI at
# MPI_THREAD_MULTIPLE, two ranks on this host, interleaved and repeated; medians per size.
#   osu-benches/compare/mt.sh [-r REPEATS] [-m MAX_SIZE] [-i ITERATIONS] [-t "S:R"] [-p THREADS] [-x]
#                             [-b BASE_BIN_DIR]
# -i: timed iterations at every size (OSU's loop counts without it; Open MPI's threads are slow
# to run them where the ranks share cores).
# -t: osu_latency_mt's sender:receiver threads (1:2, OSU's default); -p: the message rate's
# threads a rank (2); -x: TCP between the ranks (MPIRT_TRANSPORT=tcp; Open MPI's btl tcp,self)
# instead of shared memory. -b: another build's directory holding rsrun, osu_latency_mt and
# osu_mbw_mr_mt (a baseline, built with the feature `threads`), run beside this checkout's in each
# repeat as "base", with the median of each repeat's ratio this/base.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=5
max=4096
lat_threads=1:2
rate_threads=2
tcp=
base=
iterations=()
while getopts "r:m:i:t:p:xb:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        m) max=$OPTARG ;;
        i) iterations=(-i "$OPTARG") && export OSU_MT_ITERATIONS=$OPTARG ;;
        t) lat_threads=$OPTARG ;;
        p) rate_threads=$OPTARG ;;
        x) tcp=1 ;;
        b) base=$(cd "$OPTARG" && pwd) ;;
        *) echo "usage: $0 [-r REPEATS] [-m MAX_SIZE] [-i ITERATIONS] [-t S:R] [-p THREADS] [-x] [-b BASE_BIN_DIR]" >&2; exit 2 ;;
    esac
done
cargo build --release -q -p launcher -p osu-benches --features osu-benches/threads
bin=$PWD/target/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.openmpi -O2 -pthread -o "$out/osu_mt" osu-benches/compare/osu_mt.c
mpirt_env=()
ompi_mca=(--mca btl self,vader)
if [ -n "$tcp" ]; then
    mpirt_env=(MPIRT_TRANSPORT=tcp)
    ompi_mca=(--mca btl self,tcp --mca pml ob1)
fi
ompi=(mpirun.openmpi --allow-run-as-root -n 2 --bind-to none "${ompi_mca[@]}")
senders=${lat_threads%%:*}
receivers=${lat_threads##*:}
for ((r = 1; r <= repeats; r++)); do
    env "${mpirt_env[@]}" "$bin/rsrun" -n 2 "$bin/osu_latency_mt" -t "$lat_threads" -m "1:$max" "${iterations[@]}" \
        > "$out/latency.mpirt.$r"
    if [ -n "$base" ]; then
        env "${mpirt_env[@]}" "$base/rsrun" -n 2 "$base/osu_latency_mt" -t "$lat_threads" -m "1:$max" "${iterations[@]}" \
            > "$out/latency.base.$r"
    fi
    "${ompi[@]}" "$out/osu_mt" latency_mt "$senders" "$receivers" "$max" > "$out/latency.ompi.$r"
    env "${mpirt_env[@]}" "$bin/rsrun" -n 2 "$bin/osu_mbw_mr_mt" -t "$rate_threads" -m "1:$max" "${iterations[@]}" \
        > "$out/rate.mpirt.$r"
    if [ -n "$base" ]; then
        env "${mpirt_env[@]}" "$base/rsrun" -n 2 "$base/osu_mbw_mr_mt" -t "$rate_threads" -m "1:$max" "${iterations[@]}" \
            > "$out/rate.base.$r"
    fi
    "${ompi[@]}" "$out/osu_mt" mbw_mr_mt "$rate_threads" "$max" > "$out/rate.ompi.$r"
done
# The median of each size's value over the repeats (the last column: us, or messages/s).
median() {
    cat "$out"/$1.* | awk '!/^#/ && NF { v[$1] = v[$1] " " $NF } END { for (s in v) print s, v[s] }' |
        while read -r size values; do
            echo "$size $(tr ' ' '\n' <<< "$values" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')"
        done | sort -n
}
echo "# $(lscpu | grep 'Model name' | sed 's/ \+/ /g'); load: $(cut -d' ' -f1-3 /proc/loadavg); $repeats runs interleaved, medians"
echo "# osu_latency_mt -t $lat_threads, latency (us)"
join <(median latency.mpirt) <(median latency.ompi) | awk 'BEGIN {printf "%-10s%14s%14s\n", "# Size", "mpirt", "Open MPI"} {printf "%-10s%14.2f%14.2f\n", $1, $2, $3}'
# Each repeat's latency per size, in run order: the medians above hide how a size's repeats
# spread, which is where a stall in a run shows.
every() {
    for ((r = 1; r <= repeats; r++)); do cat "$out/$1.$r"; done |
        awk '!/^#/ && NF { v[$1] = v[$1] " " $NF } END { for (s in v) print s, v[s] }' | sort -n
}
echo "# osu_latency_mt -t $lat_threads, latency (us), each repeat: mpirt | Open MPI"
join <(every latency.mpirt) <(every latency.ompi) |
    awk -v n="$repeats" '{printf "%-10s", $1; for (i = 2; i <= n + 1; i++) printf " %7.2f", $i; printf "  |"; for (i = n + 2; i <= 2 * n + 1; i++) printf " %7.2f", $i; print ""}'
echo "# osu_mbw_mr_mt -t $rate_threads, messages/s"
join <(median rate.mpirt) <(median rate.ompi) | awk 'BEGIN {printf "%-10s%14s%14s\n", "# Size", "mpirt", "Open MPI"} {printf "%-10s%14.0f%14.0f\n", $1, $2, $3}'
# Beside the baseline: each size's medians, and the median of the repeats' ratios this/base (each
# repeat ran both builds back to back, so a ratio compares runs under the same load).
if [ -n "$base" ]; then
    ratios() {
        for ((r = 1; r <= repeats; r++)); do
            join <(awk '!/^#/ && NF {print $1, $NF}' "$out/$1.mpirt.$r" | sort -k1,1) \
                <(awk '!/^#/ && NF {print $1, $NF}' "$out/$1.base.$r" | sort -k1,1) |
                awk '$3 > 0 {print $1, $2 / $3}'
        done | awk '{v[$1] = v[$1] " " $2} END {for (s in v) print s, v[s]}' |
            while read -r size values; do
                echo "$size $(tr ' ' '\n' <<< "$values" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')"
            done | sort -n
    }
    echo "# beside the baseline $base: medians, and the median of each repeat's ratio this/base"
    echo "# osu_latency_mt -t $lat_threads, latency (us)"
    join <(median latency.mpirt) <(median latency.base) | join - <(ratios latency) |
        awk 'BEGIN {printf "%-10s%14s%14s%14s\n", "# Size", "mpirt", "base", "ratio"} {printf "%-10s%14.2f%14.2f%14.2f\n", $1, $2, $3, $4}'
    echo "# osu_latency_mt -t $lat_threads, latency (us), each repeat: mpirt | base"
    join <(every latency.mpirt) <(every latency.base) |
        awk -v n="$repeats" '{printf "%-10s", $1; for (i = 2; i <= n + 1; i++) printf " %7.2f", $i; printf "  |"; for (i = n + 2; i <= 2 * n + 1; i++) printf " %7.2f", $i; print ""}'
    echo "# osu_mbw_mr_mt -t $rate_threads, messages/s"
    join <(median rate.mpirt) <(median rate.base) | join - <(ratios rate) |
        awk 'BEGIN {printf "%-10s%14s%14s%14s\n", "# Size", "mpirt", "base", "ratio"} {printf "%-10s%14.0f%14.0f%14.2f\n", $1, $2, $3, $4}'
fi
