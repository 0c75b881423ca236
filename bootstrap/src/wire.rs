//! The KVS wire format, shared by rsrun's server (launcher's `kvs`) and the ranks' client.
//!
//! Every message is a frame: a little-endian `u32` body length, then the body. A body starts with
//! a one-byte tag; strings and byte strings inside it are a `u32` length and that many bytes, so
//! values are binary-safe. One request gets exactly one response, in order.

use std::io::{self, Read, Write};

/// Largest frame either side accepts, so a corrupt length cannot make us allocate gigabytes.
pub const MAX_FRAME: u32 = 64 << 20;
/// Largest first frame (the hello) the server accepts from a not yet authenticated peer.
pub const MAX_HELLO_FRAME: u32 = 4 << 10;

/// What a rank asks of rsrun's key-value service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// First message on a connection: which rank this is, proven by the job's secret.
    Hello {
        rank: u32,
        secret: Vec<u8>,
    },
    Put {
        key: String,
        value: Vec<u8>,
    },
    Fence,
    Get {
        key: String,
    },
    /// Every key and value the space holds: one round trip where a rank reads a key of each
    /// peer after a fence, instead of one per key (32 ranks made 4096 gets of rsrun's one
    /// service thread at start-up).
    GetAll,
    Abort {
        code: i32,
        message: String,
    },
    Finalize,
    /// The rank has waited in an mpirt call with nothing moving for a while: what it waits
    /// for (an encoded [`crate::stall::RankState`]). One way: rsrun answers nothing, so the
    /// rank can say it from inside its waiting loop without waiting itself.
    Stalled {
        state: Vec<u8>,
    },
    /// Something moved (or the call returned) since the rank's last `Stalled`. One way.
    Resumed,
    /// Start a job of new ranks (MPI's spawn): `apps[i].count` processes of each program,
    /// numbered in that order, whose key-value space holds `parent` under
    /// [`crate::PARENT_KEY`] (it carries a secret: never on a command line nor in a rank's
    /// environment). rsrun answers [`Response::Value`] of a [`SpawnVerdict`]; the connection
    /// stays open either way.
    Spawn {
        apps: Vec<SpawnApp>,
        parent: String,
    },
    /// The spawn that started `job` (the name rsrun's [`SpawnVerdict::Started`] gave it)
    /// returns an error to its parents (`why`): its ranks will not join them, so their job's
    /// failure is the spawn's error, not the end of this job. Sent by the parents' root
    /// before it tells the children's root, so rsrun knows before any child can exit;
    /// rsrun answers [`Response::Ok`].
    SpawnUnjoined {
        job: String,
        why: String,
    },
}

/// One program of a [`Request::Spawn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnApp {
    pub program: String,
    pub args: Vec<String>,
    pub count: u32,
}

/// rsrun's answer to a [`Request::Spawn`], as the bytes of its `Response::Value`: the first
/// byte says which, the rest is the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnVerdict {
    /// Started; the text names the new job for messages ("spawned job 1 (...)").
    Started(String),
    /// Not started; the text says why.
    Refused(String),
}

impl SpawnVerdict {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, text) = match self {
            SpawnVerdict::Started(text) => (0, text),
            SpawnVerdict::Refused(text) => (1, text),
        };
        let mut out = vec![tag];
        out.extend_from_slice(text.as_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<SpawnVerdict, String> {
        let text = String::from_utf8_lossy(bytes.get(1..).unwrap_or_default()).into_owned();
        match bytes.first() {
            Some(0) => Ok(SpawnVerdict::Started(text)),
            Some(1) => Ok(SpawnVerdict::Refused(text)),
            _ => Err("not a spawn verdict".to_string()),
        }
    }
}

/// rsrun's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Ok,
    Value(Vec<u8>),
    /// The answer to [`Request::GetAll`].
    Values(Vec<(String, Vec<u8>)>),
    NotFound,
    /// The request was refused; the text says why. The server closes the connection after it.
    Error(String),
}

/// How many bytes [`Response::Values`] of `pairs` takes encoded: a server checks it against
/// [`MAX_FRAME`] before it gathers a reply that no frame could carry.
pub fn values_len<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> usize {
    // The tag and the count, then each key and value after its length.
    1 + 4
        + pairs
            .into_iter()
            .map(|(key, value)| 4 + key.len() + 4 + value.len())
            .sum::<usize>()
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Request::Hello { rank, secret } => {
                out.push(1);
                out.extend_from_slice(&rank.to_le_bytes());
                put_bytes(&mut out, secret);
            }
            Request::Put { key, value } => {
                out.push(2);
                put_bytes(&mut out, key.as_bytes());
                put_bytes(&mut out, value);
            }
            Request::Fence => out.push(3),
            Request::Get { key } => {
                out.push(4);
                put_bytes(&mut out, key.as_bytes());
            }
            Request::Abort { code, message } => {
                out.push(5);
                out.extend_from_slice(&code.to_le_bytes());
                put_bytes(&mut out, message.as_bytes());
            }
            Request::Finalize => out.push(6),
            Request::GetAll => out.push(7),
            Request::Stalled { state } => {
                out.push(8);
                put_bytes(&mut out, state);
            }
            Request::Resumed => out.push(9),
            Request::Spawn { apps, parent } => {
                out.push(10);
                out.extend_from_slice(&(apps.len() as u32).to_le_bytes());
                for app in apps {
                    put_bytes(&mut out, app.program.as_bytes());
                    out.extend_from_slice(&app.count.to_le_bytes());
                    out.extend_from_slice(&(app.args.len() as u32).to_le_bytes());
                    for arg in &app.args {
                        put_bytes(&mut out, arg.as_bytes());
                    }
                }
                put_bytes(&mut out, parent.as_bytes());
            }
            Request::SpawnUnjoined { job, why } => {
                out.push(11);
                put_bytes(&mut out, job.as_bytes());
                put_bytes(&mut out, why.as_bytes());
            }
        }
        out
    }

    pub fn decode(body: &[u8]) -> Result<Request, String> {
        let mut r = Reader(body);
        let request = match r.u8()? {
            1 => Request::Hello {
                rank: r.u32()?,
                secret: r.bytes()?,
            },
            2 => Request::Put {
                key: r.string()?,
                value: r.bytes()?,
            },
            3 => Request::Fence,
            4 => Request::Get { key: r.string()? },
            5 => Request::Abort {
                code: r.u32()? as i32,
                message: r.string()?,
            },
            6 => Request::Finalize,
            7 => Request::GetAll,
            8 => Request::Stalled { state: r.bytes()? },
            9 => Request::Resumed,
            10 => {
                let mut apps = Vec::new();
                for _ in 0..r.count()? {
                    let program = r.string()?;
                    let count = r.u32()?;
                    let args = (0..r.count()?)
                        .map(|_| r.string())
                        .collect::<Result<_, _>>()?;
                    apps.push(SpawnApp {
                        program,
                        args,
                        count,
                    });
                }
                Request::Spawn {
                    apps,
                    parent: r.string()?,
                }
            }
            11 => Request::SpawnUnjoined {
                job: r.string()?,
                why: r.string()?,
            },
            tag => return Err(format!("unknown request tag {tag}")),
        };
        r.finish()?;
        Ok(request)
    }
}

impl Response {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Response::Ok => out.push(1),
            Response::Value(value) => {
                out.push(2);
                put_bytes(&mut out, value);
            }
            Response::NotFound => out.push(3),
            Response::Error(text) => {
                out.push(4);
                put_bytes(&mut out, text.as_bytes());
            }
            Response::Values(pairs) => {
                out.push(5);
                // The count of pairs is bounded by the frame, far below u32::MAX.
                out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
                for (key, value) in pairs {
                    put_bytes(&mut out, key.as_bytes());
                    put_bytes(&mut out, value);
                }
            }
        }
        out
    }

    pub fn decode(body: &[u8]) -> Result<Response, String> {
        let mut r = Reader(body);
        let response = match r.u8()? {
            1 => Response::Ok,
            2 => Response::Value(r.bytes()?),
            3 => Response::NotFound,
            4 => Response::Error(r.string()?),
            5 => {
                let count = r.u32()?;
                // Each pair takes at least 8 bytes: a count no body could hold is refused
                // before anything is allocated for it.
                if count as usize > r.0.len() / 8 {
                    return Err(format!("{count} pairs in a body of {} bytes", r.0.len()));
                }
                let mut pairs = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    pairs.push((r.string()?, r.bytes()?));
                }
                Response::Values(pairs)
            }
            tag => return Err(format!("unknown response tag {tag}")),
        };
        r.finish()?;
        Ok(response)
    }
}

/// Writes one frame. The caller's stream should have Nagle off: frames are small and each
/// one waits for its answer.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&len| len <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "KVS frame too large"))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)
}

/// Reads one frame of at most `max` bytes. `Ok(None)` is a clean end of stream between frames.
pub fn read_frame(r: &mut impl Read, max: u32) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("KVS frame of {len} bytes exceeds the limit of {max}"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Bodies are capped at MAX_FRAME, far below u32::MAX, so the length always fits.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A cursor over a frame body whose every read checks the remaining length.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl Reader<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("truncated KVS message".to_string());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count of items that each take at least 4 bytes: one the rest of the body could not
    /// hold is refused before anything is allocated for it.
    pub(crate) fn count(&mut self) -> Result<u32, String> {
        let count = self.u32()?;
        if count as usize > self.0.len() / 4 {
            return Err(format!("{count} items in a body of {} bytes", self.0.len()));
        }
        Ok(count)
    }

    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }

    pub(crate) fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "KVS string is not UTF-8".to_string())
    }

    pub(crate) fn finish(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes after KVS message".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_with_binary_values() {
        let requests = [
            Request::Hello {
                rank: 7,
                secret: b"s3cret".to_vec(),
            },
            Request::Put {
                key: "shm.3".into(),
                value: vec![0, b'\n', 255, 0],
            },
            Request::Fence,
            Request::Get { key: "k".into() },
            Request::Abort {
                code: -2,
                message: "boom".into(),
            },
            Request::Finalize,
            Request::GetAll,
            Request::Stalled {
                state: vec![0, 7, 255],
            },
            Request::Resumed,
            Request::Spawn {
                apps: vec![
                    SpawnApp {
                        program: "./child".into(),
                        args: vec!["-x".into(), String::new()],
                        count: 3,
                    },
                    SpawnApp {
                        program: "other".into(),
                        args: Vec::new(),
                        count: 1,
                    },
                ],
                parent: "host:7 2 00ff".into(),
            },
            Request::SpawnUnjoined {
                job: "spawned job 1 (3 ranks of ./child)".into(),
                why: "parent rank 1 cannot open its bridge".into(),
            },
        ];
        for request in requests {
            assert_eq!(Request::decode(&request.encode()), Ok(request));
        }
    }

    #[test]
    fn spawn_verdicts_round_trip_and_a_count_past_the_body_is_refused() {
        for verdict in [
            SpawnVerdict::Started("spawned job 1".into()),
            SpawnVerdict::Refused("no".into()),
        ] {
            assert_eq!(SpawnVerdict::decode(&verdict.encode()), Ok(verdict));
        }
        assert!(SpawnVerdict::decode(&[7]).is_err());
        // A spawn claiming a million programs in a body of a few bytes.
        let mut body = vec![10];
        body.extend_from_slice(&1_000_000u32.to_le_bytes());
        assert!(Request::decode(&body).is_err());
    }

    #[test]
    fn responses_round_trip() {
        for response in [
            Response::Ok,
            Response::Value(vec![1, 0, 2]),
            Response::NotFound,
            Response::Error("no".into()),
            Response::Values(vec![("a".into(), vec![0, 1]), ("b".into(), Vec::new())]),
            Response::Values(Vec::new()),
        ] {
            assert_eq!(Response::decode(&response.encode()), Ok(response));
        }
    }

    #[test]
    fn malformed_bodies_are_errors() {
        assert!(Request::decode(&[]).is_err());
        assert!(Request::decode(&[99]).is_err());
        assert!(Request::decode(&[2, 200, 0, 0, 0, b'a']).is_err());
        assert!(Request::decode(&[3, 0]).is_err());
        // A count of pairs no body could hold.
        assert!(Response::decode(&[5, 255, 255, 255, 255]).is_err());
    }

    /// A rank's word that its spawn failed is read from untrusted bytes like any request:
    /// cut short at any byte, with trailing bytes or with a cause that is not UTF-8, it is an
    /// error, never a request.
    #[test]
    fn a_spawn_unjoined_request_cut_short_or_malformed_is_an_error() {
        let bytes = Request::SpawnUnjoined {
            job: "spawned job 1 (3 ranks of ./child)".into(),
            why: "parent rank 1 cannot open its bridge".into(),
        }
        .encode();
        for len in 0..bytes.len() {
            assert!(
                Request::decode(&bytes[..len]).is_err(),
                "cut to {len} bytes"
            );
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(Request::decode(&trailing).is_err());
        let mut not_utf8 = bytes;
        *not_utf8.last_mut().unwrap() = 0xff;
        assert!(Request::decode(&not_utf8).is_err());
    }

    #[test]
    fn frames_round_trip_and_respect_the_limit() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r, 16).unwrap(), Some(b"hello".to_vec()));
        assert_eq!(read_frame(&mut r, 16).unwrap(), None);
        assert!(read_frame(&mut &buf[..], 4).is_err());
    }
}
