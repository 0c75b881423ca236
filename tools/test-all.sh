#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, then checks formatting
# and lints, and runs every test. The README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's header says when it began (minutes and seconds into the suite), so that a log,
# CI's included, shows which phase took the time.
phase() { printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

need_pkgs=()
command -v cc >/dev/null || need_pkgs+=(gcc)
# The verbs transport's build needs rdma-core's headers and libclang (for rdma-sys's bindgen);
# the UCX PML's needs UCX's headers and pkg-config; osu-benches' rsmpi build needs an MPI
# (Open MPI) and libclang.
# strace: the stranger tests record a genuine rank's handshake with it, to replay it.
# mpich: its Hydra (mpiexec.hydra) starts the suites' ranks over PMI-1; the suite names Open
# MPI's tools by their suffixed names (mpicc.openmpi, mpirun.openmpi), whichever MPI the
# unsuffixed alternatives point at. libpmix-dev: the bootstrap's `pmix` feature. libfabric-dev:
# the `ofi` transport (libfabric-bin: fi_info, to say which providers are there).
for pkg in libibverbs-dev librdmacm-dev libclang-dev libucx-dev pkg-config python3 \
    libopenmpi-dev openmpi-bin strace mpich libpmix-dev libfabric-dev libfabric-bin; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$pkg")
done
if ((${#need_pkgs[@]})); then
    phase "installing: ${need_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# The packages of the later phases (Slurm on the test hosts, the Soft-RoCE guest's QEMU and
# kernel) install in the background while the builds run: on a fresh machine they took 2-4
# minutes, most of it waiting on downloads and dpkg, one after the other with the rest. The
# scripts that need them still install what is missing themselves (this only fetches ahead),
# and the Slurm phase waits for this first, so that two apt-gets never race for dpkg's lock.
shared="$(cd .. && pwd)/shared"
prefetch_pid=
prefetch_log=$(mktemp "${TMPDIR:-/tmp}/mpirt-prefetch.XXXXXX")
if [ "$(id -u)" = 0 ]; then
    (
        set -e
        slurm_pkgs=(slurmctld slurmd slurm-client munge libpmix2)
        for pkg in "${slurm_pkgs[@]}"; do
            if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
                DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
                    --no-install-recommends "${slurm_pkgs[@]}"
                break
            fi
        done
        if [ -x "$shared/rdma-vm/setup" ]; then bash "$shared/rdma-vm/setup"; fi
    ) >"$prefetch_log" 2>&1 &
    prefetch_pid=$!
fi
# Waits for the background installs; a failure is shown, and left to the scripts that install
# for themselves to report (they try again).
prefetch_wait() {
    if [ -n "$prefetch_pid" ]; then
        if ! wait "$prefetch_pid"; then
            echo "== the background installs failed; the phases that need them install again:" >&2
            cat "$prefetch_log" >&2
        fi
        prefetch_pid=
    fi
}

phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy"
# Every target, each program once: `--tests` lints the programs as their test harnesses build
# them (the same code: rustc keeps `main` and all it reaches alive there, so dead code is
# found as in the program; a program has no `cfg(test)`, which `cargo test` below enforces),
# and `--all-targets` linted all 54 programs a second time as programs, here and with the
# optional features below. `cargo clippy --workspace --all-targets` lints no more.
lint_targets=(--lib --tests --examples --benches)
cargo clippy --workspace "${lint_targets[@]}" --release -- -D warnings
phase "cargo doc (broken intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
phase "cargo build --release --workspace"
cargo build --release --workspace
# The multi-host tests use the team's test hosts (../shared/testhosts, beside this checkout);
# they need root for network namespaces. Say plainly whether they run.
if [ "$(id -u)" = 0 ] && [ -x "$shared/testhosts/ssh-hosts" ]; then
    export MPIRT_SSH_HOSTS="$shared/testhosts/ssh-hosts"
    phase "multi-host tests: on ($MPIRT_SSH_HOSTS)"
else
    phase "multi-host tests: SKIPPED (they need root and $shared/testhosts/ssh-hosts)"
fi
phase "cargo test"
# The integration and doc tests. The libraries' unit tests run in the debug build below (every
# library, with debug assertions) and, with the optional features, in release in their phase:
# a third build of every library as a test harness here (codegen-units 1, debug info) took
# about a minute and a half of CI's time for tests that run twice already. The programs' own
# unit-test harnesses are left out too: they hold no tests (a program is tested by an
# integration test that runs it), and building and linking some 50 of them in release is build
# time for no test. A program that gains unit tests stops the suite here until this line
# tests it.
# Every program cargo knows (src/bin, src/main.rs, [[bin]] path=), in every crate; a program
# in a directory of its own (src/bin/NAME/main.rs) with its modules. A failure to read them
# stops the suite (set -e), as a program with tests does.
bin_tests=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, os, re, sys
unit_test = re.compile(r"#\[(cfg\()?test\)?\]")
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "bin" not in target["kind"]:
            continue
        src = target["src_path"]
        folder = os.path.dirname(src)
        files = [src]
        if os.path.basename(src) == "main.rs" and os.path.basename(folder) != "src":
            files = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".rs")]
        for path in files:
            if unit_test.search(open(path).read()):
                print(path)')
if [ -n "$bin_tests" ]; then
    echo "== these programs have unit tests: test them here (cargo test --bins):" >&2
    echo "$bin_tests" >&2
    exit 1
fi
# The examples (mpirt's immediate_multiple, which p2p's rsmpi_shaped_collection_example_runs
# runs): `--test '*'` builds none, and the variable makes that test fail, not skip, without
# it. With --workspace, as the tests' own build, so that the crates' features resolve alike.
cargo build --release --workspace --examples
MPIRT_TEST_EXAMPLES_BUILT=1 cargo test --workspace --release --test '*'
cargo test --workspace --release --doc
# The packages a cargo command selects decide every crate's features (conformance turns on
# mpirt's `complex`, pml's dev-dependency criterion once_cell's `default`), and a crate built
# with other features is built again, with every crate and program above it: `-p mpirt`
# compiled mpirt, proptest's dependencies and each test binary a second time. So every later
# command on this target directory that runs these suites selects --workspace, with --test
# naming them, and runs the binaries built here (the model checks' `-p mpirt` below builds
# mpirt's unit tests with a feature of their own, and only those). (mpirt's num-complex takes `std`, as proptest makes it in a test
# build, so that the release build's mpirt and programs above are the tests' too.)

# The fast tests again in a debug build, which is what a contributor's plain `cargo test` runs:
# debug_assert!s and integer overflow checks exist only there, so a test that breaks one (a
# property test made frames longer than the ring's max_frame) passes in release and fails for
# everyone else. Every library's unit tests (mpirt's with the `complex` feature, for
# num-complex's Equivalence), pml's integration tests (matching model, protocol, wire fuzzing,
# shared memory, engine), rsrun's local launch tests, and mpirt's point-to-point, collectives
# and topology suites, whose jobs run the runtime's message paths through real ranks: in one
# cargo command, so that each crate is built once (a `-p` of their own resolved other
# features, and pml and mpirt were built twice). Left to the release run, to keep this phase
# to a few minutes: the NPB kernels (over a minute in debug, on the paths the suites take), the
# multi-host tests, and the collectives and grids on more rank counts (5 to 9 ranks, a 7-rank
# grid: the same calls; every algorithm forced on sizes that are not powers of two, 16 ranks
# in one area and a 12-rank grid stay). The mpirt suites start their jobs with
# target/debug/rsrun, hence the launcher's build first.
phase "cargo test (debug build: debug assertions and overflow checks)"
# pml's integration tests, every one but those of a transport feature (ofi, ucx, verbs: their
# own phases below): a new one stops the suite here until it is listed.
pml_debug_tests=(bridge engine matcher_keys matching_model protocol shm_process shm_threads
    short_path tracking_allocator_arena wire_fuzz)
for file in pml/tests/*.rs; do
    name=$(basename "$file" .rs)
    if [[ " ${pml_debug_tests[*]} " != *" $name "* ]] &&
        ! grep -qE '^#!\[cfg\(feature = "(ofi|ucx|verbs)"\)\]' "$file"; then
        echo "== pml's test $name is not in the debug run: list it in pml_debug_tests" >&2
        exit 1
    fi
done
cargo build -p launcher
cargo test --workspace --features mpirt/complex --lib "${pml_debug_tests[@]/#/--test=}" \
    --test launch --test kvs \
    --test p2p --test collectives --test topology --test datatypes --test datatype_operations \
    --test spawn -- --skip every_collective_on_5_to_7_ranks \
    --skip every_collective_on_8_and_9_ranks --skip cartesian_grids_on_7_ranks
# Threading::Serialized and Multiple (mpirt's feature `threads`), in debug: the stress suite (4
# threads a rank, 2 to 4 ranks, shared memory and TCP). Its release run, the doc tests that
# show which handles cross threads, its lints and the multi-threaded OSU ports' option tests
# are in the optional features' build below. Without the feature the threads suite only
# checks that Funneled is the ceiling.
phase "threads: mpirt's stress suite with the feature threads, debug"
cargo test --workspace --features mpirt/threads --test threads

# The model checks of the engine that threads share (mpirt/src/environment/shared/model.rs):
# the real engine behind its real lock, driven by two and three threads in schedules that
# shuttle chooses (random and PCT from a fixed seed, and every interleaving of the two-thread
# check). The feature model-check swaps shuttle's primitives in (mpirt/src/sync.rs) in mpirt's
# unit tests alone, so
# the checks build in the release target directory beside the suites and rebuild mpirt's tests,
# shuttle, and proptest and rand with the features shuttle adds, not pml or the bootstrap (a
# `--cfg` in RUSTFLAGS, as before, changed every crate's flags: a target directory of its own,
# where pml and every dependency compiled twice more, for clippy and for the build). About 85 s
# of checks after the build (a loaded 2-vCPU machine).
phase "threads: model checks (shuttle, the feature model-check)"
cargo clippy -p mpirt --lib --tests --release --features threads,model-check -- -D warnings
cargo test --release -p mpirt --features threads,model-check --lib environment::shared::model

# The README's quick start, in a new crate outside the workspace (see the script).
phase "README quick start"
bash tools/quickstart-check.sh

# Brings the 4 test hosts up with ssh-hosts $1; prints 1 when this did (the caller then takes
# them down again), nothing when someone else had them up (used as they are, left up). Hosts
# said to be up whose sshd does not answer (gone with a run that crashed) are made anew.
hosts_up() {
    local said k
    if said=$("$1" up 4 2>&1); then
        echo 1
        return
    elif ! grep -q "already up (mode=netns n=4" <<< "$said"; then
        echo "$said" >&2
        return 1
    fi
    for k in 1 2 3 4; do
        if ! timeout 5 bash -c "exec 3<>/dev/tcp/host$k/22" 2>/dev/null; then
            echo "== sshd on test host host$k does not answer: making the hosts anew" >&2
            "$1" down >&2
            "$1" up 4 >&2
            echo 1
            return
        fi
    done
}
# Stops the suite unless the test command "$2..." (ending in `-- --exact NAMES`, or a test binary
# given NAMES) lists exactly $1 tests: a name renamed or gone would otherwise match nothing and
# the phase pass having run nothing.
expect_tests() {
    local want=$1 listed
    shift
    listed=$("$@" --list | grep -c ': test$' || true)
    if [ "$listed" != "$want" ]; then
        echo "== $* lists $listed tests, not the $want named" >&2
        exit 1
    fi
}
testhosts_ssh_args="-F ${SSH_HOSTS_DIR:-${TMPDIR:-/tmp}/mpirt-testhosts/ssh}/ssh_config"

# What a launcher decides across hosts (each rank's host, hence the hierarchical path, and the
# wire-up between hosts), the collectives suite exercises on 8, 9 and 16 ranks and in its failure
# tests; the jobs on 1 to 7 ranks, every algorithm forced and TCP forced everywhere run the
# same calls again on other rank counts, the same whichever launcher started the ranks: Hydra,
# Open MPI's mpirun and srun --mpi=pmix leave them out across hosts (srun --mpi=pmi2 runs the
# suite whole across hosts, rsrun on this host). The trade-off: under these three, every job
# across hosts has 2 ranks or more on each host; a host with a lone rank (the jobs on 1, 3, 5, 7
# ranks) is left to srun --mpi=pmi2 and to rsrun's hierarchical tests (3 ranks on one host, 1
# on another), since the launcher's part, each rank's host and the wire-up, is the same.
across_hosts_repeats=(--skip every_collective_on_1_to_4_ranks --skip every_collective_on_5_to_7_ranks
    --skip every_algorithm_forced --skip every_collective_over_tcp)
# The intercommunicators suite's churn (4,200 inter-communicators made, merged and dropped on 3
# ranks: their context ids are given back) checks mpirt's own books, the same whichever
# launcher started the ranks and whichever PML moves their messages; the release run checks it
# on rsrun, and Hydra and UCX, which run the rest of that suite, leave it out.
context_churn=(--skip context_ids_of_dropped_intercommunicators_are_given_back)
# Under another launcher, on this host as across hosts, the collectives suite leaves out the
# repeats above and the tests of mpirt's own books, which the release run checks on rsrun: the
# allocations a call makes, the plans it keeps and the context ids a communicator gives back
# are the same whichever launcher started the ranks. On this host a launcher's part is the
# wire-up of ranks on one host, which every job of the rest takes, on 1 to 16 ranks (p2p's
# ring runs 1 rank).
launcher_repeats=("${across_hosts_repeats[@]}" --skip collectives_called_again_allocate_nothing_per_call
    --skip collectives_of_one_shape_called_again_run_their_kept_plans
    --skip context_ids_are_given_back)

# The suites again with their ranks started by MPICH's Hydra (mpiexec.hydra, PMI-1 on PMI_FD):
# on this host, then round-robin over the 4 test hosts with Hydra's ssh launcher (shared
# memory between a host's ranks, TCP between hosts). Across hosts the collectives suite alone
# (less the repeats above); p2p across hosts runs under UCX, OFI and srun.
phase "launchers: mpirt's p2p and collectives suites under mpiexec.hydra"
MPIRT_TEST_LAUNCHER=hydra cargo test --release --workspace --test p2p --test collectives \
    --test intercommunicators --test spawn -- "${context_churn[@]}" "${launcher_repeats[@]}"
if [ -n "${MPIRT_SSH_HOSTS:-}" ]; then
    phase "launchers: the collectives suite under mpiexec.hydra across 4 test hosts"
    hydra_hosts_owned=$(hosts_up "$MPIRT_SSH_HOSTS")
    MPIRT_TEST_LAUNCHER=hydra MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2 \
        MPIRT_SSH_ARGS="$testhosts_ssh_args" \
        cargo test --release --workspace --test collectives -- "${launcher_repeats[@]}"
    if [ -n "$hydra_hosts_owned" ]; then "$MPIRT_SSH_HOSTS" down; fi
else
    phase "launchers: the suites under mpiexec.hydra across test hosts SKIPPED (they need root and ssh-hosts)"
fi

# Spawn under rsrun across the 4 test hosts: the spawned job's rsrun reaches them by the same
# ssh agents, and parents and children meet over TCP between hosts.
if [ -n "${MPIRT_SSH_HOSTS:-}" ]; then
    phase "spawn: rsrun's spawned jobs across 4 test hosts"
    spawn_hosts_owned=$(hosts_up "$MPIRT_SSH_HOSTS")
    MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2 MPIRT_SSH_ARGS="$testhosts_ssh_args" \
        cargo test --release --workspace --test spawn
    if [ -n "$spawn_hosts_owned" ]; then "$MPIRT_SSH_HOSTS" down; fi
else
    phase "spawn across test hosts SKIPPED (they need root and ssh-hosts)"
fi

# The hierarchical collectives under rsrun across the 4 test hosts, 2 ranks on each and 3 on one
# with 1 on another: each host's ranks meet in that host's shared-memory area, the hosts' leaders
# by TCP (the suites across hosts above take that path too; this one checks it is taken), and
# the failures there (a leader, a host's area, lengths that disagree); then the gathers,
# scatters, reduce-scatters and short all-to-alls through each host's leader, on hosts of 1, 2,
# 3 and 2 ranks (and 3, 1, 2), and on 20 ranks, whose first scatter finds the hosts; then the
# straddles suite (ranks whose lengths fall on different sides of an algorithm's limit: every
# rank ends, none waits), whose jobs of 5 to 8 ranks take the leaders' plans. Again on UCX below.
hierarchical_tests=(every_collective_hierarchically_across_hosts
    lengths_disagreeing_across_hosts_are_an_error all_gathers_take_the_hierarchical_path_across_hosts
    a_host_whose_area_fails_takes_every_rank_by_messages
    a_leader_that_fails_fails_every_later_call_naming_it
    gathers_scatters_and_reduce_scatters_go_through_host_leaders
    lengths_disagreeing_on_hierarchical_rooted_calls_are_an_error
    a_leader_that_can_make_no_buffer_for_its_ranks_parts_leaves_none_waiting
    a_first_scatter_on_more_than_16_ranks_finds_the_hosts)
if [ -n "${MPIRT_SSH_HOSTS:-}" ]; then
    phase "collectives: the hierarchical path across 4 test hosts"
    hier_hosts_owned=$(hosts_up "$MPIRT_SSH_HOSTS")
    hierarchical=(cargo test --release --workspace --test collectives -- --exact
        "${hierarchical_tests[@]}")
    expect_tests ${#hierarchical_tests[@]} "${hierarchical[@]}"
    MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2 MPIRT_SSH_ARGS="$testhosts_ssh_args" \
        "${hierarchical[@]}"
    phase "collectives: lengths straddling an algorithm's limit across 4 test hosts"
    MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2 MPIRT_SSH_ARGS="$testhosts_ssh_args" \
        cargo test --release --workspace --test straddles
    if [ -n "$hier_hosts_owned" ]; then "$MPIRT_SSH_HOSTS" down; fi
else
    phase "collectives: the hierarchical path across test hosts SKIPPED (they need root and ssh-hosts)"
fi

# The optional features, built together once in a target directory of their own (the default
# build's artifacts stay as they are): the UCX PML (`ucx`), the libfabric transport (`ofi`), the
# PMIx client (`pmix`), RDMA verbs (`verbs`, proven in the Soft-RoCE guest at the end) and
# Threading::Multiple (`threads`). Every command names the same features, so that each crate
# is built once for all these phases (verbs and threads had builds of their own, a minute and
# a half of CI's time); mpirt's default build (no features) is the release and debug runs'.
# And every command selects the whole workspace, as the release run's do: the packages a
# command selects decide the features of every crate below them (`-p pml`, `-p mpirt`, `-p
# bootstrap` and `-p examples` each resolved others, and pml and the bootstrap were built
# three times here, mpirt-derive and a dozen dependencies twice). `--exclude` narrows what
# runs where it leaves every crate's build as it is (`cargo --unit-graph` shows the same
# units): never conformance (it turns on mpirt's `complex`) nor launcher (its dependencies
# change criterion's build, which pml's tests link).
export CARGO_TARGET_DIR=target/features
all_features=ucx,ofi,pmix,verbs,threads
features=(--workspace --features "$all_features")
# The libraries whose unit tests the features change (pml, the bootstrap, launcher, mpirt,
# osu-benches).
libs=(--exclude examples --exclude mpirt-derive)
# The suites' tests over mpirt's OFI transport run in the OFI phase, and those over verbs in
# the guest; the UCX and PMIx phases leave them out, as they did when each feature had a build
# of its own.
not_ofi=(-- --skip ofi --skip verbs)
phase "optional features: clippy with ucx, ofi, pmix, verbs and threads, and rsrun's build"
cargo clippy --workspace "${lint_targets[@]}" --release --features "$all_features" -- -D warnings
# The subsets users build alone, linted (check only, seconds): verbs without ofi, where code
# shared with ofi (pml's registration cache) would be dead, and threads without the transports.
cargo clippy -p pml -p mpirt --lib --tests --release --features mpirt/verbs -- -D warnings
cargo clippy -p mpirt -p osu-benches "${lint_targets[@]}" --release \
    --features mpirt/threads,osu-benches/threads -- -D warnings
# rsrun for the suites below (each `cargo test` builds its own test targets and binaries).
cargo build --release "${features[@]}" --bin rsrun
# The libraries' unit tests: pml's transports' (ucx, ofi, verbs), the bootstrap's PMIx
# client's, rsrun's, mpirt's and osu-benches'.
cargo test --release "${features[@]}" "${libs[@]}" --lib

# Threading::Serialized and Multiple (mpirt's feature `threads`): the stress suite (4 threads a
# rank, 2 to 4 ranks, shared memory and TCP; its debug run is above), the doc tests that show
# which handles cross threads, and the multi-threaded OSU ports' format tests (the clippy
# above linted them).
phase "threads: mpirt and osu-benches with the feature threads"
cargo test --release "${features[@]}" --test threads
cargo test --release "${features[@]}" "${libs[@]}" --doc threads
# Of the OSU ports' format tests (run whole in the release run above), the multi-threaded
# ports' alone: the others' programs are the same with the feature.
threaded_formats=(cargo test --release "${features[@]}" --exclude examples --test run -- --exact
    multi_threaded_formats)
expect_tests 1 "${threaded_formats[@]}"
"${threaded_formats[@]}"
# The stall reports of ranks whose threads share the engine (examples/tests/stall.rs: `stuck`'s
# threads- bugs under rsrun --stall-timeout, on shared memory and TCP); without the feature they
# skip, saying why.
threaded_stalls=(cargo test --release "${features[@]}" --test stall -- --exact
    threaded_ranks_that_are_stuck_name_every_thread_s_call a_slow_threaded_job_is_not_stuck
    a_threaded_rank_whose_thread_computes_before_its_first_call_is_not_stuck
    a_threaded_rank_whose_uncounted_thread_ends_without_sending_is_stuck)
expect_tests 4 "${threaded_stalls[@]}"
"${threaded_stalls[@]}"

# The UCX PML: pml's own tests, then mpirt's point-to-point and collectives suites again on
# `rsrun --pml ucx`, over UCX's TCP and its shared memory on this host, and across the test
# hosts over TCP: the point-to-point suite, and of the collectives the hierarchical path,
# whose leaders talk over UCX between hosts (the rest of the collectives suite runs the same
# calls on UCX as on this host's UCX_TLS=tcp).
phase "UCX PML: pml's tests with --features ucx"
cargo test --release "${features[@]}" --test ucx
# The collectives, straddles and intercommunicators suites run once, over UCX's TCP: what they
# ask of the PML (sends, receives and probes on communicators' contexts) is what the p2p and
# datatypes suites ask of it on each transport; their second whole run, over UCX's shared
# memory, took CI's time for no path of its own.
for tls in tcp sm,self; do
    ucx_suites=(--test p2p --test datatypes)
    if [ "$tls" = tcp ]; then
        ucx_suites+=(--test collectives --test straddles --test intercommunicators)
    fi
    phase "UCX PML: mpirt's suites (${ucx_suites[*]}) on --pml ucx, UCX_TLS=$tls"
    UCX_TLS=$tls MPIRT_TEST_PML=ucx cargo test --release "${features[@]}" "${ucx_suites[@]}" \
        "${not_ofi[@]}" "${context_churn[@]}"
    phase "UCX PML: windows over UCX's RMA (ucp_put_nbx, ucp_get_nbx, ucp_atomic_op_nbx), and a barrier's flag waking a target asleep on its worker, UCX_TLS=$tls"
    UCX_TLS=$tls MPIRT_TEST_PML=ucx cargo test --release "${features[@]}" --test windows \
        -- windows_over_ucx a_target_asleep_in_its_pml_is_woken_by_the_barriers_flag
done
# The stall reports come from the runtime's own books, the same whichever UCX transport moves
# the bytes: once, over UCX's TCP.
phase "UCX PML: the stall reports of the classic bugs on --pml ucx, UCX_TLS=tcp"
UCX_TLS=tcp MPIRT_TEST_PML=ucx cargo test --release "${features[@]}" --test stall
if [ -n "${MPIRT_SSH_HOSTS:-}" ]; then
    phase "UCX PML: the p2p suite, the hierarchical collectives and the straddles across 4 test hosts, UCX_TLS=tcp"
    ucx_hosts_owned=$(hosts_up "$MPIRT_SSH_HOSTS")
    ucx_across=(env UCX_TLS=tcp MPIRT_TEST_PML=ucx MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2
        MPIRT_SSH_ARGS="$testhosts_ssh_args")
    "${ucx_across[@]}" cargo test --release "${features[@]}" --test p2p "${not_ofi[@]}"
    ucx_hierarchical=(cargo test --release "${features[@]}" --test collectives -- --exact
        "${hierarchical_tests[@]}")
    expect_tests ${#hierarchical_tests[@]} "${ucx_hierarchical[@]}"
    "${ucx_across[@]}" "${ucx_hierarchical[@]}"
    "${ucx_across[@]}" cargo test --release "${features[@]}" --test straddles "${not_ofi[@]}"
    if [ -n "$ucx_hosts_owned" ]; then "$MPIRT_SSH_HOSTS" down; fi
else
    phase "UCX PML: the suites across test hosts SKIPPED (they need root and ssh-hosts)"
fi

# The PMIx client (its unit tests ran with the libraries' above): the suites with their ranks
# started by Open MPI's mpirun, on this host and across the 4 test hosts (its ssh launcher; the
# collectives suite alone, less the repeats, as under Hydra); the Slurm phase below runs them
# under srun --mpi=pmix.
phase "launchers: the suites under Open MPI's mpirun (PMIx)"
MPIRT_TEST_LAUNCHER=mpirun cargo test --release "${features[@]}" --test p2p \
    --test collectives --test spawn "${not_ofi[@]}" "${launcher_repeats[@]}"
if [ -n "${MPIRT_SSH_HOSTS:-}" ]; then
    phase "launchers: the collectives suite under Open MPI's mpirun across 4 test hosts"
    ompi_hosts_owned=$(hosts_up "$MPIRT_SSH_HOSTS")
    MPIRT_TEST_LAUNCHER=mpirun MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2 \
        MPIRT_SSH_ARGS="$testhosts_ssh_args" \
        cargo test --release "${features[@]}" --test collectives "${not_ofi[@]}" \
        "${launcher_repeats[@]}"
    if [ -n "$ompi_hosts_owned" ]; then "$MPIRT_SSH_HOSTS" down; fi
else
    phase "launchers: the suites under mpirun across test hosts SKIPPED (they need root and ssh-hosts)"
fi

# The libfabric transport: pml's engine and dead-peer tests (its unit tests, the mr_mode and
# mode decisions for efa, cxi, verbs, tcp and shm, ran above), then mpirt's p2p, collectives
# and windows suites (windows by fi_write, fi_read and fi_atomic, counted) with every pair over
# OFI, on each provider that works without a device
# here (tcp;ofi_rxm, shm, udp;ofi_rxd; `net` is left out: it is 1.17's experimental one), and
# across the 4 test hosts on the two that cross hosts.
phase "OFI: pml's tests with --features ofi"
cargo test --release "${features[@]}" --test engine --test ofi
phase "OFI: an example's ranks under Hydra size libfabric for the job"
cargo test --release "${features[@]}" --exclude osu-benches --test run hydra
for provider in "tcp;ofi_rxm" shm "udp;ofi_rxd"; do
    if ! fi_info -p "$provider" -t FI_EP_RDM >/dev/null 2>&1; then
        phase "OFI: the suites on $provider SKIPPED (libfabric here has no such provider)"
        continue
    fi
    phase "OFI: mpirt's p2p, collectives and windows suites over libfabric $provider"
    MPIRT_TEST_OFI_PROVIDER="$provider" cargo test --release "${features[@]}" \
        --test p2p --test collectives --test windows ofi
done
if [ -n "${MPIRT_SSH_HOSTS:-}" ]; then
    ofi_hosts_owned=$(hosts_up "$MPIRT_SSH_HOSTS")
    # The windows suite too: by fi_write, fi_read and fi_atomic on tcp;ofi_rxm, and by messages
    # on udp;ofi_rxd, whose RMA mpirt never takes (it crashes ranks, three or more, inside the
    # provider: `provider::WindowsByRma::Never`); the suite checks that no RMA was counted there.
    for provider in "tcp;ofi_rxm" "udp;ofi_rxd"; do
        phase "OFI: the suites across 4 test hosts over libfabric $provider"
        MPIRT_TEST_OFI_PROVIDER="$provider" MPIRT_TEST_HOSTS=host1:2,host2:2,host3:2,host4:2 \
            MPIRT_SSH_ARGS="$testhosts_ssh_args" \
            cargo test --release "${features[@]}" --test p2p --test collectives \
            --test windows ofi
    done
    if [ -n "$ofi_hosts_owned" ]; then "$MPIRT_SSH_HOSTS" down; fi
else
    phase "OFI: the suites across test hosts SKIPPED (they need root and ssh-hosts)"
fi
unset CARGO_TARGET_DIR

# osu-benches on rsmpi over Open MPI (feature rsmpi), in its own target directory: the same
# format tests as the mpirt build's, their ranks started by Open MPI's mpirun.
phase "osu-benches on rsmpi (Open MPI): clippy and tests with --features rsmpi"
rsmpi=(env CARGO_TARGET_DIR=target/rsmpi-ompi MPICC=mpicc.openmpi OSU_MPIRUN=mpirun.openmpi)
"${rsmpi[@]}" cargo clippy -p osu-benches "${lint_targets[@]}" --release --no-default-features \
    --features rsmpi -- -D warnings
"${rsmpi[@]}" cargo test --release -p osu-benches --no-default-features --features rsmpi \
    --lib --test run

# The rsmpi-style conformance programs built from the same sources against rsmpi over Open MPI
# and against mpirt renamed to `mpi`: both pass and print the same lines (see the script).
phase "conformance: the same programs on rsmpi (Open MPI's mpirun) and on mpirt (rsrun)"
bash tools/conformance-rsmpi.sh

# rsmpi 0.8's public API, item by item, against mpirt's (rustdoc's JSON of both): every item
# without a C handle is in mpirt under its path, or a difference the script names.
phase "rsmpi's API against mpirt's"
bash tools/rsmpi-api.sh
# rsmpi's own examples, unchanged, built against mpirt and run under rsrun.
phase "rsmpi's examples on mpirt"
bash tools/rsmpi-examples.sh

# Slurm: ranks started by srun --mpi=pmi2 across four test hosts, with a real Slurm
# (../shared/testhosts/slurm-local; it installs Debian's slurm packages if missing).
testhosts="$shared/testhosts"
prefetch_wait
if [ "$(id -u)" = 0 ] && [ -x "$testhosts/slurm-local" ]; then
    phase "Slurm tests: srun --mpi=pmi2 and --mpi=pmix on 4 test hosts, rsrun inside salloc"
    slurm_hosts_owned=$(hosts_up "$testhosts/ssh-hosts")
    hosts_down() {
        "$testhosts/slurm-local" down
        if [ -n "$slurm_hosts_owned" ]; then "$testhosts/ssh-hosts" down; fi
    }
    trap hosts_down EXIT
    # A Slurm left from a run that crashed would make `up` refuse; this phase owns Slurm anyway.
    "$testhosts/slurm-local" down >/dev/null
    "$testhosts/slurm-local" up 4 --mode netns
    # srun's own tests (PMI-2, plain srun and --mpi=none refused by name, a rank that aborts or
    # is killed ending the step), then both suites under srun --mpi=pmi2 and, built with the
    # `pmix` feature, the collectives suite under --mpi=pmix less the repeats across hosts (the
    # abort test again, through PMIx_Abort; the wire-up is what PMIx changes, and every
    # collective test exercises it), over the 4 nodes.
    MPIRT_TEST_SLURM=1 cargo test --release --workspace --test p2p --test collectives \
        --test topology --test intercommunicators --test spawn -- srun \
        pmix_launchers_without_the_feature
    MPIRT_TEST_SLURM=1 cargo test --release --workspace --test slurm
    MPIRT_TEST_SLURM=1 cargo test --release --workspace --test stall -- under_srun
    phase "Slurm tests: the suites under srun --mpi=pmi2, the collectives under --mpi=pmix, on 4 nodes"
    MPIRT_TEST_SLURM=1 MPIRT_TEST_LAUNCHER=srun-pmi2 MPIRT_TEST_SLURM_NODES=4 \
        cargo test --release --workspace --test p2p --test collectives --test spawn
    MPIRT_TEST_SLURM=1 MPIRT_TEST_LAUNCHER=srun-pmix MPIRT_TEST_SLURM_NODES=4 \
        CARGO_TARGET_DIR=target/features cargo test --release "${features[@]}" \
        --test collectives "${not_ofi[@]}" "${launcher_repeats[@]}"
    hosts_down
    trap - EXIT
else
    phase "Slurm tests: SKIPPED (they need root and $testhosts/slurm-local)"
fi

# RDMA verbs: built with the optional features above (target/features) and linted there, proven
# here in a QEMU guest with two Soft-RoCE devices (../shared/rdma-vm), since this machine has no
# RDMA.
rdma_vm="$shared/rdma-vm"
if [ "$(id -u)" != 0 ] || [ ! -x "$rdma_vm/rdma-vm" ]; then
    phase "verbs tests: SKIPPED (they need root and $rdma_vm/rdma-vm)"
    exit 0
fi
phase "verbs: installing the Soft-RoCE guest's packages"
bash "$rdma_vm/setup"
export CARGO_TARGET_DIR=target/features
# The test binaries `cargo test "$@"` builds, one "name path" a line (built above already: the
# guest runs six of them and the rsrun beside them).
test_binaries() {
    cargo test "$@" --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])'
}
pml_tests=$(test_binaries --release "${features[@]}" --test engine --test verbs)
mpirt_tests=$(test_binaries --release "${features[@]}" --test p2p --test collectives \
    --test windows --test threads --test datatypes)
tests="$pml_tests"$'\n'"$mpirt_tests"
unset CARGO_TARGET_DIR
engine=$(awk '$1 == "engine" {print $2}' <<<"$tests")
p2p=$(awk '$1 == "p2p" {print $2}' <<<"$tests")
collectives=$(awk '$1 == "collectives" {print $2}' <<<"$tests")
verbs=$(awk '$1 == "verbs" {print $2}' <<<"$tests")
windows=$(awk '$1 == "windows" {print $2}' <<<"$tests")
threads=$(awk '$1 == "threads" {print $2}' <<<"$tests")
datatypes=$(awk '$1 == "datatypes" {print $2}' <<<"$tests")
for binary in engine p2p collectives verbs windows threads datatypes; do
    if [ -z "${!binary}" ]; then
        echo "== verbs: no $binary test binary in target/features" >&2
        exit 1
    fi
done
# Of mpirt's p2p suite over verbs;ofi_rxm, the tests that take the provider's own paths: every
# message size (eager, and the rendezvous by fi_read on registered memory, RDMA READs), a
# synchronous send's acknowledgement, a ring on up to 8 ranks (connections to every peer), and
# a rank that panics and a truncation (the failure paths); and those that queue completions on
# rxm's shared receive context (FI_OFI_RXM_USE_SRX=1, set for verbs;ofi_rxm alone, the
# workaround for libfabric 1.17's fi_close crashing with completions queued): many senders to
# one rank, by wildcard and in order, and buffered sends still in flight at finalize. The
# others (probes, immediate sends, futures) go by the same ofi_rxm paths as on tcp;ofi_rxm,
# which the OFI phase ran whole; on the guest's emulated CPU they took some 4 s each.
ofi_p2p_tests=(message_sizes_around_the_eager_limit_and_large::ofi synchronous_send_waits_for_the_match::ofi
    ring_on_1_2_4_and_8_ranks::ofi a_panicking_rank_ends_the_job::ofi
    truncation_is_fatal_and_names_both_lengths::ofi wildcard_receives_take_every_sender::ofi
    messages_from_each_sender_arrive_in_order::ofi
    buffered_sends_in_flight_at_finalize_arrive_or_are_an_error::ofi)
expect_tests ${#ofi_p2p_tests[@]} "$p2p" --exact "${ofi_p2p_tests[@]}"
phase "verbs tests in the Soft-RoCE guest (rxe0 and rxe1 joined by a veth pair)"
# pml's engine test's reads into non-contiguous receives by scatter-gather lists (random
# layouts, a vector column and an indexed layout, counted) and of non-contiguous sends in
# place, a READ a run (each kind of layout either side of MPIRT_VERBS_SEND_MIN_BLOCK, counted;
# pml's verbs test reads them between two bare transports too), the datatypes suite's random
# layouts over verbs (every read into a view by scatter-gather lists, counted);
# windows_over_verbs: the window suite by RDMA WRITE, READ and device atomics (counted);
# windows_beyond_locked_memory: a window past the locked-memory limit (ulimit -l, without
# CAP_IPC_LOCK) on one rank, reached by messages there.
# Then libfabric's verbs provider: pml's engine test (its rendezvous by fi_read, which rxm posts
# as RDMA READs, counted), the p2p tests above, every collective and the windows over
# verbs;ofi_rxm (puts and gets by fi_write and fi_read, counted, a constant's put by a
# registered copy; accumulates by messages, rxm over verbs being asked no atomics). The
# failure paths last: one takes rxe1's link down (and back up), which only a guest may.
# The size tests' largest message (pml's engine test, mpirt's p2p sizes) is 4 MiB and 4097
# bytes here, not 64 MiB (MPIRT_TEST_LARGEST_MESSAGE): still past every limit these paths
# have below a port's max_msg_sz, 2 GiB on Soft-RoCE (the eager limit, a frame, the
# registration of a partial last page), one RDMA READ or fi_read as 64 MiB was; at emulated
# speed 64 MiB made most of these tests' time. Reads cut at a smaller max_msg_sz are proven
# by pml's engine and verbs tests and the windows suite (MPIRT_VERBS_MAX_MSG).
# A test that fails leaves the Soft-RoCE devices' counters (retransmissions, duplicate
# requests, NAKs) and the kernel's rxe messages in the log: the guest is gone afterwards, and
# a queue pair broken by what the peer's device did shows only there.
set +e
"$rdma_vm/rdma-vm" -n 2 -t 1800 -- env MPIRT_VERBS_DEV=rxe0,rxe1 \
    MPIRT_TEST_LARGEST_MESSAGE=$(((4 << 20) + 4097)) bash -c \
    "set -e; trap 'rc=\$?; { grep -H . /sys/class/infiniband/*/ports/1/hw_counters/* |
         grep -v :0\$; dmesg | grep -i rxe | tail -40; } || true; exit \$rc' ERR;
     '$engine' ranks_over_verbs; '$p2p' verbs --test-threads=1;
     '$engine' non_contiguous_receives_scatter_into_their_blocks_over_verbs;
     '$datatypes' over_verbs --test-threads=1;
     '$threads' over_verbs --test-threads=1;
     '$windows' windows_over_verbs --test-threads=1;
     capsh --drop=cap_ipc_lock -- -c \"ulimit -l 32768 && exec '$windows' windows_beyond_locked_memory\";
     echo '== OFI: verbs;ofi_rxm in the guest: pml engine test, mpirt p2p, collectives and windows';
     '$engine' ranks_over_ofi_verbs;
     MPIRT_TEST_OFI_PROVIDER='verbs;ofi_rxm' '$p2p' --exact ${ofi_p2p_tests[*]} --test-threads=1;
     MPIRT_TEST_OFI_PROVIDER='verbs;ofi_rxm' '$collectives' ofi --test-threads=1;
     MPIRT_TEST_OFI_PROVIDER='verbs;ofi_rxm' '$windows' windows_over_ofi;
     MPIRT_TEST_VERBS_PORT_DOWN=rxe1 '$verbs' --test-threads=1"
rc=$?
set -e
phase "end of the suite: exit $rc"
if [ $rc = 77 ]; then
    phase "verbs tests: SKIPPED (rdma-vm cannot run a guest here: exit 77)"
    exit 0
fi
exit $rc
