//! OSU's options: `-m [MIN:]MAX`, `-i ITER`, `-x WARMUP`, `-h`, `-v`, with `-W WINDOW` for the
//! bandwidth tests and `-f` (full statistics) for the collective ones, with OSU's defaults and
//! its small/large message loop counts. OSU 7.4's `osu_mbw_mr` has no `-p`: it always pairs
//! half the ranks with the other half, and so do the ports.

/// Messages above this many bytes use the "large" loop counts, as in OSU.
pub const LARGE_MESSAGE_SIZE: usize = 8192;
const MAX_MESSAGE_SIZE: usize = 1 << 22;
const MAX_MESSAGE_SIZE_COLLECTIVE: usize = 1 << 20;
const WINDOW_SIZE: usize = 64;
/// The most threads `-t` takes a rank, as OSU.
const MAX_THREADS: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Benchmark {
    Latency,
    Bandwidth,
    BiBandwidth,
    MultiLatency,
    MultiBandwidth,
    Barrier,
    Broadcast,
    Reduce,
    Allreduce,
    Allgather,
    Alltoall,
    Gather,
    Scatter,
    ReduceScatter,
    Allgatherv,
    Alltoallv,
    Gatherv,
    Scatterv,
    ReduceScatterBlock,
    /// The non-blocking collectives (`osu_i...`): each started, then as long a computation as
    /// the call alone takes, then waited for; they print OSU's overlap columns.
    IBarrier,
    IBroadcast,
    IReduce,
    IAllreduce,
    IAllgather,
    IAllgatherv,
    IAlltoall,
    IAlltoallv,
    IGather,
    IGatherv,
    IScatter,
    IScatterv,
    IReduceScatter,
    IReduceScatterBlock,
    /// Not OSU's: a halo exchange of a strided column (a vector datatype), issue 21's.
    HaloColumn,
    PutLatency,
    GetLatency,
    PutBandwidth,
    GetBandwidth,
    PutBiBandwidth,
    AccLatency,
    GetAccLatency,
    FopLatency,
    CasLatency,
    /// Threads on both ranks (`-t`): OSU's `osu_latency_mt`.
    LatencyMt,
    /// Not in OSU 7.4: `osu_mbw_mr`'s windows between thread pairs of two ranks (`-t`).
    MessageRateMt,
}

/// How a one-sided test makes its window (`-w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    Create,
    Allocate,
    Dynamic,
}

/// How a one-sided test synchronises (`-s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    Lock,
    Flush,
    FlushLocal,
    LockAll,
    Pscw,
    Fence,
}

impl WindowKind {
    /// The call OSU names in its header.
    pub fn call(self) -> &'static str {
        match self {
            WindowKind::Create => "MPI_Win_create",
            WindowKind::Allocate => "MPI_Win_allocate",
            WindowKind::Dynamic => "MPI_Win_create_dynamic",
        }
    }
}

impl SyncMode {
    /// The calls OSU names in its header.
    pub fn calls(self) -> &'static str {
        match self {
            SyncMode::Lock => "MPI_Win_lock/unlock",
            SyncMode::Flush => "MPI_Win_flush",
            SyncMode::FlushLocal => "MPI_Win_flush_local",
            SyncMode::LockAll => "MPI_Win_lock_all/unlock_all",
            SyncMode::Pscw => "MPI_Win_post/start/complete/wait",
            SyncMode::Fence => "MPI_Win_fence",
        }
    }
}

impl Benchmark {
    pub fn title(self) -> &'static str {
        match self {
            Benchmark::Latency => "OSU MPI Latency Test",
            Benchmark::Bandwidth => "OSU MPI Bandwidth Test",
            Benchmark::BiBandwidth => "OSU MPI Bi-Directional Bandwidth Test",
            Benchmark::MultiLatency => "OSU MPI Multi Latency Test",
            Benchmark::MultiBandwidth => "OSU MPI Multiple Bandwidth / Message Rate Test",
            Benchmark::Barrier => "OSU MPI Barrier Latency Test",
            Benchmark::Broadcast => "OSU MPI Broadcast Latency Test",
            Benchmark::Reduce => "OSU MPI Reduce Latency Test",
            Benchmark::Allreduce => "OSU MPI Allreduce Latency Test",
            Benchmark::Allgather => "OSU MPI Allgather Latency Test",
            Benchmark::Alltoall => "OSU MPI All-to-All Personalized Exchange Latency Test",
            Benchmark::Gather => "OSU MPI Gather Latency Test",
            Benchmark::Scatter => "OSU MPI Scatter Latency Test",
            Benchmark::ReduceScatter => "OSU MPI Reduce_scatter Latency Test",
            Benchmark::Allgatherv => "OSU MPI Allgatherv Latency Test",
            Benchmark::Alltoallv => "OSU MPI All-to-Allv Personalized Exchange Latency Test",
            Benchmark::Gatherv => "OSU MPI Gatherv Latency Test",
            Benchmark::Scatterv => "OSU MPI Scatterv Latency Test",
            Benchmark::ReduceScatterBlock => "OSU MPI Reduce_scatter_block Latency Test",
            Benchmark::IBarrier => "OSU MPI Non-blocking Barrier Latency Test",
            Benchmark::IBroadcast => "OSU MPI Non-blocking Broadcast Latency Test",
            Benchmark::IReduce => "OSU MPI Non-blocking Reduce Latency Test",
            Benchmark::IAllreduce => "OSU MPI Non-blocking Allreduce Latency Test",
            Benchmark::IAllgather => "OSU MPI Non-blocking Allgather Latency Test",
            Benchmark::IAllgatherv => "OSU MPI Non-blocking Allgatherv Latency Test",
            Benchmark::IAlltoall => {
                "OSU MPI Non-blocking All-to-All Personalized Exchange Latency Test"
            }
            Benchmark::IAlltoallv => {
                "OSU MPI Non-blocking All-to-Allv Personalized Exchange Latency Test"
            }
            Benchmark::IGather => "OSU MPI Non-blocking Gather Latency Test",
            Benchmark::IGatherv => "OSU MPI Non-blocking Gatherv Latency Test",
            Benchmark::IScatter => "OSU MPI Non-blocking Scatter Latency Test",
            Benchmark::IScatterv => "OSU MPI Non-blocking Scatterv Latency Test",
            Benchmark::IReduceScatter => "OSU MPI Non-blocking Reduce_scatter Latency Test",
            Benchmark::IReduceScatterBlock => {
                "OSU MPI Non-blocking Reduce_scatter_block Latency Test"
            }
            Benchmark::HaloColumn => "Halo Exchange of a Strided Column (vector datatype) Test",
            Benchmark::PutLatency => "OSU MPI_Put Latency Test",
            Benchmark::GetLatency => "OSU MPI_Get latency Test",
            Benchmark::PutBandwidth => "OSU MPI_Put Bandwidth Test",
            Benchmark::GetBandwidth => "OSU MPI_Get Bandwidth Test",
            Benchmark::PutBiBandwidth => "OSU MPI_Put Bi-directional Bandwidth Test",
            Benchmark::AccLatency => "OSU MPI_Accumulate latency Test",
            Benchmark::GetAccLatency => "OSU MPI_Get_accumulate latency Test",
            Benchmark::FopLatency => "OSU MPI_Fetch_and_op latency Test",
            Benchmark::CasLatency => "OSU MPI_Compare_and_swap latency Test",
            Benchmark::LatencyMt => "OSU MPI Multi-threaded Latency Test",
            Benchmark::MessageRateMt => "OSU MPI Multi-threaded Message Rate Test",
        }
    }

    /// The MPI datatype the header names: what the messages are made of.
    pub fn datatype(self) -> &'static str {
        match self {
            Benchmark::HaloColumn => "MPI_DOUBLE",
            _ => "MPI_CHAR",
        }
    }

    pub fn column(self) -> &'static str {
        match self {
            Benchmark::Bandwidth | Benchmark::BiBandwidth | Benchmark::HaloColumn => {
                "Bandwidth (MB/s)"
            }
            Benchmark::MultiBandwidth | Benchmark::MessageRateMt => "MB/s",
            Benchmark::LatencyMt => "Latency (us)",
            Benchmark::PutBandwidth | Benchmark::GetBandwidth | Benchmark::PutBiBandwidth => {
                "Bandwidth (MB/s)"
            }
            _ if self.is_one_sided() => "Latency (us)",
            _ => "Avg Latency(us)",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Benchmark::Latency => "osu_latency",
            Benchmark::Bandwidth => "osu_bw",
            Benchmark::BiBandwidth => "osu_bibw",
            Benchmark::MultiLatency => "osu_multi_lat",
            Benchmark::MultiBandwidth => "osu_mbw_mr",
            Benchmark::Barrier => "osu_barrier",
            Benchmark::Broadcast => "osu_bcast",
            Benchmark::Reduce => "osu_reduce",
            Benchmark::Allreduce => "osu_allreduce",
            Benchmark::Allgather => "osu_allgather",
            Benchmark::Alltoall => "osu_alltoall",
            Benchmark::Gather => "osu_gather",
            Benchmark::Scatter => "osu_scatter",
            Benchmark::ReduceScatter => "osu_reduce_scatter",
            Benchmark::Allgatherv => "osu_allgatherv",
            Benchmark::Alltoallv => "osu_alltoallv",
            Benchmark::Gatherv => "osu_gatherv",
            Benchmark::Scatterv => "osu_scatterv",
            Benchmark::ReduceScatterBlock => "osu_reduce_scatter_block",
            Benchmark::IBarrier => "osu_ibarrier",
            Benchmark::IBroadcast => "osu_ibcast",
            Benchmark::IReduce => "osu_ireduce",
            Benchmark::IAllreduce => "osu_iallreduce",
            Benchmark::IAllgather => "osu_iallgather",
            Benchmark::IAllgatherv => "osu_iallgatherv",
            Benchmark::IAlltoall => "osu_ialltoall",
            Benchmark::IAlltoallv => "osu_ialltoallv",
            Benchmark::IGather => "osu_igather",
            Benchmark::IGatherv => "osu_igatherv",
            Benchmark::IScatter => "osu_iscatter",
            Benchmark::IScatterv => "osu_iscatterv",
            Benchmark::IReduceScatter => "osu_ireduce_scatter",
            Benchmark::IReduceScatterBlock => "osu_ireduce_scatter_block",
            Benchmark::HaloColumn => "halo_column",
            Benchmark::PutLatency => "osu_put_latency",
            Benchmark::GetLatency => "osu_get_latency",
            Benchmark::PutBandwidth => "osu_put_bw",
            Benchmark::GetBandwidth => "osu_get_bw",
            Benchmark::PutBiBandwidth => "osu_put_bibw",
            Benchmark::AccLatency => "osu_acc_latency",
            Benchmark::GetAccLatency => "osu_get_acc_latency",
            Benchmark::FopLatency => "osu_fop_latency",
            Benchmark::CasLatency => "osu_cas_latency",
            Benchmark::LatencyMt => "osu_latency_mt",
            Benchmark::MessageRateMt => "osu_mbw_mr_mt",
        }
    }

    fn has_window(self) -> bool {
        matches!(
            self,
            Benchmark::Bandwidth
                | Benchmark::BiBandwidth
                | Benchmark::MultiBandwidth
                | Benchmark::PutBandwidth
                | Benchmark::GetBandwidth
                | Benchmark::PutBiBandwidth
                | Benchmark::MessageRateMt
        )
    }

    /// The one-sided bandwidth tests (a window of operations per synchronisation).
    pub fn is_one_sided_bandwidth(self) -> bool {
        matches!(
            self,
            Benchmark::PutBandwidth | Benchmark::GetBandwidth | Benchmark::PutBiBandwidth
        )
    }

    /// The synchronisations `-s` offers a one-sided test, the default first: OSU 7.4's
    /// `osu_put_bibw` has both ranks access each other, which only the active-target
    /// synchronisations let it do.
    fn sync_modes(self) -> &'static [(&'static str, SyncMode)] {
        const ALL: [(&str, SyncMode); 6] = [
            ("flush", SyncMode::Flush),
            ("lock", SyncMode::Lock),
            ("flush_local", SyncMode::FlushLocal),
            ("lock_all", SyncMode::LockAll),
            ("pscw", SyncMode::Pscw),
            ("fence", SyncMode::Fence),
        ];
        // OSU 7.4's default for osu_put_bibw is pscw.
        const ACTIVE: [(&str, SyncMode); 2] =
            [("pscw", SyncMode::Pscw), ("fence", SyncMode::Fence)];
        match self {
            Benchmark::PutBiBandwidth => &ACTIVE,
            _ => &ALL,
        }
    }

    /// Whether the test runs threads on each rank (`-t`), at `MPI_THREAD_MULTIPLE`.
    pub fn is_threaded(self) -> bool {
        matches!(self, Benchmark::LatencyMt | Benchmark::MessageRateMt)
    }

    /// Whether the test accumulates (and `-T` picks what it accumulates).
    pub fn is_accumulate(self) -> bool {
        matches!(self, Benchmark::AccLatency | Benchmark::GetAccLatency)
    }

    /// Whether this is one of the one-sided tests (`-w` and `-s`).
    pub fn is_one_sided(self) -> bool {
        matches!(
            self,
            Benchmark::PutLatency
                | Benchmark::GetLatency
                | Benchmark::PutBandwidth
                | Benchmark::GetBandwidth
                | Benchmark::PutBiBandwidth
                | Benchmark::AccLatency
                | Benchmark::GetAccLatency
                | Benchmark::FopLatency
                | Benchmark::CasLatency
        )
    }

    /// Whether the test moves one 8-byte element only (the atomics).
    pub fn is_atomic(self) -> bool {
        matches!(self, Benchmark::FopLatency | Benchmark::CasLatency)
    }

    /// Whether this is one of the collective tests (any number of ranks from two, `-f`).
    pub fn is_collective(self) -> bool {
        !self.is_one_sided()
            && !matches!(
                self,
                Benchmark::Latency
                    | Benchmark::Bandwidth
                    | Benchmark::BiBandwidth
                    | Benchmark::MultiLatency
                    | Benchmark::MultiBandwidth
                    | Benchmark::HaloColumn
                    | Benchmark::LatencyMt
                    | Benchmark::MessageRateMt
            )
    }

    /// Whether any number of ranks from two takes part (the collective tests, and the pairs of
    /// the multi-pair tests: the first half of the ranks each pairs with one of the second).
    pub fn takes_many_ranks(self) -> bool {
        self.is_collective() || matches!(self, Benchmark::MultiLatency | Benchmark::MultiBandwidth)
    }

    /// Whether rows carry a message size (all but the barriers' single row).
    pub fn has_sizes(self) -> bool {
        !matches!(self, Benchmark::Barrier | Benchmark::IBarrier)
    }

    /// Whether this is a non-blocking collective (OSU's overlap columns).
    pub fn is_non_blocking(self) -> bool {
        matches!(
            self,
            Benchmark::IBarrier
                | Benchmark::IBroadcast
                | Benchmark::IReduce
                | Benchmark::IAllreduce
                | Benchmark::IAllgather
                | Benchmark::IAllgatherv
                | Benchmark::IAlltoall
                | Benchmark::IAlltoallv
                | Benchmark::IGather
                | Benchmark::IGatherv
                | Benchmark::IScatter
                | Benchmark::IScatterv
                | Benchmark::IReduceScatter
                | Benchmark::IReduceScatterBlock
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub min_size: usize,
    pub max_size: usize,
    pub iterations: usize,
    pub skip: usize,
    pub iterations_large: usize,
    pub skip_large: usize,
    pub window: usize,
    /// `-f`: minimum and maximum over the ranks, and the iteration count, beside the average.
    pub full: bool,
    /// `-w` (one-sided tests): how the window is made.
    pub window_kind: WindowKind,
    /// `-s` (one-sided tests): how the epochs synchronise.
    pub sync: SyncMode,
    /// `-t` (multi-threaded tests): rank 0's threads and rank 1's.
    pub sender_threads: usize,
    pub receiver_threads: usize,
    /// `-T` (the accumulate tests): accumulate `f64`s (`mpi_double`) rather than bytes.
    pub doubles: bool,
    /// `-b` (halo_column): the `f64`s of each row's block in the column (1: a column of
    /// doubles, as a halo code sends; more: blocks of that many, a vector of wider blocks).
    pub block: usize,
}

impl Options {
    pub fn defaults(b: Benchmark) -> Options {
        match b {
            // The column sizes issue 21 asks for, 4 KiB to 4 MiB of f64s, with the collective
            // tests' loop counts.
            Benchmark::HaloColumn => Options {
                min_size: 4 << 10,
                max_size: 4 << 20,
                ..Options::defaults(Benchmark::Barrier)
            },
            // OSU 7.4's osu_latency_mt: one sender thread and two receivers; it skips the empty
            // message (no element of its datatype).
            Benchmark::LatencyMt => Options {
                min_size: 1,
                receiver_threads: 2,
                ..Options::defaults(Benchmark::Latency)
            },
            // Two threads a rank, each pair with osu_mbw_mr's windows and loop counts.
            Benchmark::MessageRateMt => Options {
                sender_threads: 2,
                receiver_threads: 2,
                ..Options::defaults(Benchmark::MultiBandwidth)
            },
            // OSU 7.4's multi-pair latency skips the empty message.
            Benchmark::Latency | Benchmark::MultiLatency => Options {
                min_size: if b == Benchmark::Latency { 0 } else { 1 },
                max_size: MAX_MESSAGE_SIZE,
                iterations: 10_000,
                skip: 100,
                iterations_large: 1_000,
                skip_large: 10,
                window: 1,
                full: false,
                window_kind: WindowKind::Allocate,
                sync: SyncMode::Flush,
                sender_threads: 1,
                receiver_threads: 1,
                doubles: false,
                block: 1,
            },
            // OSU 7.4's one-sided latency tests start at 1 byte; the atomics move 8.
            b if b.is_one_sided() && !b.is_one_sided_bandwidth() => Options {
                min_size: if b.is_atomic() { 8 } else { 1 },
                max_size: if b.is_atomic() { 8 } else { MAX_MESSAGE_SIZE },
                ..Options::defaults(Benchmark::Latency)
            },
            b if b.is_one_sided_bandwidth() => Options {
                sync: b.sync_modes()[0].1,
                ..Options::defaults(Benchmark::Bandwidth)
            },
            Benchmark::Bandwidth | Benchmark::BiBandwidth => Options {
                min_size: 1,
                max_size: MAX_MESSAGE_SIZE,
                iterations: 100,
                skip: 10,
                iterations_large: 20,
                skip_large: 2,
                window: WINDOW_SIZE,
                full: false,
                window_kind: WindowKind::Allocate,
                sync: SyncMode::Flush,
                sender_threads: 1,
                receiver_threads: 1,
                doubles: false,
                block: 1,
            },
            // OSU 7.4's osu_mbw_mr keeps the small-message loop counts at every size.
            Benchmark::MultiBandwidth => Options {
                iterations_large: 100,
                skip_large: 10,
                ..Options::defaults(Benchmark::Bandwidth)
            },
            _ => Options {
                min_size: 1,
                max_size: MAX_MESSAGE_SIZE_COLLECTIVE,
                iterations: 1_000,
                skip: 100,
                iterations_large: 100,
                skip_large: 10,
                window: 1,
                full: false,
                window_kind: WindowKind::Allocate,
                sync: SyncMode::Flush,
                sender_threads: 1,
                receiver_threads: 1,
                doubles: false,
                block: 1,
            },
        }
    }

    /// The message sizes OSU walks: the minimum, then doubling (0 is followed by 1).
    pub fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(self.min_size), |&s| {
            Some(if s == 0 { 1 } else { s * 2 })
        })
        .take_while(move |&s| s <= self.max_size)
    }

    /// (timed iterations, warm-up iterations) for one message size.
    pub fn loops(&self, size: usize) -> (usize, usize) {
        if size > LARGE_MESSAGE_SIZE {
            (self.iterations_large, self.skip_large)
        } else {
            (self.iterations, self.skip)
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Run(Options),
    /// Print this and exit successfully.
    Help(String),
    Version(String),
}

fn number(flag: &str, v: &str) -> Result<usize, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{flag} needs a non-negative number, got '{v}'"))
}

/// The synchronisations of a one-sided test, as `-s` takes them: "a, b or c".
fn choices(b: Benchmark) -> String {
    let names: Vec<&str> = b.sync_modes().iter().map(|(name, _)| *name).collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn help(b: Benchmark) -> String {
    let mut h = format!(
        "Usage: {} [options]\n\
         Options:\n  \
         -m, --message-size [MIN:]MAX  set the minimum and/or the maximum message size to MIN and/or MAX bytes\n  \
         -i, --iterations ITER         set iterations per message size to ITER\n  \
         -x, --warmup WARMUP           set number of warmup iterations to skip before timing\n",
        b.program()
    );
    if b.has_window() {
        h += "  -W, --window-size SIZE        set number of messages sent before synchronization\n";
    }
    if b == Benchmark::LatencyMt {
        h += "  -t, --num_threads SEND:[RECV]  set the sender and receiver number of threads (min: 1 default: (receiver threads: 2 sender threads: 1), max: 128)\n";
    }
    if b == Benchmark::MessageRateMt {
        h += "  -t, --num_threads THREADS     set the number of threads on each rank (min: 1 default: 2, max: 128)\n";
    }
    if b.is_accumulate() {
        h += "  -T, --type TYPE               mpi_char (default) or mpi_double: the elements accumulated\n";
    }
    if b == Benchmark::HaloColumn {
        h += "  -b, --block DOUBLES           f64s a row of the column (default 1); sizes are whole rows\n";
    }
    if b.is_one_sided() {
        h += "  -w, --win-option OPTION       create, allocate (default) or dynamic\n";
        h += &format!(
            "  -s, --sync-option OPTION      {} (default: {})\n",
            choices(b),
            b.sync_modes()[0].0
        );
    }
    if b.is_collective() {
        h += "  -f, --full                    print full format listing (MIN/MAX latency and ITERATIONS\n                                displayed in addition to AVERAGE latency)\n";
    }
    h += "  -h, --help                    print this help\n  -v, --version                 print version info\n";
    h
}

/// Parses OSU's options (the arguments after the program name).
pub fn parse(b: Benchmark, args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut o = Options::defaults(b);
    // Whether -m named a minimum (which -T mpi_double then checks rather than raises).
    let mut min_given = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        // `-m16` and `--message-size=16` as well as `-m 16`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ if arg.len() > 2 && !arg.starts_with("--") => {
                (arg[..2].to_string(), Some(arg[2..].to_string()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help(help(b))),
            "-v" | "--version" => return Ok(Parsed::Version(format!("# {} v7.4\n", b.title()))),
            "-m" | "--message-size" => {
                let v = value("-m")?;
                match v.split_once(':') {
                    Some((min, max)) => {
                        if !min.is_empty() {
                            o.min_size = number("-m", min)?;
                            min_given = true;
                        }
                        if !max.is_empty() {
                            o.max_size = number("-m", max)?;
                        }
                    }
                    None => o.max_size = number("-m", &v)?,
                }
                if o.min_size > o.max_size {
                    return Err(format!(
                        "-m {v}: the minimum size {} is above the maximum {}",
                        o.min_size, o.max_size
                    ));
                }
            }
            "-i" | "--iterations" => {
                let n = number("-i", &value("-i")?)?;
                if n == 0 {
                    return Err("-i needs at least one iteration".into());
                }
                o.iterations = n;
                o.iterations_large = n;
            }
            "-x" | "--warmup" => {
                let n = number("-x", &value("-x")?)?;
                o.skip = n;
                o.skip_large = n;
            }
            "-W" | "--window-size" if b.has_window() => {
                let n = number("-W", &value("-W")?)?;
                if n == 0 {
                    return Err("-W needs a window of at least one message".into());
                }
                o.window = n;
            }
            "-f" | "--full" if b.is_collective() && inline.is_none() => o.full = true,
            "-t" | "--num_threads" if b.is_threaded() => {
                let v = value("-t")?;
                let threads = |n: &str| match number("-t", n)? {
                    n @ 1..=MAX_THREADS => Ok(n),
                    n => Err(format!(
                        "-t {v}: {n} threads, where 1 to {MAX_THREADS} are allowed"
                    )),
                };
                match (b, v.split_once(':')) {
                    (Benchmark::LatencyMt, Some((send, receive))) => {
                        o.sender_threads = threads(send)?;
                        if !receive.is_empty() {
                            o.receiver_threads = threads(receive)?;
                        }
                    }
                    // OSU's single number is the receiver threads.
                    (Benchmark::LatencyMt, None) => o.receiver_threads = threads(&v)?,
                    _ => {
                        o.sender_threads = threads(&v)?;
                        o.receiver_threads = o.sender_threads;
                    }
                }
            }
            "-w" | "--win-option" if b.is_one_sided() => {
                o.window_kind = match value("-w")?.as_str() {
                    "create" => WindowKind::Create,
                    "allocate" => WindowKind::Allocate,
                    "dynamic" => WindowKind::Dynamic,
                    other => {
                        return Err(format!(
                            "-w {other}: choose create, allocate or dynamic\n{}",
                            help(b)
                        ))
                    }
                }
            }
            "-b" | "--block" if b == Benchmark::HaloColumn => {
                o.block = number("-b", &value("-b")?)?;
                if o.block == 0 {
                    return Err("-b needs a block of at least one f64".into());
                }
            }
            "-T" | "--type" if b.is_accumulate() => {
                o.doubles = match value("-T")?.as_str() {
                    "mpi_char" => false,
                    "mpi_double" => true,
                    other => {
                        return Err(format!(
                            "-T {other}: choose mpi_char or mpi_double\n{}",
                            help(b)
                        ))
                    }
                }
            }
            "-s" | "--sync-option" if b.is_one_sided() => {
                let v = value("-s")?;
                o.sync = match b.sync_modes().iter().find(|(name, _)| *name == v) {
                    Some(&(_, mode)) => mode,
                    None => {
                        return Err(format!(
                            "-s {v}: {} offers {}\n{}",
                            b.program(),
                            choices(b),
                            help(b)
                        ))
                    }
                }
            }
            other => return Err(format!("unknown option '{other}'\n{}", help(b))),
        }
    }
    if o.doubles {
        // Sizes are whole `f64`s: a smaller one would accumulate nothing, and one that is not
        // whole elements another size than it reports. OSU's -T mpi_double starts at 8 bytes.
        if !min_given {
            o.min_size = o.min_size.max(8);
        }
        if o.min_size == 0 || !o.min_size.is_multiple_of(8) || o.max_size < o.min_size {
            return Err(format!(
                "-T mpi_double: sizes {}:{} are not whole 8-byte elements (at least one); \
                 give -m with a minimum that is a multiple of 8\n{}",
                o.min_size,
                o.max_size,
                help(b)
            ));
        }
    }
    // Its sizes are rows of one block of `f64`s: a size that is not whole rows (0 among them)
    // would send another size than it reports, or no column at all.
    // Where -m gave no minimum, the default's is raised to a whole row (rows past 4 KiB).
    let row = 8 * o.block;
    if b == Benchmark::HaloColumn && !min_given {
        o.min_size = o.min_size.next_multiple_of(row);
    }
    if b == Benchmark::HaloColumn && (o.min_size == 0 || !o.min_size.is_multiple_of(row)) {
        return Err(format!(
            "-m {}:{}: the minimum size {} is not a whole number of {row}-byte rows (at least \
             one)",
            o.min_size, o.max_size, o.min_size
        ));
    }
    if b.is_atomic() {
        // The atomics move one 8-byte element whatever -m says, as OSU's do.
        (o.min_size, o.max_size) = (8, 8);
    }
    Ok(Parsed::Run(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(b: Benchmark, args: &[&str]) -> Options {
        match parse(b, args.iter().map(|s| s.to_string())).unwrap() {
            Parsed::Run(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_follow_osu() {
        let l = run(Benchmark::Latency, &[]);
        assert_eq!((l.min_size, l.max_size), (0, 1 << 22));
        assert_eq!(l.loops(8192), (10_000, 100));
        assert_eq!(l.loops(8193), (1_000, 10));
        let bw = run(Benchmark::Bandwidth, &[]);
        assert_eq!((bw.min_size, bw.window), (1, 64));
        assert_eq!(bw.loops(1), (100, 10));
        assert_eq!(bw.loops(1 << 20), (20, 2));
        let mbw = run(Benchmark::MultiBandwidth, &["-W", "8"]);
        assert_eq!((mbw.min_size, mbw.window), (1, 8));
        assert_eq!(mbw.loops(1 << 22), (100, 10));
        let ml = run(Benchmark::MultiLatency, &[]);
        assert_eq!((ml.min_size, ml.window), (1, 1));
        assert_eq!(ml.loops(8193), (1_000, 10));
        assert!(parse(Benchmark::MultiLatency, ["-W".into(), "2".into()]).is_err());
    }

    #[test]
    fn thread_counts() {
        let l = run(Benchmark::LatencyMt, &[]);
        assert_eq!(
            (l.min_size, l.sender_threads, l.receiver_threads),
            (1, 1, 2)
        );
        let l = run(Benchmark::LatencyMt, &["-t", "4:3"]);
        assert_eq!((l.sender_threads, l.receiver_threads), (4, 3));
        let l = run(Benchmark::LatencyMt, &["-t", "5"]);
        assert_eq!((l.sender_threads, l.receiver_threads), (1, 5));
        let r = run(Benchmark::MessageRateMt, &["-t", "3", "-W", "8"]);
        assert_eq!((r.sender_threads, r.receiver_threads, r.window), (3, 3, 8));
        let err = parse(Benchmark::LatencyMt, ["-t".into(), "0:2".into()]).unwrap_err();
        assert!(err.contains("1 to 128"), "{err}");
        assert!(parse(Benchmark::Latency, ["-t".into(), "2".into()]).is_err());
    }

    #[test]
    fn collective_defaults_and_full() {
        let c = run(Benchmark::Allreduce, &[]);
        assert_eq!((c.min_size, c.max_size, c.full), (1, 1 << 20, false));
        assert_eq!(c.loops(8192), (1_000, 100));
        assert_eq!(c.loops(16384), (100, 10));
        assert!(run(Benchmark::Barrier, &["-f"]).full);
        let err = parse(Benchmark::Latency, ["-f".to_string()]).unwrap_err();
        assert!(err.contains("unknown option '-f'"));
    }

    #[test]
    fn doubles_are_whole_elements() {
        let b = Benchmark::AccLatency;
        let bytes = run(b, &[]);
        assert_eq!((bytes.doubles, bytes.min_size), (false, 1));
        let doubles = run(b, &["-T", "mpi_double", "-m", "64"]);
        assert!(doubles.doubles);
        assert_eq!(doubles.sizes().collect::<Vec<_>>(), [8, 16, 32, 64]);
        let doubles = run(b, &["-m", "16:32", "-T", "mpi_double"]);
        assert_eq!(doubles.sizes().collect::<Vec<_>>(), [16, 32]);
        for bad in [
            &["-T", "mpi_double", "-m", "4:64"][..],
            &["-T", "mpi_double", "-m", "4"],
        ] {
            assert!(
                parse(b, bad.iter().map(|s| s.to_string())).is_err(),
                "{bad:?} was accepted"
            );
        }
        assert!(parse(b, ["-T", "mpi_int"].iter().map(|s| s.to_string())).is_err());
        assert!(
            parse(
                Benchmark::PutLatency,
                ["-T", "mpi_double"].iter().map(|s| s.to_string())
            )
            .is_err(),
            "-T is the accumulate tests' option"
        );
    }

    #[test]
    fn sizes_double_from_zero() {
        let l = run(Benchmark::Latency, &["-m", "0:16"]);
        assert_eq!(l.sizes().collect::<Vec<_>>(), [0, 1, 2, 4, 8, 16]);
        let l = run(Benchmark::Latency, &["-m", "3:20"]);
        assert_eq!(l.sizes().collect::<Vec<_>>(), [3, 6, 12]);
    }

    #[test]
    fn every_option_form() {
        let o = run(
            Benchmark::Bandwidth,
            &["-m", "8", "-i", "5", "-x", "1", "-W", "16"],
        );
        assert_eq!(
            (o.min_size, o.max_size, o.iterations, o.iterations_large),
            (1, 8, 5, 5)
        );
        assert_eq!((o.skip, o.skip_large, o.window), (1, 1, 16));
        let o = run(Benchmark::Bandwidth, &["-m4:", "--iterations=7", "-W2"]);
        assert_eq!(
            (o.min_size, o.max_size, o.iterations, o.window),
            (4, 1 << 22, 7, 2)
        );
        let o = run(Benchmark::Latency, &["--message-size", ":64"]);
        assert_eq!((o.min_size, o.max_size), (0, 64));
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        let err = |b, a: &[&str]| parse(b, a.iter().map(|s| s.to_string())).unwrap_err();
        assert!(err(Benchmark::Latency, &["-m", "x"]).contains("'x'"));
        assert!(err(Benchmark::Latency, &["-m", "9:3"]).contains("above the maximum"));
        assert!(err(Benchmark::Latency, &["-i"]).contains("needs a value"));
        assert!(err(Benchmark::Latency, &["-W", "4"]).contains("unknown option '-W'"));
        assert!(err(Benchmark::Bandwidth, &["-W", "0"]).contains("at least one"));
        assert!(err(Benchmark::Bandwidth, &["--bogus"]).contains("unknown option"));
        for sizes in ["0:64", "1:64", "12:64"] {
            assert!(err(Benchmark::HaloColumn, &["-m", sizes]).contains("8-byte rows"));
        }
        assert_eq!(run(Benchmark::HaloColumn, &["-m", "8:64"]).min_size, 8);
        // Rows of 128 f64s (1 KiB blocks): sizes are whole KiBs, the default's 4 KiB among them.
        let o = run(Benchmark::HaloColumn, &["-b", "128"]);
        assert_eq!((o.block, o.min_size), (128, 4 << 10));
        assert!(
            err(Benchmark::HaloColumn, &["-b", "128", "-m", "512:4096"]).contains("1024-byte rows")
        );
        assert!(err(Benchmark::HaloColumn, &["-b", "0"]).contains("at least one f64"));
        // Rows of 8 KiB and no -m: the default minimum is raised to a row, not refused.
        let o = run(Benchmark::HaloColumn, &["-b", "1024"]);
        assert_eq!((o.min_size, o.max_size), (8 << 10, 4 << 20));
        assert!(err(Benchmark::Latency, &["-b", "2"]).contains("unknown option '-b'"));
    }

    #[test]
    fn one_sided_options() {
        let o = run(Benchmark::PutLatency, &[]);
        assert_eq!(
            (o.window_kind, o.sync, o.min_size),
            (WindowKind::Allocate, SyncMode::Flush, 1)
        );
        let o = run(Benchmark::GetLatency, &["-w", "dynamic", "-s", "pscw"]);
        assert_eq!(
            (o.window_kind, o.sync),
            (WindowKind::Dynamic, SyncMode::Pscw)
        );
        let o = run(Benchmark::FopLatency, &["-s", "fence", "-m", "1:64"]);
        assert_eq!(o.sizes().collect::<Vec<_>>(), [8]);
        assert_eq!(run(Benchmark::PutBandwidth, &["-W", "8"]).window, 8);
        let err = parse(Benchmark::PutLatency, ["-s".into(), "later".into()]).unwrap_err();
        assert!(
            err.contains("-s later: osu_put_latency offers flush, lock, flush_local, lock_all, pscw or fence"),
            "{err}"
        );
        let o = run(Benchmark::PutBiBandwidth, &[]);
        assert_eq!((o.sync, o.window), (SyncMode::Pscw, WINDOW_SIZE));
        assert_eq!(
            run(Benchmark::PutBiBandwidth, &["-s", "fence"]).sync,
            SyncMode::Fence
        );
        let err = parse(Benchmark::PutBiBandwidth, ["-s".into(), "flush".into()]).unwrap_err();
        assert!(
            err.contains("-s flush: osu_put_bibw offers pscw or fence"),
            "{err}"
        );
        assert_eq!(run(Benchmark::GetBandwidth, &[]).sync, SyncMode::Flush);
        assert_eq!(run(Benchmark::GetAccLatency, &[]).min_size, 1);
        let err = parse(Benchmark::Latency, ["-w".into(), "create".into()]).unwrap_err();
        assert!(err.contains("unknown option '-w'"), "{err}");
    }

    #[test]
    fn help_and_version() {
        let p = parse(Benchmark::BiBandwidth, ["-h".to_string()]).unwrap();
        assert!(matches!(p, Parsed::Help(h) if h.contains("osu_bibw") && h.contains("-W")));
        let p = parse(Benchmark::Latency, ["-v".to_string()]).unwrap();
        assert_eq!(p, Parsed::Version("# OSU MPI Latency Test v7.4\n".into()));
    }
}
