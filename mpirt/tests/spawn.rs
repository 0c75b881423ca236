//! Spawn under rsrun (see `common`): two parents start three children of this same binary
//! (which find their parents through `parent()`), trade over the inter-communicator and
//! merge with them; `spawn_multiple` of two commands; a child that dies ends the whole job,
//! naming it; no process is left when the job ends; rsrun given `--` spawns too; and under `srun --mpi=pmi2` a spawn is
//! a named error on every rank.

use std::env;
use std::process::Command;

use mpirt::error::MpiError;
use mpirt::topology::{InterCommunicator, MergeOrder, Rank, SimpleCommunicator};
use mpirt::traits::*;

mod common;
use common::{
    job, job_on, ok_job_with, rsrun_path, run_limited, slurm_available, text, under_rsrun, Launch,
    RANK_MODE, RANK_MODE_ARGS,
};

const CHILDREN: Rank = 3;
/// Spawns in a row from one job: each joins a bridge, more than the 32 transports that the
/// engine's mask of direct-send transports had bits for.
const MANY_SPAWNS: usize = 34;

#[test]
fn rank_mode() {
    let Ok(mode) = env::var(RANK_MODE) else {
        return;
    };
    let spawned = env::var_os("MPIRT_SPAWNED_AS").is_some();
    if mode == "no_bridge" && !spawned && env::var("MPIRT_RANK").as_deref() == Ok("1") {
        // No address matches: this parent alone cannot open a bridge (one host's world
        // needs no TCP of its own).
        env::set_var("MPIRT_TCP_IF", "no-such-interface0");
    }
    if mode == "no_bridge" && spawned {
        // Said before `initialize`, which aborts: the test looks for it after the job.
        println!("unjoined child (pid {})", std::process::id());
    }
    // A child whose parents cannot join aborts the job in `initialize`, saying why.
    let mut universe = mpirt::initialize().expect("initialize");
    let world = universe.world();
    match world.parent() {
        Some(parents) => {
            child(&world, &parents, &mode);
            universe.disconnect_parent();
            assert!(world.parent().is_none());
        }
        None => parent(&world, &mode),
    }
    println!("rank {} done", world.rank());
}

/// This binary as a child: the rank mode's own arguments, then `extra`.
fn me(extra: &str) -> Command {
    let mut command = Command::new(env::current_exe().unwrap());
    command.args(RANK_MODE_ARGS).arg(extra);
    command
}

fn parent(world: &SimpleCommunicator, mode: &str) {
    let root = world.process_at_rank(0);
    match mode {
        "compute" | "die" => {
            let inter = root.spawn(&me(mode), CHILDREN).expect("spawn");
            answers(world, &inter);
            if mode == "compute" {
                merged(world, &inter, MergeOrder::Low, true);
                merged(world, &inter, MergeOrder::High, true);
            }
        }
        "many" => {
            for _ in 0..MANY_SPAWNS {
                let inter = root.spawn(&me("many"), 1).expect("spawn");
                answers(world, &inter);
            }
            println!("parent {}: {MANY_SPAWNS} spawns answered", world.rank());
        }
        "multiple" => {
            let commands = [me("first"), me("second")];
            let inter = root
                .spawn_multiple(&commands, &[1, 2])
                .expect("spawn_multiple");
            assert_eq!(inter.remote_size(), 3);
            answers(world, &inter);
        }
        "no_bridge" => match root.spawn(&me(mode), CHILDREN) {
            Err(MpiError::Mpirt(e)) => println!("parent {}: {e}", world.rank()),
            Err(other) => panic!("not mpirt's error: {other}"),
            Ok(_) => panic!("a spawn joined although parent rank 1 has no bridge"),
        },
        "refused" => {
            let result = root.spawn(&me("compute"), CHILDREN);
            match result {
                Err(MpiError::Mpirt(e)) => println!("rank {}: {e}", world.rank()),
                Err(other) => panic!("not mpirt's error: {other}"),
                Ok(_) => panic!("spawn succeeded under srun"),
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

/// Each parent sends each child its rank plus 10 times the child's; each child answers each
/// parent with the sum of what it got plus 100 times its own rank.
fn answers(world: &SimpleCommunicator, inter: &InterCommunicator) {
    assert_eq!(inter.size(), world.size());
    let children = inter.remote_size();
    for c in 0..children {
        inter.process_at_rank(c).send(&(world.rank() + 10 * c));
    }
    let parents_sum: Rank = (0..world.size()).sum();
    for c in 0..children {
        let (answer, status) = inter.process_at_rank(c).receive::<Rank>();
        assert_eq!(status.source_rank(), c);
        assert_eq!(answer, parents_sum + world.size() * 10 * c + 100 * c);
    }
    println!("parent {}: {children} children answered", world.rank());
}

fn child(world: &SimpleCommunicator, parents: &InterCommunicator, mode: &str) {
    let args: Vec<String> = env::args().collect();
    let role = args.last().cloned().unwrap_or_default();
    println!(
        "child {} of {} ({role}, pid {})",
        world.rank(),
        world.size(),
        std::process::id()
    );
    if role == "die" {
        // Every child has joined the parents and printed its pid before one dies: a child
        // still joining when rank 1 dies would fail its `initialize` and never print.
        world.barrier();
    }
    if role == "die" && world.rank() == 1 {
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let mut sum = 0;
    for p in 0..parents.remote_size() {
        let (x, _) = parents.process_at_rank(p).receive::<Rank>();
        sum += x;
    }
    for p in 0..parents.remote_size() {
        parents.process_at_rank(p).send(&(sum + 100 * world.rank()));
    }
    if mode == "compute" {
        merged(world, parents, MergeOrder::High, false);
        // Both groups pass the same order: the parents come first.
        merged(world, parents, MergeOrder::High, false);
    }
}

/// Merges the parents (first) with the children (`parents`: whether this is a parent), sums
/// the merged ranks, and checks each merged rank's answer to a broadcast from the last.
fn merged(world: &SimpleCommunicator, inter: &InterCommunicator, order: MergeOrder, parents: bool) {
    let all = inter.merge(order);
    let size = world.size() + inter.remote_size();
    assert_eq!(all.size(), size);
    let expected_rank = match parents {
        true => world.rank(),
        false => inter.remote_size() + world.rank(),
    };
    assert_eq!(all.rank(), expected_rank);
    let mut sum: Rank = 0;
    all.all_reduce_into(
        &all.rank(),
        &mut sum,
        mpirt::collective::SystemOperation::sum(),
    );
    assert_eq!(sum, size * (size - 1) / 2);
    let mut last = if all.rank() == size - 1 { 4242 } else { 0 };
    all.process_at_rank(size - 1).broadcast_into(&mut last);
    assert_eq!(last, 4242);
    println!("merged rank {} of {size}", all.rank());
}

/// Whether process `pid` of the job's children still exists; `false` with a word when they
/// ran on other hosts, where this host cannot look.
fn alive(pid: &str) -> bool {
    if env::var_os("MPIRT_TEST_HOSTS").is_some() {
        println!("not checked: child pid {pid} ran on another host");
        return false;
    }
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pids the children printed.
fn child_pids(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split("pid ").nth(1))
        .map(|p| p.trim_end_matches(')').to_string())
        .collect()
}

#[test]
fn two_parents_spawn_three_children_that_answer_and_merge() {
    if !under_rsrun("spawn") {
        return;
    }
    let (out, err) = ok_job_with(2, "compute", &[]);
    assert_eq!(out.matches("children answered").count(), 2, "{out}\n{err}");
    assert_eq!(out.matches("merged rank").count(), 10, "{out}\n{err}");
    assert_eq!(out.matches(" done").count(), 5, "{out}\n{err}");
    let pids = child_pids(&out);
    assert_eq!(pids.len(), 3, "{out}");
    for pid in pids {
        assert!(!alive(&pid), "child pid {pid} is left after the job\n{out}");
    }
}

/// `rsrun ... -- PROGRAM`: the spawned job's rsrun gets rsrun's options, not the `--` nor a
/// value that looks like an option (`--ssh-args -n`, unused here but parsed).
#[test]
fn a_spawn_works_when_rsrun_was_given_a_double_dash() {
    if !under_rsrun("spawn") {
        return;
    }
    let mut command = Command::new(rsrun_path());
    command
        .args(["-n", "2", "--ssh-args", "-n", "--"])
        .arg(env::current_exe().unwrap())
        .args(RANK_MODE_ARGS)
        .env(RANK_MODE, "compute");
    let output = run_limited(command);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert_eq!(out.matches("children answered").count(), 2, "{out}\n{err}");
}

#[test]
fn a_job_spawns_again_and_again_past_32_bridges() {
    if !under_rsrun("spawn") {
        return;
    }
    let (out, err) = ok_job_with(2, "many", &[]);
    let line = format!("{MANY_SPAWNS} spawns answered");
    assert_eq!(out.matches(&line).count(), 2, "{out}\n{err}");
    assert_eq!(
        out.matches("child 0 of 1 (many").count(),
        MANY_SPAWNS,
        "{out}\n{err}"
    );
}

/// A parent that cannot open its bridge (no address matches MPIRT_TCP_IF) says why in the
/// gather: every other parent, and every child through the roots' trade, gets the error
/// naming it instead of waiting for its endpoint. The parents' spawn returns it, as
/// MPI_Comm_spawn returns its error, and they go on to finish; the children abort with it
/// in `initialize`, which ends their job (named, with the cause) but not the parents'; no
/// child is left.
#[test]
fn a_parent_that_cannot_open_its_bridge_is_named_on_both_sides() {
    if !under_rsrun("spawn") {
        return;
    }
    if env::var_os("MPIRT_TEST_HOSTS").is_some() {
        println!("skipped: across hosts the world's TCP needs the address this test takes away");
        return;
    }
    let output = job(2, "no_bridge", &[]);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    let named = |l: &&str| {
        l.contains("parent rank 1 cannot open its bridge: ") && l.contains("MPIRT_TCP_IF")
    };
    let parents = out
        .lines()
        .filter(|l| l.starts_with("parent "))
        .filter(named);
    assert_eq!(parents.count(), 2, "{out}\n{err}");
    assert_eq!(out.matches(" done").count(), 2, "{out}\n{err}");
    // The children's abort, then rsrun's word that their job ended without its parents.
    let children = err
        .lines()
        .filter(|l| l.starts_with("rsrun: spawned job 1 (3 ranks of"))
        .filter(|l| l.contains("called abort") && l.contains("joining the parents"))
        .filter(named);
    assert!(children.count() > 0, "{out}\n{err}");
    let ended = err
        .lines()
        .filter(|l| l.starts_with("rsrun: spawned job 1 (3 ranks of"))
        .filter(|l| l.contains("exited with status") && !l.contains("status 0"))
        .filter(|l| l.contains("its parents' spawn returned an error instead of joining it"))
        .filter(named);
    assert_eq!(ended.count(), 1, "{out}\n{err}");
    let pids = child_pids(&out);
    assert_eq!(pids.len(), 3, "{out}\n{err}");
    for pid in pids {
        assert!(!alive(&pid), "child pid {pid} is left after the job\n{out}");
    }
}

#[test]
fn spawn_multiple_starts_both_commands_in_one_world() {
    if !under_rsrun("spawn") {
        return;
    }
    let (out, err) = ok_job_with(2, "multiple", &[]);
    assert!(out.contains("child 0 of 3 (first"), "{out}\n{err}");
    assert!(out.contains("child 1 of 3 (second"), "{out}\n{err}");
    assert!(out.contains("child 2 of 3 (second"), "{out}\n{err}");
    assert_eq!(out.matches("children answered").count(), 2, "{out}\n{err}");
}

#[test]
fn a_child_that_dies_ends_the_job_naming_it() {
    if !under_rsrun("spawn") {
        return;
    }
    let output = job(2, "die", &[]);
    let (out, err) = text(&output);
    assert!(!output.status.success(), "{out}\n{err}");
    // rsrun's reaper names the child killed, unless a rank that talks to it finds its
    // connection gone first and aborts: a parent (its send to the dead child fails, or its
    // receive finds the connection closed: the abort names the child in its own job) or,
    // across hosts, another child (before the agent's report comes: its abort
    // names rank 1 and the host, in the children's job). Which comes
    // first is a race, so either ends the job.
    let named = err.lines().any(|line| {
        let reaped = line.starts_with("rsrun: spawned job 1 (3 ranks of")
            && line.contains("rank 1")
            && (line.contains("killed by signal 9")
                || line.contains("closed its connection without finalizing"));
        let aborted = line.starts_with("rsrun: rank ")
            && line.contains("called abort")
            && line.contains("the connection with rank 1 of spawned job 1 (3 ranks of");
        // Another child names its own job's rank 1 without the job's label.
        let sibling_aborted = line.starts_with("rsrun: spawned job 1 (3 ranks of")
            && line.contains("called abort")
            && line.contains("the connection with rank 1 on ");
        reaped || aborted || sibling_aborted
    });
    assert!(named, "{err}");
    let pids = child_pids(&out);
    assert_eq!(pids.len(), 3, "{out}\n{err}");
    for pid in pids {
        assert!(!alive(&pid), "child pid {pid} is left after the job\n{out}");
    }
}

/// Every rank's output says the spawn failed because only rsrun starts ranks at run time.
fn refused_on_every_rank(output: std::process::Output) {
    let (out, err) = text(&output);
    assert!(output.status.success(), "{out}\n{err}");
    for rank in 0..2 {
        let expected = format!(
            "rank {rank}: spawn: spawn failed: only rsrun starts ranks at run time, and this \
             job was started by"
        );
        assert!(out.contains(&expected), "{out}\n{err}");
    }
}

#[test]
fn spawn_under_srun_pmi2_is_a_named_error_on_every_rank() {
    if !slurm_available() {
        return;
    }
    refused_on_every_rank(job_on(Launch::Srun { nodes: 1 }, 2, "refused", &[]));
}

/// Under the launcher the suite runs with (MPIRT_TEST_LAUNCHER: Hydra, Open MPI's mpirun,
/// srun), a spawn is refused by name on every rank.
#[test]
fn spawn_under_another_launcher_is_a_named_error_on_every_rank() {
    if common::test_launcher() == common::TestLauncher::Rsrun {
        println!("skipped: the suite runs under rsrun, which spawns (MPIRT_TEST_LAUNCHER)");
        return;
    }
    refused_on_every_rank(job(2, "refused", &[]));
}
