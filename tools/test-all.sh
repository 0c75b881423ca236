#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, then checks formatting
# and lints, and runs every test. The README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v cc >/dev/null || need_pkgs+=(gcc)
if ((${#need_pkgs[@]})); then
    echo "== installing: ${need_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== cargo build --release --workspace"
cargo build --release --workspace
# The multi-host tests use the team's test hosts (../shared/testhosts, beside this checkout);
# they need root for network namespaces. Say plainly whether they run.
shared="$(cd .. && pwd)/shared"
if [ "$(id -u)" = 0 ] && [ -x "$shared/testhosts/ssh-hosts" ]; then
    export MPIRT_SSH_HOSTS="$shared/testhosts/ssh-hosts"
    echo "== multi-host tests: on ($MPIRT_SSH_HOSTS)"
else
    echo "== multi-host tests: SKIPPED (they need root and $shared/testhosts/ssh-hosts)"
fi
echo "== cargo test"
cargo test --workspace --release
