#!/usr/bin/env bash
# rsmpi 0.8's public API against mpirt's (tools/rsmpi-api-audit.py compares them): rustdoc's
# JSON of the `mpi` crate, built over Open MPI's headers as tools/conformance-rsmpi.sh builds
# it, and of mpirt with its hidden items (rsmpi's `Scope::register` is public; mpirt's is
# hidden, but there). rustdoc writes JSON only when unstable options are allowed:
# RUSTC_BOOTSTRAP=1 lets the stable toolchain do it (the script reads format version 57, that
# of Rust 1.95). Needs the `mpi` crate in cargo's registry (the conformance crate's rsmpi build
# fetches it) and Open MPI's mpicc.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
json="-Zunstable-options --output-format json"
# --release: its dependencies' build, bindgen's above all, costs less than half the CPU time
# of a dev one (11 s against 25 s here, from cold).
CARGO_TARGET_DIR=target/rsmpi-ompi MPICC=mpicc.openmpi RUSTDOCFLAGS="$json" \
    cargo doc --release --manifest-path conformance/rsmpi/Cargo.toml -p mpi --no-deps
# In the default target directory, beside the suite's `cargo doc`, which checked every crate
# this documents mpirt against (a directory of its own checked them all again, a dozen crates
# and mpirt-derive's build, on a fresh machine). The JSON is written beside the HTML.
RUSTDOCFLAGS="$json --document-hidden-items" cargo doc -p mpirt --features complex --no-deps
# A new stable toolchain may write another format (rustdoc's JSON is unstable): the audit then
# compares nothing and says which format it read, and this skips, naming why, rather than fail
# the suite on a toolchain update that changed no API (the rsmpi examples still build against
# mpirt). Updating the reader is the fix.
status=0
python3 tools/rsmpi-api-audit.py target/rsmpi-ompi/doc/mpi.json target/doc/mpirt.json ||
    status=$?
if [ "$status" = 3 ]; then
    echo "rsmpi-api: SKIPPED: $(rustc --version) writes a rustdoc JSON format the audit does not read (above)"
    exit 0
fi
exit "$status"
