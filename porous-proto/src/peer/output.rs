//! Where peers' output goes: datagrams for the application to send, events for it to
//! read, and the reused buffer datagrams are encoded into. The host owns one [`Outputs`]
//! and lends it to whichever peer it drives; a peer writes under its own id.

use std::collections::VecDeque;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};

use crate::arena::Arena;
use crate::event::{Event, Transmit};
use crate::token::MAX_SERVER_PART;
use crate::wire::secure::{MAX_REQUEST_BODY, TAG_LEN};
use crate::wire::{self, Control, Key};

/// Room for the largest sealed datagram a handshake makes: a request with the largest
/// token (type, token length, token, nonce, counter, body, tag).
const SEALED_ROOM: usize = 1 + 2 + MAX_SERVER_PART + 4 + 4 + MAX_REQUEST_BODY + TAG_LEN;

/// The host's outgoing queues and the buffer transmits are sliced from.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) events: VecDeque<Event>,
    arena: Arena,
}

impl Outputs {
    /// Encodes a control datagram for `remote`.
    pub(crate) fn control(&mut self, remote: SocketAddr, c: &Control<'_>, key: Key) {
        let out = self.arena.room(wire::MAX_REQUEST);
        let n = c.encode(key, out);
        let payload = out.split_to(n).freeze();
        self.transmits.push_back(Transmit { remote, payload });
    }

    /// Encodes a datagram for `remote` with `encode`, which returns its length (secure
    /// mode's sealed layouts, `wire::secure`).
    pub(crate) fn encode(&mut self, remote: SocketAddr, encode: impl FnOnce(&mut BytesMut) -> usize) {
        let out = self.arena.room(SEALED_ROOM);
        let n = encode(out);
        let payload = out.split_to(n).freeze();
        self.transmits.push_back(Transmit { remote, payload });
    }

    /// Queues an event for the application.
    pub(crate) fn event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    /// The arena datagrams are encoded into, and a way to queue each for `remote`.
    pub(crate) fn datagrams(&mut self, remote: SocketAddr) -> (&mut Arena, impl FnMut(Bytes) + '_) {
        let transmits = &mut self.transmits;
        (&mut self.arena, move |payload| transmits.push_back(Transmit { remote, payload }))
    }

    /// Heap bytes held: the queues, what waits in them, and the encoding buffer.
    pub(crate) fn memory(&self) -> usize {
        let event_bytes = |e: &Event| match e {
            Event::Received { data, .. } => data.len(),
            _ => 0,
        };
        self.transmits.capacity() * size_of::<Transmit>()
            + self.transmits.iter().map(|t| t.payload.len()).sum::<usize>()
            + self.events.capacity() * size_of::<Event>()
            + self.events.iter().map(event_bytes).sum::<usize>()
            + self.arena.capacity()
    }
}
