//! A connection's data path once both sides' parameters are known: it joins the transfer
//! layer, the channels and the connection's keys, and nothing else.
//!
//! Receiving a datagram: decode and verify it (ids expanded from the receive windows as
//! they are before the datagram), hand acknowledgements and pings to the transfer layer,
//! then, for a frame inside the receive window, let the channels admit it (a frame is
//! stored and acknowledged whole, or neither) and receive its messages. Sending: channels
//! queue messages into the transfer layer, which each flush turns into datagrams.

use crate::time::Time;
use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use super::negotiate::Params;
use super::settings::Settings;
use crate::arena::Arena;
use crate::channel::{ChannelCounters, Channels};
use crate::event::{SendError, SendMode};
use crate::transfer::{Transfer, TransferConfig};
use crate::wire::secure::{AeadKey, SEAL_EXTRA, TAG_LEN};
use crate::wire::{ConnectRequest, Data, DecodeError, Expand, FixedRefs, Key, Message, PlainKey};

#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) transfer: Transfer,
    pub(crate) channels: Channels,
    /// The largest datagram this connection may send: the negotiated size, or path MTU
    /// discovery's ceiling above it (the rest of the parameters went to the layers).
    pub(crate) mtu: usize,
    send_key: PlainKey,
    /// The plain key of what arrives: the peer verifies with its own keys; fuzzing forges
    /// with this one (`Session::seal`).
    #[cfg(feature = "arbitrary")]
    recv_key: Key,
    /// Unreliable packets with deadlines were sent since the last [`Session::stamp`].
    unstamped: bool,
}

/// Expands truncated ids from the transfer layer's and the channels' receive windows as
/// they are now.
pub(crate) struct ReceiveWindows<'s> {
    transfer: &'s Transfer,
    channels: &'s Channels,
}

impl Expand for ReceiveWindows<'_> {
    fn frame_id(&self, truncated: u32, bytes: u32) -> u32 {
        self.transfer.expand_frame_id(truncated, bytes)
    }

    fn ack_largest(&self, truncated: u16) -> u32 {
        self.transfer.expand_ack_largest(truncated)
    }

    fn packet_id(&self, channel: u8, truncated: u16) -> u32 {
        self.channels.expand_packet_id(channel, truncated)
    }
}

/// The windows as they start, before any session exists: how a connecting side verifies
/// the first data frame it receives (which then counts as the acknowledgement).
pub(crate) fn initial_windows(local: &ConnectRequest, remote: &ConnectRequest) -> FixedRefs {
    FixedRefs { frame: remote.frame_base, ack_limit: local.frame_base, packet: remote.packet_base }
}

/// The messages of one verified frame, decoded once. Inline up to a full datagram of
/// 32-byte messages; a frame of many tiny ones spills to the heap.
pub(crate) type FrameMessages<'d> = SmallVec<[Message<'d>; 64]>;

impl Session {
    /// A session between `local` (this side's request) and `remote` (the other's).
    /// `seed`: secret randomness for the frame ids the transfer layer skips. `sealed`: in
    /// secure mode the layers below see a datagram size smaller by what sealing adds, so
    /// every sealed datagram still fits the negotiated one. `mtu_ceiling`: the largest
    /// datagram path MTU discovery may reach (at or below the negotiated size: none).
    pub(crate) fn new(
        settings: &Arc<Settings>,
        params: Params,
        local: &ConnectRequest,
        remote: &ConnectRequest,
        seed: u64,
        (sealed, mtu_ceiling): (bool, usize),
    ) -> Self {
        let cfg = &settings.config;
        let extra = if sealed { SEAL_EXTRA } else { 0 };
        let mtu = params.mtu.saturating_sub(extra);
        let mut tc = TransferConfig::with_shared(Arc::clone(&settings.transfer), mtu, params.channels);
        tc.mtu_ceiling = mtu_ceiling.saturating_sub(extra).max(mtu);
        tc.mtu_accept = mtu_ceiling.max(params.mtu);
        tc.skip_seed = seed | 1;
        tc.initial_window = cfg.initial_window * params.mtu;
        tc.bandwidth = params.send_bandwidth;
        tc.congestion = cfg.congestion;
        let channels = Channels::new(
            Arc::clone(&settings.channels),
            crate::wire::fragment_payload(mtu),
            (params.send_max_packet, params.recv_max_packet),
            (local.packet_base, remote.packet_base),
            cfg.max_reassembly_bytes,
        );
        Self {
            transfer: Transfer::new(tc, local.frame_base, remote.frame_base),
            channels,
            mtu: mtu_ceiling.max(params.mtu),
            send_key: PlainKey::connection(local.nonce, remote.nonce),
            #[cfg(feature = "arbitrary")]
            recv_key: Key::connection(remote.nonce, local.nonce),
            unstamped: false,
        }
    }

    /// The datagram size this side sends now, as the peer receives it.
    pub(crate) fn current_mtu(&self) -> usize {
        // The transfer layer's sizes have sealing's bytes taken off.
        self.transfer.current_mtu() + (self.mtu - self.transfer.mtu_ceiling())
    }

    /// Queues a packet on `channel` (see `Channels::send`).
    pub(crate) fn send(&mut self, channel: usize, data: Bytes, mode: SendMode) -> Result<(), SendError> {
        self.unstamped |= mode == SendMode::Unreliable;
        self.channels.send(channel, data, mode, &mut self.transfer)
    }

    /// Gives the time to the deadlines of unreliable packets sent since the last call:
    /// every call with a time runs this first.
    pub(crate) fn stamp(&mut self, now: Time) {
        if std::mem::take(&mut self.unstamped) {
            self.channels.stamp(now);
            self.transfer.stamp(now);
        }
    }

    fn windows(&self) -> ReceiveWindows<'_> {
        ReceiveWindows { transfer: &self.transfer, channels: &self.channels }
    }

    /// Decodes and verifies a connection datagram against the current windows, collecting
    /// its messages in `msgs` (cleared first).
    pub(crate) fn decode<'d>(
        &self,
        datagram: &'d [u8],
        key: Key,
        msgs: &mut FrameMessages<'d>,
    ) -> Result<Data<'d>, DecodeError> {
        msgs.clear();
        let data = Data::decode_with(datagram, key, &self.windows(), |m| msgs.push(m));
        if data.is_err() {
            msgs.clear();
        }
        data
    }

    /// Processes a verified datagram, calling `deliver` with each packet it completes.
    pub(crate) fn process(
        &mut self,
        now: Time,
        data: &Data<'_>,
        msgs: &[Message<'_>],
        datagram: &Bytes,
        deliver: impl FnMut(usize, SendMode, Bytes),
    ) {
        self.transfer.on_datagram(now, data, datagram.len());
        let Some(k) = data.frame_id else { return };
        if !self.transfer.frame_in_window(k) {
            return;
        }
        let admission = self.channels.admit(msgs);
        if admission.whole {
            self.transfer.accept_frame(k, now);
        }
        self.channels.receive(msgs, &admission, datagram, &mut self.transfer, deliver);
    }

    /// Runs timers and writes every datagram the windows allow now: checked with the
    /// session's key, or in secure mode sealed with `sealing`'s cipher, each with the next
    /// value of its counter.
    pub(crate) fn flush(
        &mut self,
        now: Time,
        arena: &mut Arena,
        sealing: Option<(&AeadKey, &mut u64)>,
        emit: impl FnMut(Bytes),
    ) {
        self.flush_up_to(now, arena, sealing, None, emit);
    }

    /// [`Session::flush`] of `limit` bytes in all at most. Returns the bytes written.
    pub(crate) fn flush_within(
        &mut self,
        now: Time,
        arena: &mut Arena,
        sealing: Option<(&AeadKey, &mut u64)>,
        limit: u64,
        emit: impl FnMut(Bytes),
    ) -> u64 {
        self.flush_up_to(now, arena, sealing, Some(limit), emit)
    }

    /// The body of both flushes: without a limit (the common case) none of its arithmetic
    /// is compiled in.
    #[inline(always)]
    fn flush_up_to(
        &mut self,
        now: Time,
        arena: &mut Arena,
        mut sealing: Option<(&AeadKey, &mut u64)>,
        limit: Option<u64>,
        mut emit: impl FnMut(Bytes),
    ) -> u64 {
        self.transfer.on_timeout(now);
        self.channels.queue_window_acks(&mut self.transfer);
        let mut sent = 0;
        loop {
            let out = arena.room(self.mtu);
            let key = match &sealing {
                Some((_, counter)) => Key::unsealed(**counter),
                None => self.send_key.key(),
            };
            // The key's extra bytes ride beyond what the transfer layer counts.
            let polled = match limit {
                None => self.transfer.poll_datagram(now, key, &self.channels, out),
                Some(limit) => {
                    let left = usize::try_from(limit.saturating_sub(sent))
                        .unwrap_or(usize::MAX)
                        .saturating_sub(key.extra_len());
                    self.transfer.poll_datagram_within(now, key, &self.channels, left, out)
                }
            };
            let Some(mut n) = polled else { break };
            if let Some((cipher, counter)) = &mut sealing {
                let tag = out.get_mut(..n).map(|d| cipher.seal_datagram(**counter, d));
                out.extend_from_slice(&tag.unwrap_or_default());
                n += TAG_LEN;
                **counter += 1;
            }
            sent += n as u64;
            debug_assert!(limit.is_none_or(|limit| sent <= limit), "{sent} bytes sent within a limit of {limit:?}");
            emit(out.split_to(n).freeze());
        }
        sent
    }

    /// Whether every packet sent has been handed over and acknowledged (or, unreliable,
    /// sent and forgotten).
    pub(crate) fn is_drained(&self) -> bool {
        self.transfer.is_idle() && self.channels.is_drained()
    }

    /// Drops every packet waiting to be sent.
    pub(crate) fn clear(&mut self) {
        self.transfer.clear();
        self.channels.clear();
    }

    /// Bytes this connection holds beyond its own (it lives inline in its peer): its
    /// layers' structures, queued and in-flight payloads, and reassembly memory.
    pub(crate) fn heap(&self) -> usize {
        self.transfer.memory() + self.channels.memory()
    }

    pub(crate) fn counters(&self) -> ChannelCounters {
        self.channels.counters()
    }

    pub(crate) fn reassembly_bytes(&self) -> usize {
        self.channels.reassembly_bytes()
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        self.channels.queued_bytes(&self.transfer)
    }

    /// The check this side accepts on `body`, a data datagram without its check (what a
    /// peer that knows the keys could compute: fuzzing forges datagrams with it).
    #[cfg(feature = "arbitrary")]
    pub(crate) fn seal(&self, body: &[u8]) -> Result<u32, DecodeError> {
        Data::seal(body, self.recv_key, &self.windows())
    }
}
