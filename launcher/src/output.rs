//! Where the ranks' stdout and stderr go, one whole line at a time: rsrun's own streams, and with
//! `--output-filename` one file per rank and stream; each line optionally prefixed with the time
//! and the rank.
//!
//! Each local rank stream gets a thread that reads a line and writes it while holding the
//! destination's lock, so lines from different ranks can interleave but never split. Remote
//! ranks' lines arrive whole through their agent and take the same path ([`Outputs::write`]).

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::job::Event;

/// Which of a rank's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Stdout,
    Stderr,
}

/// `--output-filename DIR[:QUALIFIERS]`, as Open MPI takes it: the directory, and the
/// comma-separated qualifiers `nocopy` (the files only, not rsrun's streams too) and `nojobid`
/// (no `1/` level in the path), in any case (`NOCOPY` too, as Open MPI documents). What follows
/// the last colon is read as qualifiers, so a directory with a colon in its name takes a
/// trailing colon: `a:b:` is the directory `a:b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFiles {
    pub dir: PathBuf,
    /// Whether lines also go to rsrun's stdout and stderr.
    pub copy: bool,
    /// Whether the path has the job's level, `DIR/1/rank.N`.
    pub job_level: bool,
    /// The job's number in that level: 1 for rsrun's job, the next ones for the jobs its
    /// ranks spawn (rsrun's `--job-number`), as Open MPI numbers an mpirun's jobs.
    pub job: u32,
}

impl OutputFiles {
    pub fn parse(text: &str) -> Result<OutputFiles, String> {
        let (dir, qualifiers) = text.rsplit_once(':').unwrap_or((text, ""));
        let mut files = OutputFiles {
            dir: PathBuf::from(dir),
            copy: true,
            job_level: true,
            job: 1,
        };
        for word in qualifiers.split(',').filter(|w| !w.is_empty()) {
            match word.to_ascii_lowercase().as_str() {
                "nocopy" => files.copy = false,
                "nojobid" => files.job_level = false,
                _ => {
                    return Err(format!(
                        "unknown qualifier '{word}' (known: nocopy, nojobid)"
                    ))
                }
            }
        }
        if dir.is_empty() {
            return Err(format!("'{text}' names no directory"));
        }
        Ok(files)
    }

    /// `DIR/1/rank.N` (`1` stands for the job, as Open MPI's first job in an mpirun; a
    /// spawned job's is `DIR/2/...` and on, with `nojobid` too), or
    /// `DIR/rank.N` with `nojobid`. `N` has Open MPI's zero padding (one digit more than
    /// `size / 10` has), so that the directories sort in rank order.
    pub fn rank_dir(&self, rank: u32, size: u32) -> PathBuf {
        let mut digits = 1;
        let mut rest = size / 10;
        while rest > 0 {
            digits += 1;
            rest /= 10;
        }
        // A spawned job keeps its level even with `nojobid`: without it its ranks would write
        // the first job's files.
        let job = if self.job_level || self.job != 1 {
            self.dir.join(self.job.to_string())
        } else {
            self.dir.clone()
        };
        job.join(format!("rank.{rank:0digits$}"))
    }
}

/// How the job's output lines are written, shared by every thread that writes them.
pub struct Outputs {
    tag: bool,
    timestamp: bool,
    /// With `--output-filename`: each rank's stdout and stderr file, by rank.
    files: Option<Vec<[Mutex<File>; 2]>>,
    /// Whether lines go to rsrun's own streams (always, unless the files take them alone).
    to_rsrun: bool,
}

impl Outputs {
    /// Sets up the job's output; with `files`, creates each of the `size` ranks' stdout and
    /// stderr file now, so that a directory that cannot be written fails the job before
    /// anything starts.
    pub fn new(
        tag: bool,
        timestamp: bool,
        files: Option<&OutputFiles>,
        size: u32,
    ) -> io::Result<Outputs> {
        let to_rsrun = !matches!(files, Some(f) if !f.copy);
        let files = match files {
            None => None,
            Some(layout) => {
                let files = (0..size)
                    .map(|rank| {
                        let rank_dir = layout.rank_dir(rank, size);
                        fs::create_dir_all(&rank_dir).map_err(|e| in_path(e, &rank_dir))?;
                        let open = |name: &str| {
                            let path = rank_dir.join(name);
                            File::create(&path)
                                .map(Mutex::new)
                                .map_err(|e| in_path(e, &path))
                        };
                        Ok([open("stdout")?, open("stderr")?])
                    })
                    .collect::<io::Result<_>>()?;
                Some(files)
            }
        };
        Ok(Outputs {
            tag,
            timestamp,
            files,
            to_rsrun,
        })
    }

    /// Writes one line of `rank`'s `sink` stream, prefixed as asked. A prefixed line missing
    /// its newline (a rank's last words) gets one, so the next prefix starts a line.
    pub fn write(&self, rank: u32, sink: Sink, line: &[u8]) -> io::Result<()> {
        let mut text = Vec::with_capacity(line.len() + 48);
        if self.timestamp {
            text.extend(format!("[{}] ", utc_now()).bytes());
        }
        if self.tag {
            text.extend(format!("[{rank}] ").bytes());
        }
        let prefixed = !text.is_empty();
        text.extend_from_slice(line);
        if prefixed && !line.ends_with(b"\n") {
            text.push(b'\n');
        }
        let stream = match sink {
            Sink::Stdout => 0,
            Sink::Stderr => 1,
        };
        if let Some(files) = self.files.as_ref().and_then(|f| f.get(rank as usize)) {
            let mut file = files[stream].lock().unwrap_or_else(|e| e.into_inner());
            file.write_all(&text)?;
        }
        if !self.to_rsrun {
            return Ok(());
        }
        if sink == Sink::Stdout {
            let mut out = io::stdout().lock();
            out.write_all(&text)?;
            out.flush()
        } else {
            io::stderr().lock().write_all(&text)
        }
    }
}

fn in_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Copies `source` to `outputs` line by line in a new thread, and sends `Event::OutputDone` at
/// end of file so the job can wait for the last lines.
pub fn forward(
    source: impl Read + Send + 'static,
    sink: Sink,
    rank: u32,
    outputs: Arc<Outputs>,
    events: mpsc::Sender<Event>,
) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("output-{rank}"))
        .spawn(move || {
            // A write error means rsrun's own output is gone (e.g. `rsrun ... | head`).
            // Returning drops our end of the rank's pipe, so the rank gets SIGPIPE on its next
            // write, as it would writing to the closed pipe directly; its exit then decides the
            // job.
            drop(copy_lines(source, |line| outputs.write(rank, sink, line)));
            let _ = events.send(Event::OutputDone);
        })?;
    Ok(())
}

/// Reads `source` to its end, handing each line (the last one possibly without its newline)
/// to `write`.
pub fn copy_lines(
    source: impl Read,
    mut write: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, source);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        write(&line)?;
    }
}

/// The current time in UTC, ISO 8601 to the microsecond: `2026-11-25T18:04:05.123456Z`.
fn utc_now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    utc_iso8601(since.as_secs(), since.subsec_micros())
}

fn utc_iso8601(secs: u64, micros: u32) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's days_from_civil, inverted).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut seen = Vec::new();
        copy_lines(input, |line| {
            seen.push(String::from_utf8_lossy(line).into_owned());
            Ok(())
        })
        .unwrap();
        seen
    }

    #[test]
    fn lines_are_handed_on_whole() {
        assert_eq!(lines(b"a\nbb\nlast"), ["a\n", "bb\n", "last"]);
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn times_are_utc_iso8601() {
        assert_eq!(utc_iso8601(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(utc_iso8601(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(
            utc_iso8601(1_795_629_845, 123_456),
            "2026-11-25T18:04:05.123456Z"
        );
    }

    #[test]
    fn rank_directories_are_laid_out_and_padded_as_open_mpis() {
        let o = OutputFiles::parse("/o").unwrap();
        assert!(o.copy && o.job_level);
        assert_eq!(o.rank_dir(3, 9), Path::new("/o/1/rank.3"));
        assert_eq!(o.rank_dir(3, 10), Path::new("/o/1/rank.03"));
        assert_eq!(o.rank_dir(42, 100), Path::new("/o/1/rank.042"));
        let spawned = OutputFiles {
            job: 2,
            ..o.clone()
        };
        assert_eq!(spawned.rank_dir(3, 9), Path::new("/o/2/rank.3"));
        let bare = OutputFiles::parse("out:nocopy,nojobid").unwrap();
        assert!(!bare.copy);
        assert_eq!(bare.rank_dir(0, 2), Path::new("out/rank.0"));
        let bare_spawned = OutputFiles {
            job: 3,
            ..bare.clone()
        };
        assert_eq!(bare_spawned.rank_dir(0, 2), Path::new("out/3/rank.0"));
        assert!(OutputFiles::parse("out:nocopy").is_ok_and(|f| !f.copy && f.job_level));
        let e = OutputFiles::parse("out:nocpy").unwrap_err();
        assert_eq!(e, "unknown qualifier 'nocpy' (known: nocopy, nojobid)");
        assert!(OutputFiles::parse(":nocopy").is_err());
        let upper = OutputFiles::parse("out:NoCopy,NOJOBID").unwrap();
        assert!(!upper.copy && !upper.job_level);
        let colon = OutputFiles::parse("a:b:").unwrap();
        assert_eq!(colon.dir, PathBuf::from("a:b"));
        assert!(colon.copy && colon.job_level);
    }

    #[test]
    fn files_get_each_rank_stream_with_prefixes() {
        let dir = std::env::temp_dir().join(format!("rsrun-output-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let layout = OutputFiles::parse(&format!("{}:nocopy", dir.display())).unwrap();
        let outputs = Outputs::new(true, true, Some(&layout), 2).unwrap();
        outputs.write(1, Sink::Stderr, b"oops").unwrap();
        outputs.write(1, Sink::Stdout, b"one\n").unwrap();
        let read = |rank: u32, name: &str| {
            fs::read_to_string(layout.rank_dir(rank, 2).join(name)).unwrap()
        };
        assert_eq!(read(0, "stdout"), "");
        let err = read(1, "stderr");
        // "[2026-...Z] [1] oops\n"
        assert_eq!(
            err.len(),
            "[2026-11-25T18:04:05.123456Z] [1] oops\n".len(),
            "{err}"
        );
        assert!(
            err.starts_with("[20") && err.ends_with("Z] [1] oops\n"),
            "{err}"
        );
        assert!(read(1, "stdout").ends_with("Z] [1] one\n"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
