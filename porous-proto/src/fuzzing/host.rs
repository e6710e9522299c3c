//! The `host` target: two real hosts, a client and a server, joined by a network the
//! input controls, with strangers and a forger on the side.
//!
//! The input is a script of steps: the clock; deliveries, losses, duplicates, reorderings,
//! replays and corruptions of the datagrams in flight; datagrams from strangers (raw
//! bytes, connect requests, answers to the server's replies); data datagrams forged by an
//! attacker who knows the connection's keys (the strongest attacker there is: an on-path
//! observer, or a hostile peer); and API calls on both hosts: sends, connects with connect
//! data (sometimes too much), disconnections with application codes, and, when the script
//! makes the hosts decide on requests themselves (`manual_accept`), accepts and rejects
//! with codes. Channel 2 is unordered in some scripts. After every step the target checks
//! what must always hold:
//!
//! - nothing panics;
//! - peers, pending handshakes, reassembly memory, queued bytes and the memory a host
//!   reports stay within what the configuration allows;
//! - no datagram to an address without a connection is larger than a connect request,
//!   and a stranger that has not proven it receives (by acknowledging a reply) never gets
//!   more bytes in total than it sent (no amplification, at once or over time);
//! - while no forged datagram has reached a host, what it delivers keeps the guarantees:
//!   per channel, nothing duplicated or reordered, reliable packets exactly once and in
//!   order (on an unordered channel: exactly once, in any order); connect data arrives as
//!   the other host sent it; a disconnection or rejection code is one the other host's
//!   application gave (or 0);
//! - at the end, with the network healed and no forger involved, every reliable packet
//!   sent on a live connection arrives: nothing stalls forever.
//!
//! The `host_secure` target runs the same scripts with both hosts in secure mode
//! (`HostConfig::secure`): the client connects with connect tokens; strangers' requests
//! carry valid, forged, expired and wrong-server tokens (and strangers with a valid one
//! answer the server's sealed replies); the forger, who has no keys in secure mode, seals
//! its datagrams with a wrong key, and a corrupted datagram cannot be resealed. None of
//! these taints a host: the delivery guarantees must hold through all of them. Replies to
//! an unproven address may be as large as the smallest sealed request.

use std::collections::{BTreeMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;
use web_time::Instant;

use arbitrary::{Arbitrary, Unstructured};
use bytes::{Bytes, BytesMut};
use rand_pcg::Pcg32;

use super::wire::{ack_ranges, arbitrary_request};
use crate::channel::ENTRY_OVERHEAD;
use crate::config::{ChannelConfig, HostConfig, SecureConfig, SequenceStart};
use crate::event::{DisconnectReason, Event, PeerId, Transmit};
use crate::host::Host;
use crate::seq::{PACKET_WINDOW, SeqSpace};
use crate::sim::{Held, LinkConditions, Network, seeded_rng};
use crate::stats::PeerState;
use crate::token::{self, ConnectToken, PrivateKey, TokenParams};
use crate::wire::secure::{self as sealed, SEALED_REQUEST_SIZE, SecretKey, Use};
use crate::wire::{
    self, CHECK_LEN, ConnectRequest, Control, DataHeader, DataWriter, Fragment, Key, MAX_GRANULES, Message,
    MessageKind, SendMode,
};

const CLIENT: SocketAddr = addr(1, 5000);
const SERVER: SocketAddr = addr(2, 6000);
const STRANGERS: u8 = 8;
const CHANNELS: usize = 3;
/// The channel that is unordered in scripts that say so.
const UNORDERED: usize = 2;
/// Requests reported to a side and not yet decided by the script, oldest dropped beyond.
const MAX_REQUESTS: usize = 16;
/// Steps per script: enough to fill every cap, few enough for thousands of runs a second.
const MAX_STEPS: usize = 400;
/// Datagrams held per direction; the oldest are lost beyond it.
const MAX_IN_FLIGHT: usize = 256;
/// Simulated time the healed network gets to deliver everything at the end.
const HEAL_FOR: Duration = Duration::from_secs(60);

const fn addr(host: u8, port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, host), port))
}

/// Secure mode: the backend's key, and the Unix time at the script's start.
const PRIVATE_KEY: PrivateKey = PrivateKey::from_bytes([0x5E; 32]);
const UNIX: u64 = 1_800_000_000;
/// Secure mode: the client id of every token the backend makes.
const CLIENT_ID: u64 = 9;

fn stranger_addr(i: u8) -> SocketAddr {
    addr(100 + i % STRANGERS, 7000)
}

/// One of the two hosts.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    fn index(self) -> usize {
        self as usize
    }

    fn addr(self) -> SocketAddr {
        match self {
            Self::Client => CLIENT,
            Self::Server => SERVER,
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Client => Self::Server,
            Self::Server => Self::Client,
        }
    }
}

/// A step of the script. Network steps name the side the datagram travels to.
#[derive(Clone, Debug)]
pub enum Step {
    /// Advance the clock by this many milliseconds.
    Advance(u8),
    /// Advance the clock by this many tenths of a second (timeouts live here).
    Wait(u8),
    Deliver(Side),
    DeliverAll,
    Drop(Side),
    Duplicate(Side),
    Reorder(Side),
    /// Flip bits of the next datagram and deliver it; `reseal` recomputes its check as the
    /// forger would.
    Corrupt {
        to: Side,
        at: u16,
        xor: u8,
        reseal: bool,
    },
    /// Deliver again the datagram delivered last.
    Replay(Side),
    /// Arbitrary bytes, from the other host's address or from a stranger.
    Raw {
        to: Side,
        stranger: Option<u8>,
        bytes: Vec<u8>,
    },
    /// A data datagram forged with the connection's keys, from the other host's address.
    Forge {
        to: Side,
        datagram: Forged,
    },
    /// A connect request from a stranger.
    Request {
        stranger: u8,
        request: Request,
    },
    /// A stranger answers the server's last reply to it (acknowledging, or repeating its
    /// request with the cookie it was challenged with).
    Answer {
        stranger: u8,
    },
    Send {
        from: Side,
        channel: u8,
        len: u16,
        mode: SendMode,
    },
    /// Connect with `2 * data` bytes of connect data (beyond what a request carries, at
    /// times).
    Connect {
        side: Side,
        data: u8,
    },
    Disconnect {
        side: Side,
        now: bool,
        code: u32,
    },
    /// Accept or reject (with `code`) the oldest request reported to `side` (with
    /// `manual_accept`; perhaps gone or decided already).
    Decide {
        side: Side,
        accept: bool,
        code: u32,
    },
}

impl<'a> Arbitrary<'a> for Step {
    /// Weighted towards what makes progress (sending and delivering), so that both a
    /// fuzzer and a replay of random bytes reach deep states quickly.
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0u8..=99)? {
            0..=29 => {
                let from = u.arbitrary()?;
                // One channel past the last, to exercise the error.
                let channel = u.int_in_range(0..=CHANNELS as u8)?;
                let len = if u.arbitrary()? { u.int_in_range(0..=200)? } else { u.int_in_range(0..=14_000)? };
                Self::Send { from, channel, len, mode: u.arbitrary()? }
            }
            30..=44 => Self::Deliver(u.arbitrary()?),
            45..=54 => Self::DeliverAll,
            55..=62 => Self::Advance(u.arbitrary()?),
            63..=65 => Self::Wait(u.arbitrary()?),
            66..=69 => Self::Drop(u.arbitrary()?),
            70..=72 => Self::Duplicate(u.arbitrary()?),
            73..=75 => Self::Reorder(u.arbitrary()?),
            76..=78 => {
                Self::Corrupt { to: u.arbitrary()?, at: u.arbitrary()?, xor: u.arbitrary()?, reseal: u.arbitrary()? }
            }
            79..=80 => Self::Replay(u.arbitrary()?),
            81..=83 => Self::Raw { to: u.arbitrary()?, stranger: u.arbitrary()?, bytes: u.arbitrary()? },
            84..=89 => Self::Forge { to: u.arbitrary()?, datagram: u.arbitrary()? },
            90..=92 => Self::Request { stranger: u.arbitrary()?, request: u.arbitrary()? },
            93..=95 => Self::Answer { stranger: u.arbitrary()? },
            96..=97 => Self::Decide { side: u.arbitrary()?, accept: u.arbitrary()?, code: u.arbitrary()? },
            98 => Self::Connect { side: u.arbitrary()?, data: u.arbitrary()? },
            _ => Self::Disconnect { side: u.arbitrary()?, now: u.arbitrary()?, code: u.arbitrary()? },
        })
    }
}

/// A connect request with arbitrary fields (see `arbitrary_request`).
#[derive(Clone, Debug)]
pub struct Request(ConnectRequest);

impl<'a> Arbitrary<'a> for Request {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        arbitrary_request(u).map(Self)
    }
}

/// A data datagram, its ids relative to what the receiver expects so that they land in
/// (or near) its windows.
#[derive(Arbitrary, Clone, Debug)]
pub struct Forged {
    frame: Option<i16>,
    ping: Option<u8>,
    ping_ack: Option<u8>,
    /// How far back from the newest frame the receiver sent the acknowledgements start,
    /// then (gap, length) of each range.
    acks: Option<(u16, Vec<(u8, u8)>)>,
    messages: Vec<ForgedMessage>,
}

#[derive(Arbitrary, Clone, Debug)]
pub struct ForgedMessage {
    kind: MessageKind,
    channel: u8,
    offset: i16,
    dependency: u16,
    /// (count, index) of a fragment, in granules; a whole packet otherwise. The length
    /// then mostly makes whole granules (or ends the packet), now and then not.
    fragment: Option<(u16, u16)>,
    len: u16,
}

/// A whole input: the configuration's free choices, then the steps.
#[derive(Debug)]
pub struct HostScript {
    near_wrap: bool,
    small_mtu: bool,
    challenge_above: u8,
    /// Both hosts report requests and wait for `Step::Decide`.
    manual_accept: bool,
    /// Channel 2 is unordered on both hosts.
    unordered: bool,
    steps: Vec<Step>,
}

impl<'a> Arbitrary<'a> for HostScript {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let near_wrap = u.arbitrary()?;
        let small_mtu = u.arbitrary()?;
        let challenge_above = u.int_in_range(0..=3)?;
        let (manual_accept, unordered) = (u.arbitrary()?, u.arbitrary()?);
        let mut steps = Vec::new();
        while !u.is_empty() && steps.len() < MAX_STEPS {
            steps.push(u.arbitrary()?);
        }
        Ok(Self { near_wrap, small_mtu, challenge_above, manual_accept, unordered, steps })
    }
}

/// Small caps, so a script reaches every one; short timers, so it reaches them too.
/// Secure mode: the client's and the server's configurations differ in `secure` only.
fn configs(script: &HostScript, secure: Option<Instant>) -> [HostConfig; 2] {
    let c = config(script);
    let Some(t0) = secure else { return [c.clone(), c] };
    let mut client = c.clone();
    client.secure = Some(SecureConfig::client());
    let mut server = c;
    server.secure = Some(SecureConfig::server(PRIVATE_KEY, vec![SERVER], t0, UNIX));
    [client, server]
}

fn config(script: &HostScript) -> HostConfig {
    let mut c = HostConfig {
        max_peers: 6,
        max_pending: 3,
        challenge_above: usize::from(script.challenge_above),
        manual_accept: script.manual_accept,
        ..HostConfig::default()
    };
    c.peer.channels = vec![ChannelConfig { max_queued_bytes: 24 * 1024, ..ChannelConfig::default() }; CHANNELS];
    c.peer.channels[UNORDERED].unordered = script.unordered;
    c.peer.mtu = if script.small_mtu { 300 } else { 1200 };
    c.peer.max_packet_size = 12 * 1024;
    c.peer.max_reassembly_bytes = 16 * 1024;
    c.peer.timeout = Duration::from_secs(3);
    c.peer.connect_timeout = Duration::from_secs(2);
    c.peer.disconnect_timeout = Duration::from_secs(1);
    c.peer.linger = Duration::from_secs(1);
    c.peer.ping_interval = Duration::from_millis(250);
    c.peer.connect_retry = Duration::from_millis(100);
    if script.near_wrap {
        c.sequence_start = SequenceStart::Fixed { frame: u32::MAX - 40, packet: SeqSpace::PACKET.sub(0, 30) };
    }
    c
}

/// What the configuration allows one peer to hold.
struct Caps {
    /// The connections' granule (plain mode), which forged fragments are cut in.
    granule: usize,
    max_peers: usize,
    max_pending: usize,
    reassembly: usize,
    queued: usize,
    peer_memory: usize,
}

impl Caps {
    fn of(c: &HostConfig) -> Self {
        let p = &c.peer;
        // A fragmented packet reserves whole granules and a bitmap of them; a sealed
        // connection's granule is at most a few bytes smaller.
        let granule = wire::granule(p.mtu);
        let smallest = wire::granule_of(wire::fragment_payload(p.mtu) - wire::secure::SEAL_EXTRA);
        let bitmap = p.max_packet_size.div_ceil(smallest).div_ceil(64) * 8;
        let packet = p.max_packet_size + granule + bitmap + ENTRY_OVERHEAD;
        let channels = p.channels.len();
        // The channel docs' bound: the cap, plus per channel three packets and a datagram.
        let reassembly = p.max_reassembly_bytes + channels * (3 * packet + p.mtu);
        let queued = p.channels.iter().map(|c| c.max_queued_bytes).sum();
        Self {
            max_peers: c.max_peers,
            max_pending: c.max_pending,
            reassembly,
            queued,
            peer_memory: p.memory_limit(),
            granule,
        }
    }
}

/// A stranger's view of its handshake with the server, and the bytes each way, per host
/// (indexed by [`Side::index`]), until it proves it receives (by acknowledging the
/// server's reply; it never does to the client, which takes no requests from it).
#[derive(Clone, Debug, Default)]
struct Stranger {
    request: Option<ConnectRequest>,
    reply: Option<Control<'static>>,
    proven: bool,
    bytes_in: [usize; 2],
    bytes_out: [usize; 2],
    /// Secure mode: the token its requests carry, and how many it sent with it.
    token: Option<(ConnectToken, u32)>,
}

/// A stranger's connect data: 0 to 256 bytes taken from its request's nonce.
fn connect_data(req: &ConnectRequest) -> Vec<u8> {
    let len = req.nonce as usize % (wire::MAX_CONNECT_DATA + 1);
    req.nonce.to_le_bytes().into_iter().cycle().take(len).collect()
}

/// What one side has sent on one connection, for checking what the other delivers.
#[derive(Debug, Default)]
struct Book {
    next: [u32; CHANNELS],
    delivered: [Option<u32>; CHANNELS],
    reliable: [VecDeque<u32>; CHANNELS],
}

/// A side's connect data of `len` bytes: its own pattern, so the receiver can tell it
/// arrived as sent.
fn connect_payload(side: Side, len: usize) -> Vec<u8> {
    (0..len).map(|i| (side as u8 + 1) ^ (i as u8).wrapping_mul(31)).collect()
}

/// The packets a side sends name themselves: sender side, connection number, channel,
/// sequence number, mode. Then filler up to the length asked for.
const HEADER: usize = 11;

fn mode_byte(m: SendMode) -> u8 {
    match m {
        SendMode::Reliable => 0,
        SendMode::Unreliable => 1,
        SendMode::Passive => 2,
    }
}

/// The two hosts on a simulated network whose two links are held: the script is the
/// network, and moves every datagram between them by hand.
struct World {
    net: Network,
    hosts: [Host; 2],
    caps: Caps,
    /// Per receiving side, the datagram it was handed last (by `Step::Deliver`), to replay.
    last: [Option<Bytes>; 2],
    strangers: [Stranger; STRANGERS as usize],
    /// Per sending side: the connection number, and the peer id it was for.
    connection: [(u32, Option<PeerId>); 2],
    /// Per sending side and connection number.
    books: [BTreeMap<u32, Book>; 2],
    /// Whether a forged datagram has reached the side.
    tainted: [bool; 2],
    /// Per side, the requests reported to it (`Event::ConnectRequest`) for `Step::Decide`.
    requests: [VecDeque<PeerId>; 2],
    /// Per side, the codes its application gave (disconnections and rejections).
    codes: [Vec<u32>; 2],
    /// Channel `UNORDERED` is unordered.
    unordered: bool,
    /// Secure mode: when the script started (Unix time `UNIX`), and the backend's
    /// generator of token keys.
    secure: Option<(Instant, Pcg32)>,
}

/// Runs a script; returns how many packets were delivered and checked, so replays can
/// tell they reach past the handshake.
pub fn host(data: &[u8]) -> usize {
    let mut u = Unstructured::new(data);
    let Ok(script) = HostScript::arbitrary(&mut u) else { return 0 };
    run(&script, false)
}

/// The same in secure mode: runs a script; returns how many packets were delivered and
/// checked.
pub fn host_secure(data: &[u8]) -> usize {
    let mut u = Unstructured::new(data);
    let Ok(script) = HostScript::arbitrary(&mut u) else { return 0 };
    run(&script, true)
}

fn run(script: &HostScript, secure: bool) -> usize {
    // No randomness is drawn: held links carry nothing by themselves.
    let mut net = Network::new(0);
    net.set_link_both(CLIENT, SERVER, LinkConditions::held());
    let t0 = net.now();
    let cfgs = configs(script, secure.then_some(t0));
    let make = |i: usize, seed| Host::new(cfgs[i].clone(), seeded_rng(seed)).expect("a valid config"); // ok: a fixed config
    let mut w = World {
        net,
        hosts: [make(0, 1), make(1, 2)],
        caps: Caps::of(&cfgs[0]),
        last: Default::default(),
        strangers: Default::default(),
        connection: Default::default(),
        books: Default::default(),
        tainted: [false; 2],
        requests: Default::default(),
        codes: Default::default(),
        unordered: script.unordered,
        secure: secure.then(|| (t0, seeded_rng(3))),
    };
    // Start connected, so that even short scripts reach the data paths.
    w.connect(Side::Client, &connect_payload(Side::Client, 16));
    let mut checked = 0;
    for _ in 0..20 {
        checked += w.settle();
        // With manual admission, the server admits the first request at once.
        while let Some(peer) = w.requests[Side::Server.index()].pop_front() {
            let now = w.now();
            let _ = w.host(Side::Server).accept(now, peer);
        }
        w.deliver_all();
    }
    for step in &script.steps {
        w.step(step);
        checked += w.settle();
    }
    checked + w.heal()
}

impl World {
    fn host(&mut self, side: Side) -> &mut Host {
        &mut self.hosts[side.index()]
    }

    fn now(&self) -> Instant {
        self.net.now()
    }

    fn wait(&mut self, d: Duration) {
        let at = self.now() + d;
        self.net.advance_to(at);
    }

    /// The held link towards `to`.
    fn link(&mut self, to: Side) -> Held<'_> {
        self.net.held(to.other().addr(), to.addr())
    }

    fn step(&mut self, step: &Step) {
        match step {
            Step::Advance(ms) => self.wait(Duration::from_millis(u64::from(*ms))),
            Step::Wait(tenths) => self.wait(Duration::from_millis(100 * u64::from(*tenths))),
            Step::Deliver(to) => {
                self.deliver(*to);
            }
            Step::DeliverAll => self.deliver_all(),
            Step::Drop(to) => {
                self.link(*to).drop_next();
            }
            Step::Duplicate(to) => {
                self.link(*to).duplicate_next();
            }
            Step::Reorder(to) => {
                self.link(*to).requeue_next();
            }
            Step::Corrupt { to, at, xor, reseal } => {
                // Without the keys, nobody can reseal a sealed datagram.
                let reseal = *reseal && self.secure.is_none();
                self.corrupt(*to, usize::from(*at), *xor, reseal);
            }
            Step::Replay(to) => {
                if let Some(d) = self.last[to.index()].clone() {
                    let now = self.now();
                    self.host(*to).handle_datagram(now, to.other().addr(), &d);
                }
            }
            Step::Raw { to, stranger, bytes } => {
                let from = stranger.map_or(to.other().addr(), stranger_addr);
                let bytes = bytes.get(..1500).unwrap_or(bytes);
                // `stranger_addr` takes the index modulo STRANGERS, and so does this.
                if let Some(st) = stranger.and_then(|i| self.strangers.get_mut(usize::from(i % STRANGERS))) {
                    st.bytes_in[to.index()] += bytes.len();
                }
                let now = self.now();
                self.host(*to).handle_datagram(now, from, bytes);
            }
            Step::Forge { to, datagram } => self.forge(*to, datagram),
            Step::Request { stranger, request } if self.secure.is_some() => {
                self.sealed_request(stranger % STRANGERS, request.0);
            }
            Step::Request { stranger, request } => {
                let i = stranger % STRANGERS;
                let mut req = request.0;
                req.cookie = None;
                let st = &mut self.strangers[usize::from(i)];
                (st.request, st.reply) = (Some(req), None);
                // Connect data from the request's own bytes, so scripts read as before.
                let data = connect_data(&req);
                self.stranger_sends(i, &Control::Request { request: req, data: &data }, Key::version());
            }
            Step::Answer { stranger } => self.answer(stranger % STRANGERS),
            Step::Send { from, channel, len, mode } => {
                self.send(*from, usize::from(*channel), usize::from(*len), *mode);
            }
            Step::Connect { side, data } => {
                let data = connect_payload(*side, 2 * usize::from(*data));
                self.connect(*side, &data);
            }
            Step::Disconnect { side, now: at_once, code } => {
                let Some(peer) = self.host(*side).peer_by_addr(side.other().addr()) else { return };
                let now = self.now();
                self.codes[side.index()].push(*code);
                if *at_once {
                    self.host(*side).disconnect_now_with(now, peer, *code);
                } else {
                    self.host(*side).disconnect_with(now, peer, *code);
                }
            }
            Step::Decide { side, accept, code } => {
                let Some(peer) = self.requests[side.index()].pop_front() else { return };
                let now = self.now();
                // The request may have timed out or been decided: an error, never a panic.
                if *accept {
                    let _ = self.host(*side).accept(now, peer);
                } else {
                    self.codes[side.index()].push(*code);
                    let _ = self.host(*side).reject(now, peer, *code);
                }
            }
        }
    }

    /// Hands the next datagram held towards `to` over; `false` if there was none.
    fn deliver(&mut self, to: Side) -> bool {
        let Some(d) = self.link(to).release() else { return false };
        let now = self.now();
        self.host(to).handle_datagram(now, to.other().addr(), &d);
        self.last[to.index()] = Some(d);
        true
    }

    /// Starts connecting `side` to the other with connect `data`: in plain mode as
    /// `connect_with`, in secure mode with a fresh token that carries `data` as its user
    /// data (a server cannot connect: secure mode is client and server). Data beyond what a
    /// token holds makes no token; `connect_with` then meets the secure host's refusal.
    fn connect(&mut self, side: Side, data: &[u8]) {
        let now = self.now();
        let remote = side.other().addr();
        match self.fresh_token(TokenKind::Valid, data) {
            Some(t) => drop(self.host(side).connect_with_token(now, remote, &t)),
            None => drop(self.host(side).connect_with(now, remote, data)),
        }
    }

    /// Secure mode: a token of `kind` for the client with `user_data`, as the backend
    /// would make it now (or a forger, or a backend long ago, or for another server);
    /// `None` in plain mode or if the backend refuses the parameters.
    fn fresh_token(&mut self, kind: TokenKind, user_data: &[u8]) -> Option<Vec<u8>> {
        let now = self.now();
        let (t0, rng) = self.secure.as_mut()?;
        let unix = UNIX + now.saturating_duration_since(*t0).as_secs();
        let mut p = TokenParams::new(CLIENT_ID, vec![SERVER], unix, Duration::from_secs(30));
        p.timeout = Duration::from_secs(3);
        p.user_data = user_data.to_vec();
        let key = match kind {
            TokenKind::Forged => PrivateKey::from_bytes([0x17; 32]),
            TokenKind::Expired => {
                (p.created, p.expires) = (unix - 60, unix - 1);
                PRIVATE_KEY
            }
            TokenKind::ElsewhereOnly => {
                p.server_addresses = vec![addr(3, 6000)];
                PRIVATE_KEY
            }
            TokenKind::Valid => PRIVATE_KEY,
        };
        token::generate(&key, &p, rng).ok()
    }

    /// Secure mode: a stranger's sealed request. A stranger keeps its token (it may
    /// repeat it, from its address) until a request draws a new one: valid (then it meets
    /// the usual handshake), forged, expired, or for another server. Its user data comes
    /// from the request's own bytes, as a plain stranger's connect data does.
    fn sealed_request(&mut self, i: u8, mut req: ConnectRequest) {
        req.cookie = None;
        let kind = match req.frame_base % 8 {
            0..=3 => None,
            4 => Some(TokenKind::Valid),
            5 => Some(TokenKind::Forged),
            6 => Some(TokenKind::Expired),
            _ => Some(TokenKind::ElsewhereOnly),
        };
        let fresh = match kind.or(self.strangers[usize::from(i)].token.is_none().then_some(TokenKind::Valid)) {
            Some(kind) => self.fresh_token(kind, &connect_data(&req)).and_then(|t| ConnectToken::decode(&t).ok()),
            None => None,
        };
        let st = &mut self.strangers[usize::from(i)];
        if let Some(t) = fresh {
            st.token = Some((t, 0));
        }
        (st.request, st.reply) = (Some(req), None);
        self.stranger_sends_request(i, &req);
    }

    fn stranger_sends_request(&mut self, i: u8, req: &ConnectRequest) {
        let Some((t, n)) = &mut self.strangers[usize::from(i)].token else { return };
        let mut out = Vec::new();
        sealed::encode_request(&mut out, t.server_part(), req, *n, &t.keys().0);
        *n += 1;
        self.stranger_to_server(i, &out);
    }

    fn deliver_all(&mut self) {
        for side in [Side::Client, Side::Server] {
            while self.deliver(side) {}
        }
    }

    fn corrupt(&mut self, to: Side, at: usize, xor: u8, reseal: bool) {
        let Some(d) = self.link(to).take_next() else { return };
        let (from, mut d) = (to.other().addr(), d.to_vec());
        if d.is_empty() {
            return;
        }
        let at = at % d.len();
        d[at] ^= xor.max(1);
        if reseal && d.len() > CHECK_LEN {
            let mut body = d[..d.len() - CHECK_LEN].to_vec();
            if self.hosts[to.index()].seal_from(from, &mut body) {
                self.tainted[to.index()] = true;
                d = body;
            }
        }
        let now = self.now();
        self.host(to).handle_datagram(now, from, &d);
    }

    fn forge(&mut self, to: Side, f: &Forged) {
        let from = to.other().addr();
        let Some((recv, send, bases)) = self.hosts[to.index()].id_references(from) else { return };
        let s = SeqSpace::FRAME;
        let acks = match &f.acks {
            Some((back, shape)) => ack_ranges(s.sub(send, 1 + u32::from(*back)), shape),
            None => Vec::new(),
        };
        let frame = f.frame.map(|off| (s.add(recv, off as i32 as u32), 4));
        if frame.is_none() && f.ping.is_none() && f.ping_ack.is_none() && acks.is_empty() {
            return;
        }
        let header = DataHeader { frame, ping: f.ping, ping_ack: f.ping_ack, acks: &acks, ack_delay: 0 };
        let filler = [0x5Au8; 1400];
        let messages: Vec<Message<'_>> = if frame.is_some() {
            f.messages.iter().take(12).map(|m| forged_message(m, &bases, &filler, self.caps.granule)).collect()
        } else {
            Vec::new()
        };
        if self.secure.is_some() {
            // Without the keys: sealed with a wrong key, at a counter the receiver takes.
            let key = SecretKey::from_bytes([f.ping.unwrap_or(1); 32]);
            let counter = u64::from(f.ping_ack.unwrap_or(0));
            let mut out = BytesMut::new();
            let mut writer = DataWriter::new(&mut out, Key::sealed(key, counter), &header);
            for (i, m) in messages.iter().enumerate() {
                writer.message(m, false, i + 1 == messages.len());
            }
            writer.finish();
            let now = self.now();
            self.host(to).handle_datagram(now, from, &out);
            return;
        }
        let mut out = BytesMut::new();
        let mut writer = DataWriter::new(&mut out, Key::version(), &header);
        for (i, m) in messages.iter().enumerate() {
            writer.message(m, false, i + 1 == messages.len());
        }
        let len = writer.finish();
        let mut body = out.get(..len.saturating_sub(CHECK_LEN)).unwrap_or_default().to_vec();
        if self.hosts[to.index()].seal_from(from, &mut body) {
            self.tainted[to.index()] = true;
            let now = self.now();
            self.host(to).handle_datagram(now, from, &body);
        }
    }

    fn stranger_sends(&mut self, i: u8, c: &Control<'_>, key: Key) {
        let mut out = Vec::new();
        c.encode(key, &mut out);
        self.stranger_to_server(i, &out);
    }

    fn stranger_to_server(&mut self, i: u8, datagram: &[u8]) {
        if let Some(st) = self.strangers.get_mut(usize::from(i)) {
            st.bytes_in[Side::Server.index()] += datagram.len();
        }
        let now = self.now();
        self.host(Side::Server).handle_datagram(now, stranger_addr(i), datagram);
    }

    fn answer(&mut self, i: u8) {
        if self.secure.is_some() {
            return self.answer_sealed(i);
        }
        let st = self.strangers[usize::from(i)].clone();
        match (st.request, st.reply) {
            (Some(_), Some(Control::RequestAck(server))) => {
                self.stranger_sends(i, &Control::Ack, Key::reply(server.nonce));
                // Only a receiver of the reply can acknowledge it.
                if let Some(st) = self.strangers.get_mut(usize::from(i)) {
                    st.proven = true;
                }
            }
            (Some(mut req), Some(Control::Challenge(cookie))) => {
                req.cookie = Some(cookie);
                let data = connect_data(&req);
                self.stranger_sends(i, &Control::Request { request: req, data: &data }, Key::version());
            }
            _ => {}
        }
    }

    /// Secure mode: a stranger answers the sealed reply it opened, with its token's keys:
    /// the connection's first sealed `Ack`, or its request again with the cookie.
    fn answer_sealed(&mut self, i: u8) {
        let st = self.strangers[usize::from(i)].clone();
        let Some((t, _)) = &st.token else { return };
        match (st.request, st.reply) {
            (Some(req), Some(Control::RequestAck(server))) => {
                let key = t.keys().0.derive(Use::ClientToServer, req.nonce, server.nonce);
                let mut out = Vec::new();
                sealed::encode_sealed_control(&mut out, &Control::Ack, &sealed::AeadKey::new(key), 0);
                self.stranger_to_server(i, &out);
                if let Some(st) = self.strangers.get_mut(usize::from(i)) {
                    st.proven = true;
                }
            }
            (Some(mut req), Some(Control::Challenge(cookie))) => {
                req.cookie = Some(cookie);
                self.stranger_sends_request(i, &req);
            }
            _ => {}
        }
    }

    fn send(&mut self, from: Side, channel: usize, len: usize, mode: SendMode) {
        let Some(peer) = self.host(from).peer_by_addr(from.other().addr()) else { return };
        // An unordered channel takes reliable packets only; ask for others now and then,
        // for the error.
        let mode =
            if self.unordered && channel == UNORDERED && !len.is_multiple_of(8) { SendMode::Reliable } else { mode };
        let (number, known) = &mut self.connection[from.index()];
        if *known != Some(peer) {
            *number += 1;
            *known = Some(peer);
        }
        let number = *number;
        let book = self.books[from.index()].entry(number).or_default();
        let seq = book.next.get(channel).copied().unwrap_or(0);
        let mut data = Vec::with_capacity(len.max(HEADER));
        data.push(from as u8);
        data.extend_from_slice(&number.to_le_bytes());
        data.push(channel as u8);
        data.extend_from_slice(&seq.to_le_bytes());
        data.push(mode_byte(mode));
        data.resize(len.max(HEADER), seq as u8);
        if self.hosts[from.index()].send(peer, channel, Bytes::from(data), mode).is_ok() {
            let book = self.books[from.index()].entry(number).or_default();
            book.next[channel] += 1;
            if mode == SendMode::Reliable {
                book.reliable[channel].push_back(seq);
            }
        }
    }

    /// Gives both hosts their turn, client first: each steps, what it sends goes through
    /// [`route`]'s checks into the network, its events are checked, then its caps.
    /// Returns the packets checked.
    fn settle(&mut self) -> usize {
        let mut checked = 0;
        for side in [Side::Client, Side::Server] {
            let Self { net, hosts, strangers, secure, .. } = self;
            let secure = secure.is_some();
            let out = |net: &mut Network, host: &Host, t: Transmit| route(net, host, side, secure, strangers, t);
            let events: Vec<Event> = net.turn(&mut hosts[side.index()], out).collect();
            for e in events {
                checked += self.on_event(side, e);
            }
            self.check_caps(side);
        }
        checked
    }

    fn on_event(&mut self, side: Side, e: Event) -> usize {
        let (channel, mode, data) = match e {
            Event::Received { channel, mode, data, .. } => (channel, mode, data),
            Event::ConnectRequest { peer, remote, data, client_id } => {
                self.check_client_id(side, client_id);
                let requests = &mut self.requests[side.index()];
                if requests.len() == MAX_REQUESTS {
                    requests.pop_front();
                }
                requests.push_back(peer);
                self.check_connect_data(side, remote, &data);
                return 0;
            }
            Event::Connected { remote, data, client_id, .. } => {
                self.check_client_id(side, client_id);
                self.check_connect_data(side, remote, &data);
                return 0;
            }
            // The harness's hosts keep their addresses; a change is the other host's own
            // datagrams from a new port, which proves nothing to check here.
            Event::AddressChanged { .. } => return 0,
            Event::Disconnected { reason, .. } => {
                let (DisconnectReason::Remote { code } | DisconnectReason::Rejected { code }) = reason else {
                    return 0;
                };
                let given = &self.codes[side.other().index()];
                assert!(
                    self.tainted[side.index()] || code == 0 || given.contains(&code),
                    "{side:?}: {reason:?}, a code the other host never gave"
                );
                return 0;
            }
        };
        if self.tainted[side.index()] {
            return 0;
        }
        assert!(data.len() >= HEADER, "a packet shorter than any sent: {data:?}");
        let word = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        let (sender, number, ch, seq, m) = (data[0], word(1), usize::from(data[5]), word(6), data[10]);
        assert_eq!(sender, side.other() as u8, "delivered to the side that sent it");
        assert_eq!((ch, m), (channel, mode_byte(mode)), "channel and mode as sent");
        let book = self.books[side.other().index()].get_mut(&number).expect("a packet from a connection that sent"); // ok: a finding
        assert!(seq < book.next[ch], "a packet never sent");
        if let Some(last) = book.delivered[ch] {
            assert!(seq > last, "channel {ch}: packet {seq} after {last} (duplicated or reordered)");
        }
        if self.unordered && ch == UNORDERED {
            // Exactly once, in any order.
            assert_eq!(mode, SendMode::Reliable, "channel {ch} is unordered: reliable packets only");
            let at = book.reliable[ch].iter().position(|&r| r == seq);
            let at = at.unwrap_or_else(|| panic!("unordered channel {ch}: packet {seq} delivered twice")); // ok: a finding
            book.reliable[ch].remove(at);
            return 1;
        }
        book.delivered[ch] = Some(seq);
        let oldest = book.reliable[ch].front().copied();
        if mode == SendMode::Reliable {
            assert_eq!(oldest, Some(seq), "channel {ch}: reliable packet out of order");
            book.reliable[ch].pop_front();
        } else {
            assert!(oldest.is_none_or(|r| r > seq), "channel {ch}: {seq} overtook reliable packet {oldest:?}");
        }
        1
    }

    /// A client id comes from a verified token only: on a secure server, the one every
    /// token of the backend carries; `None` in plain mode and on a client.
    fn check_client_id(&self, side: Side, client_id: Option<u64>) {
        let expected = (self.secure.is_some() && side == Side::Server).then_some(CLIENT_ID);
        assert_eq!(client_id, expected, "{side:?}: a client id not from a verified token");
    }

    /// Connect data from the other host arrives as that host sent it (strangers' is
    /// theirs to choose).
    fn check_connect_data(&self, side: Side, remote: SocketAddr, data: &[u8]) {
        if remote == side.other().addr() && !self.tainted[side.index()] {
            assert_eq!(data, connect_payload(side.other(), data.len()), "{side:?}: connect data not as sent");
        }
    }

    fn check_caps(&self, side: Side) {
        let h = &self.hosts[side.index()];
        let c = &self.caps;
        let peers: Vec<PeerId> = h.peers().collect();
        assert!(peers.len() <= c.max_peers, "{} peers", peers.len());
        assert!(h.stats().pending <= c.max_pending, "{} pending", h.stats().pending);
        for p in &peers {
            let Some(s) = h.peer_stats(*p) else { continue };
            assert!(s.reassembly_bytes <= c.reassembly, "reassembly {} > {}", s.reassembly_bytes, c.reassembly);
            assert!(s.queued_bytes <= c.queued, "queued {} > {}", s.queued_bytes, c.queued);
        }
        let m = h.memory_usage();
        assert!(m.peers <= peers.len() * c.peer_memory, "{m:?} for {} peers", peers.len());
    }

    /// Heals the network and lets it run: on a connection both sides still hold, free of
    /// forgeries, every reliable packet sent must arrive.
    fn heal(&mut self) -> usize {
        let mut checked = 0;
        let end = self.now() + HEAL_FOR;
        while self.now() < end {
            self.deliver_all();
            checked += self.settle();
            if self.tainted.iter().any(|&t| t) || !self.live() || !self.undelivered() {
                return checked;
            }
            self.wait(Duration::from_millis(5));
        }
        if self.live() && self.undelivered() {
            // What the fuzzer's report needs to explain the stall.
            for side in [Side::Client, Side::Server] {
                let h = &self.hosts[side.index()];
                let stats = h.peer_by_addr(side.other().addr()).and_then(|p| h.peer_stats(p));
                let book = self.books[side.index()].get(&self.connection[side.index()].0);
                eprintln!("{side:?}: {stats:#?}\nsent by {side:?}: {book:?}");
            }
        }
        assert!(!self.live() || !self.undelivered(), "reliable packets stalled for {HEAL_FOR:?} on a healed network");
        checked
    }

    /// Whether both sides hold a connection with each other.
    fn live(&self) -> bool {
        [Side::Client, Side::Server].iter().all(|&side| {
            let h = &self.hosts[side.index()];
            let peer = h.peer_by_addr(side.other().addr());
            peer.and_then(|p| h.peer_stats(p)).is_some_and(|s| s.state == PeerState::Connected)
        })
    }

    /// Whether a reliable packet sent on the current connection has not arrived.
    fn undelivered(&self) -> bool {
        [Side::Client, Side::Server].iter().any(|&side| {
            let (number, known) = self.connection[side.index()];
            let current = self.hosts[side.index()].peer_by_addr(side.other().addr());
            current.is_some()
                && current == known
                && self.books[side.index()].get(&number).is_some_and(|b| b.reliable.iter().any(|r| !r.is_empty()))
        })
    }
}

/// What a host of the world sends, on its way into the network: towards the other host
/// it joins the held link (the oldest held datagram lost beyond `MAX_IN_FLIGHT`); towards
/// anyone else it is checked (no datagram to an address without a connection larger than
/// the smallest request; no unproven stranger sent more bytes than it sent) and read as a
/// stranger would, for its answer.
fn route(net: &mut Network, sender: &Host, from: Side, secure: bool, strangers: &mut [Stranger], t: Transmit) {
    let (to, payload) = (t.remote, t.payload);
    let connected =
        |h: &Host| h.peer_by_addr(to).and_then(|p| h.peer_stats(p)).is_some_and(|s| s.state == PeerState::Connected);
    if to == from.other().addr() {
        let mut link = net.held(from.addr(), to);
        if link.len() == MAX_IN_FLIGHT {
            link.drop_next();
        }
        net.inject(from.addr(), to, payload);
        return;
    }
    let smallest_request = if secure { SEALED_REQUEST_SIZE } else { wire::REQUEST_SIZE };
    if !connected(sender) {
        assert!(payload.len() <= smallest_request, "{} byte datagram to {to}, which has no connection", payload.len());
    }
    if let Some(i) = (0..STRANGERS).find(|&i| stranger_addr(i) == to) {
        let st = &mut strangers[usize::from(i)];
        // A stranger proves it receives only to the server (whose requests it answers);
        // to the client (an unknown path answers what it sent) it never does.
        if !st.proven || from == Side::Client {
            let side = from.index();
            st.bytes_out[side] += payload.len();
            assert!(
                st.bytes_out[side] <= st.bytes_in[side],
                "{} bytes sent to {to} by the {from:?}, which it sent {} and has not proven it receives",
                st.bytes_out[side],
                st.bytes_in[side]
            );
        }
        let reply = match (&st.token, st.request) {
            (Some((t, _)), Some(req)) if secure => {
                sealed::open_reply(&payload, &t.keys().1.derive(Use::Reply, req.nonce, 0)).ok()
            }
            (_, Some(req)) => Control::decode(&payload, Key::reply(req.nonce)).ok().map(Control::without_data),
            _ => None,
        };
        if let Some(c) = reply {
            st.reply = Some(c);
        }
    }
}

/// The tokens strangers' requests carry in secure mode.
#[derive(Clone, Copy, Debug)]
enum TokenKind {
    Valid,
    Forged,
    Expired,
    ElsewhereOnly,
}

fn forged_message<'f>(m: &ForgedMessage, bases: &[u32], filler: &'f [u8], granule: usize) -> Message<'f> {
    let channel = m.channel % (CHANNELS as u8 + 1);
    let base = bases.get(usize::from(channel)).copied().unwrap_or(0);
    let id = SeqSpace::PACKET.wrap(base.wrapping_add(m.offset as i32 as u32));
    let (dependency, fragment, len) = match m.kind {
        MessageKind::WindowAck => (0, Fragment::WHOLE, 0),
        MessageKind::Sentinel => (u32::from(m.dependency) % PACKET_WINDOW, Fragment::WHOLE, 0),
        MessageKind::Fragment(_) => {
            let raw = usize::from(m.len) % filler.len();
            let (fragment, len) = match m.fragment {
                Some((count, index)) => {
                    // Mostly packets this side accepts (12 KiB: 169 granules at 1,200 bytes).
                    let count = match count {
                        0..0x8000 => 2 + u32::from(count) % 256,
                        _ => 2 + u32::from(count) % (MAX_GRANULES - 1),
                    };
                    let index = u32::from(index) % count;
                    // 1 to 16 whole granules (a fragment of the negotiated size at most),
                    // or what is left of the packet, its last granule partial; one time
                    // in 8 any length, mostly bad geometry.
                    let left = (count - index) as usize;
                    let k = 1 + usize::from(m.len / 8) % 16;
                    let len = match m.len % 8 {
                        7 => raw,
                        _ if k >= left => (left - 1) * granule + 1 + usize::from(m.len) % granule,
                        _ => k * granule,
                    };
                    (Fragment { index, count }, len.min(filler.len()))
                }
                None => (Fragment::WHOLE, raw),
            };
            (u32::from(m.dependency) % PACKET_WINDOW, fragment, len)
        }
    };
    Message { kind: m.kind, channel, id, dependency, fragment, payload: &filler[..len] }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::sim::SplitMix64;

    /// Replays the target over seeded pseudo-random scripts, so `cargo test` covers it.
    #[test]
    fn replay_host() {
        let mut s = SplitMix64::new(0x4057);
        let mut buf = Vec::new();
        let mut checked = 0;
        let cases = 2000;
        for i in 0..cases {
            s.fill(&mut buf, 200 + (i * 7919) % 3000);
            checked += host(&buf);
        }
        eprintln!("host: {checked} delivered packets checked in {cases} scripts");
        assert!(checked > cases, "the replay must deliver data: {checked}");
    }

    /// The same scripts in secure mode.
    #[test]
    fn replay_host_secure() {
        let mut s = SplitMix64::new(0x4057);
        let mut buf = Vec::new();
        let mut checked = 0;
        let cases = 1000;
        for i in 0..cases {
            s.fill(&mut buf, 200 + (i * 7919) % 3000);
            checked += host_secure(&buf);
        }
        eprintln!("host_secure: {checked} delivered packets checked in {cases} scripts");
        assert!(checked > cases, "the replay must deliver data: {checked}");
    }

    /// Inputs the fuzzer once failed on, kept in `fuzz/regressions/host/`.
    #[test]
    #[cfg_attr(target_family = "wasm", ignore = "reads the corpus from the file system")]
    fn regressions_hold() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/host");
        let mut n = 0;
        // ok: a test reading the repository's own corpus; a missing file is a failure.
        for entry in std::fs::read_dir(&dir).expect("the regression corpus") {
            let path = entry.expect("a directory entry").path();
            eprintln!("{}", path.display());
            let input = std::fs::read(&path).expect("a regression input");
            host(&input);
            host_secure(&input);
            n += 1;
        }
        assert!(n > 0, "no regression inputs in {}", dir.display());
    }
}
