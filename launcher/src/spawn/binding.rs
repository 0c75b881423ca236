//! Which CPUs a host's ranks are pinned to, and the `--report-bindings` line that says so.

use std::io;
use std::mem::MaybeUninit;

/// How one host's ranks are pinned, by local rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// Not pinned: ranks run on the launcher's CPUs.
    None,
    /// `--bind-to core`: local rank i on the i-th of these CPUs (the launcher's own), unless the
    /// host's ranks outnumber them: then none is pinned (see `cpus_of`).
    Core(Vec<usize>),
    /// A rankfile's slots: local rank i on exactly the i-th list.
    Cpus(Vec<Vec<usize>>),
}

impl Binding {
    /// The CPUs the rank with `local_rank` of `local_size` is pinned to; None if unpinned.
    pub fn cpus_of(&self, local_rank: u32, local_size: u32) -> Option<&[usize]> {
        let i = local_rank as usize;
        match self {
            Binding::None => None,
            // As Open MPI does, ranks that outnumber the CPUs are left unbound: two ranks pinned
            // to one CPU can only take turns on it while another CPU may be free, whereas the
            // scheduler runs unbound ones wherever a CPU frees up first (4 ranks on 2 busy
            // cores: all-reduce latency halves).
            Binding::Core(cpus) if local_size as usize > cpus.len() => None,
            Binding::Core(cpus) => Some(&cpus[i..=i]),
            Binding::Cpus(lists) => lists.get(i).map(Vec::as_slice),
        }
    }

    /// Checks that every CPU of a rankfile binding is one this host lets the launcher use
    /// (`allowed`), so a wrong slot fails before any rank starts; `ranks` are the job ranks by
    /// local rank, for the message.
    pub fn check(&self, ranks: &[u32], allowed: &[usize]) -> Result<(), String> {
        let Binding::Cpus(lists) = self else {
            return Ok(());
        };
        for (rank, cpus) in ranks.iter().zip(lists) {
            if let Some(cpu) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(format!(
                    "the rankfile binds rank {rank} to CPU {cpu}, but rsrun may use only CPUs \
                     {} there",
                    cpu_list(allowed)
                ));
            }
        }
        Ok(())
    }

    /// The words an agent gets: `none`, `core`, or `cpus:` and each local rank's CPUs
    /// (comma-separated), the ranks separated by `/`.
    pub fn to_word(&self) -> String {
        match self {
            Binding::None => "none".into(),
            Binding::Core(_) => "core".into(),
            Binding::Cpus(lists) => {
                let lists: Vec<String> = lists
                    .iter()
                    .map(|cpus| {
                        let cpus: Vec<String> = cpus.iter().map(usize::to_string).collect();
                        cpus.join(",")
                    })
                    .collect();
                format!("cpus:{}", lists.join("/"))
            }
        }
    }

    /// Reads `to_word`'s form back; `core` takes the CPUs this process may use.
    pub fn from_word(word: &str) -> Result<Binding, String> {
        match word {
            "none" => Ok(Binding::None),
            "core" => allowed_cpus()
                .map(Binding::Core)
                .map_err(|e| format!("cannot read CPU affinity: {e}")),
            _ => {
                let lists = word
                    .strip_prefix("cpus:")
                    .ok_or_else(|| format!("unknown binding '{word}'"))?;
                lists
                    .split('/')
                    .map(|cpus| {
                        cpus.split(',')
                            .map(|c| c.parse().map_err(|_| format!("bad CPU in '{word}'")))
                            .collect()
                    })
                    .collect::<Result<_, _>>()
                    .map(Binding::Cpus)
            }
        }
    }
}

/// The CPUs this process may run on, in order; ranks bound to cores are spread over these.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    affinity(0)
}

/// The CPUs process `pid` (0: this one) may run on.
fn affinity(pid: libc::pid_t) -> io::Result<Vec<usize>> {
    let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: `set` is a zeroed (valid, empty) cpu_set_t of exactly the size passed, and
    // sched_getaffinity writes at most that many bytes into it.
    let rc = unsafe {
        libc::sched_getaffinity(
            pid,
            std::mem::size_of::<libc::cpu_set_t>(),
            set.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed memory is a valid cpu_set_t, and the call above only filled it in.
    let set = unsafe { set.assume_init() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads `set`, and every index is below the set's capacity.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// A set holding `cpus`, each below the set's capacity (the rankfile parser and
/// `allowed_cpus` make sure of that).
pub fn cpu_set_of(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` is below the set's capacity (see above), which CPU_SET indexes.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// `0-3,6`: CPU numbers with runs written as ranges, as `taskset -c` and /proc print them.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for cpu in sorted {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == cpu => *end = cpu,
            _ => runs.push((cpu, cpu)),
        }
    }
    let words: Vec<String> = runs
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    words.join(",")
}

/// Open MPI's `--report-bindings` line for a rank that rsrun started as `pid` on `host`:
/// `[host:pid] MCW rank 3 bound to CPUs 2-3: [././B/B]`, the map having one place per CPU of
/// the machine; the CPUs are read back from the running rank, so the line shows what took
/// effect. An unpinned rank gets Open MPI's words for it.
pub fn report(host: &str, rank: u32, pid: libc::pid_t, pinned: bool) -> String {
    let head = format!("[{host}:{pid}] MCW rank {rank}");
    if !pinned {
        return format!("{head} is not bound (or bound to all available processors)");
    }
    let cpus = match affinity(pid) {
        Ok(cpus) => cpus,
        Err(e) => return format!("{head}: cannot read its CPU affinity: {e}"),
    };
    // SAFETY: sysconf has no memory-safety preconditions.
    let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let last = cpus.iter().copied().max().unwrap_or(0);
    let places = usize::try_from(configured).unwrap_or(0).max(last + 1);
    let map: Vec<&str> = (0..places)
        .map(|cpu| if cpus.contains(&cpu) { "B" } else { "." })
        .collect();
    let noun = if cpus.len() == 1 { "CPU" } else { "CPUs" };
    format!(
        "{head} bound to {noun} {}: [{}]",
        cpu_list(&cpus),
        map.join("/")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_may_run_somewhere() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let set = cpu_set_of(&cpus[..1]);
        // SAFETY: CPU_ISSET only reads the set, and the index is in range.
        assert!(unsafe { libc::CPU_ISSET(cpus[0], &set) });
    }

    #[test]
    fn bindings_pick_cpus_by_local_rank_and_travel_as_words() {
        let core = Binding::Core(vec![2, 3]);
        assert_eq!(core.cpus_of(1, 2), Some(&[3][..]));
        assert_eq!(core.cpus_of(1, 3), None, "outnumbered CPUs pin nothing");
        let lists = Binding::Cpus(vec![vec![0, 1], vec![3]]);
        assert_eq!(lists.cpus_of(0, 2), Some(&[0, 1][..]));
        assert_eq!(lists.to_word(), "cpus:0,1/3");
        assert_eq!(Binding::from_word("cpus:0,1/3").unwrap(), lists);
        assert_eq!(Binding::from_word("none").unwrap(), Binding::None);
        assert!(Binding::from_word("cpus:0,x").is_err());
        assert!(Binding::from_word("socket").is_err());
    }

    #[test]
    fn rankfile_cpus_must_be_the_hosts() {
        let lists = Binding::Cpus(vec![vec![0], vec![1, 5]]);
        assert_eq!(lists.check(&[4, 6], &[0, 1, 5]), Ok(()));
        let e = lists.check(&[4, 6], &[0, 1, 2, 3]).unwrap_err();
        assert_eq!(
            e,
            "the rankfile binds rank 6 to CPU 5, but rsrun may use only CPUs 0-3 there"
        );
        assert_eq!(cpu_list(&[6, 0, 1, 2, 9, 10]), "0-2,6,9-10");
    }

    #[test]
    fn reports_read_the_rank_back() {
        let own = std::process::id() as libc::pid_t;
        let line = report("h", 3, own, true);
        let cpus = cpu_list(&allowed_cpus().unwrap());
        assert!(
            line.starts_with(&format!("[h:{own}] MCW rank 3 bound to CPU")),
            "{line}"
        );
        assert!(line.contains(&format!(" {cpus}: [")), "{line}");
        assert_eq!(
            report("h", 0, own, false),
            format!("[h:{own}] MCW rank 0 is not bound (or bound to all available processors)")
        );
    }
}
