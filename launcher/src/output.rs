//! Forwarding the ranks' stdout and stderr to rsrun's, one whole line at a time.
//!
//! Each rank stream gets a thread that reads a line and writes it to rsrun's stream while holding
//! that stream's lock, so lines from different ranks can interleave but never split.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::mpsc;
use std::thread;

use crate::job::Event;

/// Which of rsrun's streams a rank stream goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    Stdout,
    Stderr,
}

/// Copies `source` to `sink` line by line in a new thread, prefixing `[rank] ` when `tag` is set,
/// and sends `Event::OutputDone` at end of file so the job can wait for the last lines.
pub fn forward(
    source: impl Read + Send + 'static,
    sink: Sink,
    rank: u32,
    tag: bool,
    events: mpsc::Sender<Event>,
) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("output-{rank}"))
        .spawn(move || {
            let prefix = if tag {
                format!("[{rank}] ").into_bytes()
            } else {
                Vec::new()
            };
            let result = match sink {
                Sink::Stdout => copy_lines(source, &prefix, || io::stdout().lock()),
                Sink::Stderr => copy_lines(source, &prefix, || io::stderr().lock()),
            };
            // A write error means rsrun's own output is gone (e.g. `rsrun ... | head`). Returning
            // drops our end of the rank's pipe, so the rank gets SIGPIPE on its next write, as it
            // would writing to the closed pipe directly; its exit then decides the job.
            drop(result);
            let _ = events.send(Event::OutputDone);
        })?;
    Ok(())
}

/// Reads `source` to its end, writing each line (prefix first) through a freshly locked writer.
/// A last line without a newline is written at end of file; tagged, it gets a newline so the
/// next rank's tag starts a line of its own.
pub fn copy_lines<W: Write>(
    source: impl Read,
    prefix: &[u8],
    mut lock: impl FnMut() -> W,
) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, source);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        if !prefix.is_empty() && !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        let mut out = lock();
        out.write_all(prefix)?;
        out.write_all(&line)?;
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Records each locked write session as one entry, to check lines are never split.
    fn sessions(input: &[u8], prefix: &[u8]) -> Vec<String> {
        let log = RefCell::new(Vec::<String>::new());
        struct Session<'a>(&'a RefCell<Vec<String>>, Vec<u8>);
        impl Write for Session<'_> {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.1.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                let text = String::from_utf8_lossy(&self.1).into_owned();
                self.0.borrow_mut().push(text);
                Ok(())
            }
        }
        copy_lines(input, prefix, || Session(&log, Vec::new())).unwrap();
        log.into_inner()
    }

    #[test]
    fn whole_lines_with_prefix() {
        assert_eq!(
            sessions(b"a\nbb\nlast", b"[3] "),
            ["[3] a\n", "[3] bb\n", "[3] last\n"]
        );
    }

    #[test]
    fn untagged_output_is_passed_through_exactly() {
        assert_eq!(sessions(b"a\nno newline", b""), ["a\n", "no newline"]);
        assert!(sessions(b"", b"[0] ").is_empty());
    }
}
