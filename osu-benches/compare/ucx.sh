#!/usr/bin/env bash
# mpirt on its UCX PML (rsrun --pml ucx) beside Open MPI's pml ucx and UCX's own ucx_perftest,
# two ranks on this host, on the same UCX_TLS: osu_latency at 8 B and 8 KiB against tag_lat,
# osu_bw at 64 KiB and 1 MiB against tag_bw; medians of interleaved repeats. Open MPI and
# mpirt run the same OSU loops (osu_p2p.c and mpirt's ports); ucx_perftest is UCX without
# any MPI above it, the floor both stand on.
#   osu-benches/compare/ucx.sh [-r REPEATS] [-T "TLS..."] [-o OUTDIR]
# -T: the UCX_TLS settings to compare on, space-separated (default: "tcp sm,self").
# -o: keeps every measurement in OUTDIR/<TLS, comma as _>/, named as run.sh names its own
#     (BENCH.RUNTIME.REPEAT in OSU's format, ucx_perftest's as runtime "perftest", and
#     load.txt), for report.py (report.sh's UCX part); without it they are thrown away.
# Builds mpirt with the ucx feature into target/ucx first; needs ucx-utils (ucx_perftest) and
# an Open MPI with pml ucx (Debian's has it: ompi_info | grep 'pml: ucx').
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=5
tls_list="tcp sm,self"
keep=
while getopts "r:T:o:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        T) tls_list=$OPTARG ;;
        o) keep=$OPTARG ;;
        *) echo "usage: $0 [-r REPEATS] [-T \"TLS...\"] [-o OUTDIR]" >&2; exit 2 ;;
    esac
done
if ! command -v ucx_perftest >/dev/null; then
    echo "$0: ucx_perftest is missing (apt-get install -y ucx-utils)" >&2
    exit 1
fi
if ! ompi_info | grep -q 'pml: ucx'; then
    echo "this Open MPI has no pml ucx (ompi_info | grep ucx): nothing to compare with" >&2
    exit 1
fi
CARGO_TARGET_DIR=target/ucx cargo build --release --workspace --features mpirt/ucx -q
bin=$PWD/target/ucx/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/osu_p2p.ompi" osu-benches/compare/osu_p2p.c
max=1048576
lat_sizes=(8 8192)
bw_sizes=(65536 1048576)
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# The figure for `size` in an OSU output (size, then the value).
pick() { awk -v s="$1" '$1 == s {print $2}'; }

# Both ranks bound to their own core, as Open MPI binds by default.
mpirt() {
    "$bin/rsrun" --bind-to core --pml ucx -n 2 "$bin/osu_$1" -m "$max"
}
# Open MPI 4.1's pml ucx turns itself down unless UCX offers an RDMA transport
# (pml_ucx_tls, pml_ucx_devices): told to take any, it runs on UCX_TLS like mpirt does.
ompi() {
    mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --mca pml ucx --mca osc ^ucx \
        --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS \
        "$out/osu_p2p.ompi" "$1" "$max"
}
# ucx_perftest: a server and a client on one port of this host, each on its own core; prints
# the client's overall figure (latency in us, or bandwidth in MB/s of 2^20 bytes).
perftest() {
    local test=$1 size=$2 iters=$3 col=$4 port=$((20000 + RANDOM % 20000))
    taskset -c 0 timeout 120 ucx_perftest -p $port -t "$test" -s "$size" -n "$iters" \
        > /dev/null 2>&1 &
    sleep 1
    taskset -c 1 timeout 120 ucx_perftest localhost -p $port -t "$test" -s "$size" \
        -n "$iters" 2>/dev/null | awk -v c="$col" '$1 == "Final:" {print $c}'
    wait
}

for tls in $tls_list; do
    export UCX_TLS=$tls
    key=${tls//,/_}
    runs=$out/runs/$key
    mkdir -p "$runs"
    echo "before: $(cut -d' ' -f1 /proc/loadavg)" > "$runs/load.txt"
    for ((r = 1; r <= repeats; r++)); do
        mpirt latency > "$runs/latency.mpirt.$r"
        ompi latency > "$runs/latency.ompi.$r"
        mpirt bw > "$runs/bw.mpirt.$r"
        ompi bw > "$runs/bw.ompi.$r"
        for size in "${lat_sizes[@]}"; do
            pick "$size" < "$runs/latency.mpirt.$r" >> "$out/$key.lat$size.mpirt"
            pick "$size" < "$runs/latency.ompi.$r" >> "$out/$key.lat$size.ompi"
            perftest tag_lat "$size" 10000 5 | tee -a "$out/$key.lat$size.perftest" |
                awk -v s="$size" '{print s, $1}' >> "$runs/latency.perftest.$r"
        done
        for size in "${bw_sizes[@]}"; do
            pick "$size" < "$runs/bw.mpirt.$r" >> "$out/$key.bw$size.mpirt"
            pick "$size" < "$runs/bw.ompi.$r" >> "$out/$key.bw$size.ompi"
            # OSU reports MB/s of 10^6 bytes.
            perftest tag_bw "$size" 2000 7 | awk '{print $1 * 1.048576}' |
                tee -a "$out/$key.bw$size.perftest" |
                awk -v s="$size" '{print s, $1}' >> "$runs/bw.perftest.$r"
        done
    done
    echo "after: $(cut -d' ' -f1 /proc/loadavg)" >> "$runs/load.txt"
done
if [ -n "$keep" ]; then
    rm -rf "$keep"
    mkdir -p "$keep"
    cp -r "$out/runs/." "$keep/"
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
row() {
    local what=$1 file=$2 unit=$3 m o p
    m=$(median < "$out/$file.mpirt")
    o=$(median < "$out/$file.ompi")
    p=$(median < "$out/$file.perftest")
    printf '%-26s %10s %10s %10s %10s %10s  (%s)\n' "$what" "$m" "$o" "$p" \
        "$(ratio "$m" "$o")" "$(ratio "$m" "$p")" "$unit"
}
echo "# mpirt --pml ucx vs Open MPI --mca pml ucx vs ucx_perftest, 2 ranks on this host," \
    "medians of $repeats"
for tls in $tls_list; do
    key=${tls//,/_}
    echo "## UCX_TLS=$tls"
    printf '%-26s %10s %10s %10s %10s %10s\n' "" mpirt ompi perftest mpirt/ompi mpirt/perf
    for size in "${lat_sizes[@]}"; do
        row "latency $size B" "$key.lat$size" us
    done
    for size in "${bw_sizes[@]}"; do
        row "bandwidth $size B" "$key.bw$size" MB/s
    done
done
