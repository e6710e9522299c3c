//! Packet captures of POROUS traffic, for Wireshark and tshark.
//!
//! POROUS runs over UDP, so a capture is a file of UDP datagrams. This crate writes
//! them in [pcapng], each datagram framed as the IP packet that carried it (an IPv4 or
//! IPv6 header and a UDP header, every length and checksum correct), so any tool that
//! reads captures decodes them as UDP, and POROUS's Wireshark dissector
//! (`tools/wireshark/porous.lua` in the repository) decodes what is inside.
//!
//! - [`Writer`]: writes a capture to any [`std::io::Write`], one datagram a call, each
//!   with an optional comment and direction. The simulator's captures are written with
//!   it: `cargo run --release -p porous-proto --features sim --example capture -- FILE`
//!   writes one of a simulated lossy game, every datagram with its fate (delivered at
//!   what time, lost, duplicated, corrupted) as its comment.
//! - [`Recorder`]: a capture of a real run, written by a thread of its own and bounded in
//!   size, so the sockets' path never waits on a disk. `porous-udp` records every
//!   datagram its sockets send and receive into one when `POROUS_CAPTURE` names a file
//!   ([`Recorder::from_env`]).
//!
//! The crate has no dependencies: pcapng needs three block types here (a section header,
//! an interface description, enhanced packet blocks), which are less code than an
//! adapter to a general pcap crate, and no such crate frames UDP in IP headers.
//!
//! ```
//! use std::time::Duration;
//! use porous_pcap::{Datagram, Direction, Writer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut capture = Writer::new(Vec::new(), "my test")?;
//! let sim = capture.add_interface("sim", "a simulated network")?;
//! capture.datagram(&Datagram {
//!     interface: sim,
//!     time: Duration::from_millis(1_500),
//!     from: "10.0.0.2:9000".parse()?,
//!     to: "10.0.0.1:9000".parse()?,
//!     payload: &[0x04, 0x01, 0, 0, 0, 0],
//!     direction: Some(Direction::Outbound),
//!     comment: Some("lost"),
//! })?;
//! let bytes = capture.into_inner()?; // a pcapng file Wireshark opens
//! assert_eq!(&bytes[..4], &[0x0A, 0x0D, 0x0D, 0x0A]);
//! # Ok(())
//! # }
//! ```
//!
//! [pcapng]: https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcapng/
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod frame;
mod pcapng;
mod recorder;

pub use frame::{FrameError, MAX_IPV4_PAYLOAD, MAX_IPV6_PAYLOAD, frame, unspecified_like};
pub use pcapng::{Datagram, Direction, Writer, encode};
pub use recorder::{BATCH, BATCH_AGE, DEFAULT_LIMIT, QUEUE, Recorder, RecorderStats};
