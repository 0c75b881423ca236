#!/usr/bin/env bash
# mpirt's libfabric (OFI) transport beside libfabric's own fi_pingpong, Open MPI's `mtl ofi`
# (--mca pml cm --mca mtl ofi) on the same provider, and mpirt's native transport for the same
# pair (shared memory where the provider is shm, TCP otherwise): osu_latency at 8 B and 8 KiB,
# osu_bw at 64 KiB and 1 MiB, osu_mbw_mr at 8 B, 2 ranks on this host, medians of interleaved
# repeats. fi_pingpong (-e rdm -m tagged) is a ping-pong: its MB/s at 1 MiB is a round trip's
# bandwidth, not a stream's, so read it as a floor.
#   osu-benches/compare/ofi.sh [-r REPEATS] [-p "PROVIDER..."]
# Builds mpirt with the ofi feature into ${CARGO_TARGET_DIR:-target/ofi} first.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=3
providers="tcp;ofi_rxm shm udp;ofi_rxd"
while getopts "r:p:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        p) providers=$OPTARG ;;
        *) echo "usage: $0 [-r REPEATS] [-p \"PROVIDER...\"]" >&2; exit 2 ;;
    esac
done
for tool in fi_pingpong mpicc.openmpi; do
    if ! command -v $tool >/dev/null; then
        echo "$0: $tool is missing (apt-get install -y libfabric-bin libopenmpi-dev openmpi-bin)" >&2
        exit 1
    fi
done
ompi_ofi=$(ompi_info | grep -q 'mtl: ofi' && echo 1 || true)
target=${CARGO_TARGET_DIR:-target/ofi}
CARGO_TARGET_DIR=$target cargo build --release -p launcher -p osu-benches --features osu-benches/ofi -q
bin=$PWD/$target/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/osu_p2p.ompi" osu-benches/compare/osu_p2p.c
max=1048576
lat_sizes=(8 8192)
bw_sizes=(65536 1048576)
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# The figure at size $1 in column $2 (default 2; osu_mbw_mr's messages/s are column 3).
pick() { awk -v s="$1" -v c="${2:-2}" '$1 == s {print $c}'; }

# mpirt over OFI on provider $1, or (with $1 empty) on its native transport $2.
mpirt() {
    local provider=$1 native=$2 bench=$3
    if [ -n "$provider" ]; then
        "$bin/rsrun" --timeout 120 --bind-to core -n 2 --transport ofi \
            --ofi-provider "$provider" "$bin/osu_$bench" -m "$max"
    else
        "$bin/rsrun" --timeout 120 --bind-to core -n 2 --transport "$native" \
            "$bin/osu_$bench" -m "$max"
    fi
}
# Open MPI's mtl ofi on udp;ofi_rxd hung (osu latency past 1 MiB, 16 minutes): bounded, and a
# run that fails or is stopped leaves its figures out.
ompi() {
    timeout 120 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include "$1" --mca btl self "$out/osu_p2p.ompi" "$2" "$max"
}
# fi_pingpong's figure at `size` bytes in column `col` (7: usec/xfer, 6: MB/sec).
pingpong() {
    local provider=$1 size=$2 iters=$3 col=$4 port=$((20000 + RANDOM % 20000))
    taskset -c 0 timeout 120 fi_pingpong -e rdm -m tagged -p "$provider" -B $port \
        -S "$size" -I "$iters" > /dev/null 2>&1 &
    sleep 1
    taskset -c 1 timeout 120 fi_pingpong -e rdm -m tagged -p "$provider" -P $port \
        -S "$size" -I "$iters" 127.0.0.1 2>/dev/null | awk -v c="$col" 'NR == 2 {print $c}'
    wait
}

loads=()
for provider in $providers; do
    key=${provider//;/_}
    native=tcp
    [ "$provider" = shm ] && native=shm
    loads+=("$provider: before: $(cut -d' ' -f1 /proc/loadavg)")
    for ((r = 1; r <= repeats; r++)); do
        for bench in latency bw mbw_mr; do
            mpirt "$provider" "" $bench > "$out/$key.$bench.mpirt.$r" || true
            mpirt "" "$native" $bench > "$out/$key.$bench.native.$r" || true
            if [ -n "$ompi_ofi" ]; then
                ompi "$provider" $bench > "$out/$key.$bench.ompi.$r" 2>/dev/null || true
            fi
            touch "$out/$key.$bench.ompi.$r"
        done
        for who in mpirt native ompi; do
            for size in "${lat_sizes[@]}"; do
                pick "$size" < "$out/$key.latency.$who.$r" >> "$out/$key.lat$size.$who"
            done
            for size in "${bw_sizes[@]}"; do
                pick "$size" < "$out/$key.bw.$who.$r" >> "$out/$key.bw$size.$who"
            done
            pick 8 3 < "$out/$key.mbw_mr.$who.$r" >> "$out/$key.mbw8.$who"
        done
        for size in "${lat_sizes[@]}"; do
            pingpong "$provider" "$size" 10000 7 >> "$out/$key.lat$size.pingpong"
        done
        for size in "${bw_sizes[@]}"; do
            pingpong "$provider" "$size" 1000 6 >> "$out/$key.bw$size.pingpong"
        done
        touch "$out/$key.mbw8.pingpong"
    done
    loads[-1]+="; after: $(cut -d' ' -f1 /proc/loadavg)"
done

fig() { if [ -s "$1" ]; then median < "$1"; else echo "-"; fi; }
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b}'
}
row() {
    local what=$1 key=$2 file=$3 m o p n
    m=$(fig "$out/$key.$file.mpirt")
    o=$(fig "$out/$key.$file.ompi")
    p=$(fig "$out/$key.$file.pingpong")
    n=$(fig "$out/$key.$file.native")
    echo "| $what | $m | $o | $p | $n | $(ratio "$m" "$o") |"
}
echo "2 ranks on this host, medians of $repeats interleaved repeats; mpirt/ompi is mpirt over" \
    "OFI against Open MPI's mtl ofi on the same provider (below 1 is better for latency, above" \
    "1 for bandwidth and message rate). Load (1-minute average) $(IFS=';'; echo "${loads[*]}")."
[ -n "$ompi_ofi" ] || echo "This Open MPI has no mtl ofi (ompi_info | grep ofi): its column is empty."
for provider in $providers; do
    key=${provider//;/_}
    native=tcp
    [ "$provider" = shm ] && native=shm
    echo
    echo "### $provider"
    echo
    echo "| figure | mpirt ofi | Open MPI mtl ofi | fi_pingpong | mpirt $native | mpirt/ompi |"
    echo "|---|---|---|---|---|---|"
    for size in "${lat_sizes[@]}"; do
        row "latency $size B (us)" "$key" "lat$size"
    done
    for size in "${bw_sizes[@]}"; do
        row "bandwidth $size B (MB/s)" "$key" "bw$size"
    done
    row "message rate 8 B (messages/s)" "$key" mbw8
done
