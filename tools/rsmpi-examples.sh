#!/usr/bin/env bash
# rsmpi 0.8's own examples (its crate's examples/, from cargo's registry), built unchanged
# against mpirt renamed to `mpi` and run under rsrun on 2, 3 and 4 ranks: each must build and
# exit 0, but for the ones listed below, each with why; and its tests/, run as singletons. The crate is made under
# target/ (its binaries are named rsmpi_ex_*, beside the workspace's in target/release, whose
# mpirt build they share). Needs the `mpi` crate in the registry (the conformance crate's
# rsmpi build fetches it) and target/release/rsrun.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/mpi-0.8.2 2>/dev/null | head -n 1)
if [ -z "$src" ]; then
    echo "rsmpi-examples: mpi-0.8.2 is not in cargo's registry: build conformance/rsmpi first" >&2
    exit 1
fi

# Not built: they reach for the C API (`mpi::ffi`, `from_raw`), which mpirt has not.
declare -A not_built=(
    [reduce]="mpi::ffi::MPI_Datatype in an UnsafeUserOperation"
    [immediate_reduce]="mpi::ffi::MPI_Datatype in an UnsafeUserOperation"
    [datatype_dup]="DynBufferMut::from_raw and Collection::count"
)
# Built, but they fail on purpose here.
declare -A differ=(
    [derive_preinit_panic]="asserts that a derived datatype panics before initialize: mpirt's are values and need none"
    [derive_postfinalize_panic]="asserts that a derived datatype panics after finalize: likewise"
    [derive_nonthreaded_panic]="asserts that a derived datatype panics on another thread without MPI_THREAD_MULTIPLE: likewise"
    [dyn_communicator]="scans a usize into an i32 (8 bytes into 4 under rsmpi): mpirt refuses it by name"
)
# cartesian_map asks for a [2, size / 4] grid: extents of 0 below 4 ranks, refused by name.
declare -A min_ranks=([cartesian_map]=4)

crate=target/rsmpi-examples
mkdir -p "$crate/src"
# Written only when their text changes: a rewrite's new mtime would rebuild all the examples.
keep() {
    if ! cmp -s "$1" "$2"; then
        mv "$1" "$2"
    else
        rm "$1"
    fi
}
[ -e "$crate/src/lib.rs" ] || : >"$crate/src/lib.rs"
cp Cargo.lock "$crate/Cargo.lock.new"
keep "$crate/Cargo.lock.new" "$crate/Cargo.lock"
{
    cat <<TOML
[package]
name = "rsmpi-examples"
version = "0.1.0"
edition = "2021"
publish = false

[workspace]

[features]
# The examples' own cfgs: what rsmpi builds them with.
default = ["derive", "complex", "user-operations"]
derive = []
complex = []
user-operations = []

[dependencies]
mpi = { package = "mpirt", path = "$repo/mpirt", features = ["complex"] }
num-complex = { version = "0.4", default-features = false }

# The workspace's, so that mpirt's build is shared.
[profile.release]
debug = 1
codegen-units = 1

[lints.rust]
unexpected_cfgs = { level = "warn", check-cfg = ['cfg(msmpi)'] }
TOML
    for file in "$src"/examples/*.rs; do
        name=$(basename "$file" .rs)
        [ -n "${not_built[$name]:-}" ] && continue
        printf '\n[[bin]]\nname = "rsmpi_ex_%s"\npath = "%s"\n' "$name" "$file"
    done
    for file in "$src"/tests/*.rs; do
        printf '\n[[test]]\nname = "%s"\npath = "%s"\n' "$(basename "$file" .rs)" "$file"
    done
} >"$crate/Cargo.toml.new"
keep "$crate/Cargo.toml.new" "$crate/Cargo.toml"
cargo=(env CARGO_TARGET_DIR="$repo/target" cargo)
"${cargo[@]}" build --release --offline --manifest-path "$crate/Cargo.toml" --bins
# rsmpi's tests: each a process of its own, a singleton (no launcher).
tests=()
for file in "$src"/tests/*.rs; do
    tests+=(--test "$(basename "$file" .rs)")
done
"${cargo[@]}" test --release --offline --manifest-path "$crate/Cargo.toml" "${tests[@]}"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
for name in "${!not_built[@]}"; do
    echo "not built: $name (${not_built[$name]})"
done
for file in "$src"/examples/*.rs; do
    name=$(basename "$file" .rs)
    [ -n "${not_built[$name]:-}" ] && continue
    bad=0
    for n in 2 3 4; do
        [ "$n" -lt "${min_ranks[$name]:-0}" ] && continue
        if timeout 120 target/release/rsrun -n "$n" "target/release/rsmpi_ex_$name" >"$out/log" 2>&1; then
            status=ok
        else
            status=failed
        fi
        case "$status:${differ[$name]:+differs}" in
            ok:) ;;
            failed:differs) ;;
            ok:differs)
                echo "UNEXPECTED PASS: $name on $n ranks (listed: ${differ[$name]})"
                bad=1
                ;;
            failed:)
                echo "FAILED: $name on $n ranks:"
                tail -n 20 "$out/log"
                bad=1
                ;;
        esac
    done
    if [ "$bad" = 1 ]; then
        failed=1
    elif [ -n "${differ[$name]:-}" ]; then
        echo "differs on purpose: $name (${differ[$name]})"
    else
        echo "ok: $name"
    fi
done
exit "$failed"
