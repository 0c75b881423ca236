#!/usr/bin/env bash
# The comparison a folder made by compare/bundle.sh runs, as its run.sh, on a machine with
# neither Rust nor an MPI: mpirt against Open MPI on that one host, interleaved and repeated,
# within a time budget, every result under $OUT.
#   [OUT=DIR] [BUDGET=SECONDS] [RANKS="2 4 8 16"] [BENCHES="..."] [MAX=BYTES] [REPEATS=5]
#   [MIN_REPEATS=3] [P2P_REPEATS=9] [MANY="128 64 16"] [MANY_ITERATIONS=20] bash run.sh
# In order:
# 1. point to point, 2 ranks bound to a core each: osu_latency 8 B, osu_mbw_mr 8 B and osu_bw
#    4 MiB, mpirt's ports against compare/osu_p2p.c, P2P_REPEATS interleaved pairs;
# 2. OSU's blocking collectives (BENCHES; all nine of OSU's blocking set but the v forms) on
#    each of RANKS, 1 B to MAX (64 KiB), mpirt's ports against compare/osu_coll.c, every rank
#    bound to a core while the ranks fit the cores. A repeat runs every operation on every rank
#    count, mpirt then Open MPI, so a repeat the budget cuts short leaves the earlier ones whole;
#    MIN_REPEATS (3) always start, more up to REPEATS while the last one's time fits before the
#    reserve for step 3 (MANY_RESERVE seconds, 120);
# 3. many ranks (compare/many-ranks.sh): the 32 KiB all_to_all on each of MANY (none if
#    empty; the largest first, issue 23's targets), MANY_ITERATIONS calls a run, 3 repeats,
#    with peak shared memory (sampled every 0.2 s: a run shorter than that may show none),
#    while the budget lasts.
# BUDGET (400 s) bounds the measuring: no run starts past it, none runs more than 30 s past
# it, and any one run is stopped after RUN_LIMIT seconds (60). The summary takes 10-30 s more. Then the summary, on stdout and in $OUT/summary.txt: the machine,
# the paired ratios mpirt / Open MPI of step 1, report.py's collective sweep section of step 2
# ($OUT/sweep.md, its heat map $OUT/collectives-heatmap.png), step 3's lines and every failed
# run. Every raw output goes to $OUT/raw.tar.gz: p2p/ and one run.sh -o folder per rank count
# (coll-N), which `report.py --sweep` reads again; $OUT/log.txt has the progress.
# No -e: a step that fails (a run, a report) must not lose the outputs of those before it, nor
# raw.tar.gz; `run` keeps each run's status, and the summary lists the failures.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# A copy that lost the files' modes on its way (not every transfer keeps them) runs all the same.
chmod +x "$here"/bin/* "$here"/c/* "$here"/c/bin/* "$here"/target/release/* \
    "$here"/ompi/*/bin/* "$here"/glibc/ld-linux-x86-64.so.2
source "$here/env.sh"
cd "$here"
out=${OUT:-/tmp/out}
budget=${BUDGET:-400}
read -ra ranks <<< "${RANKS:-2 4 8 16}"
read -ra benches <<< "${BENCHES:-barrier bcast reduce allreduce allgather alltoall gather scatter reduce_scatter}"
max=${MAX:-65536}
repeats=${REPEATS:-5}
min_repeats=${MIN_REPEATS:-3}
p2p_repeats=${P2P_REPEATS:-9}
read -ra many <<< "${MANY-128 64 16}"
many_iterations=${MANY_ITERATIONS:-20}
limit=${RUN_LIMIT:-60}
reserve=$(( ${#many[@]} ? ${MANY_RESERVE:-120} : 0 ))
bin=$here/target/release
work=$(mktemp -d "${TMPDIR:-/tmp}/bundle-work.XXXXXX")
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
log=$!
say() { printf '[%4d s] %s\n' "$SECONDS" "$*"; }

# Open MPI binds to whole cores and refuses more ranks than it has slots for: the launch
# options for $1 ranks. rsrun --bind-to core pins rank i to the i-th CPU, and none when the
# ranks outnumber the CPUs.
cpus=$(nproc)
cores=$(lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l)
ompi_binding() {
    if (($1 <= cores)); then
        echo --bind-to core
    elif (($1 <= cpus)); then
        echo --use-hwthread-cpus --bind-to hwthread
    else
        echo --oversubscribe --bind-to none
    fi
}
# Runs "${@:2}" into file $1 within RUN_LIMIT and the budget; a run that fails leaves FILE.failed
# (report.py reads only FILE) and a line in failures, one past the budget a line in not-started.
failed=0
run() {
    local file=$1 status
    shift
    if ((SECONDS >= budget)); then
        echo "$*" >> "$work/not-started"
        return
    fi
    # The last runs may overrun the budget by 30 s at most.
    timeout -k 5 $((budget + 30 - SECONDS < limit ? budget + 30 - SECONDS : limit)) "$@" \
        > "$file" 2> "$file.err"
    status=$?
    if ((status != 0)); then
        failed=$((failed + 1))
        mv "$file" "$file.failed"
        { echo "exit $status: $*"; tail -3 "$file.err" | sed 's/^/    /'; } >> "$work/failures"
    elif ! [ -s "$file.err" ]; then
        rm -f "$file.err"
    fi
}

# 128 ranks want more descriptors than some images allow by default; both runtimes get them.
ulimit -n "$(ulimit -Hn)"
# Both runtimes keep their shared memory in /dev/shm; a bare image may not mount it.
if ! [ -d /dev/shm ] || ! [ -w /dev/shm ]; then
    mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
fi
{
    echo "== machine"
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)):' |
        sed 's/  */ /g'
    echo "kernel $(uname -r); $(ldd --version | head -1); $(free -g | awk '/^Mem/ { print $2 }') GiB memory"
    echo "/dev/shm: $(df -h /dev/shm | tail -1 | awk '{ print $2, "size,", $4, "free" }');" \
        "$(ulimit -n) descriptors a process"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "bundle: $(tr '\n' ';' < VERSION)"
} > "$work/machine.txt"
cat "$work/machine.txt"
# A runtime that cannot start says so in its own words before anything is timed, and the run
# ends there rather than spend the budget on runs that fail alike.
for probe in "mpirun.openmpi $(ompi_binding 2) --report-bindings -n 2 c/osu_p2p latency 8 8" \
    "$bin/rsrun --bind-to core --report-bindings -n 2 $bin/osu_latency -m 8:8"; do
    say "probe: $probe"
    if ! timeout -k 5 60 $probe > "$work/probe" 2>&1 || ! grep -q '^8 ' "$work/probe"; then
        cat "$work/probe"
        echo "the probe failed: ${probe%% *} cannot run here; what its programs lack:"
        ldd c/bin/osu_p2p "$bin/rsrun" "$OPAL_PREFIX/bin/mpirun" | grep -E ':$|not found'
        exit 1
    fi
    grep -v '^#' "$work/probe" | tail -4 | tee -a "$work/probes.txt"
done

say "point to point: $p2p_repeats repeats"
p2p=$work/p2p
mkdir -p "$p2p"
for ((r = 1; r <= p2p_repeats; r++)); do
    for bench in latency:8 mbw_mr:8 bw:4194304; do
        size=${bench#*:} bench=${bench%:*}
        run "$p2p/$bench.mpirt.$r" "$bin/rsrun" --bind-to core -n 2 "$bin/osu_$bench" -m "$size:$size"
        run "$p2p/$bench.ompi.$r" mpirun.openmpi $(ompi_binding 2) -n 2 c/osu_p2p "$bench" "$size" "$size"
    done
done

coll_end=$((budget - reserve))
say "collectives: ${benches[*]} on ${ranks[*]} ranks, 1 B to $max B; $min_repeats to $repeats repeats until ${coll_end} s"
for n in "${ranks[@]}"; do
    mkdir -p "$work/coll-$n"
done
r=0
last=0
while ((r < repeats && SECONDS < budget)); do
    if ((r >= min_repeats && SECONDS + last > coll_end)); then
        break
    fi
    r=$((r + 1))
    start=$SECONDS
    for n in "${ranks[@]}"; do
        echo "repeat $r: $(cut -d' ' -f1 /proc/loadavg)" >> "$work/coll-$n/load.txt"
        for bench in "${benches[@]}"; do
            run "$work/coll-$n/$bench.mpirt.$r" "$bin/rsrun" --bind-to core -n "$n" \
                "$bin/osu_$bench" -m "1:$max"
            run "$work/coll-$n/$bench.ompi.$r" mpirun.openmpi $(ompi_binding "$n") -n "$n" \
                c/osu_coll "$bench" "$max"
        done
    done
    last=$((SECONDS - start))
    say "collectives repeat $r: $last s, $failed failed runs so far"
done
coll_repeats=$r

for n in "${many[@]}"; do
    left=$((budget + 30 - SECONDS))
    if ((left < 40)); then
        echo "many ranks: $n ranks not run, budget spent" >> "$work/many.txt"
        continue
    fi
    say "many ranks: $n"
    timeout -k 5 "$left" bash osu-benches/compare/many-ranks.sh -c c/osu_coll -n "$n" \
        -b alltoall -s 32768 -i "$many_iterations" -o "$work/many" >> "$work/many.txt" 2>&1 ||
        echo "many ranks: $n ranks stopped (exit $?)" >> "$work/many.txt"
done
say "measured; load $(cut -d' ' -f1-3 /proc/loadavg)"

source osu-benches/compare/python.sh
c=osu-benches/compare
$python $c/report.py "$p2p" "$p2p_repeats" latency mbw_mr bw > "$p2p/tables.txt"
dirs=()
for n in "${ranks[@]}"; do
    $python $c/report.py "$work/coll-$n" "$coll_repeats" "${benches[@]}" > "$work/coll-$n/tables.txt"
    dirs+=("$work/coll-$n")
done
how="bundle run.sh: RANKS=\"${ranks[*]}\" MAX=$max, $coll_repeats repeats; rsrun --bind-to core,"
how="$how mpirun $(ompi_binding "${ranks[-1]}") at ${ranks[-1]} ranks ($cores cores, $cpus CPUs)"
$python $c/report.py --sweep "$work/sweep.md" "$how" "${dirs[@]}" > /dev/null
# report.py describes run.sh's launches (Open MPI oversubscribed, MPICH beside it); these ran
# otherwise.
$python - "$work/sweep.md" <<'EOF'
import sys
from pathlib import Path

sweep = Path(sys.argv[1])
lines = [l for l in sweep.read_text().splitlines() if not l.startswith("MPICH: no cell")]
text = "\n".join(lines) + "\n"
sweep.write_text(text.replace(
    "Open MPI with `--oversubscribe` (it yields while it waits past the cores), rsrun with "
    "`--bind-to core` (every rank unbound where a host's ranks outnumber its CPUs)",
    "Open MPI and rsrun with every rank bound to a core of its own while the ranks fit the "
    "cores (compare/bundle-run.sh)"))
EOF
{
    cat "$work/machine.txt"
    echo "Open MPI: $OMPI_MCA_pml over btl $OMPI_MCA_btl; each rank on its own core while they fit"
    echo
    echo "== point to point, 2 ranks, paired ratio mpirt / Open MPI (median of $p2p_repeats pairs)"
    PYTHONDONTWRITEBYTECODE=1 $python - "$p2p" "$p2p_repeats" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "osu-benches/compare")
import report  # noqa: E402 (after the path)

out, repeats = Path(sys.argv[1]), int(sys.argv[2])
records = report.collect(out, repeats, ["latency", "mbw_mr", "bw"])
m, runs = report.medians(records), report.paired(records)
for bench, size, goal in (("latency", 8, "at most 0.8"), ("mbw_mr", 8, "at least 1.2"),
                          ("bw", 1 << 22, "at least 1.0")):
    mine, other = m.get((bench, size, "mpirt")), m.get((bench, size, "ompi"))
    if mine is None or other is None:
        print(f"{bench} {report.size_name(size)}: not measured (see failures)")
        continue
    ratio = report.paired_ratio(runs, (bench, size, "mpirt"), (bench, size, "ompi"))
    values = sorted(runs[bench, size, "mpirt"].values())
    u = report.unit(bench)
    print(f"{bench} {report.size_name(size)}: mpirt {report.figure(mine)} {u}, Open MPI "
          f"{report.figure(other)} {u}, paired ratio {ratio:.2f} (goal {goal}); mpirt runs "
          f"{report.figure(values[0])}-{report.figure(values[-1])}")
EOF
    echo
    echo "== collectives (report.py --sweep; ratios mpirt / Open MPI, lower is better)"
    grep -v '^!\[' "$work/sweep.md" | grep -v 'results-coll-RANKS' | cat -s
    echo "== many ranks, 32 KiB all_to_all (compare/many-ranks.sh, $many_iterations calls a run)"
    cat "$work/many.txt" 2>/dev/null
    echo
    echo "== $failed failed runs; $(cat "$work/not-started" 2>/dev/null | wc -l) not started, the budget spent"
    head -40 "$work/failures" 2>/dev/null
    echo "== probes (bindings)"
    cat "$work/probes.txt"
} > "$out/summary.txt"
cp "$work/sweep.md" "$out/"
cp "$work/report/collectives-heatmap.png" "$out/" 2>/dev/null
tar -czf "$out/raw.tar.gz" -C "$work" . && rm -rf "$work"
say "done: $out ($(ls "$out" | tr '\n' ' '))"
echo
cat "$out/summary.txt"
# Lets tee write its last lines before the command returns.
exec >&- 2>&-
wait "$log"
