//! The PMI-1 wire protocol, client side: how ranks started by MPICH's Hydra (`mpiexec.hydra`),
//! Flux or another PMI-1 process manager exchange endpoints, with no libpmi; and the first
//! exchange on `PMI_FD`, which picks PMI-1 or PMI-2 by what the server answers.
//!
//! Every message either way is one line of space-separated `key=value` words, the first of
//! them `cmd=...`. A value ends at the next space, so values this client puts are escaped
//! (see [`escape`]). The rank and the size come from the environment (`PMI_RANK`,
//! `PMI_SIZE`); the server says its key-value space's name and its limits.

use std::io::{self, Read, Write};

use crate::pmi2::Message;
use crate::pmi_socket::PmiSocket;

/// Longest line accepted from the server.
const MAX_LINE: usize = 64 << 10;

/// The wire protocol agreed on the PMI socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    One,
    Two,
}

/// Writes `m` as one PMI-1 line: `cmd=...`, then its `key=value` words, space-separated.
pub fn encode(m: &Message) -> Vec<u8> {
    let mut line = format!("cmd={}", m.cmd);
    for (k, v) in &m.attrs {
        line += &format!(" {k}={v}");
    }
    line.push('\n');
    line.into_bytes()
}

/// Parses one PMI-1 line (without its newline). A word without `=` is an error; a value may
/// hold `=` (the first one ends the key).
pub fn decode(line: &str) -> Result<Message, String> {
    let mut words = line.split_ascii_whitespace().map(|word| {
        word.split_once('=')
            .ok_or_else(|| format!("'{word}' has no '=' (in PMI-1 line '{line}')"))
    });
    match words.next() {
        Some(Ok(("cmd", cmd))) => Ok(Message {
            cmd: cmd.to_string(),
            attrs: words
                .map(|w| w.map(|(k, v)| (k.to_string(), v.to_string())))
                .collect::<Result<_, _>>()?,
        }),
        _ => Err(format!("PMI-1 line '{line}' does not start with cmd=")),
    }
}

/// Reads one line, byte by byte: the server may send the next line before this one is
/// taken, and nothing past the newline may be consumed.
fn read_line(r: &mut impl Read) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        r.read_exact(&mut byte)?;
        if byte[0] == b'\n' {
            break;
        }
        if line.len() == MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("PMI line longer than {MAX_LINE} bytes"),
            ));
        }
        line.push(byte[0]);
    }
    String::from_utf8(line)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "PMI line is not UTF-8"))
}

/// Reads one line and parses it.
pub(crate) fn read_message(r: &mut impl Read) -> Result<Message, String> {
    let text = read_line(r).map_err(|e| e.to_string())?;
    decode(&text)
}

/// Sends `request` and reads the answer, which must be `cmd=<answer>` with no `rc` or
/// `rc=0`.
pub fn call(
    stream: &mut (impl Read + Write),
    request: &Message,
    answer: &str,
) -> Result<Message, String> {
    let failed = |e: io::Error| format!("PMI-1 {}: {e}", request.cmd);
    stream.write_all(&encode(request)).map_err(failed)?;
    let text = read_line(stream).map_err(failed)?;
    let response = decode(&text).map_err(|e| format!("PMI-1 {}: {e}", request.cmd))?;
    if response.cmd != answer {
        return Err(format!(
            "PMI-1 {}: the server answered '{}'",
            request.cmd,
            text.trim()
        ));
    }
    match response.get("rc") {
        Some("0") | None => Ok(response),
        Some(rc) => Err(format!(
            "PMI-1 {} failed (rc={rc}{})",
            request.cmd,
            response
                .get("msg")
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )),
    }
}

/// What the first exchange asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// This version, else the other.
    Prefer(Version),
    /// This version or none.
    Only(Version),
}

impl Version {
    fn other(self) -> Version {
        match self {
            Version::One => Version::Two,
            Version::Two => Version::One,
        }
    }

    fn number(self) -> u8 {
        match self {
            Version::One => 1,
            Version::Two => 2,
        }
    }
}

/// The first exchange on the PMI socket: asks for a version, and takes PMI-1 where the
/// server answers a request for PMI-2 with PMI-1 (as Flux does); where the server refuses,
/// asks for the other version unless told to take only the one.
pub fn negotiate(stream: &mut (impl Read + Write), ask: Ask) -> Result<Version, String> {
    let (asked, only) = match ask {
        Ask::Prefer(v) => (v, false),
        Ask::Only(v) => (v, true),
    };
    let refused = |answer: &Message, what: String| {
        format!(
            "the process manager on PMI_FD refused {what} (it answered rc={}{})",
            answer.get("rc").unwrap_or("?"),
            answer
                .get("pmi_version")
                .map(|v| format!(" pmi_version={v}"))
                .unwrap_or_default()
        )
    };
    let answer = ask_for(stream, asked)?;
    if answer.get("rc") == Some("0") {
        let agreed = match answer.get("pmi_version") {
            Some("1") => Version::One,
            _ => asked,
        };
        if agreed == asked || !only {
            return Ok(agreed);
        }
    }
    if only {
        return Err(refused(&answer, format!("PMI-{}", asked.number())));
    }
    let other = asked.other();
    let second = ask_for(stream, other)?;
    if second.get("rc") == Some("0") {
        Ok(other)
    } else {
        Err(refused(&second, "PMI-1 and PMI-2".to_string()))
    }
}

/// Sends `init` asking for `version`; returns the server's `response_to_init`.
fn ask_for(stream: &mut (impl Read + Write), version: Version) -> Result<Message, String> {
    let (v, sub) = match version {
        Version::One => ("1", "1"),
        Version::Two => ("2", "0"),
    };
    let init = Message::new("init", &[("pmi_version", v), ("pmi_subversion", sub)]);
    stream
        .write_all(&encode(&init))
        .map_err(|e| format!("PMI init: {e}"))?;
    let text = read_line(stream).map_err(|e| format!("PMI init: {e}"))?;
    let answer = decode(&text).map_err(|e| format!("PMI init: {e}"))?;
    if answer.cmd != "response_to_init" {
        return Err(format!("PMI init: the server answered '{}'", text.trim()));
    }
    Ok(answer)
}

/// The server's limits, from `get_maxes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Maxes {
    pub kvsname: usize,
    pub key: usize,
    pub value: usize,
}

/// Asks for the server's limits.
pub fn maxes(stream: &mut (impl Read + Write)) -> Result<Maxes, String> {
    let answer = call(stream, &Message::new("get_maxes", &[]), "maxes")?;
    let limit = |key: &str| {
        answer
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("PMI-1 get_maxes: no {key} in the answer"))
    };
    Ok(Maxes {
        kvsname: limit("kvsname_max")?,
        key: limit("keylen_max")?,
        value: limit("vallen_max")?,
    })
}

/// A rank's line to a PMI-1 server, once [`negotiate`] agreed on PMI-1.
pub struct Client {
    stream: PmiSocket,
    kvsname: String,
    appnum: u32,
    maxes: Maxes,
}

impl Client {
    /// Asks for the server's limits and the name of the job's key-value space; gives the
    /// socket back with the error where the server failed, for an abort through it.
    pub fn new(mut stream: PmiSocket) -> Result<Client, (PmiSocket, String)> {
        match Client::ask_job(&mut stream) {
            Ok((maxes, kvsname, appnum)) => Ok(Client {
                stream,
                kvsname,
                appnum,
                maxes,
            }),
            Err(e) => Err((stream, e)),
        }
    }

    fn ask_job(stream: &mut PmiSocket) -> Result<(Maxes, String, u32), String> {
        let maxes = maxes(stream)?;
        let answer = call(stream, &Message::new("get_my_kvsname", &[]), "my_kvsname")?;
        let kvsname = answer
            .get("kvsname")
            .ok_or("PMI-1 get_my_kvsname: no kvsname in the answer")?
            .to_string();
        let answer = call(stream, &Message::new("get_appnum", &[]), "appnum")?;
        let appnum = answer
            .get("appnum")
            .and_then(|n| n.parse().ok())
            .ok_or("PMI-1 get_appnum: no appnum in the answer")?;
        Ok((maxes, kvsname, appnum))
    }

    /// Which application of an MPMD launch (`mpiexec -n 2 a : -n 2 b`) this rank runs.
    pub fn appnum(&self) -> u32 {
        self.appnum
    }

    /// The name of the job's key-value space: the job's, unique while it runs.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Puts `value` (escaped) under `key`, within the server's limits.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let word = escape(value);
        if key.len() > self.maxes.key || key.contains(|c: char| !c.is_ascii_graphic()) {
            return Err(format!(
                "PMI-1 put: key '{key}' is longer than the server's {} bytes or not one word",
                self.maxes.key
            ));
        }
        if word.len() > self.maxes.value {
            return Err(format!(
                "PMI-1 put: the value of '{key}' takes {} bytes, over the server's {}",
                word.len(),
                self.maxes.value
            ));
        }
        let put = Message::new(
            "put",
            &[("kvsname", &self.kvsname), ("key", key), ("value", &word)],
        );
        call(&mut self.stream, &put, "put_result").map(drop)
    }

    /// Waits for every rank: then all puts made before are visible.
    pub fn fence(&mut self) -> Result<(), String> {
        call(
            &mut self.stream,
            &Message::new("barrier_in", &[]),
            "barrier_out",
        )
        .map(drop)
    }

    /// The value some rank put under `key`, `None` where the server has none.
    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let get = Message::new("get", &[("kvsname", &self.kvsname), ("key", key)]);
        let failed = |e: io::Error| format!("PMI-1 get: {e}");
        self.stream.write_all(&encode(&get)).map_err(failed)?;
        let text = read_line(&mut self.stream).map_err(failed)?;
        let answer = decode(&text).map_err(|e| format!("PMI-1 get: {e}"))?;
        if answer.cmd != "get_result" {
            return Err(format!("PMI-1 get: the server answered '{}'", text.trim()));
        }
        match answer.get("rc") {
            Some("0") => {}
            _ if is_missing_key(&answer) => return Ok(None),
            rc => {
                return Err(format!(
                    "PMI-1 get of '{key}' failed (rc={}{}), which is no missing key",
                    rc.unwrap_or("none"),
                    answer
                        .get("msg")
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ))
            }
        }
        let word = answer.get("value").unwrap_or_default();
        unescape(word)
            .map(Some)
            .ok_or_else(|| format!("PMI-1 get: the value of '{key}' is not escaped: '{word}'"))
    }

    /// Asks the server to end the job with `code`; no answer comes.
    pub fn abort(&mut self, code: i32) {
        abort(&mut self.stream, code);
    }

    /// Says goodbye.
    pub fn finalize(&mut self) -> Result<(), String> {
        call(
            &mut self.stream,
            &Message::new("finalize", &[]),
            "finalize_ack",
        )
        .map(drop)
    }
}

/// Asks the PMI-1 server on `stream` to end the job with `code`, whatever this rank got
/// through so far; no answer comes.
pub fn abort(stream: &mut impl Write, code: i32) {
    let code = code.to_string();
    let _ = stream.write_all(&encode(&Message::new("abort", &[("exitcode", &code)])));
}

/// Whether a failed `get`'s answer says the key is not there, as each server words it:
/// Hydra before 4.1 and MPICH's other process managers in `msg` (`key_<key>_not_found`, where
/// `kvs_<name>_not_found` is a wrong key-value space), Hydra 4.1 and later by
/// `msg=key_not_found`, Slurm's PMI-1 by rc=1 alone, servers on MPICH's `pmi.h` (Flux) by
/// rc=4, `PMI_ERR_INVALID_KEY`, alone, and older Flux by `rc=-1 msg=failure`, its only
/// answer to a failed get. Anything else (a wrong key-value space, a server in trouble) is a
/// failure to report, not a key some rank has yet to put.
fn is_missing_key(answer: &Message) -> bool {
    match (answer.get("rc"), answer.get("msg")) {
        (_, Some("key_not_found")) | (Some("-1"), Some("failure")) => true,
        (_, Some(msg)) => msg.starts_with("key_") && msg.ends_with("_not_found"),
        (rc, None) => matches!(rc, Some("1" | "4")),
    }
}

/// Escapes `value` into one PMI-1 word: bytes other than printable ASCII, and the space,
/// `%`, `;` (which some servers treat as a separator) and `=` (which some parse as the start
/// of the next key's value), become `%XX`.
pub fn escape(value: &[u8]) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_graphic() && !matches!(b, b'%' | b';' | b'=') {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// Reverses [`escape`]; `None` for a `%` not followed by two hex digits.
pub fn unescape(word: &str) -> Option<Vec<u8>> {
    let bytes = word.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    /// A fake server: answers each line it reads with the next of `answers`, and returns
    /// the lines it read.
    fn serve(answers: &'static [&'static str]) -> (PmiSocket, thread::JoinHandle<Vec<String>>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let fake = thread::spawn(move || {
            let mut heard = Vec::new();
            for answer in answers {
                heard.push(read_line(&mut server).unwrap());
                server.write_all(answer.as_bytes()).unwrap();
            }
            heard
        });
        (PmiSocket::Inherited(client), fake)
    }

    #[test]
    fn lines_round_trip_and_values_may_hold_equals() {
        let line = Message::new(
            "put",
            &[("kvsname", "kvs_1"), ("key", "k"), ("value", "a=b")],
        );
        assert_eq!(encode(&line), b"cmd=put kvsname=kvs_1 key=k value=a=b\n");
        let text = String::from_utf8(encode(&line)).unwrap();
        assert_eq!(decode(text.trim_end()).unwrap(), line);
        assert!(decode("key=1").unwrap_err().contains("cmd="));
        assert!(decode("cmd=x novalue").unwrap_err().contains("'novalue'"));
    }

    #[test]
    fn escaped_values_are_one_word_and_come_back() {
        for value in [&b""[..], b"plain-10.0.0.1:80", b"a b%c;d\n\0\xff", b"x=y"] {
            let word = escape(value);
            assert!(!word.contains([' ', '\n', ';', '=']), "{word}");
            assert_eq!(unescape(&word).as_deref(), Some(value));
        }
        assert_eq!(unescape("%4"), None);
        assert_eq!(unescape("%zz"), None);
    }

    #[test]
    fn pmi2_is_taken_where_the_server_offers_it() {
        let (mut client, fake) =
            serve(&["cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n"]);
        assert_eq!(
            negotiate(&mut client, Ask::Prefer(Version::Two)),
            Ok(Version::Two)
        );
        assert_eq!(
            fake.join().unwrap(),
            ["cmd=init pmi_version=2 pmi_subversion=0"]
        );
    }

    #[test]
    fn a_pmi1_answer_to_pmi2_is_pmi1() {
        // Flux answers a request for PMI-2 with its own version.
        let (mut client, fake) =
            serve(&["cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"]);
        assert_eq!(
            negotiate(&mut client, Ask::Prefer(Version::Two)),
            Ok(Version::One)
        );
        assert_eq!(fake.join().unwrap().len(), 1);
    }

    #[test]
    fn a_refused_pmi2_asks_again_for_pmi1() {
        let (mut client, fake) = serve(&[
            "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=-1\n",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        ]);
        assert_eq!(
            negotiate(&mut client, Ask::Prefer(Version::Two)),
            Ok(Version::One)
        );
        assert_eq!(
            fake.join().unwrap()[1],
            "cmd=init pmi_version=1 pmi_subversion=1"
        );
        let (mut client, _) = serve(&[
            "cmd=response_to_init pmi_version=2 rc=-1\n",
            "cmd=response_to_init pmi_version=1 rc=-2\n",
        ]);
        let e = negotiate(&mut client, Ask::Prefer(Version::Two)).unwrap_err();
        assert!(
            e.contains("refused PMI-1 and PMI-2 (it answered rc=-2"),
            "{e}"
        );
        // A PMI-2-only server refuses PMI-1.
        let (mut client, _) = serve(&[
            "cmd=response_to_init pmi_version=2 rc=-1\n",
            "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n",
        ]);
        assert_eq!(
            negotiate(&mut client, Ask::Prefer(Version::One)),
            Ok(Version::Two)
        );
    }

    #[test]
    fn a_version_asked_for_is_kept_or_refused() {
        let (mut client, fake) =
            serve(&["cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"]);
        assert_eq!(
            negotiate(&mut client, Ask::Only(Version::One)),
            Ok(Version::One)
        );
        assert_eq!(
            fake.join().unwrap(),
            ["cmd=init pmi_version=1 pmi_subversion=1"]
        );
        let (mut client, _) = serve(&["cmd=response_to_init rc=0 pmi_version=1\n"]);
        let e = negotiate(&mut client, Ask::Only(Version::Two)).unwrap_err();
        assert!(
            e.contains("refused PMI-2 (it answered rc=0 pmi_version=1)"),
            "{e}"
        );
    }

    #[test]
    fn a_client_session_escapes_and_keeps_to_the_limits() {
        let (client, fake) = serve(&[
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=8 vallen_max=12\n",
            "cmd=my_kvsname kvsname=kvs_7_0 rc=0\n",
            "cmd=appnum appnum=3 rc=0\n",
            "cmd=put_result rc=0 msg=success\n",
            "cmd=barrier_out\n",
            "cmd=get_result rc=0 msg=success value=a%20b\n",
            "cmd=get_result rc=-1 msg=key_k2_not_found value=unknown\n",
            "cmd=finalize_ack\n",
        ]);
        let mut client = Client::new(client).ok().unwrap();
        assert_eq!(client.kvsname(), "kvs_7_0");
        assert_eq!(client.appnum(), 3);
        client.put("k", b"a b").unwrap();
        let e = client.put("k", b"0123456789abc").unwrap_err();
        assert!(
            e.contains("'k' takes 13 bytes, over the server's 12"),
            "{e}"
        );
        let e = client.put("much-too-long", b"").unwrap_err();
        assert!(e.contains("key 'much-too-long'"), "{e}");
        client.fence().unwrap();
        assert_eq!(client.get("k").unwrap().as_deref(), Some(&b"a b"[..]));
        assert_eq!(client.get("k2").unwrap(), None);
        client.finalize().unwrap();
        let heard = fake.join().unwrap();
        assert_eq!(heard[2], "cmd=get_appnum");
        assert_eq!(heard[3], "cmd=put kvsname=kvs_7_0 key=k value=a%20b");
        assert_eq!(heard[4], "cmd=barrier_in");
        assert_eq!(heard[5], "cmd=get kvsname=kvs_7_0 key=k");
    }

    #[test]
    fn values_with_equals_and_spaces_go_as_one_word_and_failed_gets_are_named() {
        let (client, fake) = serve(&[
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            "cmd=my_kvsname kvsname=kvs_7_0 rc=0\n",
            "cmd=appnum appnum=0 rc=0\n",
            "cmd=put_result rc=0 msg=success\n",
            "cmd=get_result rc=0 msg=success value=tcp%3D10.0.0.1%3A80%20x\n",
            // Slurm's, Flux's, older Flux's and Hydra 4.1's words for a missing key.
            "cmd=get_result rc=1\n",
            "cmd=get_result rc=4\n",
            "cmd=get_result rc=-1 msg=failure\n",
            "cmd=get_result rc=1 msg=key_not_found\n",
            // Not a missing key: the server lost the space, or failed.
            "cmd=get_result rc=-1 msg=kvs_kvs_7_0_not_found value=unknown\n",
            "cmd=get_result rc=-1\n",
        ]);
        let mut client = Client::new(client).ok().unwrap();
        client.put("card", b"tcp=10.0.0.1:80 x").unwrap();
        assert_eq!(
            client.get("card").unwrap().as_deref(),
            Some(&b"tcp=10.0.0.1:80 x"[..])
        );
        assert_eq!(client.get("slurm").unwrap(), None);
        assert_eq!(client.get("flux").unwrap(), None);
        assert_eq!(client.get("older-flux").unwrap(), None);
        assert_eq!(client.get("hydra-4.1").unwrap(), None);
        let e = client.get("lost").unwrap_err();
        assert_eq!(
            e,
            "PMI-1 get of 'lost' failed (rc=-1: kvs_kvs_7_0_not_found), which is no missing key"
        );
        let e = client.get("failed").unwrap_err();
        assert!(e.contains("get of 'failed' failed (rc=-1)"), "{e}");
        let heard = fake.join().unwrap();
        assert_eq!(
            heard[3],
            "cmd=put kvsname=kvs_7_0 key=card value=tcp%3D10.0.0.1:80%20x"
        );
    }

    #[test]
    fn calls_check_the_answer_and_its_rc() {
        let (mut client, fake) = serve(&[
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            "cmd=get_result rc=-1 msg=key_x_not_found value=unknown\n",
            "cmd=barrier_out\n",
        ]);
        assert_eq!(
            maxes(&mut client),
            Ok(Maxes {
                kvsname: 256,
                key: 64,
                value: 1024
            })
        );
        let e = call(
            &mut client,
            &Message::new("get", &[("kvsname", "k"), ("key", "x")]),
            "get_result",
        )
        .unwrap_err();
        assert_eq!(e, "PMI-1 get failed (rc=-1: key_x_not_found)");
        let e = call(
            &mut client,
            &Message::new("barrier_in", &[]),
            "finalize_ack",
        )
        .unwrap_err();
        assert!(e.contains("answered 'cmd=barrier_out'"), "{e}");
        fake.join().unwrap();
    }
}
