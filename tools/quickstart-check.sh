#!/usr/bin/env bash
# Runs the README's quick start as a newcomer would: a new crate outside this workspace that
# depends on mpirt exactly as the README says (its path pointing at this checkout), with the
# README's program, built and run with the README's commands, whose output must be the
# README's. Everything is read from the README's blocks marked `<!-- quickstart: NAME -->`,
# so that the README cannot drift from what works. Needs target/release/rsrun (the README
# installs it with `cargo install --path launcher`; this uses the one the build made, which is
# the same program). Works offline: the workspace's Cargo.lock pins the crate to the versions
# already fetched for the workspace.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
readme="$repo/README.md"

# The lines of the fenced block that follows `<!-- quickstart: $1 -->`, with the indentation
# of a list item's block taken off.
block() {
    awk -v want="<!-- quickstart: $1 -->" '
        { line = $0; sub(/^ +/, "", line) }
        line == want { found = 1; next }
        found && line ~ /^```/ { if (inside) exit; inside = 1; indent = index($0, "`") - 1; next }
        inside { print substr($0, indent + 1) }
    ' "$readme"
}

rsrun="$repo/target/release/rsrun"
if [ ! -x "$rsrun" ]; then
    echo "quickstart-check: $rsrun is missing: run cargo build --release -p launcher first" >&2
    exit 1
fi
for name in dependency main.rs run output; do
    if [ -z "$(block "$name")" ]; then
        echo "quickstart-check: README.md has no block marked <!-- quickstart: $name -->" >&2
        exit 1
    fi
done

# The README's paths (./target/release/app) are cargo's defaults.
unset CARGO_TARGET_DIR
work=$(mktemp -d "${TMPDIR:-/tmp}/mpirt-quickstart.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
cargo new --quiet --vcs none app
cd app
block dependency | sed "s|/path/to/mpirt|$repo|g" >> Cargo.toml
block main.rs > src/main.rs
cp "$repo/Cargo.lock" .
echo "== quickstart-check: Cargo.toml of the new crate"
cat Cargo.toml
# The run block as the README has it, with the checkout's rsrun first on PATH; the build's
# progress goes to stderr, so stdout is the job's output alone.
PATH="$(dirname "$rsrun"):$PATH" CARGO_NET_OFFLINE=true bash -euo pipefail -c "$(block run)" \
    > output.txt
if ! diff <(block output | sort) <(sort output.txt); then
    echo "quickstart-check: the job's output (>) is not the README's (<)" >&2
    exit 1
fi
# The README's two-host line, on the team's test hosts when the suite has them up (they share
# this filesystem, so the crate's relative program path is there too).
ssh_config="${SSH_HOSTS_DIR:-${TMPDIR:-/tmp}/mpirt-testhosts/ssh}/ssh_config"
two_hosts=$(grep -o 'rsrun -H host1:2,host2:2 [^`]*' "$readme" | head -n1)
if [ -n "${MPIRT_SSH_HOSTS:-}" ] && [ -f "$ssh_config" ] && [ -n "$two_hosts" ] &&
    timeout 5 bash -c "exec 3<>/dev/tcp/host1/22" 2>/dev/null; then
    echo "== quickstart-check: $two_hosts"
    PATH="$(dirname "$rsrun"):$PATH" MPIRT_SSH_ARGS="-F $ssh_config" bash -c "$two_hosts" \
        > output-hosts.txt
    if ! diff <(block output | sort) <(sort output-hosts.txt); then
        echo "quickstart-check: the two-host job's output (>) is not the README's (<)" >&2
        exit 1
    fi
else
    echo "== quickstart-check: two-host line SKIPPED (needs MPIRT_SSH_HOSTS and the test hosts up, with sshd answering)"
fi
echo "== quickstart-check: the README's quick start builds and runs as it says"
