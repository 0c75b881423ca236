//! The PMI-2 wire protocol, client side: how ranks started by `srun --mpi=pmi2` learn their
//! rank and size and exchange endpoints, with no libpmi.
//!
//! Slurm hands each rank a connected socket in `PMI_FD`. The first exchange is in PMI-1's
//! line format (`cmd=init pmi_version=2 ...`, see `pmi1::negotiate`), which tells the server
//! to speak PMI-2 from then on: every message either way is a six-character, space-padded decimal length, then that
//! many bytes of `key=value;` pairs, the first of them `cmd=...`. A `;` inside a value is
//! written twice.

use std::collections::HashMap;
use std::io::{self, Read, Write};

/// Longest message accepted from the server (Slurm's own limit is far below).
const MAX_MESSAGE: usize = 1 << 20;

/// One PMI command or response: its `cmd` and its attributes, in order (PMI-1 writes it as a
/// line, see `pmi1::encode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub cmd: String,
    pub attrs: Vec<(String, String)>,
}

impl Message {
    pub fn new(cmd: &str, attrs: &[(&str, &str)]) -> Message {
        Message {
            cmd: cmd.to_string(),
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut body = format!("cmd={};", self.cmd);
        for (k, v) in &self.attrs {
            body += &format!("{k}={};", v.replace(';', ";;"));
        }
        let mut out = format!("{:<6}", body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }

    /// Parses a message body (without its length).
    pub fn decode(body: &str) -> Result<Message, String> {
        let mut pairs = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let (key, after) = rest
                .split_once('=')
                .ok_or_else(|| format!("'{rest}' has no '=' (in PMI-2 message '{body}')"))?;
            let mut value = String::new();
            let mut chars = after.char_indices().peekable();
            let mut end = after.len();
            while let Some((i, c)) = chars.next() {
                if c == ';' {
                    if chars.peek().map(|&(_, n)| n) == Some(';') {
                        chars.next();
                        value.push(';');
                        continue;
                    }
                    end = i + 1;
                    break;
                }
                value.push(c);
            }
            pairs.push((key.to_string(), value));
            rest = &after[end.min(after.len())..];
        }
        let mut pairs = pairs.into_iter();
        match pairs.next() {
            Some((k, cmd)) if k == "cmd" => Ok(Message {
                cmd,
                attrs: pairs.collect(),
            }),
            _ => Err(format!("PMI-2 message '{body}' does not start with cmd=")),
        }
    }
}

/// Writes `m` to `w`.
pub fn send(w: &mut impl Write, m: &Message) -> io::Result<()> {
    w.write_all(&m.encode())
}

/// Reads one message from `r`.
pub fn receive(r: &mut impl Read) -> io::Result<Message> {
    let mut len = [0u8; 6];
    r.read_exact(&mut len)?;
    let len: usize = std::str::from_utf8(&len)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n| n <= MAX_MESSAGE)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "PMI-2 length field '{}' is not a length",
                    String::from_utf8_lossy(&len)
                ),
            )
        })?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let body = String::from_utf8(body)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "PMI-2 message is not UTF-8"))?;
    Message::decode(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Sends `request` and reads the response, which must be `<cmd>-response` with `rc=0`.
pub fn call(stream: &mut (impl Read + Write), request: &Message) -> Result<Message, String> {
    send(stream, request).map_err(|e| format!("PMI-2 {}: {e}", request.cmd))?;
    let response = receive(stream).map_err(|e| format!("PMI-2 {}: {e}", request.cmd))?;
    let expected = format!("{}-response", request.cmd);
    if response.cmd != expected {
        return Err(format!(
            "PMI-2 {}: the server answered '{}'",
            request.cmd, response.cmd
        ));
    }
    match response.get("rc") {
        Some("0") | None => Ok(response),
        Some(rc) => Err(format!(
            "PMI-2 {} failed (rc={rc}{})",
            request.cmd,
            response
                .get("errmsg")
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )),
    }
}

/// What `fullinit` tells a rank.
pub struct Init {
    pub rank: u32,
    pub size: u32,
    pub attrs: HashMap<String, String>,
}

/// Introduces this rank (`pmijobid`, `pmirank` from the environment) once the socket speaks
/// PMI-2 (see `pmi1::negotiate`).
pub fn fullinit(stream: &mut (impl Read + Write), job: &str, rank: &str) -> Result<Init, String> {
    let response = call(
        stream,
        &Message::new(
            "fullinit",
            &[("pmijobid", job), ("pmirank", rank), ("threaded", "FALSE")],
        ),
    )?;
    let number = |key: &str| -> Result<u32, String> {
        response
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("PMI-2 fullinit: no {key} in the answer"))
    };
    Ok(Init {
        rank: number("rank")?,
        size: number("size")?,
        attrs: response.attrs.iter().cloned().collect(),
    })
}

/// The job's id as the server names it (`job-getid`): Hydra's key-value space.
pub fn job_id(stream: &mut (impl Read + Write)) -> Result<String, String> {
    let answer = call(stream, &Message::new("job-getid", &[]))?;
    answer
        .get("jobid")
        .map(str::to_string)
        .ok_or_else(|| "PMI-2 job-getid: no jobid in the answer".to_string())
}

/// Asks the server on `stream` to end the whole job (`isworld=TRUE`: Slurm then kills every
/// task of the step), saying `message`; no answer comes.
pub fn abort(stream: &mut impl Write, message: &str) {
    let _ = send(
        stream,
        &Message::new("abort", &[("isworld", "TRUE"), ("msg", message)]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    #[test]
    fn messages_round_trip_with_escaped_semicolons() {
        let m = Message::new("kvs-put", &[("key", "a-b"), ("value", "1 2;;3=4")]);
        let bytes = m.encode();
        assert_eq!(&bytes[..6], format!("{:<6}", bytes.len() - 6).as_bytes());
        let back = receive(&mut &bytes[..]).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.get("value"), Some("1 2;;3=4"));
    }

    /// The key Slurm's PMI-2 server reads (`isworld`): under any other, it leaves the step
    /// running and the aborting rank's peers wait for it forever.
    #[test]
    fn abort_asks_to_end_the_whole_job() {
        let mut sent = Vec::new();
        abort(&mut sent, "rank 1 called abort(3)");
        let m = receive(&mut &sent[..]).unwrap();
        assert_eq!(
            m,
            Message::new(
                "abort",
                &[("isworld", "TRUE"), ("msg", "rank 1 called abort(3)")]
            )
        );
    }

    #[test]
    fn malformed_messages_are_named_errors() {
        assert!(Message::decode("key=1;").unwrap_err().contains("cmd="));
        assert!(Message::decode("cmd=x;novalue").is_err());
        let e = receive(&mut &b"abcdefcmd=x;"[..]).unwrap_err();
        assert!(e.to_string().contains("'abcdef'"), "{e}");
    }

    #[test]
    fn a_session_against_a_fake_server() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        let fake = thread::spawn(move || {
            let init = receive(&mut server).unwrap();
            assert_eq!(init.cmd, "fullinit");
            assert_eq!(init.get("pmirank"), Some("3"));
            send(
                &mut server,
                &Message::new(
                    "fullinit-response",
                    &[("rc", "0"), ("rank", "3"), ("size", "8"), ("appnum", "0")],
                ),
            )
            .unwrap();
            let put = receive(&mut server).unwrap();
            assert_eq!(put.get("value"), Some("x;y"));
            send(
                &mut server,
                &Message::new("kvs-put-response", &[("rc", "7")]),
            )
            .unwrap();
        });
        let init = fullinit(&mut client, "42.0", "3").unwrap();
        assert_eq!((init.rank, init.size), (3, 8));
        let e = call(
            &mut client,
            &Message::new("kvs-put", &[("key", "k"), ("value", "x;y")]),
        )
        .unwrap_err();
        assert!(e.contains("kvs-put failed (rc=7"), "{e}");
        fake.join().unwrap();
    }
}
