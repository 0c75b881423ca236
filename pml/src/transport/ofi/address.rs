//! Whether this rank's endpoint still has its IP address, on providers over IP sockets
//! (`udp`, `tcp` and the layers over them: udp;ofi_rxd, tcp;ofi_rxm). Such an endpoint is
//! bound to one interface's address: libfabric offers a fabric per interface and the
//! transport takes the first, which with pml's SSH test hosts up is their bridge (`rsbr0`),
//! not loopback. When that address goes away under a running job (the interface is deleted
//! or loses it: `ssh-hosts down` deletes the bridge), udp;ofi_rxd only logs each failed send
//! and sends it again, for minutes (its retransmission gives up after 50 tries, up to 4 s
//! apart), and reports nothing to the ranks: with a veth address deleted 1.5 s into pml's
//! engine test over udp;ofi_rxd, both ranks still waited 60 s later, asleep, and never
//! failed. So a wait that has delivered nothing for a while checks the address (a fresh
//! socket's bind to it fails once no interface has it) and fails naming it. An interface
//! taken down keeps its IPv4 addresses (IPv6 ones go), so that is not caught.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};

/// The IP address in `name`, an endpoint's name as `fi_getname` gave it, where `provider`
/// runs over IP sockets (its first layer is `udp` or `tcp`, which name endpoints by a
/// `sockaddr_in` or `sockaddr_in6`), with port 0. `None` for other providers (shm, verbs,
/// efa and cxi name endpoints their own way), for a name too short for its family, and for
/// the wildcard address, which no interface loses.
pub(super) fn socket_address(provider: &str, name: &[u8]) -> Option<SocketAddr> {
    if !matches!(provider.split(';').next(), Some("udp" | "tcp")) {
        return None;
    }
    let family = i32::from(u16::from_ne_bytes(name.get(..2)?.try_into().ok()?));
    let address = match family {
        libc::AF_INET => {
            let ip: [u8; 4] = name.get(4..8)?.try_into().ok()?;
            SocketAddr::new(Ipv4Addr::from(ip).into(), 0)
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = name.get(8..24)?.try_into().ok()?;
            let scope = u32::from_ne_bytes(name.get(24..28)?.try_into().ok()?);
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), 0, 0, scope))
        }
        _ => return None,
    };
    (!address.ip().is_unspecified()).then_some(address)
}

/// Why `address` is no longer this host's, or `None` while a socket still binds to it. A
/// bind refused for another cause (no file descriptor left) says nothing of the address:
/// `None` too.
pub(super) fn lost(address: SocketAddr) -> Option<std::io::Error> {
    match UdpSocket::bind(address) {
        Err(e)
            if e.kind() == ErrorKind::AddrNotAvailable
                || e.raw_os_error() == Some(libc::ENODEV) =>
        {
            Some(e)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `sockaddr_in` for `ip`, port 4660, as `fi_getname` writes one.
    fn sockaddr_in(ip: [u8; 4]) -> Vec<u8> {
        let mut name = vec![0u8; 16];
        name[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        name[2..4].copy_from_slice(&4660u16.to_be_bytes());
        name[4..8].copy_from_slice(&ip);
        name
    }

    #[test]
    fn ip_providers_name_their_endpoints_by_socket_address_others_do_not() {
        let local = sockaddr_in([127, 0, 0, 1]);
        let expected = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(socket_address("udp;ofi_rxd", &local), expected);
        assert_eq!(socket_address("tcp;ofi_rxm", &local), expected);
        assert_eq!(socket_address("udp", &local), expected);
        for other in ["shm", "verbs;ofi_rxm", "efa", "cxi", "sockets"] {
            assert_eq!(socket_address(other, &local), None, "{other}");
        }
        assert_eq!(
            socket_address("udp;ofi_rxd", &local[..6]),
            None,
            "too short"
        );
        assert_eq!(
            socket_address("udp;ofi_rxd", &sockaddr_in([0, 0, 0, 0])),
            None,
            "the wildcard"
        );
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[8..24].copy_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 7).octets());
        v6[24..28].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(
            socket_address("udp;ofi_rxd", &v6),
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 7),
                0,
                0,
                3
            )))
        );
        assert_eq!(socket_address("udp;ofi_rxd", &v6[..24]), None, "no scope");
    }

    /// Loopback is this host's; an address of the documentation's range (RFC 5737), which no
    /// interface here has, is lost, and the error says so.
    #[test]
    fn an_address_no_interface_has_is_lost() {
        assert!(lost(SocketAddr::from(([127, 0, 0, 1], 0))).is_none());
        let nonlocal_bind = std::fs::read_to_string("/proc/sys/net/ipv4/ip_nonlocal_bind")
            .is_ok_and(|v| v.trim() != "0");
        if nonlocal_bind {
            println!("skipped the lost address: net.ipv4.ip_nonlocal_bind lets any address bind");
            return;
        }
        let e = lost(SocketAddr::from(([198, 51, 100, 7], 0))).expect("198.51.100.7 is lost");
        assert_eq!(e.kind(), ErrorKind::AddrNotAvailable, "{e}");
    }

    /// A link-local IPv6 address is lost with its interface, whose index (the scope) no
    /// longer names one: the bind fails with ENODEV, not EADDRNOTAVAIL.
    #[test]
    fn a_link_local_address_of_an_interface_gone_is_lost() {
        if let Err(e) = UdpSocket::bind("[::1]:0") {
            println!("skipped: no IPv6 loopback here to bind ({e})");
            return;
        }
        let gone = i32::MAX as u32;
        let link_local = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 7);
        let e = lost(SocketAddr::V6(SocketAddrV6::new(link_local, 0, 0, gone)))
            .expect("an address on no interface is lost");
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
    }
}
