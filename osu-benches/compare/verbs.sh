#!/usr/bin/env bash
# RDMA verbs side by side with perftest on the same two Soft-RoCE devices (rxe0 <-> rxe1 across
# a veth pair), in the QEMU guest of ../shared/rdma-vm: osu_latency at 8 B against ib_send_lat,
# osu_bw at 64 KiB and 1 MiB against ib_read_bw (mpirt's rendezvous is an RDMA READ), medians
# of interleaved repeats. The guest emulates the CPU, which sets the absolute speed: read the
# ratios.
#   osu-benches/compare/verbs.sh [-r REPEATS]
# Builds mpirt with the verbs feature into target/verbs first.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=3
while getopts "r:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        *) echo "usage: $0 [-r REPEATS]" >&2; exit 2 ;;
    esac
done
bin=$PWD/target/verbs/release

if [ ! -e /sys/class/infiniband/rxe1 ]; then
    CARGO_TARGET_DIR=target/verbs cargo build --release --workspace --features verbs -q
    exec ../shared/rdma-vm/rdma-vm -n 2 -t 3000 -- bash "$0" -r "$repeats"
fi

# The guest's RoCE v2 IPv4 GID, as ../shared/rdma-vm/prove-rdma.sh finds it.
gid=1
server=10.99.0.1
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# perftest: server on rxe0, client on rxe1; prints the client's figure in column `col` of the
# row for `size` bytes.
perftest() {
    local tool=$1 size=$2 col=$3
    shift 3
    timeout 300 "$tool" -d rxe0 -x $gid -s "$size" "$@" > /dev/null 2>&1 &
    sleep 1.5
    timeout 300 "$tool" -d rxe1 -x $gid -s "$size" "$@" $server 2>/dev/null |
        awk -v s="$size" -v c="$col" '$1 == s {print $c}'
    wait
}

osu() {
    local bench=$1 size=$2
    shift 2
    "$bin/rsrun" -n 2 --transport verbs --verbs-dev rxe0,rxe1 "$bin/$bench" -m "$size:$size" "$@" |
        awk -v s="$size" '$1 == s {print $2}'
}

out=$(mktemp -d)
for ((r = 1; r <= repeats; r++)); do
    osu osu_latency 8 -i 2000 -x 200 >> "$out/lat.mpirt"
    perftest ib_send_lat 8 6 -n 2000 >> "$out/lat.perftest"
    for size in 65536 1048576; do
        osu osu_bw $size -i 20 -x 2 >> "$out/bw$size.mpirt"
        # perftest reports MiB/s (2^20 bytes); OSU reports MB/s (10^6 bytes).
        perftest ib_read_bw $size 4 -n 200 | awk '{print $1 * 1.048576}' >> "$out/bw$size.perftest"
    done
done

row() {
    local what=$1 file=$2 unit=$3
    local m p
    m=$(median < "$out/$file.mpirt")
    p=$(median < "$out/$file.perftest")
    printf '%-34s %12s %12s %8.2f   (%s)\n' "$what" "$m" "$p" "$(awk -v a="$m" -v b="$p" 'BEGIN {print a / b}')" "$unit"
}
echo "# mpirt over verbs vs perftest, Soft-RoCE in QEMU, medians of $repeats"
printf '%-34s %12s %12s %8s\n' "" mpirt perftest ratio
row "latency 8 B (osu_latency/ib_send_lat)" lat us
row "bandwidth 64 KiB (osu_bw/ib_read_bw)" bw65536 MB/s
row "bandwidth 1 MiB (osu_bw/ib_read_bw)" bw1048576 MB/s
rm -rf "$out"
