//! [`UdpIo`]: batched receive and send on one socket.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::time::SystemTime;

use porous_pcap::{Direction, Recorder};
use porous_proto::Transmit;
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState};

#[cfg(feature = "fault-injection")]
use crate::Faults;
use crate::plan::{lone_datagrams, run_length};
use crate::{AsSocketRef, BATCH_SIZE, Batching, SocketRef, SocketStats};

/// The socket's own address, for a capture.
fn local_addr(socket: SocketRef<'_>) -> io::Result<SocketAddr> {
    socket2::SockRef::from(&socket)
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not an IP socket"))
}

/// The address a capture shows for this socket talking to `peer`: its own, or for a
/// socket bound to a wildcard address, the wildcard of `peer`'s family (a dual-stack
/// socket talks to IPv4 peers too).
fn captured(local: SocketAddr, peer: SocketAddr) -> SocketAddr {
    if local.ip().is_unspecified() {
        SocketAddr::new(porous_pcap::unspecified_like(peer).ip(), local.port())
    } else {
        local
    }
}

/// Bytes per receive buffer: the largest UDP payload, which is also the most a GRO buffer
/// holds (the kernel coalesces at most 64 KB).
const SLOT: usize = 65_536;

/// The most datagrams one `sendmmsg` call takes.
pub(crate) const MAX_MESSAGES: usize = 32;

/// A way of sending several datagrams in one system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Offload {
    /// UDP GSO: equal-size datagrams to one destination in one buffer.
    Gso,
    /// `sendmmsg`: any datagrams, one message each.
    Mmsg,
}

/// The batched IO of one UDP socket: receive buffers, the queue of datagrams to send, and
/// what the kernel turned out to support. See the [crate docs](crate).
///
/// It does not own the socket: each call borrows it ([`AsSocketRef::as_socket_ref`]), so
/// it works under any event loop. The socket must be non-blocking (creating a `UdpIo`
/// makes it so) and must stay the same one for the `UdpIo`'s life.
pub struct UdpIo {
    state: UdpSocketState,
    batching: Batching,
    /// A GSO send failed where one-by-one sends of its datagrams worked: GSO stays off.
    gso_refused: bool,
    /// A `sendmmsg` failed where its first datagram alone went: `sendmmsg` stays off.
    mmsg_refused: bool,
    /// `BATCH_SIZE` slots of `SLOT` bytes. Zeroed lazily by the allocator: only what the
    /// kernel writes is ever touched.
    recv_buf: Box<[u8]>,
    metas: Vec<RecvMeta>,
    /// Slots the last receive filled.
    filled: usize,
    queue: VecDeque<Transmit>,
    /// Datagrams at the queue's front to send one by one: what is left of a refused batch.
    singles: usize,
    /// The batching whose send was refused: the next one-by-one send tells whether it or
    /// the destination was at fault.
    probing: Option<Offload>,
    gso_buf: Vec<u8>,
    stats: SocketStats,
    /// Where every datagram sent and received is recorded, if anywhere, and the socket's
    /// own address for the captured packets.
    capture: Option<(Recorder, SocketAddr)>,
    #[cfg(feature = "fault-injection")]
    faults: Faults,
}

impl fmt::Debug for UdpIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpIo")
            .field("batching", &self.batching)
            .field("max_segments", &self.max_segments())
            .field("gro_segments", &self.gro_segments())
            .field("pending", &self.queue.len())
            .field("stats", &self.stats)
            .field("capture", &self.capture.as_ref().map(|(r, _)| r.path()))
            .finish_non_exhaustive()
    }
}

impl UdpIo {
    /// Prepares `socket` for batched IO: makes it non-blocking and switches on what the
    /// kernel offers (GRO, packet information, the don't-fragment behaviour described in
    /// the [crate docs](crate#socket-options)). When the environment asks for a capture
    /// (`POROUS_CAPTURE`, see [the crate docs](crate#captures)), every datagram the
    /// socket sends and receives is recorded; a capture file that cannot be created is
    /// this call's error.
    pub fn new(socket: &impl AsSocketRef, batching: Batching) -> io::Result<Self> {
        let borrowed = socket.as_socket_ref();
        let state = UdpSocketState::new(UdpSockRef::from(&borrowed))?;
        let capture = match Recorder::from_env()? {
            Some(recorder) => Some((recorder, local_addr(borrowed)?)),
            None => None,
        };
        Ok(Self {
            state,
            batching,
            gso_refused: false,
            mmsg_refused: false,
            recv_buf: vec![0; SLOT * BATCH_SIZE].into_boxed_slice(),
            metas: vec![RecvMeta::default(); BATCH_SIZE],
            filled: 0,
            queue: VecDeque::new(),
            singles: 0,
            probing: None,
            gso_buf: Vec::new(),
            stats: SocketStats::default(),
            capture,
            #[cfg(feature = "fault-injection")]
            faults: Faults::NONE,
        })
    }

    /// Records every datagram this socket sends and receives from now on into `recorder`
    /// (`socket` is the socket this `UdpIo` serves: its address goes in the capture), or
    /// stops recording with `None`. A [`Recorder`] writes off this thread and never
    /// blocks it; see [the crate docs](crate#captures).
    pub fn set_capture(&mut self, socket: SocketRef<'_>, recorder: Option<Recorder>) -> io::Result<()> {
        self.capture = match recorder {
            Some(r) => Some((r, local_addr(socket)?)),
            None => None,
        };
        Ok(())
    }

    /// The capture this socket records into, if any.
    pub fn capture(&self) -> Option<&Recorder> {
        self.capture.as_ref().map(|(r, _)| r)
    }

    /// The batching in use.
    pub fn batching(&self) -> Batching {
        self.batching
    }

    /// Changes the batching from the next call on.
    pub fn set_batching(&mut self, batching: Batching) {
        self.batching = batching;
    }

    /// Injects `faults` from the next call on; [`Faults::NONE`] ends them.
    #[cfg(feature = "fault-injection")]
    pub fn inject(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// The most datagrams one send may carry now: 1 without GSO (not offered by the
    /// kernel, switched off by [`Batching::gso`], or refused at send time), else
    /// quinn-udp's figure (64 on Linux).
    pub fn max_segments(&self) -> usize {
        if self.batching.gso && !self.gso_refused { self.state.max_gso_segments().max(1) } else { 1 }
    }

    /// The most datagrams one `sendmmsg` may carry now: 1 where it does not exist (it is
    /// Linux's), is switched off by [`Batching::send_batch`], or was refused at send time.
    pub fn max_messages(&self) -> usize {
        if cfg!(target_os = "linux") && !self.mmsg_refused {
            self.batching.send_batch.clamp(1, MAX_MESSAGES)
        } else {
            1
        }
    }

    /// The most datagrams the kernel may coalesce into one receive buffer (64 with GRO,
    /// else 1).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// The counters so far.
    pub fn stats(&self) -> SocketStats {
        self.stats
    }

    /// One receive system call. Returns how many datagrams it brought, which
    /// [`UdpIo::received`] then yields; an error (`WouldBlock` included) leaves
    /// [`UdpIo::received`] empty. Errors other than `WouldBlock` are counted.
    pub fn recv(&mut self, socket: SocketRef<'_>) -> io::Result<usize> {
        self.filled = 0;
        #[cfg(feature = "fault-injection")]
        if let Some(kind) = self.faults.recv_error {
            self.stats.recv_errors += 1;
            return Err(io::Error::from(kind));
        }
        let slots = self.batching.recv_batch.clamp(1, BATCH_SIZE);
        let mut chunks = self.recv_buf.chunks_mut(SLOT);
        let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
        let (bufs, metas) =
            (bufs.get_mut(..slots).unwrap_or_default(), self.metas.get_mut(..slots).unwrap_or_default());
        match self.state.recv(UdpSockRef::from(&socket), bufs, metas) {
            Ok(n) => {
                self.filled = n;
                if let Some((recorder, local)) = &self.capture {
                    let now = SystemTime::now();
                    for (meta, datagram) in self.datagrams() {
                        // The address the datagram was sent to, where the kernel says.
                        let to = meta.dst_ip.map_or(*local, |ip| SocketAddr::new(ip, local.port()));
                        recorder.record_at(now, Direction::Inbound, meta.addr, captured(to, meta.addr), datagram);
                    }
                }
                let datagrams = self.received().count();
                self.stats.recv_calls += 1;
                self.stats.received += datagrams as u64;
                Ok(datagrams)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::WouldBlock {
                    self.stats.recv_errors += 1;
                }
                Err(e)
            }
        }
    }

    /// The datagrams the last [`UdpIo::recv`] brought, with their senders, in the order
    /// they arrived.
    pub fn received(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> + '_ {
        self.datagrams().map(|(meta, datagram)| (meta.addr, datagram))
    }

    /// [`UdpIo::received`], each datagram with what the kernel said of its buffer.
    fn datagrams(&self) -> impl Iterator<Item = (&RecvMeta, &[u8])> + '_ {
        let metas = self.metas.get(..self.filled).unwrap_or_default();
        metas.iter().zip(self.recv_buf.chunks(SLOT)).flat_map(|(meta, slot)| {
            let data = slot.get(..meta.len).unwrap_or(slot);
            // `stride` is the size of each datagram in a GRO buffer, the last one maybe shorter.
            let stride = if meta.stride == 0 { meta.len } else { meta.stride }.max(1);
            data.chunks(stride).map(move |datagram| (meta, datagram))
        })
    }

    /// Queues a datagram behind those already queued.
    pub fn push(&mut self, transmit: Transmit) {
        self.queue.push_back(transmit);
    }

    /// Datagrams queued and not yet sent.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Sends queued datagrams, oldest first, until the queue is empty (`Ok`) or the socket
    /// would block (`Err` of kind `WouldBlock`; the rest stays queued, in order). Runs of
    /// equal-size datagrams to one destination go out by GSO, the datagrams between them
    /// by `sendmmsg`, where the kernel has them. Any other error drops only the datagrams
    /// of the send that failed (one destination's), counts them in
    /// [`SocketStats::send_errors`], and sending goes on. A batched send that fails is
    /// retried datagram by datagram, and if that works the batching is switched off.
    pub fn send(&mut self, socket: SocketRef<'_>) -> io::Result<()> {
        while !self.queue.is_empty() {
            let (count, offload) = self.plan();
            let result = match offload {
                Some(Offload::Mmsg) => self.send_mmsg(socket, count),
                _ => self.send_front(socket, count).map(|()| count),
            };
            match result {
                Ok(sent) => {
                    self.singles = self.singles.saturating_sub(sent);
                    if let Some(refused) = self.probing.take() {
                        // The datagram goes through alone: the batching was what failed.
                        // It is off from now on, and the rest may go by the other one.
                        match refused {
                            Offload::Gso => self.gso_refused = true,
                            Offload::Mmsg => self.mmsg_refused = true,
                        }
                        self.singles = 0;
                    }
                    if let Some((recorder, local)) = &self.capture {
                        let now = SystemTime::now();
                        for t in self.queue.iter().take(sent) {
                            recorder.record_at(
                                now,
                                Direction::Outbound,
                                captured(*local, t.remote),
                                t.remote,
                                &t.payload,
                            );
                        }
                    }
                    self.queue.drain(..sent);
                    self.stats.sent += sent as u64;
                    self.stats.send_calls += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stats.would_block += 1;
                    return Err(e);
                }
                Err(_) if offload == Some(Offload::Gso) => {
                    // Send the batch's datagrams one by one; the first tells whether the
                    // offload or the destination failed.
                    self.stats.send_fallbacks += 1;
                    self.singles = count;
                    self.probing = Some(Offload::Gso);
                }
                Err(_) if offload == Some(Offload::Mmsg) => {
                    // `sendmmsg` reports an error only for its first message (later ones
                    // end the call early): send that one alone to learn whose fault it is.
                    self.stats.send_fallbacks += 1;
                    self.singles = 1;
                    self.probing = Some(Offload::Mmsg);
                }
                Err(_) => {
                    self.probing = None;
                    self.singles = self.singles.saturating_sub(1);
                    self.queue.pop_front();
                    self.stats.send_errors += 1;
                }
            }
        }
        Ok(())
    }

    /// How many datagrams the next send takes, and how.
    fn plan(&self) -> (usize, Option<Offload>) {
        if self.singles > 0 {
            return (1, None);
        }
        let segments = self.max_segments();
        let run = run_length(&self.queue, segments);
        if run > 1 {
            return (run, Some(Offload::Gso));
        }
        match lone_datagrams(&self.queue, segments, self.max_messages()) {
            lone if lone > 1 => (lone, Some(Offload::Mmsg)),
            _ => (1, None),
        }
    }

    /// One `sendmmsg` for the first `count` queued datagrams, one message each. Returns
    /// how many the kernel took (at least 1), or the error of the first.
    #[cfg(target_os = "linux")]
    fn send_mmsg(&mut self, socket: SocketRef<'_>, count: usize) -> io::Result<usize> {
        use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};

        // Fault injection may end the call early, as the kernel does at a failing message.
        #[cfg(feature = "fault-injection")]
        let mut count = count;
        #[cfg(feature = "fault-injection")]
        {
            if self.faults.mmsg_refused {
                return Err(io::Error::from(io::ErrorKind::Unsupported));
            }
            // As the kernel does: the call ends before the failing message, or fails with it.
            if let Some(at) = self.queue.iter().take(count).position(|t| Some(t.remote) == self.faults.unreachable) {
                if at == 0 {
                    return Err(io::Error::from(io::ErrorKind::PermissionDenied));
                }
                count = at;
            }
        }
        let transmits: Vec<&Transmit> = self.queue.iter().take(count).collect();
        let addrs: Vec<SocketAddrAny> = transmits.iter().map(|t| SocketAddrAny::from(t.remote)).collect();
        let iovs: Vec<[IoSlice<'_>; 1]> = transmits.iter().map(|t| [IoSlice::new(&t.payload)]).collect();
        let mut controls: Vec<SendAncillaryBuffer<'_, '_, '_>> =
            (0..count).map(|_| SendAncillaryBuffer::default()).collect();
        let mut messages: Vec<MMsgHdr<'_>> = addrs
            .iter()
            .zip(&iovs)
            .zip(controls.iter_mut())
            .map(|((addr, iov), control)| MMsgHdr::new_with_addr(addr, iov, control))
            .collect();
        loop {
            match rustix::net::sendmmsg(socket, &mut messages, SendFlags::empty()) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(sent) => return Ok(sent),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// No `sendmmsg` here: [`UdpIo::max_messages`] is 1, so this is never called.
    #[cfg(not(target_os = "linux"))]
    fn send_mmsg(&mut self, _socket: SocketRef<'_>, _count: usize) -> io::Result<usize> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    /// One send system call for the first `count` queued datagrams.
    fn send_front(&mut self, socket: SocketRef<'_>, count: usize) -> io::Result<()> {
        let Some(front) = self.queue.front() else { return Ok(()) };
        let contents: &[u8] = if count > 1 {
            self.gso_buf.clear();
            for t in self.queue.iter().take(count) {
                self.gso_buf.extend_from_slice(&t.payload);
            }
            &self.gso_buf
        } else {
            &front.payload
        };
        #[cfg(feature = "fault-injection")]
        {
            if self.faults.unreachable == Some(front.remote) {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            if self.faults.gso_refused && count > 1 {
                return Err(io::Error::other("injected: GSO refused"));
            }
        }
        let transmit = quinn_udp::Transmit {
            destination: front.remote,
            ecn: None,
            contents,
            segment_size: (count > 1).then_some(front.payload.len()),
            src_ip: None,
        };
        self.state.try_send(UdpSockRef::from(&socket), &transmit)
    }
}
