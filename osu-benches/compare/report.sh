#!/usr/bin/env bash
# The issue-8 report: run.sh's comparison with 3 repeats of what issue 8 sets targets for:
# over shared memory osu_latency, osu_bw and osu_mbw_mr on 2 ranks, osu_allreduce on 4, and
# the launch time; over TCP between two test hosts osu_latency and osu_bw, when run as root
# with ../shared/testhosts/ssh-hosts. Open MPI and MPICH run both OSU's C method and mpirt's
# benchmark source built on rsmpi (run.sh -s both). Then issue 6's part: ucx.sh, mpirt's UCX
# PML against Open MPI's pml ucx on UCX_TLS=tcp and sm,self (a few minutes; where UCX,
# ucx_perftest or Open MPI's pml ucx is missing, the report says so). And shm-callgrind.sh:
# the instructions each runtime spends per 8-byte message, which say why a shared-memory
# latency or rate target is missed (valgrind; without it, the report says so). Writes
# osu-benches/REPORT.md, with the charts and every measurement (CSV) in osu-benches/report/.
# -c: issue 23's collective sweep too: every OSU collective, blocking and non-blocking, on 2,
# 3, 4, 8 and 16 ranks (oversubscribed past the cores), 1 B to 1 MiB (4 MiB for broadcasts and
# all-reductions), beside Open MPI and MPICH, with its heat map in REPORT.md; it needs a quiet
# machine and hours (-n "RANKS..." runs fewer rank counts, -b "BENCH..." fewer collectives).
# -S: that sweep alone, which replaces only its own section of REPORT.md (and its heat map);
# the rest of the report, and the sections other scripts wrote into it, stay as they are.
# -m BYTES: the sweep's largest size (run.sh -m).
#   osu-benches/compare/report.sh [-r REPEATS] [-c|-S [-n "RANKS..."] [-b "BENCH..."] [-m BYTES]]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=3
sweep=
sweep_only=
sweep_ranks="2 3 4 8 16"
sweep_benches=
sweep_max=
while getopts "r:cSn:b:m:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        c) sweep=1 ;;
        S) sweep=1 sweep_only=1 ;;
        n) sweep_ranks=$OPTARG ;;
        b) sweep_benches=$OPTARG ;;
        m) sweep_max=$OPTARG ;;
        *) echo "usage: $0 [-r REPEATS] [-c|-S [-n \"RANKS...\"] [-b \"BENCH...\"] [-m BYTES]]" >&2; exit 2 ;;
    esac
done
c=osu-benches/compare
out=target/report
rm -rf "$out"
# Issue 23's sweep, one folder per rank count; the issue asks for at least 5 repeats.
run_sweep() {
    local all run n
    all="barrier bcast reduce allreduce allgather allgatherv alltoall alltoallv gather gatherv"
    all="$all scatter scatterv reduce_scatter reduce_scatter_block"
    all="$all $(printf 'i%s ' $all)"
    for n in $sweep_ranks; do
        run="$c/run.sh -r $(( repeats < 5 ? 5 : repeats )) -n $n -o $out/coll-$n -s c"
        run="$run${sweep_max:+ -m $sweep_max}"
        run="$run -b \"${sweep_benches:-$all}\""
        commands+=("$run")
        eval "$run"
        sweep_dirs+=("$out/coll-$n")
    done
}
commands=()
sweep_dirs=()
if [ -n "$sweep_only" ]; then
    run_sweep
    source "$c/python.sh"
    $python $c/report.py --sweep osu-benches/REPORT.md "$(printf '%s\n' "${commands[@]}")" \
        "${sweep_dirs[@]}"
    echo "replaced the collective sweep's section of osu-benches/REPORT.md"
    exit 0
fi
commands+=("$c/run.sh -r $repeats -n 4 -o $out/shm -s both -b \"latency bw mbw_mr allreduce\"")
hosts=${MPIRT_SSH_HOSTS:-$(cd .. && pwd)/shared/testhosts/ssh-hosts}
if [ "$(id -u)" = 0 ] && [ -x "$hosts" ]; then
    commands+=("$c/run.sh -t -r $repeats -o $out/tcp -s both")
fi
eval "${commands[0]}"
# A failed TCP run (the test hosts are shared) leaves the report without TCP figures but
# saying why: its last lines of errors.
if [ ${#commands[@]} -gt 1 ] && ! eval "${commands[1]}" 2> >(tee "$out/tcp-errors" >&2); then
    tail -3 "$out/tcp-errors" > "$out/tcp-failed"
fi
# The work per message behind the shared-memory figures: instruction counts (valgrind).
work="$c/shm-callgrind.sh -o $out/callgrind"
commands+=("$work")
if ! eval "$work" 2> >(tee "$out/callgrind-errors" >&2); then
    tail -3 "$out/callgrind-errors" > "$out/callgrind-failed"
fi
# Likewise a UCX run that cannot run here (no UCX, no ucx_perftest, no pml ucx in Open MPI).
ucx="$c/ucx.sh -r $repeats -o $out/ucx"
commands+=("$ucx")
if ! eval "$ucx" 2> >(tee "$out/ucx-errors" >&2); then
    tail -3 "$out/ucx-errors" > "$out/ucx-failed"
fi
if [ -n "$sweep" ]; then
    run_sweep
fi
source "$c/python.sh"
$python $c/report.py --markdown osu-benches/REPORT.md "$(printf '%s\n' "${commands[@]}")" \
    "$out/shm" "$out/tcp" "$out/ucx" "$out/callgrind" "${sweep_dirs[@]}"
echo "wrote osu-benches/REPORT.md"
