#!/usr/bin/env bash
# The strided-column halo exchange (halo_column, a vector datatype, 4 KiB to 4 MiB) on mpirt
# beside its C twin (compare/halo_column.c) on Open MPI and on MPICH (Debian's packages):
# interleaved, repeated, medians per size and the paired ratio mpirt / Open MPI (each
# repeat's mpirt run against the Open MPI run beside it).
#   osu-benches/compare/halo.sh [-r REPEATS] [-o OUTDIR] [-t] [-u] [-x MPIRT_BINARY]
# -t: between the test hosts host1 and host2 over TCP (../shared/testhosts/ssh-hosts, or
#     $MPIRT_SSH_HOSTS, left up), as run.sh -t runs osu_bw, instead of two ranks on this host.
# -u: mpirt on its UCX PML (rsrun --pml ucx, built with the ucx feature into target/ucx, as
#     compare/ucx.sh builds it) and Open MPI on its pml ucx, both on UCX_TLS as the caller
#     sets it (UCX's own choice where unset); MPICH as ever.
# -x: another halo_column build to run beside this checkout's (a baseline), as "mpirt-base"
#     (with -u, one built with the ucx feature).
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=3
out=
tcp=
ucx=
base=
while getopts "r:o:tux:" opt; do
    case $opt in
        r) repeats=$OPTARG ;;
        o) out=$OPTARG ;;
        t) tcp=1 ;;
        u) ucx=1 ;;
        x) base=$(realpath "$OPTARG") ;;
        *) echo "usage: $0 [-r REPEATS] [-o OUTDIR] [-t] [-u] [-x MPIRT_BINARY]" >&2; exit 2 ;;
    esac
done
if [ -n "$tcp" ] && [ -n "$ucx" ]; then
    echo "$0: -t and -u together are not supported (-t runs Open MPI on ob1's TCP)" >&2
    exit 2
fi
out=${out:-target/halo${tcp:+-tcp}${ucx:+-ucx}}
mkdir -p "$out"
out=$(realpath "$out")
if [ -n "$ucx" ]; then
    CARGO_TARGET_DIR=target/ucx cargo build --release -q -p launcher -p osu-benches \
        --features osu-benches/ucx --bin rsrun --bin halo_column
    bin=$(realpath target/ucx/release)
else
    cargo build --release -q -p launcher -p osu-benches --bin rsrun --bin halo_column
    bin=$(realpath target/release)
fi
mpicc.openmpi -O2 -o "$out/halo.ompi" osu-benches/compare/halo_column.c
mpicc.mpich -O2 -o "$out/halo.mpich" osu-benches/compare/halo_column.c
if [ -n "$tcp" ]; then
    hosts=${MPIRT_SSH_HOSTS:-$(cd .. && pwd)/shared/testhosts/ssh-hosts}
    "$hosts" up 2 || echo "using the test hosts already up (left up)"
    cfg=${SSH_HOSTS_DIR:-${TMPDIR:-/tmp}/mpirt-testhosts/ssh}/ssh_config
    ssh=$out/ssh
    printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$cfg" > "$ssh"
    chmod +x "$ssh"
    # As run.sh -t: TCP and self only on the hosts' network, ranks yielding while they wait.
    ompi=(mpirun.openmpi --allow-run-as-root -H host1:1,host2:1 --mca plm_rsh_agent "$ssh"
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24
        --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_disable_family 6
        --mca mpi_yield_when_idle 1 -n 2)
    mpich=(mpiexec.mpich -launcher ssh -launcher-exec "$ssh" -iface rsbr0
        -hosts host1:1,host2:1 -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 -n 2)
    rsrun=("$bin/rsrun" -H host1:1,host2:1 --ssh-args "-F $cfg" --transport tcp -n 2)
else
    ompi=(mpirun.openmpi --allow-run-as-root -n 2)
    mpich=(mpiexec.mpich -n 2)
    rsrun=("$bin/rsrun" --bind-to core -n 2)
fi
if [ -n "$ucx" ]; then
    # Open MPI 4.1's pml ucx declines shared memory and TCP unless told to take any
    # transport (pml_ucx_tls, pml_ucx_devices), as compare/ucx.sh runs it.
    ompi+=(--mca pml ucx --mca osc ^ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
    # Exported only where set: mpirun warns about an -x of an unset variable.
    [ -n "${UCX_TLS+x}" ] && ompi+=(-x UCX_TLS)
    rsrun+=(--pml ucx)
fi
# Keeps "size MB/s" lines only.
figures() { awk '/^[0-9]/ {print $1, $2}'; }
runtimes=(mpirt ompi mpich)
[ -n "$base" ] && runtimes+=(mpirt-base)
for r in $(seq 1 "$repeats"); do
    for runtime in "${runtimes[@]}"; do
        case $runtime in
            mpirt) "${rsrun[@]}" "$bin/halo_column" -m 4096:4194304 ;;
            mpirt-base) "${rsrun[@]}" "$base" -m 4096:4194304 ;;
            ompi) "${ompi[@]}" "$out/halo.ompi" ;;
            mpich) "${mpich[@]}" "$out/halo.mpich" ;;
        esac 2>"$out/$runtime.$r.err" | figures > "$out/$runtime.$r" ||
            echo "$runtime repeat $r failed: $(tail -3 "$out/$runtime.$r.err")" >&2
    done
done
python3 - "$out" "$repeats" "${runtimes[@]}" <<'EOF'
import statistics, sys
out, repeats, runtimes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {}
for rt in runtimes:
    for r in range(1, repeats + 1):
        try:
            lines = open(f"{out}/{rt}.{r}").read().split("\n")
        except FileNotFoundError:
            continue
        for line in filter(None, lines):
            size, mbs = line.split()
            runs.setdefault((rt, int(size)), {})[r] = float(mbs)
sizes = sorted({s for (_, s) in runs})
# Each repeat's mpirt run against the run of the other beside it: Open MPI, and the baseline
# where -x gave one.
against = ["ompi"] + [rt for rt in runtimes if rt == "mpirt-base"]
head = ["size"] + [f"{rt} MB/s" for rt in runtimes]
head += [f"mpirt/{other} (paired median)" for other in against]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for s in sizes:
    row = [str(s)]
    for rt in runtimes:
        v = runs.get((rt, s), {})
        row.append(f"{statistics.median(v.values()):.0f}" if v else "-")
    m = runs.get(("mpirt", s), {})
    for other in against:
        o = runs.get((other, s), {})
        ratios = [m[r] / o[r] for r in m if r in o and o[r] > 0]
        row.append(f"{statistics.median(ratios):.2f}" if ratios else "-")
    print("| " + " | ".join(row) + " |")
EOF
