//! Which launcher started this process, read from the variables each one sets for its
//! tasks, so that a rank never runs as a silent singleton: a process that is one of several
//! and cannot reach its launcher's key-value space is an error naming the launcher and what
//! to do, not a job of one that computes what its peers compute too.
//!
//! The order matters. rsrun's own variables come first, since rsrun also sets Open MPI's
//! (`OMPI_COMM_WORLD_*`) for programs that read them, and a rank of rsrun inside a Slurm
//! allocation inherits Slurm's. Then a PMI socket (`PMI_FD`: Slurm's `--mpi=pmi2`, MPICH's
//! Hydra, Flux), a PMI server's address (`PMI_PORT`: Hydra's `-pmi-port`) and PMIx's
//! namespace, which are ways in; then the task variables of launchers
//! whose way in this process lacks.

use std::fmt;

/// The launcher behind this process, and how many tasks it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartedBy {
    /// rsrun: `MPIRT_RANK` and its key-value service.
    Rsrun,
    /// A PMI-1 or PMI-2 server on the socket in `PMI_FD`.
    PmiFd,
    /// A PMI-1 server at the TCP address in `PMI_PORT` (Hydra's `-pmi-port`).
    PmiPort,
    /// A PMIx server: `PMIX_NAMESPACE` and `PMIX_RANK`. `launcher` says whose, and `place`
    /// which task of how many where its own variables say, for errors.
    Pmix {
        launcher: Launcher,
        place: Option<(u32, u32)>,
    },
    /// A launcher whose way in this process has none (see [`Launcher`]), as task `task` of
    /// `tasks`.
    Unreachable {
        launcher: Launcher,
        task: u32,
        tasks: u32,
    },
    /// No launcher, or one that started this process alone: a job of one.
    Alone,
}

/// A launcher known by its task variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    Slurm,
    OpenMpi,
    Hydra,
    Flux,
    /// A PMIx server whose launcher set no task variables of its own.
    UnknownPmix,
}

impl StartedBy {
    /// Reads the launcher from `var`, which looks up one environment variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> StartedBy {
        if var("MPIRT_RANK").is_some() {
            return StartedBy::Rsrun;
        }
        if var("PMI_FD").is_some() {
            return StartedBy::PmiFd;
        }
        if var("PMI_PORT").is_some() {
            return StartedBy::PmiPort;
        }
        let known = launcher_task(&var);
        if var("PMIX_NAMESPACE").is_some() && var("PMIX_RANK").is_some() {
            // Open MPI's mpirun and srun --mpi=pmix set their own task variables beside
            // PMIx's: a PMIx job of one is still a singleton where they say so.
            return match known {
                Some((_, _, 1)) => StartedBy::Alone,
                Some((launcher, task, tasks)) => StartedBy::Pmix {
                    launcher,
                    place: Some((task, tasks)),
                },
                None => StartedBy::Pmix {
                    launcher: Launcher::UnknownPmix,
                    place: None,
                },
            };
        }
        match known {
            Some((launcher, task, tasks)) if tasks > 1 => StartedBy::Unreachable {
                launcher,
                task,
                tasks,
            },
            _ => StartedBy::Alone,
        }
    }

    /// How many ranks the job has, as the launcher's variables (`var`) say before this
    /// process connects to it: `None` where they do not (a PMI socket whose launcher sets no
    /// count, a PMIx server of an unknown launcher). mpirt sizes libfabric by it before a
    /// PMIx bootstrap starts its thread (see [`crate::libfabric::prepare_before_bootstrap`]).
    pub fn tasks(&self, var: impl Fn(&str) -> Option<String>) -> Option<u32> {
        match *self {
            StartedBy::Rsrun => var("MPIRT_SIZE").and_then(|v| v.trim().parse().ok()),
            // Hydra inside a Slurm allocation leaves Slurm's variables set: PMI's own count
            // comes first.
            StartedBy::PmiFd | StartedBy::PmiPort => var("PMI_SIZE")
                .and_then(|v| v.trim().parse().ok())
                .or_else(|| launcher_task(&var).map(|(_, _, n)| n)),
            StartedBy::Pmix { place, .. } => place.map(|(_, n)| n),
            StartedBy::Unreachable { tasks, .. } => Some(tasks),
            StartedBy::Alone => Some(1),
        }
    }

    /// The error for a process this build cannot wire up, or `None` where it can.
    pub fn unsupported(&self, pmix_built: bool) -> Option<Unsupported> {
        match *self {
            StartedBy::Pmix { launcher, place } if !pmix_built => {
                Some(Unsupported::NoPmix(launcher, place))
            }
            StartedBy::Unreachable {
                launcher,
                task,
                tasks,
            } => Some(Unsupported::NoWayIn {
                launcher,
                task,
                tasks,
            }),
            _ => None,
        }
    }
}

/// (launcher, task, tasks) from each launcher's own task variables (`var`), first match wins.
fn launcher_task(var: &impl Fn(&str) -> Option<String>) -> Option<(Launcher, u32, u32)> {
    let number = |name: &str| var(name).and_then(|v| v.trim().parse::<u32>().ok());
    let slurm_tasks = number("SLURM_STEP_NUM_TASKS").or_else(|| {
        // SLURM_NTASKS is the allocation's too (a batch script sees it): only within a
        // step, where SLURM_STEP_ID is set, does it count this step's tasks.
        var("SLURM_STEP_ID").and_then(|_| number("SLURM_NTASKS"))
    });
    let tasks_of = [
        (
            Launcher::OpenMpi,
            number("OMPI_COMM_WORLD_RANK"),
            number("OMPI_COMM_WORLD_SIZE"),
        ),
        (Launcher::Slurm, number("SLURM_PROCID"), slurm_tasks),
        (
            Launcher::Flux,
            number("FLUX_TASK_RANK"),
            number("FLUX_JOB_SIZE"),
        ),
        (Launcher::Hydra, number("PMI_RANK"), number("PMI_SIZE")),
        // Hydra with -pmi-port names the rank PMI_ID.
        (Launcher::Hydra, number("PMI_ID"), number("PMI_SIZE")),
        (
            Launcher::Hydra,
            number("MPI_LOCALRANKID"),
            number("MPI_LOCALNRANKS"),
        ),
    ];
    tasks_of
        .iter()
        .find_map(|&(launcher, task, tasks)| Some((launcher, task?, tasks?)))
}

/// Why a process started by a launcher cannot join its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsupported {
    /// Its launcher speaks PMIx (to task `.0` of `.1` where known), and this build has no
    /// PMIx client.
    NoPmix(Launcher, Option<(u32, u32)>),
    /// Its launcher started it as one of several tasks and gave it no key-value space.
    NoWayIn {
        launcher: Launcher,
        task: u32,
        tasks: u32,
    },
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Unsupported::NoPmix(launcher, place) => {
                let (who, what, other) = match launcher {
                    Launcher::Slurm => ("srun --mpi=pmix", "task", "run srun --mpi=pmi2, or "),
                    Launcher::OpenMpi => ("Open MPI's mpirun", "rank", "use rsrun, or "),
                    Launcher::Flux => {
                        ("Flux with PMIx", "task", "run flux with -o pmi=simple, or ")
                    }
                    Launcher::Hydra | Launcher::UnknownPmix => ("a PMIx launcher", "task", ""),
                };
                let place = place
                    .map(|(task, tasks)| format!(" as {what} {task} of {tasks}"))
                    .unwrap_or_default();
                write!(
                    f,
                    "started by {who}{place} (PMIX_NAMESPACE is set), but this build of mpirt \
                     has no PMIx client: {other}build mpirt with the `pmix` feature"
                )
            }
            Unsupported::NoWayIn {
                launcher,
                task,
                tasks,
            } => {
                let (who, what, lacking, advice) = match launcher {
                    Launcher::Slurm => (
                        "srun",
                        "task",
                        "Slurm gave no PMI",
                        "run srun --mpi=pmi2, or build mpirt with the `pmix` feature for \
                         --mpi=pmix",
                    ),
                    Launcher::OpenMpi => (
                        "Open MPI's mpirun",
                        "rank",
                        "it gave no PMIx server (PMIX_NAMESPACE is not set)",
                        "run it with Open MPI 4 or later, and mpirt built with the `pmix` \
                         feature, or use rsrun",
                    ),
                    Launcher::Hydra => (
                        "MPICH's mpiexec (Hydra)",
                        "rank",
                        "it gave no PMI server (neither PMI_FD nor PMI_PORT is set)",
                        "run the job with MPICH's own mpiexec.hydra, or use rsrun",
                    ),
                    Launcher::Flux => (
                        "Flux",
                        "task",
                        "it gave no PMI socket (PMI_FD is not set)",
                        "run flux with -o pmi=simple",
                    ),
                    Launcher::UnknownPmix => ("a PMIx launcher", "task", "no PMIx", "use rsrun"),
                };
                write!(
                    f,
                    "started by {who} as {what} {task} of {tasks}, but {lacking}: {advice}"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn started(vars: &[(&str, &str)]) -> StartedBy {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StartedBy::from_vars(|name| map.get(name).cloned())
    }

    /// The error the default build (no PMIx) gives for `vars`.
    fn refusal(vars: &[(&str, &str)]) -> String {
        started(vars)
            .unsupported(false)
            .expect("this environment is refused")
            .to_string()
    }

    /// The job's size as each launcher's variables give it, before any connection.
    #[test]
    fn the_tasks_come_from_each_launchers_variables() {
        let tasks = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            started(vars).tasks(|name| map.get(name).cloned())
        };
        let rsrun = [
            ("MPIRT_RANK", "2"),
            ("MPIRT_SIZE", "6"),
            ("OMPI_COMM_WORLD_SIZE", "9"),
        ];
        assert_eq!(tasks(&rsrun), Some(6));
        let pmi2 = [
            ("PMI_FD", "5"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "3"),
        ];
        assert_eq!(tasks(&pmi2), Some(3));
        let hydra_in_slurm = [
            ("PMI_FD", "5"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "8"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NTASKS", "2"),
        ];
        assert_eq!(tasks(&hydra_in_slurm), Some(8));
        assert_eq!(
            tasks(&[("PMI_PORT", "vm:1"), ("PMI_ID", "0"), ("PMI_SIZE", "5")]),
            Some(5)
        );
        let pmix = [
            ("PMIX_NAMESPACE", "prterun-vm-1@1"),
            ("PMIX_RANK", "0"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ];
        assert_eq!(tasks(&pmix), Some(4));
        assert_eq!(tasks(&[("PMIX_NAMESPACE", "n"), ("PMIX_RANK", "0")]), None);
        assert_eq!(tasks(&[("PMI_FD", "5")]), None);
        assert_eq!(tasks(&[]), Some(1));
    }

    #[test]
    fn plain_srun_with_several_tasks_is_named() {
        let vars = [
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
        ];
        assert_eq!(
            refusal(&vars),
            "started by srun as task 1 of 2, but Slurm gave no PMI: run srun --mpi=pmi2, or \
             build mpirt with the `pmix` feature for --mpi=pmix"
        );
        // An older srun without SLURM_STEP_NUM_TASKS: the step's SLURM_NTASKS.
        let e = refusal(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_ID", "3"),
        ]);
        assert!(e.starts_with("started by srun as task 0 of 4,"), "{e}");
    }

    #[test]
    fn one_task_and_batch_scripts_are_singletons() {
        let one = [("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "1")];
        assert_eq!(started(&one), StartedBy::Alone);
        // A batch script (no step of its own) in an allocation of 8 tasks.
        let batch = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "8")];
        assert_eq!(started(&batch), StartedBy::Alone);
        assert_eq!(started(&[]), StartedBy::Alone);
        assert_eq!(started(&[]).unsupported(false), None);
    }

    #[test]
    fn srun_with_pmix_needs_the_pmix_feature() {
        let vars = [
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("PMIX_NAMESPACE", "slurm.pmix.12.0"),
            ("PMIX_RANK", "1"),
        ];
        assert_eq!(
            started(&vars),
            StartedBy::Pmix {
                launcher: Launcher::Slurm,
                place: Some((1, 2))
            }
        );
        assert_eq!(
            refusal(&vars),
            "started by srun --mpi=pmix as task 1 of 2 (PMIX_NAMESPACE is set), but this build \
             of mpirt has no PMIx client: run srun --mpi=pmi2, or build mpirt with the `pmix` \
             feature"
        );
        assert_eq!(started(&vars).unsupported(true), None);
    }

    #[test]
    fn open_mpi_mpirun_is_named() {
        let vars = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "prterun-vm-1@1"),
            ("PMIX_RANK", "3"),
        ];
        let e = refusal(&vars);
        assert!(
            e.starts_with("started by Open MPI's mpirun as rank 3 of 4 (PMIX_NAMESPACE"),
            "{e}"
        );
        assert!(
            e.ends_with("use rsrun, or build mpirt with the `pmix` feature"),
            "{e}"
        );
        // Without PMIx (an Open MPI older than 2), the rank and size still say it is a job.
        let e = refusal(&vars[..2]);
        assert!(
            e.starts_with("started by Open MPI's mpirun as rank 3 of 4, but it gave no PMIx"),
            "{e}"
        );
        // mpirun -n 1 under PMIx is a job of one.
        let one = [
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "1"),
            ("PMIX_NAMESPACE", "x"),
            ("PMIX_RANK", "0"),
        ];
        assert_eq!(started(&one), StartedBy::Alone);
    }

    #[test]
    fn a_pmix_server_alone_says_so() {
        let vars = [("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")];
        let e = refusal(&vars);
        assert!(
            e.starts_with("started by a PMIx launcher (PMIX_NAMESPACE"),
            "{e}"
        );
    }

    #[test]
    fn rsrun_comes_before_the_open_mpi_variables_it_also_sets() {
        let vars = [
            ("MPIRT_RANK", "1"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "3"),
        ];
        assert_eq!(started(&vars), StartedBy::Rsrun);
        assert_eq!(started(&vars).unsupported(false), None);
    }

    #[test]
    fn a_pmi_socket_is_a_way_in() {
        let hydra = [("PMI_FD", "6"), ("PMI_RANK", "1"), ("PMI_SIZE", "2")];
        assert_eq!(started(&hydra), StartedBy::PmiFd);
        let slurm = [
            ("PMI_FD", "9"),
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
        ];
        assert_eq!(started(&slurm), StartedBy::PmiFd);
    }

    #[test]
    fn a_pmi_port_is_a_way_in() {
        let hydra = [("PMI_ID", "2"), ("PMI_SIZE", "3"), ("PMI_PORT", "vm:1234")];
        assert_eq!(started(&hydra), StartedBy::PmiPort);
        assert_eq!(started(&hydra).unsupported(false), None);
    }

    #[test]
    fn hydra_without_a_socket_is_named() {
        let e = refusal(&[("PMI_RANK", "1"), ("PMI_SIZE", "3")]);
        assert_eq!(
            e,
            "started by MPICH's mpiexec (Hydra) as rank 1 of 3, but it gave no PMI server \
             (neither PMI_FD nor PMI_PORT is set): run the job with MPICH's own \
             mpiexec.hydra, or use rsrun"
        );
        let e = refusal(&[("PMI_ID", "2"), ("PMI_SIZE", "3")]);
        assert!(
            e.starts_with("started by MPICH's mpiexec (Hydra) as rank 2 of 3"),
            "{e}"
        );
        // Hydra's local-rank variables alone.
        let e = refusal(&[("MPI_LOCALRANKID", "0"), ("MPI_LOCALNRANKS", "2")]);
        assert!(
            e.starts_with("started by MPICH's mpiexec (Hydra) as rank 0 of 2"),
            "{e}"
        );
    }

    #[test]
    fn flux_without_a_socket_is_named() {
        let vars = [
            ("FLUX_JOB_ID", "f2Xy"),
            ("FLUX_TASK_RANK", "2"),
            ("FLUX_JOB_SIZE", "4"),
        ];
        assert_eq!(
            refusal(&vars),
            "started by Flux as task 2 of 4, but it gave no PMI socket (PMI_FD is not set): \
             run flux with -o pmi=simple"
        );
    }
}
