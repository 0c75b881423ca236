//! The socket to a PMI server: inherited in `PMI_FD` (Slurm, Hydra, Flux), or dialled at
//! `PMI_PORT` (`host:port`: Hydra's `mpiexec -pmi-port`, process managers that start ranks
//! they cannot hand a socket to), where the rank first says which of the server's processes it
//! is (`PMI_ID`) and the server answers with its rank and the job's size. After that both
//! speak the same protocol.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::pmi1;

/// How long a rank tries each address of `PMI_PORT` before the next, or giving up: a server
/// that does not answer (a firewall dropping the packets) must not hang the rank.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
use crate::pmi2::Message;

pub enum PmiSocket {
    Inherited(UnixStream),
    Dialled(TcpStream),
}

impl PmiSocket {
    /// The socket the process manager opened for this process in `fd`.
    ///
    /// # Safety
    /// `fd` is an open socket that nothing else in the process owns or closes.
    pub unsafe fn inherited(fd: RawFd) -> PmiSocket {
        // SAFETY: the caller's promise.
        PmiSocket::Inherited(unsafe { UnixStream::from_raw_fd(fd) })
    }

    /// Connects to the server at `port` (`host:port`).
    pub fn dial(port: &str, id: &str) -> Result<PmiSocket, String> {
        let failed = |e: io::Error| {
            format!("cannot reach the PMI server at PMI_PORT={port} (PMI_ID={id}): {e}")
        };
        let addrs = port.to_socket_addrs().map_err(|e| {
            let hint = if port.matches(':').count() > 1 && !port.starts_with('[') {
                " (IPv6 needs [addr]:port)"
            } else {
                ""
            };
            failed(io::Error::new(e.kind(), format!("{e}{hint}")))
        })?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "it names no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(stream) => {
                    // Each request waits for its answer; Nagle would only add latency.
                    stream.set_nodelay(true).map_err(failed)?;
                    return Ok(PmiSocket::Dialled(stream));
                }
                Err(e) => last = io::Error::new(e.kind(), format!("{addr}: {e}")),
            }
        }
        Err(failed(last))
    }

    /// Says which of the server's processes this is (`PMI_ID`), on a dialled socket, before
    /// anything else; returns the rank and the job's size the server answers (`cmd=initack`,
    /// then `cmd=set` lines with `size`, `rank` and `debug`, as MPICH's PMI-1 clients read
    /// them).
    pub fn introduce(&mut self, id: &str) -> Result<(u32, u32), String> {
        let failed = |e: io::Error| format!("PMI-1 initack: {e}");
        self.write_all(&pmi1::encode(&Message::new("initack", &[("pmiid", id)])))
            .map_err(failed)?;
        let answer = pmi1::read_message(self).map_err(|e| format!("PMI-1 initack: {e}"))?;
        if answer.cmd != "initack" {
            return Err(format!(
                "PMI-1 initack: the server at PMI_PORT answered cmd={} (is PMI_ID={id} one of \
                 its processes?)",
                answer.cmd
            ));
        }
        let (mut rank, mut size) = (None, None);
        for _ in 0..3 {
            let set = pmi1::read_message(self).map_err(|e| format!("PMI-1 initack: {e}"))?;
            let number = |key| set.get(key).and_then(|v| v.parse::<u32>().ok());
            if set.cmd != "set" {
                return Err(format!(
                    "PMI-1 initack: the server answered cmd={} where cmd=set was due",
                    set.cmd
                ));
            }
            rank = rank.or(number("rank"));
            size = size.or(number("size"));
        }
        match (rank, size) {
            (Some(rank), Some(size)) if rank < size => Ok((rank, size)),
            _ => Err(format!(
                "PMI-1 initack: the server gave no rank below the job's size (rank {rank:?}, \
                 size {size:?})"
            )),
        }
    }
}

impl Read for PmiSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PmiSocket::Inherited(s) => s.read(buf),
            PmiSocket::Dialled(s) => s.read(buf),
        }
    }
}

impl Write for PmiSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PmiSocket::Inherited(s) => s.write(buf),
            PmiSocket::Dialled(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            PmiSocket::Inherited(s) => s.flush(),
            PmiSocket::Dialled(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmi1::{negotiate, Ask, Client, Version};
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::thread;

    /// A PMI-1 server on a TCP port, as Hydra's proxy with -pmi-port: answers the lines it
    /// reads with `answers` in turn, and returns the lines.
    fn serve_port(answers: &'static [&'static str]) -> (String, thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().to_string();
        let fake = thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut out = stream.try_clone().unwrap();
            let mut lines = BufReader::new(stream).lines();
            let mut heard = Vec::new();
            for answer in answers {
                heard.push(lines.next().unwrap().unwrap());
                out.write_all(answer.as_bytes()).unwrap();
            }
            heard
        });
        (port, fake)
    }

    #[test]
    fn a_rank_dials_pmi_port_introduces_itself_and_speaks_pmi1() {
        let (port, fake) = serve_port(&[
            "cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=0\n",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            "cmd=my_kvsname kvsname=kvs_9_0 rc=0\n",
            "cmd=appnum appnum=0 rc=0\n",
            "cmd=put_result rc=0\n",
            "cmd=barrier_out\n",
            "cmd=get_result rc=0 value=x%3Dy\n",
        ]);
        let mut socket = PmiSocket::dial(&port, "2").unwrap();
        assert_eq!(socket.introduce("2"), Ok((2, 4)));
        assert_eq!(
            negotiate(&mut socket, Ask::Prefer(Version::One)),
            Ok(Version::One)
        );
        let mut client = Client::new(socket).ok().unwrap();
        client.put("k", b"x=y").unwrap();
        client.fence().unwrap();
        assert_eq!(client.get("k").unwrap().as_deref(), Some(&b"x=y"[..]));
        let heard = fake.join().unwrap();
        assert_eq!(heard[0], "cmd=initack pmiid=2");
        assert_eq!(heard[5], "cmd=put kvsname=kvs_9_0 key=k value=x%3Dy");
    }

    #[test]
    fn a_port_that_does_not_know_the_rank_is_named() {
        let (port, fake) = serve_port(&["cmd=response_to_init rc=-1\n"]);
        let mut socket = PmiSocket::dial(&port, "2").unwrap();
        let e = socket.introduce("7").unwrap_err();
        assert!(
            e.contains("answered cmd=response_to_init (is PMI_ID=7 one of its processes?)"),
            "{e}"
        );
        fake.join().unwrap();
        let (port, fake) =
            serve_port(&["cmd=initack\ncmd=set size=2\ncmd=set rank=5\ncmd=set debug=0\n"]);
        let e = PmiSocket::dial(&port, "2")
            .unwrap()
            .introduce("5")
            .unwrap_err();
        assert!(e.contains("no rank below the job's size"), "{e}");
        fake.join().unwrap();
        // Nobody listening: the error names the variable and the address.
        let gone = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap().to_string();
        drop(gone);
        let e = PmiSocket::dial(&addr, "3").err().unwrap();
        assert!(
            e.starts_with(&format!(
                "cannot reach the PMI server at PMI_PORT={addr} (PMI_ID=3): "
            )),
            "{e}"
        );
        // An IPv6 address without brackets (here with its port forgotten) reads as a host
        // "fe80:" and a port 1: the error says how to write one.
        let e = PmiSocket::dial("fe80::1", "3").err().unwrap();
        assert!(e.ends_with(" (IPv6 needs [addr]:port)"), "{e}");
    }
}
