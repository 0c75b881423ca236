#!/usr/bin/env bash
# mpirt's libfabric (OFI) transport beside libfabric's own fi_pingpong, Open MPI's `mtl ofi`
# (--mca pml cm --mca mtl ofi) on the same provider, and mpirt's native transport for the same
# pair (shared memory where the provider is shm, TCP otherwise): osu_latency at 8 B and 8 KiB,
# osu_bw at 64 KiB and 1 MiB, osu_mbw_mr at 8 B, 2 ranks on this host, medians of interleaved
# repeats, and paired ratios (each repeat's mpirt figure over the run beside it, then their
# median). mpirt over OFI runs twice, with its registration cache and without
# (MPIRT_OFI_REG_CACHE=0). Each repeat starts the four runs of a benchmark (cached, uncached,
# native, Open MPI) one place further round than the last, so that no run always comes first
# (the one after a build, or after fi_pingpong) and the order's bias cancels over a multiple
# of 4 repeats (4 by default: each run takes each place once). A run stopped by its 120 s
# bound reads "did not finish" where it gave no figure.
# fi_pingpong (-e rdm -m tagged) is a ping-pong: its MB/s at 1 MiB is a round trip's
# bandwidth, not a stream's, so read it as a floor.
#   osu-benches/compare/ofi.sh [-r REPEATS] [-p "PROVIDER..."] [-k DIR] [-R DIR]
# -k DIR keeps each repeat's figures in DIR as they come; -R DIR writes the tables from such a
# DIR without running anything (for a run stopped early: the repeats that finished), naming
# the command, commit and date of the run that measured them, as kept in DIR.
# Builds mpirt with the ofi feature into ${CARGO_TARGET_DIR:-target/ofi} first.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=4
providers="tcp;ofi_rxm shm udp;ofi_rxd"
keep=
report_only=
while getopts "r:p:k:R:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        p) providers=$OPTARG ;;
        k) keep=$OPTARG ;;
        R) report_only=$OPTARG ;;
        *) echo "usage: $0 [-r REPEATS] [-p \"PROVIDER...\"] [-k DIR] [-R DIR]" >&2; exit 2 ;;
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
bin=$PWD/$target/release
if [ -n "$report_only" ]; then
    out=$report_only
elif [ -n "$keep" ]; then
    out=$keep
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
if [ -z "$report_only" ]; then
    # What built the binaries measured, kept beside their figures so that -R names the run's
    # sources, not whatever the checkout holds when the report is written again.
    # Outside a git checkout (sources unpacked from an archive) the commit reads "unknown".
    changed=$({ git status --porcelain --untracked-files=no 2>/dev/null || true; } |
        awk '{print $NF}' | paste -sd, -)
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    {
        echo "osu-benches/compare/ofi.sh -r $repeats -p \"$providers\""
        echo "$commit${changed:+ (with uncommitted changes to ${changed//,/, })}"
        date -u +%Y-%m-%d
    } > "$out/provenance"
    CARGO_TARGET_DIR=$target cargo build --release -p launcher -p osu-benches \
        --features osu-benches/ofi -q
    mpicc.openmpi -O2 -Wno-stringop-overflow -o "$out/osu_p2p.ompi" osu-benches/compare/osu_p2p.c
fi
lat_sizes=(8 8192)
bw_sizes=(65536 1048576)
# The median of the numbers read ("-" and "stopped" lines left out), or "-" where there are
# none.
median() {
    { grep -E '^[-+]?[0-9.]+([eE][-+]?[0-9]+)?$' || true; } | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
            else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
# The figure at size $1 in column $2 (osu_mbw_mr's messages/s are column 3), or "-".
figure() { awk -v s="$1" -v c="$2" '$1 == s {v = $c} END {print (v == "" ? "-" : v)}'; }

# The sizes each benchmark runs (only those the tables show, so that runs stay short).
declare -A min_size=([latency]=8 [bw]=65536 [mbw_mr]=8)
declare -A max_size=([latency]=8192 [bw]=1048576 [mbw_mr]=8)
# mpirt over OFI on provider $1, or (with $1 empty) on its native transport $2.
mpirt() {
    local provider=$1 native=$2 bench=$3 sizes="${min_size[$3]}:${max_size[$3]}"
    if [ -n "$provider" ]; then
        "$bin/rsrun" --timeout 120 --bind-to core -n 2 --transport ofi \
            --ofi-provider "$provider" "$bin/osu_$bench" -m "$sizes"
    else
        "$bin/rsrun" --timeout 120 --bind-to core -n 2 --transport "$native" \
            "$bin/osu_$bench" -m "$sizes"
    fi
}
# Open MPI's mtl ofi on udp;ofi_rxd hung (osu latency past 1 MiB, 16 minutes): bounded, and a
# run that fails or is stopped leaves its figures out; a stopped one exits 124 (timeout's),
# or 137 where it outlived TERM by 5 s and KILL stopped it.
ompi() {
    timeout -k 5 120 mpirun.openmpi --allow-run-as-root -n 2 --bind-to core --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include "$1" --mca btl self "$out/osu_p2p.ompi" "$2" \
        "${max_size[$2]}" "${min_size[$2]}"
}
# fi_pingpong's figure at `size` bytes in column `col` (7: usec/xfer, 6: MB/sec); "-" where
# it gave none (on udp;ofi_rxd its 1 MiB run fails or runs out its bound), so that each
# repeat still writes one line.
pingpong() {
    local provider=$1 size=$2 iters=$3 col=$4 port=$((20000 + RANDOM % 20000)) v
    taskset -c 0 timeout 120 fi_pingpong -e rdm -m tagged -p "$provider" -B $port \
        -S "$size" -I "$iters" > /dev/null 2>&1 &
    sleep 1
    v=$(taskset -c 1 timeout 120 fi_pingpong -e rdm -m tagged -p "$provider" -P $port \
        -S "$size" -I "$iters" 127.0.0.1 2>/dev/null | awk -v c="$col" 'NR == 2 {print $c}' ||
        true)
    wait || true
    echo "${v:--}"
}
# The runs of one benchmark in a repeat, in the order the first repeat takes them, and what
# the report calls them.
runs=(mpirt nocache native ompi)
declare -A whose=([mpirt]="mpirt ofi" [nocache]="mpirt ofi without its cache"
    [native]="mpirt's native transport" [ompi]="Open MPI")
# Run $1 of benchmark $4 on provider $2 (native transport $3).
run() {
    case $1 in
        mpirt) mpirt "$2" "" "$4" ;;
        nocache) MPIRT_OFI_REG_CACHE=0 mpirt "$2" "" "$4" ;;
        native) mpirt "" "$3" "$4" ;;
        ompi) if [ -n "$ompi_ofi" ]; then ompi "$2" "$4" 2>/dev/null; fi ;;
    esac
}
# The figure at size $1 in column $2 of run output $3, "stopped" where there is none and the
# run was stopped by its bound.
repeat_figure() {
    local v
    v=$(figure "$1" "$2" < "$3")
    if [ "$v" = - ] && [ -e "$3.stopped" ]; then v=stopped; fi
    echo "$v"
}

for provider in $providers; do
    [ -z "$report_only" ] || break
    key=${provider//;/_}
    native=tcp
    [ "$provider" = shm ] && native=shm
    echo -n "$provider: before: $(cut -d' ' -f1 /proc/loadavg)" >> "$out/$key.load"
    for ((r = 1; r <= repeats; r++)); do
        for bench in latency bw mbw_mr; do
            for ((i = 0; i < ${#runs[@]}; i++)); do
                who=${runs[(i + r - 1) % ${#runs[@]}]}
                run "$who" "$provider" "$native" $bench > "$out/$key.$bench.$who.$r" ||
                    case $? in
                        124 | 137) touch "$out/$key.$bench.$who.$r.stopped" ;;
                    esac
            done
        done
        # One line per repeat in each figure's file ("-" where the run gave none, "stopped"
        # where it gave none before its bound stopped it), so that line r of two files are
        # the same repeat's runs, seconds apart.
        for who in "${runs[@]}"; do
            for size in "${lat_sizes[@]}"; do
                repeat_figure "$size" 2 "$out/$key.latency.$who.$r" >> "$out/$key.lat$size.$who"
            done
            for size in "${bw_sizes[@]}"; do
                repeat_figure "$size" 2 "$out/$key.bw.$who.$r" >> "$out/$key.bw$size.$who"
            done
            repeat_figure 8 3 "$out/$key.mbw_mr.$who.$r" >> "$out/$key.mbw8.$who"
        done
        for size in "${lat_sizes[@]}"; do
            pingpong "$provider" "$size" 10000 7 >> "$out/$key.lat$size.pingpong"
        done
        for size in "${bw_sizes[@]}"; do
            pingpong "$provider" "$size" 1000 6 >> "$out/$key.bw$size.pingpong"
        done
        touch "$out/$key.mbw8.pingpong"
        echo -n ", after repeat $r: $(cut -d' ' -f1 /proc/loadavg)" >> "$out/$key.load"
    done
done

# The median of file $1's figures; "did not finish" where it has none and a run was stopped.
fig() {
    local m=-
    [ -s "$1" ] && m=$(median < "$1")
    if [ "$m" = - ] && grep -qx stopped "$1" 2>/dev/null; then m="did not finish"; fi
    echo "$m"
}
# The median over repeats of file $1's figure over file $2's, repeat by repeat, and how many
# repeats both have.
paired() {
    [ -s "$1" ] && [ -s "$2" ] || { echo "-"; return; }
    local ratios n
    ratios=$(paste "$1" "$2" | awk '$1 + 0 == $1 && $2 + 0 == $2 && $2 != 0 {print $1 / $2}')
    n=$(grep -c . <<<"$ratios" || true)
    if [ "$n" = 0 ]; then echo "-"; else printf "%.2f (%s)" "$(median <<<"$ratios")" "$n"; fi
}
row() {
    local what=$1 key=$2 file=$3 m c o p n
    m=$(fig "$out/$key.$file.mpirt")
    c=$(fig "$out/$key.$file.nocache")
    o=$(fig "$out/$key.$file.ompi")
    p=$(fig "$out/$key.$file.pingpong")
    n=$(fig "$out/$key.$file.native")
    echo "| $what | $m | $c | $o | $p | $n | $(paired "$out/$key.$file.mpirt" "$out/$key.$file.ompi") |" \
        "$(paired "$out/$key.$file.mpirt" "$out/$key.$file.nocache") |"
}
if [ -s "$out/provenance" ]; then
    { read -r command_line; read -r commit; read -r day; } < "$out/provenance"
    echo "Command: \`$command_line\`${report_only:+ (this report written again by -R)}, built at" \
        "commit $commit, $day."
else
    echo "Command and commit: not recorded in $out (a run of an older ofi.sh)."
fi
echo "CPU: $(lscpu | grep 'Model name' | sed 's/Model name: *//'), $(nproc) cores."
# The repeats that finished, for each provider (fewer than asked where a run was stopped).
done_repeats=$(for provider in $providers; do
    echo -n "${provider}: $(cat "$out/${provider//;/_}.lat8.mpirt" 2>/dev/null | grep -c . || true); "
done)
loads=$(for provider in $providers; do
    cat "$out/${provider//;/_}.load" 2>/dev/null || echo -n "$provider: not recorded"
    echo -n "; "
done)
echo "2 ranks on this host bound to a core each, medians of interleaved repeats (${done_repeats% })." \
    "Paired" \
    "ratios: each repeat's mpirt-over-OFI figure over the other run's of the same repeat, then" \
    "the median of those, with how many repeats both ran in parentheses; mpirt/ompi is against" \
    "Open MPI's mtl ofi on the same provider (below 1 is better for latency, above 1 for" \
    "bandwidth and message rate), cache/no cache against mpirt over OFI with" \
    "MPIRT_OFI_REG_CACHE=0. Load (1-minute average) ${loads% }"
[ -n "$ompi_ofi" ] || echo "This Open MPI has no mtl ofi (ompi_info | grep ofi): its column is empty."
for provider in $providers; do
    key=${provider//;/_}
    native=tcp
    [ "$provider" = shm ] && native=shm
    echo
    echo "### $provider"
    echo
    echo "| figure | mpirt ofi | mpirt ofi, no cache | Open MPI mtl ofi | fi_pingpong" \
        "| mpirt $native | mpirt/ompi, paired | cache/no cache, paired |"
    echo "|---|---|---|---|---|---|---|---|"
    for size in "${lat_sizes[@]}"; do
        row "latency $size B (us)" "$key" "lat$size"
    done
    for size in "${bw_sizes[@]}"; do
        row "bandwidth $size B (MB/s)" "$key" "bw$size"
    done
    row "message rate 8 B (messages/s)" "$key" mbw8
    stopped=$(for who in ompi mpirt nocache native; do
        for bench in latency bw mbw_mr; do
            n=$(find "$out" -name "$key.$bench.$who.*.stopped" | wc -l)
            [ "$n" = 0 ] || echo -n "${whose[$who]} osu_$bench in $n, "
        done
    done)
    if [ -n "$stopped" ]; then
        echo
        echo "Runs that did not finish within 120 s and were stopped: ${stopped%, } of the" \
            "repeats (where a stopped run gave no figure, the table reads did not finish)."
    fi
done
