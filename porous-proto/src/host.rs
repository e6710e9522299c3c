//! The [`Host`]: one UDP socket's worth of connections.
//!
//! The host owns the peer table (a slab of slots with generations, and a hash map from
//! address to slot, keyed per host: see [`AddrHasher`]), demultiplexes datagrams to peers, creates peers for acceptable
//! connection requests, and keeps every peer's next deadline in a heap, so a step costs
//! time in proportion to the peers with something to do, not to all peers.
//!
//! What a connection request from an unknown address gets is the listener's decision
//! (`listener/`: cookies, the challenge threshold, pending handshakes, refusals); what
//! peers send and report goes to one [`Outputs`] the host lends to whichever peer it
//! drives.
//!
//! Invariants: `by_addr` maps exactly the addresses of the peers in `slots`; a slot's
//! `scheduled` is the deadline its latest heap entry carries (older entries are stale and
//! skipped); a slot is in `dirty` exactly when its `dirty` flag is set.
//!
//! Deadlines in the heap are nanoseconds since the first time the host was given (its
//! epoch) packed with the slot into one `u128`: a peer's deadline moves at nearly every
//! step it is polled, so the heap takes a push per active peer per step and as many pops
//! of stale entries, and a key that compares in two instructions and takes 16 bytes
//! (an `(Instant, u32, u32)` takes 24) makes those cheap. `poll_timeout` turns the earliest
//! back into the `Instant` it came from, exactly.
//!
//! Nothing here touches a socket or a clock; see the crate docs for the call contract.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::hash::{BuildHasher, Hasher as _};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use bytes::Bytes;
use siphasher::sip::SipHasher13;

use crate::arena::Arena;
use crate::config::{ConfigError, HostConfig, SequenceStart};
use crate::event::{AdmissionError, ConnectError, Event, PeerId, SendError, SendMode, Transmit};
use crate::listener::{Listener, Refused, ReplyKey, Request, Verdict};
use crate::peer::{self, Input, Outputs, PathCookies, Peer, SecureState, Settings};
use crate::stats::{HostStats, MemoryUsage, PeerState, PeerStats};
use crate::time::Time;
use crate::token::ConnectToken;
use crate::wire::{self, Control, DecodeError, Key, KeyClass};

/// The hasher of the address table: SipHash-1-3 under a key of the host's own, so which
/// addresses share a bucket cannot be predicted, and a remote choosing its source
/// addresses cannot make lookups slow (a hash map with a fixed hash would let it). The
/// key comes from the host's random generator, as everything random does: the same seed
/// gives the same table, and the order of the table is never observable anyway.
///
/// A hash map, not an ordered map: every datagram is one lookup, and at 10,000 peers an
/// ordered map's walk down its nodes cost more than the rest of the lookup (4.7% of the
/// server's instructions in the `active` bench, and a cache miss per level).
#[derive(Clone, Copy, Debug)]
struct AddrHasher(u64, u64);

impl AddrHasher {
    /// A key for the table derived from `secret` (the listener's cookie key): drawing it
    /// from the generator would move every later draw, and so every nonce and id a seeded
    /// host has always produced. SipHash is a pseudorandom function, so the derived key
    /// says nothing of the secret.
    fn derived_from(secret: (u64, u64)) -> Self {
        let word = |label: u64| {
            let mut h = SipHasher13::new_with_keys(secret.0, secret.1);
            h.write(b"porous peer table");
            h.write_u64(label);
            h.finish()
        };
        Self(word(0), word(1))
    }
}

impl BuildHasher for AddrHasher {
    type Hasher = SipHasher13;

    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.0, self.1)
    }
}

/// The timer heap: every peer's next deadline, earliest first, with stale entries left in
/// place until they surface (see the module's invariants).
#[derive(Debug, Default)]
struct Deadlines {
    /// The first time the host was given: every [`Time`] counts from it.
    epoch: Option<Instant>,
    /// Entries packed by [`Deadlines::entry`].
    heap: BinaryHeap<Reverse<u128>>,
}

impl Deadlines {
    /// Sets the epoch, the first time it is given, and returns `now` counted from it.
    fn observe(&mut self, now: Instant) -> Time {
        Time::since(*self.epoch.get_or_insert(now), now)
    }

    /// A deadline as the heap keeps it: nanoseconds since the epoch. Deadlines are never
    /// before it (the caller's times do not go backwards); one that is counts as the
    /// epoch, which is past anyway.
    fn ticks(t: Time) -> u64 {
        u64::try_from(t.nanos()).unwrap_or(0)
    }

    /// The instant of `ticks`.
    fn instant(&self, ticks: u64) -> Option<Instant> {
        let t = Time::from_nanos(i64::try_from(ticks).unwrap_or(i64::MAX));
        self.epoch.map(|e| t.instant(e))
    }

    /// One heap entry: the deadline in the high half, so entries order by it.
    fn entry(ticks: u64, index: u32, generation: u32) -> Reverse<u128> {
        Reverse(u128::from(ticks) << 64 | u128::from(index) << 32 | u128::from(generation))
    }

    fn unpack(Reverse(e): Reverse<u128>) -> (u64, u32, u32) {
        ((e >> 64) as u64, (e >> 32) as u32, e as u32)
    }

    fn push(&mut self, ticks: u64, index: u32, generation: u32) {
        self.heap.push(Self::entry(ticks, index, generation));
    }

    /// The earliest entry: deadline, slot, generation.
    fn peek(&self) -> Option<(u64, u32, u32)> {
        self.heap.peek().copied().map(Self::unpack)
    }

    fn pop(&mut self) {
        self.heap.pop();
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    /// Keeps the entries `keep` says are current.
    fn retain(&mut self, mut keep: impl FnMut(u64, u32, u32) -> bool) {
        self.heap.retain(|&e| {
            let (t, i, g) = Self::unpack(e);
            keep(t, i, g)
        });
    }

    fn memory(&self) -> usize {
        self.heap.capacity() * size_of::<Reverse<u128>>()
    }
}

/// One place in the peer table, aligned to a cache line: a connected peer's whole fixed
/// state (the peer, its session inline) starts on a line of its own and takes whole lines.
#[derive(Debug)]
#[repr(align(64))]
struct Slot {
    generation: u32,
    /// In the slot, not boxed: a datagram or a step reaches a peer through its slot, and a
    /// box was one more dependent cache miss each time (7% of a 10,000-peer tick).
    peer: Option<Peer>,
    /// The deadline this slot is filed under in the timer heap (see [`Deadlines`]), if
    /// `filed`: an `Option<u64>` in two fields, so that its flag shares the word of
    /// `generation`. [`Slot::scheduled`] reads it.
    ticks: u64,
    filed: bool,
    /// Queued for the next step.
    dirty: bool,
}

impl Slot {
    const EMPTY: Self = Self { generation: 0, peer: None, ticks: 0, filed: false, dirty: false };

    /// Whether this slot holds peer `id`: a peer is in it, of `id`'s generation (a stale
    /// id never reaches a later peer in the same slot).
    fn holds(&self, id: PeerId) -> bool {
        self.generation == id.generation && self.peer.is_some()
    }

    /// The deadline this slot is filed under in the timer heap.
    fn scheduled(&self) -> Option<u64> {
        self.filed.then_some(self.ticks)
    }

    /// Marks slot `index` (this one) for the next step, queueing it on the host's list of
    /// slots to step unless it is there already.
    fn mark(&mut self, index: u32, dirty: &mut Vec<u32>) {
        if !std::mem::replace(&mut self.dirty, true) {
            dirty.push(index);
        }
    }

    fn set_scheduled(&mut self, ticks: Option<u64>) {
        self.filed = ticks.is_some();
        self.ticks = ticks.unwrap_or(0);
    }
}

/// The peer table's storage: one vector of slots, grown by an eighth at a time. A slot
/// holds a connected peer's whole fixed state (1,792 bytes, its session inline), so:
///
/// - consecutive slots are consecutive in memory, and a host going through its peers in
///   slot order reads each field at a constant stride, which the processor follows and
///   fetches ahead (`docs/notes/server-scale.md`, Part 8); past about 2.1 KB a slot's size
///   costs every active peer's tick even where nothing reads the extra bytes, so a slot
///   has a budget (2,048 bytes, held by a test: Part 10);
/// - the room beyond the peers is at most an eighth of them (16 slots at first), where a
///   doubling vector's free part would cost about 1,100 bytes a peer at 10,000 peers;
/// - the price is that growing copies the slots: about 8 times the table's final size in
///   all, as peers arrive, the largest copy in the call that adds the peer that does not
///   fit (about 18 MB at 10,000 peers, a few milliseconds). Slots in chunks that never
///   move would not copy, but lookups through them cost about 40 instructions per message
///   more in the `hosts` bench with one message a round.
#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
}

impl Slots {
    fn get(&self, index: usize) -> Option<&Slot> {
        self.slots.get(index)
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut Slot> {
        self.slots.get_mut(index)
    }

    /// The slot of peer `id`, if that peer is still in it.
    fn of(&self, id: PeerId) -> Option<&Slot> {
        self.get(id.index as usize).filter(|s| s.holds(id))
    }

    fn of_mut(&mut self, id: PeerId) -> Option<&mut Slot> {
        self.get_mut(id.index as usize).filter(|s| s.holds(id))
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    /// A never-used slot at the end of the table: its index.
    fn grow(&mut self) -> usize {
        if self.slots.len() == self.slots.capacity() {
            self.slots.reserve_exact((self.slots.len() / 8).max(16));
        }
        self.slots.push(Slot::EMPTY);
        self.slots.len() - 1
    }

    /// Every slot handed out so far, in order.
    fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.slots.iter()
    }

    fn memory(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>()
    }
}

/// How many peers of the table are in each state: the counts of [`HostStats`] (`peers`,
/// `connected`, `connecting`, `closing`), kept as peers enter, change state and leave, so
/// that reading them walks nothing. Every change of a peer's state happens inside
/// [`drive_peer`], and every peer enters by [`Host::insert`] and leaves by
/// [`Host::remove`]: those three keep it true.
#[derive(Debug, Default)]
struct Census([usize; 5]);

impl Census {
    fn of(&self, state: PeerState) -> usize {
        self.0.get(state as usize).copied().unwrap_or(0)
    }

    fn changed(&mut self, was: Option<PeerState>, is: Option<PeerState>) {
        if was != is {
            if let Some(n) = was.and_then(|s| self.0.get_mut(s as usize)) {
                *n -= 1;
            }
            if let Some(n) = is.and_then(|s| self.0.get_mut(s as usize)) {
                *n += 1;
            }
        }
    }
}

/// Runs `f` on `peer` with the host's outputs, keeping the listener's count of pending
/// handshakes and the census of states true whatever `f` does to the peer's state. A free
/// function over the host's fields, so that a caller holding the peer's slot can use it
/// too.
fn drive_peer<R>(
    peer: &mut Peer,
    out: &mut Outputs,
    (listener, census): (&mut Listener, &mut Census),
    f: impl FnOnce(&mut Peer, &mut Outputs) -> R,
) -> R {
    let (was, state) = (peer.is_pending(), peer.state());
    let r = f(peer, out);
    listener.pending_changed(was, peer.is_pending());
    census.changed(Some(state), Some(peer.state()));
    r
}

/// A POROUS endpoint: the connections of one UDP socket.
///
/// # Call contract
///
/// The host never reads a clock and never blocks. Drive it like this:
///
/// 1. feed it input: [`Host::handle_datagram`] for every datagram received, and the
///    application's [`Host::connect`], [`Host::send`], [`Host::disconnect`];
/// 2. call [`Host::step`] with the current time: it runs timers and assembles datagrams;
/// 3. drain [`Host::poll_transmit`] (send each on the socket) and [`Host::poll_event`]
///    until both return `None`;
/// 4. sleep until a datagram arrives or [`Host::poll_timeout`] passes, then go to 1.
///
/// `now` must not go backwards; only differences between the times given matter, so a
/// simulation may start from any `Instant` and add durations. Extra `step` calls are
/// harmless. The same inputs and the same random generator give the same outputs, byte
/// for byte.
///
/// ```
/// use std::time::{Duration, Instant};
/// use bytes::Bytes;
/// use porous_proto::{Event, Host, HostConfig, SendMode};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Two hosts joined by a perfect in-memory link, seeded so the run is repeatable.
/// let a_addr = "10.0.0.1:9000".parse()?;
/// let b_addr = "10.0.0.2:9000".parse()?;
/// let mut a = Host::with_seed(HostConfig::default(), 1)?;
/// let mut b = Host::with_seed(HostConfig::default(), 2)?;
///
/// let start = Instant::now();
/// let peer = a.connect(start, b_addr)?;
/// let mut sent = false;
/// let mut got = None;
/// for tick in 0..100 {
///     let now = start + Duration::from_millis(10 * tick);
///     for (host, addr) in [(&mut a, a_addr), (&mut b, b_addr)] {
///         host.step(now);
///     }
///     // Carry datagrams across the link.
///     while let Some(t) = a.poll_transmit() { b.handle_datagram(now, a_addr, &t.payload); }
///     while let Some(t) = b.poll_transmit() { a.handle_datagram(now, b_addr, &t.payload); }
///     while let Some(e) = a.poll_event() {
///         if let Event::Connected { .. } = e {
///             a.send(peer, 0, Bytes::from_static(b"hello"), SendMode::Reliable)?;
///             sent = true;
///         }
///     }
///     while let Some(e) = b.poll_event() {
///         if let Event::Received { data, .. } = e { got = Some(data); }
///     }
/// }
/// assert!(sent);
/// assert_eq!(got.as_deref(), Some(&b"hello"[..]));
/// # Ok(())
/// # }
/// ```
pub struct Host {
    config: HostConfig,
    /// What every peer keeps of `config.peer`, shared.
    settings: Arc<Settings>,
    rng: Box<dyn rand_core::Rng + Send>,
    slots: Slots,
    free: Vec<u32>,
    by_addr: HashMap<SocketAddr, u32, AddrHasher>,
    timers: Deadlines,
    dirty: Vec<u32>,
    out: Outputs,
    recv_arena: Arena,
    last_now: Option<Instant>,
    last_step: Option<Time>,
    step_interval: Duration,
    stats: HostStats,
    listener: Listener,
    census: Census,
    /// What the transport says the path to an address carries ([`Host::set_path_mtu`]),
    /// where it carries less than the configured `mtu`. Entries come from the application
    /// alone and leave with [`Host::close_path`].
    path_mtu: HashMap<SocketAddr, usize, AddrHasher>,
    /// Every peer's address again, ordered, so that the peers of one IP are a range: the
    /// candidates for a datagram from a new port of that IP (address change).
    by_ip: BTreeMap<(IpAddr, u16), u32>,
    /// The addresses peers are validating (address change), each to its peer: the first
    /// candidate for a datagram from there. An entry may outlive its probe; the peer's own
    /// probe is what counts.
    probes: HashMap<SocketAddr, u32, AddrHasher>,
    /// Every connection's id on this side (its nonce), to the peer: where a moved from an
    /// address of another IP finds its connection. Nonces are random, so an id may name
    /// several peers.
    by_nonce: BTreeMap<(u32, u32), ()>,
    /// The cookies of unknown-path answers.
    path_cookies: PathCookies,
}

/// Most peers a datagram from an unknown address is tried against (those of its IP), so
/// that a stranger's datagram costs a bounded number of verifications.
const MAX_CANDIDATES: usize = 16;

impl core::fmt::Debug for Host {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host")
            .field("peers", &self.by_addr.len())
            .field("transmits", &self.out.transmits.len())
            .field("events", &self.out.events.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host with `config`, drawing connection nonces and starting ids from `rng`: any
    /// generator of `rand_core` 0.10 (the `rand` 0.10 family; generators of `rand` 0.8
    /// and 0.9 implement older traits and do not fit). [`Host::from_entropy`] and
    /// [`Host::with_seed`] cover the usual cases; this one is for injecting a generator of
    /// your own, as a simulation does.
    pub fn new(config: HostConfig, mut rng: impl rand_core::Rng + Send + 'static) -> Result<Self, ConfigError> {
        config.validate()?;
        let secret = (rng.next_u64(), rng.next_u64());
        let listener = Listener::new(&config, secret);
        let settings = Arc::new(Settings::new(config.peer.clone()));
        Ok(Self {
            listener,
            census: Census::default(),
            settings,
            config,
            rng: Box::new(rng),
            slots: Slots::default(),
            free: Vec::new(),
            by_addr: HashMap::with_hasher(AddrHasher::derived_from(secret)),
            path_mtu: HashMap::with_hasher(AddrHasher::derived_from(secret)),
            by_ip: BTreeMap::new(),
            probes: HashMap::with_hasher(AddrHasher::derived_from(secret)),
            by_nonce: BTreeMap::new(),
            path_cookies: PathCookies::new(secret),
            timers: Deadlines::default(),
            dirty: Vec::new(),
            out: Outputs::default(),
            recv_arena: Arena::default(),
            last_now: None,
            last_step: None,
            step_interval: Duration::ZERO,
            stats: HostStats::default(),
        })
    }

    /// A host drawing its randomness from the operating system's generator (through
    /// `getrandom`, feature `os-random`, on by default): the constructor for real use.
    ///
    /// ```
    /// use porous_proto::{Host, HostConfig};
    /// let host = Host::from_entropy(HostConfig::default())?;
    /// # Ok::<(), porous_proto::ConfigError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If the operating system's generator fails, which it does not once the system has
    /// booted on any platform `getrandom` supports. The host draws from it here and for
    /// each new connection.
    #[cfg(feature = "os-random")]
    #[cfg_attr(docsrs, doc(cfg(feature = "os-random")))]
    pub fn from_entropy(config: HostConfig) -> Result<Self, ConfigError> {
        Self::new(config, rand_core::UnwrapErr(getrandom::SysRng))
    }

    /// A host whose randomness comes from a generator seeded with `seed`: the same seed
    /// and the same inputs give the same outputs, byte for byte. For tests, simulations,
    /// replays and fixed-step engines that record their inputs.
    ///
    /// Not for a host on a public network: the connection nonces that key every
    /// datagram's integrity check come from this generator, and they are visible in
    /// handshakes; anyone who knows the seed, or sees enough nonces, can predict the next
    /// ones and forge datagrams into other connections. Use [`Host::from_entropy`] there.
    ///
    /// ```
    /// use std::time::Instant;
    /// use porous_proto::{Host, HostConfig};
    /// let (mut a, mut b) = (Host::with_seed(HostConfig::default(), 7)?, Host::with_seed(HostConfig::default(), 7)?);
    /// let (now, server) = (Instant::now(), "10.0.0.2:9000".parse()?);
    /// a.connect(now, server)?;
    /// b.connect(now, server)?;
    /// a.step(now);
    /// b.step(now);
    /// // The same connection request, byte for byte.
    /// assert_eq!(a.poll_transmit(), b.poll_transmit());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_seed(config: HostConfig, seed: u64) -> Result<Self, ConfigError> {
        use rand_core::SeedableRng as _;
        Self::new(config, rand_pcg::Pcg64Mcg::seed_from_u64(seed))
    }

    /// The configuration (with the public addresses [`Host::set_public_addresses`] set).
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Secure mode, on a server: the addresses connect tokens name this server by, from now
    /// on (they replace [`SecureConfig::public_addresses`](crate::SecureConfig)). For a
    /// server that learns its address after it is made: bound to port 0, or reached
    /// through a load balancer or a NAT whose public address it learns later. Until a
    /// server has an address, it refuses every token (counted in
    /// [`HostStats::wrong_server_tokens`]); connections made already are not touched.
    ///
    /// ```
    /// use std::time::{Instant, SystemTime, UNIX_EPOCH};
    /// use porous_proto::token::PrivateKey;
    /// use porous_proto::{Host, HostConfig, SecureConfig};
    ///
    /// let unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    /// let mut config = HostConfig::default();
    /// // No address yet: the socket is not bound.
    /// config.secure = Some(SecureConfig::server(PrivateKey::from_bytes([7; 32]), Vec::new(), Instant::now(), unix));
    /// let mut server = Host::from_entropy(config)?;
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// server.set_public_addresses(vec![socket.local_addr()?])?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Fails with [`ConfigError::Secure`] on a host that is not a secure server (no
    /// [`SecureConfig::private_key`](crate::SecureConfig)), and with
    /// [`ConfigError::PublicAddresses`] for more addresses than a token can name
    /// ([`MAX_SERVER_ADDRESSES`](crate::token::MAX_SERVER_ADDRESSES)).
    pub fn set_public_addresses(&mut self, addresses: Vec<SocketAddr>) -> Result<(), ConfigError> {
        if addresses.len() > crate::token::MAX_SERVER_ADDRESSES {
            return Err(ConfigError::PublicAddresses(addresses.len()));
        }
        let Some(secure) = self.config.secure.as_mut() else {
            return Err(ConfigError::Secure("public addresses are for a secure server (SecureConfig::server)"));
        };
        if !self.listener.set_public_addresses(addresses.clone()) {
            return Err(ConfigError::Secure("public addresses are for a secure server (SecureConfig::server)"));
        }
        secure.public_addresses = addresses;
        Ok(())
    }

    /// Records the time the caller gave, and returns it as the layers below count time.
    fn observe(&mut self, now: Instant) -> Time {
        if self.last_now.is_none_or(|t| now > t) {
            self.last_now = Some(now);
        }
        self.timers.observe(now)
    }

    fn peer_index(&self, id: PeerId) -> Option<usize> {
        self.slots.of(id).map(|_| id.index as usize)
    }

    fn id_of(&self, index: u32) -> PeerId {
        let generation = self.slots.get(index as usize).map_or(0, |s| s.generation);
        PeerId { index, generation }
    }

    /// The id the next inserted peer gets.
    fn next_id(&self) -> PeerId {
        self.id_of(self.free.last().copied().unwrap_or(self.slots.len() as u32))
    }

    fn mark_dirty(&mut self, index: u32) {
        if let Some(slot) = self.slots.get_mut(index as usize) {
            slot.mark(index, &mut self.dirty);
        }
    }

    /// Puts `peer` (made with [`Host::next_id`]) in its slot.
    fn insert(&mut self, peer: Peer) -> u32 {
        let (addr, nonce) = (peer.remote(), peer.local_nonce());
        let index = match self.free.pop() {
            Some(i) => i,
            None => self.slots.grow() as u32,
        };
        debug_assert_eq!(peer.id(), self.id_of(index));
        self.census.changed(None, Some(peer.state()));
        if let Some(slot) = self.slots.get_mut(index as usize) {
            slot.peer = Some(peer);
            slot.set_scheduled(None);
        }
        self.by_addr.insert(addr, index);
        self.by_ip.insert((addr.ip(), addr.port()), index);
        self.by_nonce.insert((nonce, index), ());
        self.mark_dirty(index);
        index
    }

    fn remove(&mut self, index: u32) {
        let Some(slot) = self.slots.get_mut(index as usize) else { return };
        if let Some(peer) = slot.peer.take() {
            self.listener.pending_changed(peer.is_pending(), false);
            self.census.changed(Some(peer.state()), None);
            self.by_addr.remove(&peer.remote());
            self.by_ip.remove(&(peer.remote().ip(), peer.remote().port()));
            self.by_nonce.remove(&(peer.local_nonce(), index));
            // Its probe may have ended with the connection: every entry naming the slot goes.
            self.probes.retain(|_, i| *i != index);
            slot.generation = slot.generation.wrapping_add(1);
            slot.set_scheduled(None);
            self.free.push(index);
        }
    }

    /// Runs `f` on the peer in slot `index` with the host's outputs, keeping the pending
    /// count true whatever `f` does to the peer's state.
    fn drive<R>(&mut self, index: u32, f: impl FnOnce(&mut Peer, &mut Outputs) -> R) -> Option<R> {
        let peer = self.slots.get_mut(index as usize)?.peer.as_mut()?;
        Some(drive_peer(peer, &mut self.out, (&mut self.listener, &mut self.census), f))
    }

    fn next_ids(&mut self) -> (u32, u32, u32) {
        let nonce = self.rng.next_u32();
        match self.config.sequence_start {
            SequenceStart::Fixed { frame, packet } => (nonce, frame, packet),
            _ => (nonce, nonce, self.rng.next_u32() & 0x00FF_FFFF),
        }
    }

    /// This side's handshake request (the one it sends, or the one its replies carry),
    /// announcing datagram size `mtu`.
    fn request(&self, nonce: u32, frame: u32, packet: u32, mtu: usize) -> wire::ConnectRequest {
        wire::ConnectRequest { mtu: mtu as u32, ..peer::request(&self.config.peer, nonce, frame, packet, None) }
    }

    /// The datagram size a connection with `remote` announces: the configured `mtu`, or
    /// less where the path carries less ([`Host::set_path_mtu`]).
    fn mtu_towards(&self, remote: SocketAddr) -> usize {
        self.path_mtu.get(&remote).map_or(self.config.peer.mtu, |&m| m.min(self.config.peer.mtu))
    }

    /// Tells the host that the path to `remote` carries datagrams of at most `mtu` bytes,
    /// as the transport under the host knows it: a WebTransport session's maximum
    /// datagram size (QUIC's datagrams are smaller than UDP's), a tunnel's limit. A
    /// connection with `remote` made from then on (by [`Host::connect`] or a request from
    /// it) announces and uses at most that size, so both sides agree on it; the configured
    /// [`PeerConfig::mtu`](crate::PeerConfig::mtu) stays the ceiling for every path. A
    /// connection already made keeps its size. Call it before the first datagram of
    /// `remote` is handed over; [`Host::close_path`] forgets it. Fails with
    /// [`ConfigError::Mtu`] below the smallest datagram the protocol works with (in
    /// secure mode that smallest one plus the sealing) or above the largest.
    ///
    /// ```
    /// use std::time::Instant;
    /// use porous_proto::{Host, HostConfig};
    /// let mut host = Host::with_seed(HostConfig::default(), 1)?;
    /// let session = "[100::1]:1".parse()?; // how an adapter names a WebTransport session
    /// host.set_path_mtu(session, 1_150)?;
    /// host.connect(Instant::now(), session)?; // announces 1,150 bytes, not 1,200
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_path_mtu(&mut self, remote: SocketAddr, mtu: usize) -> Result<(), ConfigError> {
        let extra = if self.config.secure.is_some() { wire::secure::SEAL_EXTRA } else { 0 };
        if !(wire::MIN_MTU + extra..=wire::MAX_MTU).contains(&mtu) {
            return Err(ConfigError::Mtu(mtu));
        }
        self.path_mtu.insert(remote, mtu);
        Ok(())
    }

    /// Tells the host that the transport to `remote` is gone (a WebTransport session
    /// closed): the connection with `remote`, if any, ends at once with
    /// [`DisconnectReason::TransportClosed`](crate::DisconnectReason::TransportClosed)
    /// (reported if the application knows the peer) and nothing more is sent to it; a
    /// handshake under way there is dropped; what [`Host::set_path_mtu`] said of `remote`
    /// is forgotten. A later datagram from `remote` is treated as from a stranger.
    pub fn close_path(&mut self, now: Instant, remote: SocketAddr) {
        let now = self.observe(now);
        self.path_mtu.remove(&remote);
        if let Some(&index) = self.by_addr.get(&remote) {
            self.drive(index, |peer, out| peer.transport_closed(now, out));
            self.mark_dirty(index);
        }
    }

    /// Starts connecting to `remote`. The id is valid at once: `Connected` or
    /// `Disconnected` follows for it.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<PeerId, ConnectError> {
        self.connect_with(now, remote, &[])
    }

    /// Starts connecting to `remote` with connect data: up to
    /// [`MAX_CONNECT_DATA`](wire::MAX_CONNECT_DATA) bytes (fewer at a small `mtu`: see
    /// [`PeerConfig::max_connect_data`](crate::PeerConfig::max_connect_data)) that the
    /// remote's application gets with [`Event::ConnectRequest`] or [`Event::Connected`]:
    /// a version, a login ticket. Every request carries it, so it only makes requests
    /// larger, never the remote's replies. It is not encrypted, and until the connection
    /// is made it is not authenticated either.
    ///
    /// ```
    /// use std::time::Instant;
    /// use porous_proto::{Host, HostConfig};
    /// let mut client = Host::with_seed(HostConfig::default(), 1)?;
    /// let server = "10.0.0.2:9000".parse()?;
    /// let peer = client.connect_with(Instant::now(), server, b"v1.4 ticket:8f3a")?;
    /// # let _ = peer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect_with(&mut self, now: Instant, remote: SocketAddr, data: &[u8]) -> Result<PeerId, ConnectError> {
        let now = self.observe(now);
        if self.config.secure.is_some() {
            return Err(ConnectError::TokenRequired);
        }
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(ConnectError::InvalidAddress);
        }
        let mtu = self.mtu_towards(remote);
        let max = self.config.peer.connect_data_room(mtu);
        if data.len() > max {
            return Err(ConnectError::DataTooLarge { size: data.len(), max });
        }
        if let Some(&i) = self.by_addr.get(&remote) {
            return Err(ConnectError::PeerExists(self.id_of(i)));
        }
        if self.by_addr.len() >= self.config.max_peers {
            return Err(ConnectError::HostFull);
        }
        let (nonce, frame, packet) = self.next_ids();
        let req = self.request(nonce, frame, packet, mtu);
        let seed = self.rng.next_u64();
        let start = self.start(remote, req, seed);
        let index = self.insert(Peer::outgoing(now, start, Bytes::copy_from_slice(data), None));
        Ok(self.id_of(index))
    }

    /// Secure mode ([`HostConfig::secure`](crate::HostConfig::secure)): starts connecting
    /// to `remote`, one of the servers `token` names, with a connect token from the game's
    /// backend ([`crate::token`]). Every request carries the token's sealed part; the
    /// server verifies it and its application gets the token's client id and user data in
    /// [`Event::Connected`]. Everything after the request is encrypted and authenticated
    /// with the token's keys. A token the server refuses (expired, for another server,
    /// forged, used from another address) gets no answer: the attempt ends with
    /// `Disconnected { reason: Timeout }` after the connect timeout.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use porous_proto::{Host, HostConfig, SecureConfig};
    /// use porous_proto::token::{self, PrivateKey, TokenParams};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = "10.0.0.2:9000".parse()?;
    /// // The backend, with the key it shares with its servers:
    /// let key = PrivateKey::from_bytes([7; 32]);
    /// let params = TokenParams::new(42, vec![server], 1_700_000_000, Duration::from_secs(30));
    /// let bytes = token::generate(&key, &params, &mut rand_pcg::Pcg64Mcg::new(1))?;
    /// // The game client:
    /// let mut config = HostConfig::default();
    /// config.secure = Some(SecureConfig::client());
    /// let mut client = Host::with_seed(config, 2)?;
    /// client.connect_with_token(Instant::now(), server, &bytes)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_with_token(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        token: &[u8],
    ) -> Result<PeerId, ConnectError> {
        let now = self.observe(now);
        if self.config.secure.is_none() {
            return Err(ConnectError::NotSecure);
        }
        let token = ConnectToken::decode(token).map_err(ConnectError::Token)?;
        if !token.server_addresses().contains(&remote) {
            return Err(ConnectError::NotInToken);
        }
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(ConnectError::InvalidAddress);
        }
        if let Some(&i) = self.by_addr.get(&remote) {
            return Err(ConnectError::PeerExists(self.id_of(i)));
        }
        if self.by_addr.len() >= self.config.max_peers {
            return Err(ConnectError::HostFull);
        }
        let (nonce, frame, packet) = self.next_ids();
        let mtu = self.mtu_towards(remote);
        let req = self.request(nonce, frame, packet, mtu);
        // The largest request this attempt sends (with a cookie) must fit the datagram size.
        let mut probe = Vec::new();
        let with_cookie = wire::ConnectRequest { cookie: Some(wire::Cookie([0; wire::COOKIE_LEN])), ..req };
        let size = wire::secure::encode_request(&mut probe, token.server_part(), &with_cookie, 0, &token.keys().0);
        if size > mtu {
            return Err(ConnectError::TokenTooLarge { size, max: mtu });
        }
        let seed = self.rng.next_u64();
        let start = self.start(remote, req, seed);
        let peer = Peer::outgoing(now, start, Bytes::new(), Some(SecureState::client(&token)));
        let index = self.insert(peer);
        Ok(self.id_of(index))
    }

    /// Hands the host a datagram received from `from`. Malformed, foreign and forged
    /// datagrams are counted and dropped before any state changes.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let t = self.observe(now);
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        let ty = match wire::peek_type(datagram) {
            Ok(ty) => ty,
            Err(e) => return self.malformed(e),
        };
        if ty == wire::T_UNKNOWN_PATH {
            return self.handle_unknown_path(t, from, datagram);
        }
        if wire::key_class(ty) == KeyClass::Version {
            // A request passes the listener's gate (secure mode: token, seal, record of
            // use) before anything else.
            return match self.listener.open(now, from, datagram) {
                Ok(request) => self.handle_request((now, t), from, request),
                Err(Refused::Malformed(e)) => self.malformed(e),
                Err(Refused::NotListening) => self.stats.unknown_source += 1,
                // Counted by the listener.
                Err(_) => {}
            };
        }
        let Some(&index) = self.by_addr.get(&from) else {
            return self.handle_elsewhere(t, from, ty, datagram);
        };
        // Everything else goes to the peer of its address: opened with its keys (secure
        // mode: through its replay window), then acted on. A data datagram is copied once
        // into the receive arena (decrypted into it in secure mode); packets delivered
        // from it are slices of that copy.
        let Self { slots, out, recv_arena, listener, census, .. } = self;
        let result = slots.get_mut(index as usize).and_then(|s| s.peer.as_mut()).map(|peer| {
            drive_peer(peer, out, (listener, census), |peer, out| match peer.open(ty, datagram, recv_arena)? {
                Some(input) => peer.handle(t, input, out),
                None => Ok(()),
            })
        });
        match result {
            Some(Err(DecodeError::Replayed)) => self.stats.replayed += 1,
            Some(Err(e)) => self.malformed(e),
            _ => {}
        }
        self.mark_dirty(index);
    }

    /// A datagram from an address with no peer that is not a request: a connected peer's
    /// from a new address, if it verifies with the keys of one of the candidates (a moved:
    /// the peers its id names, once its cookie proved the address receives; anything else:
    /// the peers of the same IP, the one validating that address first, at most
    /// [`MAX_CANDIDATES`] either way). Otherwise counted as from an unknown source, and a
    /// connection datagram is answered with an unknown path, no larger than it, so that a
    /// remote that moved to another IP can say so. The peer acts on it and validates the
    /// address (`peer/path.rs`); when the address proves it receives, the tables follow
    /// the peer.
    fn handle_elsewhere(&mut self, t: Time, from: SocketAddr, ty: u8, datagram: &[u8]) {
        if !self.config.address_change {
            self.stats.unknown_source += 1;
            return;
        }
        // A moved carries the id and the cookie in the clear, at the same place in both
        // modes: a stranger's costs a MAC, not a verification per peer.
        let moved = (ty == wire::T_MOVED)
            .then(|| wire::peek_moved(datagram))
            .map(|m| m.and_then(|(id, cookie)| Some((id, self.path_cookies.verify(t, from, &cookie)?))));
        let probing = self.probes.get(&from).copied();
        let candidates: smallvec::SmallVec<[u32; MAX_CANDIDATES]> = match moved {
            Some(None) => smallvec::SmallVec::new(),
            Some(Some((id, _))) => {
                self.by_nonce.range((id, 0)..=(id, u32::MAX)).map(|(&(_, i), _)| i).take(MAX_CANDIDATES).collect()
            }
            None => {
                let same_ip = self.by_ip.range((from.ip(), 0)..=(from.ip(), u16::MAX)).map(|(_, &i)| i);
                probing.into_iter().chain(same_ip.filter(|&i| Some(i) != probing)).take(MAX_CANDIDATES).collect()
            }
        };
        let Self { slots, out, recv_arena, listener, census, rng, .. } = self;
        let mut found = None;
        let mut replayed = false;
        for index in candidates {
            let Some(peer) = slots.get_mut(index as usize).and_then(|s| s.peer.as_mut()) else { continue };
            match peer.open_elsewhere(ty, datagram, recv_arena) {
                Ok(Some(input)) => {
                    let (old, old_probe) = (peer.remote(), peer.probe_addr());
                    let fresh = || rng.next_u64();
                    let len = datagram.len();
                    let result = drive_peer(peer, out, (listener, census), |peer, out| match (input, moved) {
                        (Input::Control(Control::Moved { .. }), Some(Some((_, issued)))) => {
                            peer.moved(t, from, issued, out);
                            Ok(())
                        }
                        (input, _) => peer.handle_from(t, from, len, input, fresh, out),
                    });
                    found = Some((index, old, old_probe, peer.remote(), peer.probe_addr(), result));
                    break;
                }
                Ok(None) => {}
                Err(DecodeError::Replayed) => replayed = true,
                Err(_) => {}
            }
        }
        let Some((index, old, old_probe, new, probe, result)) = found else {
            if replayed {
                self.stats.replayed += 1;
            } else {
                self.stats.unknown_source += 1;
                self.answer_unknown_path(t, from, ty, datagram.len());
            }
            return;
        };
        if old_probe != probe {
            if let Some(a) = old_probe {
                self.probes.remove(&a);
            }
            if let Some(a) = probe {
                self.probes.insert(a, index);
            }
        }
        if old != new {
            self.by_addr.remove(&old);
            self.by_ip.remove(&(old.ip(), old.port()));
            self.by_addr.insert(new, index);
            self.by_ip.insert((new.ip(), new.port()), index);
            self.stats.address_changes += 1;
        }
        match result {
            Err(DecodeError::Replayed) => self.stats.replayed += 1,
            Err(e) => self.malformed(e),
            Ok(()) => {}
        }
        self.mark_dirty(index);
    }

    /// Answers a connection datagram of `len` bytes from `from`, an address with no
    /// connection, with an unknown path: only a datagram of the connection's kinds (data,
    /// and its control datagrams but a moved, which would answer back), only one at least
    /// as large as the answer, so `from` never gets more bytes than it sent, and only while
    /// the host has a connection that could have moved (a host with none has nothing to
    /// gain from answering, and stays silent to what it cannot read).
    fn answer_unknown_path(&mut self, t: Time, from: SocketAddr, ty: u8, len: usize) {
        let connection = wire::key_class(ty) == KeyClass::Connection && ty != wire::T_MOVED;
        let connected = self.census.of(PeerState::Connected) + self.census.of(PeerState::Disconnecting);
        if !connection || len < wire::UNKNOWN_PATH_DATAGRAM || connected == 0 {
            return;
        }
        let cookie = self.path_cookies.issue(t, from);
        self.out.control(from, &Control::UnknownPath(cookie), Key::version());
        self.stats.unknown_paths += 1;
    }

    /// An unknown path: the remote at `from` knows no connection of this side's address.
    /// The peer of `from` answers where it is now (`Peer::on_unknown_path`); from an
    /// address with no peer, or before a connection, it means nothing.
    fn handle_unknown_path(&mut self, t: Time, from: SocketAddr, datagram: &[u8]) {
        let cookie = match Control::decode(datagram, Key::version()) {
            Ok(Control::UnknownPath(cookie)) => cookie,
            Ok(_) => return self.malformed(DecodeError::UnknownType(wire::T_UNKNOWN_PATH)),
            Err(e) => return self.malformed(e),
        };
        let Some(&index) = self.by_addr.get(&from) else {
            self.stats.unknown_source += 1;
            return;
        };
        let Self { slots, out, listener, census, .. } = self;
        if let Some(peer) = slots.get_mut(index as usize).and_then(|s| s.peer.as_mut()) {
            drive_peer(peer, out, (listener, census), |peer, out| peer.on_unknown_path(t, cookie, out));
        }
        self.mark_dirty(index);
    }

    fn malformed(&mut self, e: DecodeError) {
        self.stats.malformed += 1;
        if e == DecodeError::BadChecksum {
            self.stats.bad_checksum += 1;
        }
    }

    /// A connection request from `from`, opened by the listener.
    ///
    /// From an address with a peer, it is that peer's, unless the peer is an incoming
    /// handshake of another attempt: a request alone does not replace it (anyone can put an
    /// address on a datagram, and in secure mode anyone can get a token), one that proves
    /// it receives at the address does (the listener's cookie). Otherwise the listener
    /// decides. Nothing is allocated for a request the host does not take, and every answer
    /// is no larger than the request.
    fn handle_request(&mut self, (now, t): (Instant, Time), from: SocketAddr, req: Request<'_>) {
        if let Some(&index) = self.by_addr.get(&from) {
            let token = req.token.as_ref();
            let slot = self.slots.get(index as usize);
            let held = slot.and_then(|s| s.peer.as_ref()).is_some_and(|p| p.is_held_against(&req.request, token));
            if !held {
                let input = Input::Request { request: req.request, data: req.data, token };
                self.drive(index, |peer, out| peer.handle(t, input, out));
                self.mark_dirty(index);
                return;
            }
            if let Err(cookie) = self.listener.prove(now, from, &req.request) {
                return self.answer(from, &Control::Challenge(cookie), req.reply_key());
            }
            self.drive(index, |peer, out| peer.supersede(t, out));
            self.remove(index);
        }
        let mtu = self.mtu_towards(from);
        match self.listener.judge(now, from, req, self.by_addr.len(), (&self.config.peer, mtu)) {
            Verdict::Answer(c, key) => self.answer(from, &c, key),
            Verdict::Defer => {}
            Verdict::Accept(admitted) => {
                let (nonce, frame, packet) = self.next_ids();
                let seed = self.rng.next_u64();
                let secure = admitted.token.as_ref().map(|token| SecureState::server(token, self.rng.next_u64()));
                let local = self.request(nonce, frame, packet, mtu);
                let start = self.start(from, local, seed);
                let peer = Peer::incoming(t, start, admitted, secure, self.config.manual_accept, &mut self.out);
                self.insert(peer);
            }
        }
    }

    /// Answers a request from `to` before any peer does, keyed or sealed with `key`.
    fn answer(&mut self, to: SocketAddr, c: &Control<'_>, key: ReplyKey) {
        match key {
            ReplyKey::Plain(nonce) => self.out.control(to, c, Key::reply(nonce)),
            ReplyKey::Sealed(key) => {
                let salt = self.rng.next_u64();
                self.out.encode(to, |buf| wire::secure::encode_reply(buf, c, &key, salt));
            }
        }
    }

    /// A new peer's start at `remote`: the id the next inserted peer gets, this host's
    /// settings, its request `local` and its session's secret `seed`.
    fn start(&self, remote: SocketAddr, local: wire::ConnectRequest, seed: u64) -> peer::Start {
        // Discovery never probes a path beyond what its adapter said it carries.
        let max = self.config.peer.max_mtu;
        let mtu_ceiling = self.path_mtu.get(&remote).map_or(max, |&m| m.min(max));
        peer::Start { id: self.next_id(), remote, settings: Arc::clone(&self.settings), local, seed, mtu_ceiling }
    }

    /// Runs every timer due at `now` and assembles the datagrams that can go out: one
    /// POROUS step. Afterwards drain [`Host::poll_transmit`] and [`Host::poll_event`].
    pub fn step(&mut self, now: Instant) {
        let now = self.observe(now);
        if let Some(prev) = self.last_step {
            let interval = now.saturating_duration_since(prev);
            self.step_interval =
                if self.step_interval.is_zero() { interval } else { self.step_interval * 7 / 8 + interval / 8 };
        }
        self.last_step = Some(now);
        let due = Deadlines::ticks(now);
        while let Some((t, index, generation)) = self.timers.peek() {
            if t > due {
                break;
            }
            self.timers.pop();
            if let Some(slot) = self.slots.get_mut(index as usize)
                && slot.generation == generation
                && slot.scheduled() == Some(t)
            {
                slot.set_scheduled(None);
                slot.mark(index, &mut self.dirty);
            }
        }
        let dirty = std::mem::take(&mut self.dirty);
        for &index in &dirty {
            self.poll_peer(now, index);
        }
        let mut dirty = dirty;
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
        self.compact_timers();
    }

    fn poll_peer(&mut self, now: Time, index: u32) {
        let step = self.step_interval;
        // One lookup of the slot for the whole poll; the fields apart, so that the peer
        // can write to the outputs.
        let Self { slots, out, listener, census, timers, .. } = self;
        let Some(slot) = slots.get_mut(index as usize) else { return };
        slot.dirty = false;
        let Some(peer) = slot.peer.as_mut() else { return };
        drive_peer(peer, out, (listener, census), |peer, out| peer.poll(now, step, out));
        if peer.state() == PeerState::Zombie {
            self.remove(index);
            return;
        }
        let next = peer.next_timeout(now).map(Deadlines::ticks);
        if next != slot.scheduled() {
            slot.set_scheduled(next);
            if let Some(t) = next {
                timers.push(t, index, slot.generation);
            }
        }
    }

    /// Drops heap entries no slot is filed under any more, when they outnumber the peers.
    fn compact_timers(&mut self) {
        if self.timers.len() <= 4 * self.by_addr.len() + 64 {
            return;
        }
        let slots = &self.slots;
        self.timers
            .retain(|t, i, g| slots.get(i as usize).is_some_and(|s| s.generation == g && s.scheduled() == Some(t)));
    }

    /// The next datagram to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.out.transmits.pop_front()?;
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += t.payload.len() as u64;
        Some(t)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }

    /// When [`Host::step`] must run next: at once if input arrived or the application
    /// called the host since the last step, otherwise the earliest peer deadline. `None`
    /// when there is nothing to wait for (no peers).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.dirty.is_empty() {
            // Something was marked by a call that gave the time: step at once.
            if let Some(now) = self.last_now {
                return Some(now);
            }
        }
        self.timers.peek().and_then(|(t, _, _)| self.timers.instant(t))
    }

    /// Queues a packet for `peer` on `channel`. It leaves at the next [`Host::step`]; an
    /// unreliable packet's deadline
    /// ([`ChannelConfig::unreliable_deadline`](crate::ChannelConfig::unreliable_deadline))
    /// counts from that step, or from an earlier [`Host::handle_datagram`].
    ///
    /// `data` is anything that converts into [`Bytes`] without a copy: `Bytes`, `Vec<u8>`,
    /// `String`, `Box<[u8]>`, `&'static [u8]` or `&'static str` (a borrowed slice:
    /// `Bytes::copy_from_slice`). The host keeps it as it is until acknowledged; the same
    /// `Bytes` sent to many peers is shared, not copied.
    #[inline]
    pub fn send(
        &mut self,
        peer: PeerId,
        channel: usize,
        data: impl Into<Bytes>,
        mode: SendMode,
    ) -> Result<(), SendError> {
        self.send_bytes(peer, channel, data.into(), mode)
    }

    fn send_bytes(&mut self, peer: PeerId, channel: usize, data: Bytes, mode: SendMode) -> Result<(), SendError> {
        // One lookup of the slot for the check, the send and the mark: a send is per
        // message.
        let slot = self.slots.of_mut(peer).ok_or(SendError::UnknownPeer)?;
        slot.peer.as_mut().ok_or(SendError::UnknownPeer)?.send(channel, data, mode)?;
        slot.mark(peer.index, &mut self.dirty);
        Ok(())
    }

    /// Runs an application call on `peer`, if it exists, counting a request it rejects.
    fn call(&mut self, now: Instant, peer: PeerId, f: impl FnOnce(&mut Peer, &mut Outputs, Time)) {
        let now = self.observe(now);
        if self.peer_index(peer).is_none() {
            return;
        }
        let rejected = self.drive(peer.index, |p, out| {
            let awaiting = p.is_awaiting();
            f(p, out, now);
            // A request awaiting the application ends only by being rejected.
            awaiting && p.state() == PeerState::Zombie
        });
        if rejected == Some(true) {
            self.stats.rejected += 1;
        }
        self.mark_dirty(peer.index);
    }

    /// Disconnects gracefully: packets already sent are delivered first, then the
    /// disconnection is acknowledged; `Disconnected` follows (with
    /// [`DisconnectReason::FlushTimeout`](crate::DisconnectReason::FlushTimeout) instead of
    /// `Local` if some of them were never acknowledged). The remote side gets
    /// [`DisconnectReason::Remote`](crate::DisconnectReason::Remote) with code 0.
    pub fn disconnect(&mut self, now: Instant, peer: PeerId) {
        self.disconnect_with(now, peer, 0);
    }

    /// [`Host::disconnect`] with an application code (ENet's disconnect data): the remote
    /// side's application gets it in `DisconnectReason::Remote { code }`. Why a player was
    /// kicked, that a match ended, that the client quit. On a request awaiting the
    /// application's decision it is [`Host::reject`].
    ///
    /// The code travels in every disconnection request until one is acknowledged, so it
    /// arrives unless the remote stops answering altogether.
    pub fn disconnect_with(&mut self, now: Instant, peer: PeerId, code: u32) {
        self.call(now, peer, |p, out, now| p.disconnect(now, code, out));
    }

    /// Disconnects at once, dropping pending packets; `Disconnected` is queued now and the
    /// remote side is told once, on a best-effort basis (with code 0).
    pub fn disconnect_now(&mut self, now: Instant, peer: PeerId) {
        self.disconnect_now_with(now, peer, 0);
    }

    /// [`Host::disconnect_now`] with an application code for the remote side, sent once,
    /// on a best-effort basis. On a request awaiting the application's decision it is
    /// [`Host::reject`].
    pub fn disconnect_now_with(&mut self, now: Instant, peer: PeerId, code: u32) {
        self.call(now, peer, |p, out, now| p.disconnect_now(now, code, out));
    }

    /// Accepts a connection request the host reported as [`Event::ConnectRequest`] (with
    /// [`HostConfig::manual_accept`](crate::HostConfig::manual_accept)): the handshake
    /// goes on, and `Connected` (or `Disconnected`, if it does not complete within the
    /// connect timeout counted from the request's arrival) follows for `peer`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use porous_proto::{Event, Host, HostConfig};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (client_addr, server_addr) = ("10.0.0.1:5000".parse()?, "10.0.0.2:9000".parse()?);
    /// let mut config = HostConfig::default();
    /// config.manual_accept = true;
    /// let mut server = Host::with_seed(config, 1)?;
    /// let mut client = Host::with_seed(HostConfig::default(), 2)?;
    /// let start = Instant::now();
    /// client.connect_with(start, server_addr, b"ticket:alice")?;
    /// let mut welcomed = None;
    /// for tick in 0..50 {
    ///     let now = start + Duration::from_millis(10 * tick);
    ///     client.step(now);
    ///     server.step(now);
    ///     while let Some(t) = client.poll_transmit() { server.handle_datagram(now, client_addr, &t.payload); }
    ///     while let Some(t) = server.poll_transmit() { client.handle_datagram(now, server_addr, &t.payload); }
    ///     while let Some(event) = server.poll_event() {
    ///         match event {
    ///             // The application decides, from the connect data.
    ///             Event::ConnectRequest { peer, data, .. } if data.starts_with(b"ticket:") => server.accept(now, peer)?,
    ///             Event::ConnectRequest { peer, .. } => server.reject(now, peer, 403)?,
    ///             Event::Connected { data, .. } => welcomed = Some(data),
    ///             _ => {}
    ///         }
    ///     }
    /// }
    /// assert_eq!(welcomed.as_deref(), Some(&b"ticket:alice"[..]));
    /// # Ok(())
    /// # }
    /// ```
    pub fn accept(&mut self, now: Instant, peer: PeerId) -> Result<(), AdmissionError> {
        self.admit(now, peer, |p, out, now| p.accept(now, out))
    }

    /// Rejects a connection request the host reported as [`Event::ConnectRequest`]: the
    /// requester is refused with `code`, which its application gets in
    /// [`DisconnectReason::Rejected`](crate::DisconnectReason::Rejected), and the peer is
    /// gone at once (`Disconnected { reason: Local }` is queued for it), having held no
    /// more than a pending handshake. Should the refusal be lost, the requester's next
    /// retry arrives as a new request.
    pub fn reject(&mut self, now: Instant, peer: PeerId, code: u32) -> Result<(), AdmissionError> {
        self.admit(now, peer, |p, out, now| p.reject(now, code, out))
    }

    /// Runs an admission decision on `peer`.
    fn admit(
        &mut self,
        now: Instant,
        peer: PeerId,
        decide: impl FnOnce(&mut Peer, &mut Outputs, Time) -> bool,
    ) -> Result<(), AdmissionError> {
        self.peer_index(peer).ok_or(AdmissionError::UnknownPeer)?;
        let mut decided = false;
        self.call(now, peer, |p, out, now| decided = decide(p, out, now));
        if decided { Ok(()) } else { Err(AdmissionError::NotAwaiting) }
    }

    /// A snapshot of a peer's state and counters.
    pub fn peer_stats(&self, peer: PeerId) -> Option<PeerStats> {
        let index = self.peer_index(peer)?;
        self.slots.get(index)?.peer.as_ref().map(Peer::stats)
    }

    /// The host's counters.
    pub fn stats(&self) -> HostStats {
        debug_assert_eq!(self.census.0.iter().sum::<usize>(), self.by_addr.len(), "the census is every peer");
        let l = self.listener.counters();
        HostStats {
            bad_tokens: l.bad_tokens,
            expired_tokens: l.expired_tokens,
            wrong_server_tokens: l.wrong_server_tokens,
            reused_tokens: l.reused_tokens,
            refused: l.refused,
            challenged: l.challenged,
            bad_cookies: l.bad_cookies,
            handshakes_deferred: l.handshakes_deferred,
            accepted: l.accepted,
            pending: self.listener.pending(),
            peers: self.census.of(PeerState::Connecting) + self.census.of(PeerState::Connected),
            connecting: self.census.of(PeerState::Connecting),
            connected: self.census.of(PeerState::Connected),
            closing: self.census.of(PeerState::Disconnecting)
                + self.census.of(PeerState::Disconnected)
                + self.census.of(PeerState::Zombie),
            ..self.stats
        }
    }

    /// The memory the host holds, by what holds it. Every part is bounded by the
    /// configuration (peers, queues per channel, reassembly per peer); see
    /// `docs/security.md`.
    pub fn memory_usage(&self) -> MemoryUsage {
        let mut m = MemoryUsage::default();
        let mut held = 0;
        for peer in self.slots.iter().filter_map(|s| s.peer.as_ref()) {
            m.peers += peer.memory();
            m.reassembly += peer.stats().reassembly_bytes;
            held += 1;
        }
        m.table = size_of::<Self>()
            // A peer lives in its slot: its own bytes count with the peers, above.
            + self.slots.memory().saturating_sub(held * size_of::<Peer>())
            + self.free.capacity() * size_of::<u32>()
            // A hash map holds its entries and a control byte per bucket, and keeps an
            // eighth of its buckets free.
            + self.by_addr.capacity() * 8 / 7 * (size_of::<(SocketAddr, u32)>() + 1)
            + self.timers.memory()
            + self.dirty.capacity() * size_of::<u32>()
            // An ordered map's entries live in nodes of up to 11, about two thirds full.
            + self.by_ip.len() * 3 / 2 * size_of::<((IpAddr, u16), u32)>()
            + self.probes.capacity() * 8 / 7 * (size_of::<(SocketAddr, u32)>() + 1)
            + self.by_nonce.len() * 3 / 2 * size_of::<(u32, u32)>()
            + self.listener.memory();
        m.buffers = self.out.memory() + self.recv_arena.capacity();
        m.total = m.peers + m.table + m.buffers;
        m
    }

    /// The ids of every peer the host holds, in slot order.
    pub fn peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.peer.is_some())
            .map(|(i, s)| PeerId { index: i as u32, generation: s.generation })
    }

    /// The peer with address `remote`, if any.
    pub fn peer_by_addr(&self, remote: SocketAddr) -> Option<PeerId> {
        self.by_addr.get(&remote).map(|&i| self.id_of(i))
    }

    /// The address of `peer`, if it exists: where its datagrams come from and go to. The
    /// inverse of [`Host::peer_by_addr`].
    pub fn remote_addr(&self, peer: PeerId) -> Option<SocketAddr> {
        let index = self.peer_index(peer)?;
        self.slots.get(index)?.peer.as_ref().map(Peer::remote)
    }

    /// The data path of the connection with `remote`, once it is made (see
    /// `fuzzing::hooks`).
    #[cfg(feature = "arbitrary")]
    pub(crate) fn session_at(&self, remote: SocketAddr) -> Option<&peer::Session> {
        let index = *self.by_addr.get(&remote)?;
        self.slots.get(index as usize)?.peer.as_ref()?.session()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::{Slot, Slots};

    /// Most bytes a [`Slot`] may take. A server's tick goes through its peers' slots in
    /// turn, and a slot's size costs more than the lines the tick reads: on the machine of
    /// `docs/notes/server-scale.md` (Part 10), 10,000 active peers took 1.09x, 1.21x and 1.28x as
    /// long a tick with 448, 576 and 832 bytes of padding that nothing reads added to each
    /// 1,792-byte slot (320 bytes: no change; 100 peers: no change). Growing a connection's
    /// fixed state past this is a cost every active peer pays, to be measured first.
    const SLOT_BUDGET: usize = 2_048;

    /// The table grows by an eighth of its slots (by 16 while that is more), never by more.
    #[test]
    fn slots_grow_by_an_eighth() {
        let mut slots = Slots::default();
        for i in 0..3000 {
            assert_eq!(slots.grow(), i);
            let (len, room) = (slots.len(), slots.slots.capacity());
            assert!(room <= len + (len / 8).max(16), "{room} slots of room for {len}");
        }
        assert_eq!(slots.iter().count(), 3000);
    }

    /// A slot is aligned to a cache line, and its own fields beside the peer (with its
    /// session inline) take no line of their own.
    #[test]
    fn a_slot_is_its_peer_in_whole_cache_lines() {
        let peer = size_of::<crate::peer::Peer>();
        assert_eq!(align_of::<Slot>(), 64);
        assert_eq!(size_of::<Slot>(), (peer + 16).next_multiple_of(64), "a peer of {peer} bytes");
    }

    /// A slot stays within [`SLOT_BUDGET`]: past it, every active peer's tick pays for the
    /// size, whether or not the new bytes are read (see the constant).
    #[test]
    fn a_slot_stays_within_its_budget() {
        let slot = size_of::<Slot>();
        assert!(slot <= SLOT_BUDGET, "a slot of {slot} bytes is over its budget of {SLOT_BUDGET}");
    }
}
