#!/usr/bin/env bash
# Start-up time of a hello job, launch to exit, under each launcher that starts mpirt ranks
# (issue 29), beside a C MPI hello (hello.c: MPI_Init, printf, MPI_Finalize) under the same
# launcher: Open MPI's where the launcher speaks PMIx (srun --mpi=pmix, mpirun), MPICH's where it
# speaks PMI (srun --mpi=pmi2, mpiexec.hydra). rsrun starts no C MPI program; its row has no C
# time. Every (launcher, ranks, program) runs once per round, rounds interleaved so that a
# noisy machine's drift falls on all alike; prints the medians and mpirt / C.
#
#   osu-benches/compare/startup.sh [-r ROUNDS] [-n "1 8 32"] [-l "rsrun srun-pmi2 ..."]
#                                  [-H HOSTS] [-o DIR]
#
# srun runs on one node of the test Slurm (../shared/testhosts/slurm-local, netns mode: its
# host1), with -O so that 32 tasks may share its CPUs; the script does not bring Slurm up or
# down, and leaves out the srun rows where sinfo fails. The `pmix` feature's hello is built in
# target/pmix. -H HOSTS spreads every job's ranks round-robin over the SSH test hosts host1 to
# hostHOSTS (../shared/testhosts/ssh-hosts up HOSTS first; srun over as many Slurm nodes), each
# launcher reaching them by ssh with the hosts' ssh_config.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=7
# Seconds a launch may take before it is killed and counted as failed.
launch_timeout=120
sizes="1 8 32"
launchers="rsrun srun-pmi2 srun-pmix mpirun hydra"
keep=
hosts=0
while getopts "r:n:l:H:o:" opt; do
    case $opt in
    r) rounds=$OPTARG ;;
    n) sizes=$OPTARG ;;
    l) launchers=$OPTARG ;;
    H) hosts=$OPTARG ;;
    o) keep=$OPTARG ;;
    *)
        sed -n '2,17p' "$0" >&2
        exit 2
        ;;
    esac
done
# The C programs and every time measured (startup.csv) stay in DIR, target/startup by default.
mkdir -p "${keep:-target/startup}"
out=$(cd "${keep:-target/startup}" && pwd)

cargo build --release -q -p launcher -p examples
CARGO_TARGET_DIR=target/pmix cargo build --release -q -p examples --features mpirt/pmix
mpicc.openmpi -O2 -o "$out/hello.ompi" osu-benches/compare/hello.c
mpicc.mpich -O2 -o "$out/hello.mpich" osu-benches/compare/hello.c
plain=$PWD/target/release/hello
pmix=$PWD/target/pmix/release/hello
if ! sinfo -h >/dev/null 2>&1; then
    echo "no Slurm answers (sinfo): the srun rows are left out" >&2
    launchers=$(tr ' ' '\n' <<<"$launchers" | grep -v '^srun' | tr '\n' ' ')
fi

# Over test hosts: the hosts' ssh_config, an ssh that uses it (for the launchers that take
# only a program), and the host lists each launcher's syntax wants.
if [ "$hosts" -gt 0 ]; then
    ssh_config=${SSH_HOSTS_DIR:-${TMPDIR:-/tmp}/mpirt-testhosts/ssh}/ssh_config
    export MPIRT_SSH_ARGS="-F $ssh_config"
    printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$ssh_config" >"$out/ssh"
    chmod +x "$out/ssh"
    host_list() { seq -f "host%g$1" -s, 1 "$hosts"; }
fi

# The command line that starts $3 ranks of program $2 under launcher $1.
command_for() {
    local launcher=$1 program=$2 n=$3
    if [ "$hosts" -gt 0 ]; then
        case $launcher in
        rsrun) echo "target/release/rsrun -H $(host_list ":$n") --map-by node -n $n $program" ;;
        srun-pmi2 | srun-pmix)
            echo "srun --mpi=${launcher#srun-} -N $hosts -O -n $n $program" ;;
        mpirun)
            echo "mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none" \
                "-H $(host_list ":$n") --map-by node --mca plm_rsh_agent $out/ssh" \
                "--mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24" \
                "-n $n $program" ;;
        hydra)
            echo "mpiexec.hydra -hosts $(host_list :1) -launcher ssh -launcher-exec $out/ssh" \
                "-iface rsbr0 -n $n $program" ;;
        esac
        return
    fi
    case $launcher in
    rsrun) echo "target/release/rsrun -n $n $program" ;;
    srun-pmi2) echo "srun --mpi=pmi2 -N 1 -w host1 -O -n $n $program" ;;
    srun-pmix) echo "srun --mpi=pmix -N 1 -w host1 -O -n $n $program" ;;
    mpirun) echo "mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -n $n $program" ;;
    hydra) echo "mpiexec.hydra -n $n $program" ;;
    esac
}
# mpirt's hello and the C MPI's that the launcher starts.
programs_for() {
    case $1 in
    rsrun) echo "mpirt:$plain" ;;
    srun-pmi2 | hydra) echo "mpirt:$plain C:$out/hello.mpich" ;;
    srun-pmix | mpirun) echo "mpirt:$pmix C:$out/hello.ompi" ;;
    esac
}

csv=$out/startup.csv
echo "launcher,ranks,program,round,seconds" >"$csv"
for round in $(seq "$rounds"); do
    for n in $sizes; do
        for launcher in $launchers; do
            for entry in $(programs_for "$launcher"); do
                program=${entry%%:*}
                cmd=$(command_for "$launcher" "${entry#*:}" "$n")
                start=$(date +%s.%N)
                # A launch that hangs (a rank that never reaches its peers) must not hang the
                # benchmark: it counts as a failed run.
                if ! lines=$(timeout "$launch_timeout" $cmd 2>"$out/stderr" | grep -c '^Hello from rank'); then
                    lines=0
                fi
                end=$(date +%s.%N)
                if [ "$lines" != "$n" ]; then
                    echo "round $round: '$cmd' said hello $lines times, not $n:" >&2
                    cat "$out/stderr" >&2
                    continue
                fi
                echo "$launcher,$n,$program,$round,$(echo "$end - $start" | bc)" >>"$csv"
            done
        done
    done
    echo "round $round of $rounds done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

python3 - "$csv" <<'EOF'
import csv, statistics, sys
times = {}
for row in csv.DictReader(open(sys.argv[1])):
    times.setdefault((row["launcher"], int(row["ranks"]), row["program"]), []).append(float(row["seconds"]))
print("| launcher | ranks | mpirt (s) | C MPI (s) | mpirt / C | runs |")
print("|---|---:|---:|---:|---:|---:|")
for launcher, n in sorted({(l, n) for l, n, _ in times}, key=lambda k: (k[1], k[0])):
    m = times.get((launcher, n, "mpirt"), [])
    c = times.get((launcher, n, "C"), [])
    med = lambda xs: statistics.median(xs) if xs else None
    fmt = lambda x: f"{x:.3f}" if x is not None else "-"
    ratio = f"{med(m) / med(c):.2f}" if m and c else "-"
    print(f"| {launcher} | {n} | {fmt(med(m))} | {fmt(med(c))} | {ratio} | {len(m)}/{len(c)} |")
EOF
