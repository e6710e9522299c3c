//! The pcapng blocks a capture of UDP datagrams needs: a section header, an interface
//! description per interface, and an enhanced packet block per datagram (its direction
//! and an optional comment as options). Little-endian, raw IP link type, nanosecond
//! timestamps. Format: the pcapng draft of the IETF OPSAWG (draft-ietf-opsawg-pcapng).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Duration;

use crate::frame::{FrameError, frame};

const SECTION_HEADER: u32 = 0x0A0D_0D0A;
const INTERFACE_DESCRIPTION: u32 = 1;
const ENHANCED_PACKET: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// Raw IP: each packet starts with an IPv4 or IPv6 header, told apart by its version.
const LINKTYPE_RAW: u16 = 101;

const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;

/// Which way a datagram went, as the capturing host saw it (the enhanced packet block's
/// `epb_flags` option: Wireshark shows it as `frame.packet_flags_direction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Received by the capturing host.
    Inbound,
    /// Sent by the capturing host.
    Outbound,
}

/// One datagram to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The interface it was seen on ([`Writer::add_interface`]'s index).
    pub interface: u32,
    /// When, since the Unix epoch (a simulation picks its own epoch).
    pub time: Duration,
    /// Sender.
    pub from: SocketAddr,
    /// Receiver.
    pub to: SocketAddr,
    /// The UDP payload: the POROUS datagram.
    pub payload: &'a [u8],
    /// Which way it went, if the capture knows.
    pub direction: Option<Direction>,
    /// A comment Wireshark shows with the packet (`frame.comment`): what became of it.
    pub comment: Option<&'a str>,
}

/// Appends `len` bytes of option value `value` under `code`, padded to four bytes.
fn option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    // An option's length field is 16 bits: a longer value is cut (only comments can be).
    let value = &value[..value.len().min(usize::from(u16::MAX) & !3)];
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Starts a block of `kind` in `out`; returns where it starts, for [`end_block`].
fn begin_block(out: &mut Vec<u8>, kind: u32) -> usize {
    let at = out.len();
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the total length, once known
    at
}

/// Ends the block begun at `at`: the closing option, and the total length at both ends.
fn end_block(out: &mut Vec<u8>, at: usize, with_options: bool) {
    if with_options {
        out.extend_from_slice(&OPT_END.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
    }
    let total = (out.len() - at + 4) as u32;
    out.extend_from_slice(&total.to_le_bytes());
    out[at + 4..at + 8].copy_from_slice(&total.to_le_bytes());
}

/// The section header block: byte order, version 1.0, section length unknown.
pub(crate) fn section_header(out: &mut Vec<u8>, application: &str) {
    let at = begin_block(out, SECTION_HEADER);
    out.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&u64::MAX.to_le_bytes());
    option(out, SHB_USERAPPL, application.as_bytes());
    end_block(out, at, true);
}

/// An interface description block: raw IP, no snapshot limit, nanosecond timestamps.
pub(crate) fn interface(out: &mut Vec<u8>, name: &str, description: &str) {
    let at = begin_block(out, INTERFACE_DESCRIPTION);
    out.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&0u32.to_le_bytes()); // snaplen 0: no limit
    option(out, IF_NAME, name.as_bytes());
    if !description.is_empty() {
        option(out, IF_DESCRIPTION, description.as_bytes());
    }
    option(out, IF_TSRESOL, &[9]);
    end_block(out, at, true);
}

/// Appends the enhanced packet block of `d` to `out`, its IP packet numbered `ip_id`
/// (IPv4's identification field). Returns the block's length; on an error nothing is
/// appended.
pub fn encode(out: &mut Vec<u8>, d: &Datagram<'_>, ip_id: u16) -> Result<usize, FrameError> {
    let at = begin_block(out, ENHANCED_PACKET);
    let nanos = d.time.as_nanos().min(u128::from(u64::MAX)) as u64;
    out.extend_from_slice(&d.interface.to_le_bytes());
    out.extend_from_slice(&((nanos >> 32) as u32).to_le_bytes());
    out.extend_from_slice(&(nanos as u32).to_le_bytes());
    let lengths = out.len();
    out.extend_from_slice(&[0; 8]);
    let len = match frame(out, d.from, d.to, d.payload, ip_id) {
        Ok(len) => len as u32,
        Err(e) => {
            out.truncate(at);
            return Err(e);
        }
    };
    out[lengths..lengths + 4].copy_from_slice(&len.to_le_bytes());
    out[lengths + 4..lengths + 8].copy_from_slice(&len.to_le_bytes());
    pad(out);
    let options = d.direction.is_some() || d.comment.is_some();
    if let Some(comment) = d.comment {
        option(out, OPT_COMMENT, comment.as_bytes());
    }
    if let Some(direction) = d.direction {
        let bits: u32 = match direction {
            Direction::Inbound => 1,
            Direction::Outbound => 2,
        };
        option(out, EPB_FLAGS, &bits.to_le_bytes());
    }
    end_block(out, at, options);
    Ok(out.len() - at)
}

/// Writes a pcapng capture of UDP datagrams to `W`, one block per call, unbuffered
/// (give it a `BufWriter`): the simulator's captures, and the blocks of a [`Recorder`].
///
/// [`Recorder`]: crate::Recorder
#[derive(Debug)]
pub struct Writer<W> {
    out: W,
    interfaces: u32,
    ip_id: u16,
    buf: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Starts a capture in `out` (its section header names `application`); add an
    /// interface before the first datagram.
    pub fn new(mut out: W, application: &str) -> io::Result<Self> {
        let mut buf = Vec::new();
        section_header(&mut buf, application);
        out.write_all(&buf)?;
        Ok(Self { out, interfaces: 0, ip_id: 0, buf })
    }

    /// Describes the next interface; returns its index for [`Datagram::interface`].
    pub fn add_interface(&mut self, name: &str, description: &str) -> io::Result<u32> {
        self.buf.clear();
        interface(&mut self.buf, name, description);
        self.out.write_all(&self.buf)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// Writes one datagram. An unknown interface, or a datagram no IP packet can carry
    /// (see [`FrameError`]), is an `InvalidInput` error and writes nothing.
    pub fn datagram(&mut self, d: &Datagram<'_>) -> io::Result<()> {
        if d.interface >= self.interfaces {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no such interface in the capture"));
        }
        self.buf.clear();
        encode(&mut self.buf, d, self.ip_id).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.ip_id = self.ip_id.wrapping_add(1);
        self.out.write_all(&self.buf)
    }

    /// Flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The output, flushed.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Walks the blocks: every block's two length fields agree, are multiples of four,
    /// and the blocks tile the file exactly. Returns the block types.
    fn blocks(file: &[u8]) -> Vec<(u32, &[u8])> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < file.len() {
            let kind = u32_at(file, at);
            let len = u32_at(file, at + 4) as usize;
            assert_eq!(len % 4, 0);
            assert_eq!(u32_at(file, at + len - 4) as usize, len, "trailing length of block at {at}");
            out.push((kind, &file[at + 8..at + len - 4]));
            at += len;
        }
        assert_eq!(at, file.len());
        out
    }

    #[test]
    fn a_capture_is_well_formed_blocks() {
        let mut w = Writer::new(Vec::new(), "test").unwrap();
        let i = w.add_interface("sim", "a simulated network").unwrap();
        let d = Datagram {
            interface: i,
            time: Duration::new(1_700_000_000, 123_456_789),
            from: "10.0.0.2:9000".parse().unwrap(),
            to: "10.0.0.1:9000".parse().unwrap(),
            payload: b"abcde",
            direction: Some(Direction::Outbound),
            comment: Some("lost"),
        };
        w.datagram(&d).unwrap();
        w.datagram(&Datagram { comment: None, direction: None, ..d }).unwrap();
        assert!(w.datagram(&Datagram { interface: 1, ..d }).is_err());
        let file = w.into_inner().unwrap();
        let b = blocks(&file);
        assert_eq!(b.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [SECTION_HEADER, 1, 6, 6]);
        assert_eq!(u32_at(b[0].1, 0), BYTE_ORDER_MAGIC);
        let epb = b[2].1;
        let nanos = (u64::from(u32_at(epb, 4)) << 32) | u64::from(u32_at(epb, 8));
        assert_eq!(nanos, 1_700_000_000_123_456_789);
        assert_eq!(u32_at(epb, 12), 20 + 8 + 5);
        assert_eq!(u32_at(epb, 16), 20 + 8 + 5);
        // Packet data padded to 36, then the comment, the flags, the end of options.
        let opts = &epb[20 + 36..];
        assert_eq!(&opts[..4], &[1, 0, 4, 0]);
        assert_eq!(&opts[4..8], b"lost");
        assert_eq!(&opts[8..16], &[2, 0, 4, 0, 2, 0, 0, 0]);
        assert_eq!(&opts[16..], &[0, 0, 0, 0]);
        // No options: no end-of-options either.
        assert_eq!(b[3].1.len(), 20 + 36);
    }
}
