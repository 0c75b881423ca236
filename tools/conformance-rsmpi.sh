#!/usr/bin/env bash
# The conformance programs (conformance/src/bin), built twice from the same sources: against
# mpirt renamed to `mpi` and run under rsrun, and against rsmpi over Debian's Open MPI and run
# under its mpirun. Each run must pass the program's own assertions, and both builds must print
# the same lines (compared sorted: ranks print concurrently). Rank counts come from each
# program's `//! ranks:` line.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p conformance -p launcher
CARGO_TARGET_DIR=target/rsmpi-ompi MPICC=mpicc.openmpi \
    cargo build --release --manifest-path conformance/rsmpi/Cargo.toml
mpirun=(mpirun.openmpi --oversubscribe)
if [ "$(id -u)" = 0 ]; then mpirun+=(--allow-run-as-root); fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
for source in conformance/src/bin/*.rs; do
    name=$(basename "$source" .rs)
    for n in $(sed -n 's|^//! ranks:||p' "$source"); do
        if ! timeout 120 target/release/rsrun -n "$n" "target/release/$name" >"$out/mpirt" 2>&1; then
            echo "FAILED: $name on $n ranks, mpirt under rsrun:"
            cat "$out/mpirt"
            failed=1
            continue
        fi
        if ! timeout 120 "${mpirun[@]}" -n "$n" "target/rsmpi-ompi/release/$name" >"$out/rsmpi" 2>&1; then
            echo "FAILED: $name on $n ranks, rsmpi under mpirun (Open MPI):"
            cat "$out/rsmpi"
            failed=1
            continue
        fi
        if diff <(sort "$out/rsmpi") <(sort "$out/mpirt") >"$out/diff"; then
            echo "ok: $name on $n ranks: both builds pass and print the same $(wc -l <"$out/mpirt") lines"
        else
            echo "DIFFERENT: $name on $n ranks (< rsmpi, > mpirt, sorted):"
            cat "$out/diff"
            failed=1
        fi
    done
done
exit "$failed"
