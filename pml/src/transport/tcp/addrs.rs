//! Which addresses a rank offers its peers (`--tcp-if`), how they travel through the key-value
//! service, and which of a peer's addresses to dial.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// An address of one of this host's interfaces, with its subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    pub interface: String,
    pub ip: IpAddr,
    pub prefix: u8,
}

/// One item of `--tcp-if`: an interface name (`eth0`) or a subnet (`10.0.0.0/8`, `::1/128`; a
/// bare address means just that address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Interface(String),
    Subnet(IpAddr, u8),
}

pub fn parse_selectors(list: &str) -> Result<Vec<Selector>, String> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let selector = match item.split_once('/') {
            Some((ip, prefix)) => {
                let ip: IpAddr = ip.parse().map_err(|_| {
                    format!("'{item}' in MPIRT_TCP_IF is not a subnet (ADDRESS/BITS)")
                })?;
                let prefix: u8 = prefix
                    .parse()
                    .ok()
                    .filter(|&p| p <= max_prefix(ip))
                    .ok_or_else(|| {
                        format!("'{item}' in MPIRT_TCP_IF has a prefix length out of range")
                    })?;
                Selector::Subnet(ip, prefix)
            }
            None => match item.parse::<IpAddr>() {
                Ok(ip) => Selector::Subnet(ip, max_prefix(ip)),
                Err(_) => Selector::Interface(item.to_string()),
            },
        };
        out.push(selector);
    }
    Ok(out)
}

fn max_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// Whether `a` and `b` share their first `prefix` bits (false across address families).
pub fn same_subnet(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    fn masked(bits: u128, width: u32, prefix: u8) -> u128 {
        let keep = u32::from(prefix).min(width);
        if keep == 0 {
            0
        } else {
            bits >> (width - keep)
        }
    }
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            masked(u32::from(a).into(), 32, prefix) == masked(u32::from(b).into(), 32, prefix)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            masked(u128::from(a), 128, prefix) == masked(u128::from(b), 128, prefix)
        }
        _ => false,
    }
}

impl Selector {
    fn takes(&self, a: &IfAddr) -> bool {
        match self {
            Selector::Interface(name) => &a.interface == name,
            Selector::Subnet(net, prefix) => same_subnet(*net, a.ip, *prefix),
        }
    }
}

/// Link-local IPv6 addresses need a scope id to be dialled, which another host's id does not
/// give; they are never offered.
fn link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// The addresses to offer: those the selectors take, or by default every address of every
/// interface that is up except loopback (loopback alone when there is nothing else).
pub fn choose(all: &[IfAddr], selectors: &[Selector]) -> Vec<IfAddr> {
    let usable = all.iter().filter(|a| !link_local_v6(a.ip));
    if !selectors.is_empty() {
        return usable
            .filter(|a| selectors.iter().any(|s| s.takes(a)))
            .cloned()
            .collect();
    }
    let external: Vec<IfAddr> = usable
        .clone()
        .filter(|a| !a.ip.is_loopback())
        .cloned()
        .collect();
    if external.is_empty() {
        usable.cloned().collect()
    } else {
        external
    }
}

/// This host's interface addresses (of interfaces that are up).
pub fn interfaces() -> io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cursor };
        cursor = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let interface = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr (checked non-null) and ifa_netmask point to sockaddrs of the family
        // named in sa_family, which selects the struct each is read as.
        let (ip, prefix) = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                    let prefix = if ifa.ifa_netmask.is_null() {
                        32
                    } else {
                        let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                        u32::from_be(m.sin_addr.s_addr).count_ones() as u8
                    };
                    (IpAddr::V4(ip), prefix)
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                    let prefix = if ifa.ifa_netmask.is_null() {
                        128
                    } else {
                        let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                        u128::from_be_bytes(m.sin6_addr.s6_addr).count_ones() as u8
                    };
                    (IpAddr::V6(ip), prefix)
                }
                _ => continue,
            }
        };
        out.push(IfAddr {
            interface,
            ip,
            prefix,
        });
    }
    // SAFETY: `head` came from getifaddrs and nothing borrows from the list any more.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// What a rank publishes: its listening port and the addresses it offers, as
/// `PORT ADDR/PREFIX ADDR/PREFIX ...`.
pub fn encode_endpoint(port: u16, addrs: &[IfAddr]) -> String {
    let mut s = port.to_string();
    for a in addrs {
        s += &format!(" {}/{}", a.ip, a.prefix);
    }
    s
}

/// A peer's published endpoint: the addresses to dial, each with the peer's subnet prefix.
pub fn decode_endpoint(text: &str) -> Result<Vec<(SocketAddr, u8)>, String> {
    let mut words = text.split_ascii_whitespace();
    let port: u16 = words
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("'{text}' is not a TCP endpoint (no port)"))?;
    words
        .map(|w| {
            let (ip, prefix) = w
                .split_once('/')
                .and_then(|(ip, p)| Some((ip.parse::<IpAddr>().ok()?, p.parse::<u8>().ok()?)))
                .ok_or_else(|| format!("'{w}' in TCP endpoint '{text}' is not ADDRESS/BITS"))?;
            Ok((SocketAddr::new(ip, port), prefix))
        })
        .collect()
}

/// The peer's addresses in the order to try them: first those on a subnet this rank is on,
/// then those of a family this rank has; loopback ones only for a peer on this host (on
/// another host they would reach this host instead).
pub fn dial_order(peer: &[(SocketAddr, u8)], mine: &[IfAddr], same_host: bool) -> Vec<SocketAddr> {
    let score = |(addr, _): &(SocketAddr, u8)| -> Option<u8> {
        if addr.ip().is_loopback() && !same_host {
            return None;
        }
        if mine.iter().any(|m| same_subnet(m.ip, addr.ip(), m.prefix)) {
            Some(0)
        } else if mine.iter().any(|m| m.ip.is_ipv4() == addr.is_ipv4()) {
            Some(1)
        } else {
            Some(2)
        }
    };
    let mut ranked: Vec<(u8, SocketAddr)> = peer
        .iter()
        .filter_map(|p| score(p).map(|s| (s, p.0)))
        .collect();
    ranked.sort_by_key(|&(s, _)| s);
    ranked.into_iter().map(|(_, a)| a).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifa(name: &str, ip: &str, prefix: u8) -> IfAddr {
        IfAddr {
            interface: name.into(),
            ip: ip.parse().unwrap(),
            prefix,
        }
    }

    fn host() -> Vec<IfAddr> {
        vec![
            ifa("lo", "127.0.0.1", 8),
            ifa("lo", "::1", 128),
            ifa("eth0", "10.77.0.11", 24),
            ifa("eth0", "fe80::1", 64),
            ifa("ib0", "192.168.5.3", 24),
        ]
    }

    #[test]
    fn default_offers_every_external_address_but_link_local() {
        let ips: Vec<String> = choose(&host(), &[])
            .iter()
            .map(|a| a.ip.to_string())
            .collect();
        assert_eq!(ips, ["10.77.0.11", "192.168.5.3"]);
        let lo_only = &host()[..2];
        assert_eq!(choose(lo_only, &[]).len(), 2);
    }

    #[test]
    fn selectors_take_interfaces_subnets_and_addresses() {
        let pick = |s: &str| -> Vec<String> {
            choose(&host(), &parse_selectors(s).unwrap())
                .iter()
                .map(|a| a.ip.to_string())
                .collect()
        };
        assert_eq!(pick("ib0"), ["192.168.5.3"]);
        assert_eq!(pick("10.0.0.0/8"), ["10.77.0.11"]);
        assert_eq!(pick("lo"), ["127.0.0.1", "::1"]);
        assert_eq!(pick("::1"), ["::1"]);
        assert_eq!(pick("eth0, ::1/128"), ["::1", "10.77.0.11"]);
        assert!(pick("wlan9").is_empty());
        assert!(parse_selectors("10.0.0.0/33").is_err());
        assert!(parse_selectors("nonsense/8").is_err());
    }

    #[test]
    fn subnets_compare_the_prefix_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_subnet(ip("10.77.0.11"), ip("10.77.0.200"), 24));
        assert!(!same_subnet(ip("10.77.0.11"), ip("10.77.1.11"), 24));
        assert!(same_subnet(ip("1.2.3.4"), ip("9.9.9.9"), 0));
        assert!(!same_subnet(ip("::1"), ip("127.0.0.1"), 0));
        assert!(same_subnet(ip("fd00::1"), ip("fd00::2"), 64));
    }

    #[test]
    fn endpoints_round_trip_and_reject_garbage() {
        let mine = choose(&host(), &[]);
        let text = encode_endpoint(4242, &mine);
        let back = decode_endpoint(&text).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].0, "10.77.0.11:4242".parse().unwrap());
        assert_eq!(back[0].1, 24);
        assert!(decode_endpoint("").is_err());
        assert!(decode_endpoint("70000 1.2.3.4/8").is_err());
        assert!(decode_endpoint("80 1.2.3.4").is_err());
    }

    #[test]
    fn dialling_prefers_a_shared_subnet_and_skips_foreign_loopback() {
        let peer =
            decode_endpoint("9 127.0.0.1/8 192.168.9.9/24 10.77.0.12/24 fd00::5/64").unwrap();
        let mine = choose(&host(), &[]);
        let order = dial_order(&peer, &mine, false);
        let order: Vec<String> = order.iter().map(|a| a.ip().to_string()).collect();
        assert_eq!(order, ["10.77.0.12", "192.168.9.9", "fd00::5"]);
        let local = dial_order(&peer, &host()[..1], true);
        assert_eq!(local[0].ip().to_string(), "127.0.0.1");
    }
}
