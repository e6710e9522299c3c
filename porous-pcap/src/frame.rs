//! IPv4 and IPv6 headers with a UDP header around a datagram, as a raw IP capture holds
//! them: every length and checksum correct, so Wireshark and tshark decode them as any
//! captured UDP traffic (and mark nothing as bad).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Length of the UDP header.
const UDP_HEADER: usize = 8;
/// Length of an IPv4 header without options.
const IPV4_HEADER: usize = 20;
/// The largest UDP payload an IPv4 packet holds (its total length is 16 bits).
pub const MAX_IPV4_PAYLOAD: usize = 65_535 - IPV4_HEADER - UDP_HEADER;
/// The largest UDP payload an IPv6 packet holds without a jumbogram.
pub const MAX_IPV6_PAYLOAD: usize = 65_535 - UDP_HEADER;

const PROTO_UDP: u8 = 17;
const TTL: u8 = 64;

/// Why a datagram cannot be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The two addresses are of different families (an IPv4 sender and an IPv6
    /// receiver): no IP packet carries that. An IPv4-mapped IPv6 address counts as IPv4.
    MixedFamilies,
    /// The payload is larger than one IP packet of its family holds.
    TooLarge {
        /// The payload's length.
        len: usize,
    },
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::MixedFamilies => f.write_str("sender and receiver are of different IP families"),
            Self::TooLarge { len } => write!(f, "a {len}-byte datagram does not fit one IP packet"),
        }
    }
}

impl std::error::Error for FrameError {}

/// The address as the IP family it travels in: an IPv4-mapped IPv6 address (what a
/// dual-stack socket reports for an IPv4 peer) is IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Appends to `out` an IP packet carrying `payload` from `from` to `to` in UDP: an IPv4
/// header (no options, don't-fragment, TTL 64, the given `id`) or an IPv6 header (hop
/// limit 64), then the UDP header with its checksum. Returns the packet's length.
pub fn frame(
    out: &mut Vec<u8>,
    from: SocketAddr,
    to: SocketAddr,
    payload: &[u8],
    id: u16,
) -> Result<usize, FrameError> {
    let start = out.len();
    let udp_len = UDP_HEADER + payload.len();
    match (canonical(from.ip()), canonical(to.ip())) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            if payload.len() > MAX_IPV4_PAYLOAD {
                return Err(FrameError::TooLarge { len: payload.len() });
            }
            ipv4_header(out, src, dst, (IPV4_HEADER + udp_len) as u16, id);
            let pseudo = sum(&src.octets()) + sum(&dst.octets()) + u32::from(PROTO_UDP) + udp_len as u32;
            udp(out, from.port(), to.port(), payload, pseudo);
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            if payload.len() > MAX_IPV6_PAYLOAD {
                return Err(FrameError::TooLarge { len: payload.len() });
            }
            out.extend_from_slice(&0x6000_0000u32.to_be_bytes());
            out.extend_from_slice(&(udp_len as u16).to_be_bytes());
            out.extend_from_slice(&[PROTO_UDP, TTL]);
            out.extend_from_slice(&src.octets());
            out.extend_from_slice(&dst.octets());
            let len = udp_len as u32;
            let pseudo = sum(&src.octets()) + sum(&dst.octets()) + (len >> 16) + (len & 0xFFFF) + u32::from(PROTO_UDP);
            udp(out, from.port(), to.port(), payload, pseudo);
        }
        _ => return Err(FrameError::MixedFamilies),
    }
    Ok(out.len() - start)
}

fn ipv4_header(out: &mut Vec<u8>, src: Ipv4Addr, dst: Ipv4Addr, total: u16, id: u16) {
    let at = out.len();
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&0x4000u16.to_be_bytes()); // don't fragment, offset 0
    out.extend_from_slice(&[TTL, PROTO_UDP, 0, 0]);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&dst.octets());
    let checksum = fold(sum(&out[at..])).to_be_bytes();
    out[at + 10..at + 12].copy_from_slice(&checksum);
}

/// The UDP header and payload; `pseudo` is the sum of the IP pseudo-header's words.
fn udp(out: &mut Vec<u8>, src_port: u16, dst_port: u16, payload: &[u8], pseudo: u32) {
    let at = out.len();
    let len = (UDP_HEADER + payload.len()) as u16;
    out.extend_from_slice(&src_port.to_be_bytes());
    out.extend_from_slice(&dst_port.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    let checksum = fold_with(pseudo, &out[at..]);
    // A computed zero is sent as all ones: zero means "no checksum" in UDP over IPv4 and
    // is forbidden over IPv6 (RFC 768, RFC 8200).
    let checksum = if checksum == 0 { 0xFFFF } else { checksum };
    out[at + 6..at + 8].copy_from_slice(&checksum.to_be_bytes());
}

/// The ones'-complement sum of `bytes` as big-endian 16-bit words (an odd last byte
/// padded with zero), not yet folded.
fn sum(bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(2);
    let mut s: u32 = 0;
    for w in &mut words {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        s += u32::from(*last) << 8;
    }
    s
}

/// The Internet checksum of `initial` (a partial sum) and `bytes`.
fn fold_with(initial: u32, bytes: &[u8]) -> u16 {
    // 65,535 words of at most 0xFFFF each fit a u64 with room: no overflow.
    let mut words = bytes.chunks_exact(2);
    let mut s = u64::from(initial);
    for w in &mut words {
        s += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        s += u64::from(*last) << 8;
    }
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}

/// The Internet checksum of a partial sum.
fn fold(mut s: u32) -> u16 {
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}

/// The unspecified address of `addr`'s family, with its port: what a capture shows for a
/// socket bound to a wildcard address.
pub fn unspecified_like(addr: SocketAddr) -> SocketAddr {
    match canonical(addr.ip()) {
        IpAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port())),
        IpAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, addr.port())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verifying a checksum: the sum over the covered words, checksum included, folds to
    /// zero.
    fn verifies(initial: u32, bytes: &[u8]) -> bool {
        fold_with(initial, bytes) == 0
    }

    #[test]
    fn ipv4_udp_headers_are_well_formed() {
        let from: SocketAddr = "10.0.0.2:9000".parse().unwrap();
        let to: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let payload = b"hello, checksums";
        let mut out = Vec::new();
        assert_eq!(frame(&mut out, from, to, payload, 7).unwrap(), 20 + 8 + payload.len());
        assert_eq!(out[0], 0x45);
        assert_eq!(u16::from_be_bytes([out[2], out[3]]) as usize, out.len());
        assert_eq!(u16::from_be_bytes([out[4], out[5]]), 7);
        assert_eq!(out[9], 17);
        assert!(verifies(0, &out[..20]), "IPv4 header checksum");
        let pseudo = sum(&out[12..20]) + 17 + (8 + payload.len()) as u32;
        assert!(verifies(pseudo, &out[20..]), "UDP checksum");
        assert_eq!(&out[20..22], &9000u16.to_be_bytes());
        assert_eq!(&out[22..24], &7000u16.to_be_bytes());
        assert_eq!(&out[28..], payload);
    }

    #[test]
    fn ipv6_udp_headers_are_well_formed() {
        let from: SocketAddr = "[fd00::2]:9001".parse().unwrap();
        let to: SocketAddr = "[fd00::1]:9001".parse().unwrap();
        let payload = [0xA5u8; 33]; // odd: the last byte is padded in the sum
        let mut out = Vec::new();
        frame(&mut out, from, to, &payload, 0).unwrap();
        assert_eq!(out.len(), 40 + 8 + 33);
        assert_eq!(out[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([out[4], out[5]]), 41);
        assert_eq!((out[6], out[7]), (17, 64));
        let pseudo = sum(&out[8..40]) + 41 + 17;
        assert!(verifies(pseudo, &out[40..]), "UDP checksum");
    }

    #[test]
    fn a_checksum_of_zero_is_sent_as_all_ones() {
        // Find a payload whose checksum computes to zero: the field then holds 0xFFFF,
        // which verifies as well (ones' complement has two zeros).
        let from: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let to: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let found = (0..=u16::MAX).find_map(|w| {
            let mut out = Vec::new();
            frame(&mut out, from, to, &w.to_be_bytes(), 0).unwrap();
            (out[26..28] == [0xFF, 0xFF]).then_some(out)
        });
        let out = found.expect("some two-byte payload sums to zero");
        let pseudo = sum(&out[12..20]) + 17 + 10;
        assert!(verifies(pseudo, &out[20..]));
    }

    #[test]
    fn mapped_addresses_frame_as_ipv4_and_mixed_families_are_refused() {
        let mapped: SocketAddr = "[::ffff:10.0.0.2]:9000".parse().unwrap();
        let v4: SocketAddr = "10.0.0.1:9000".parse().unwrap();
        let v6: SocketAddr = "[fd00::1]:9000".parse().unwrap();
        let mut out = Vec::new();
        frame(&mut out, mapped, v4, b"x", 0).unwrap();
        assert_eq!(out[0], 0x45);
        assert_eq!(frame(&mut out, v4, v6, b"x", 0), Err(FrameError::MixedFamilies));
        let big = vec![0; MAX_IPV4_PAYLOAD + 1];
        assert_eq!(frame(&mut out, v4, v4, &big, 0), Err(FrameError::TooLarge { len: big.len() }));
        assert!(frame(&mut out, v6, v6, &big, 0).is_ok());
        assert_eq!(unspecified_like(mapped), "0.0.0.0:9000".parse().unwrap());
    }
}
