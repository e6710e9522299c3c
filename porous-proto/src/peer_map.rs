//! [`PeerMap`]: the application's own data per peer, keyed by [`PeerId`].
//!
//! The core keeps no user data on its peers (ENet's `peer->data`): a [`Host`](crate::Host)
//! would have to be generic over it, or hold it as `dyn Any`. A peer's id is made for
//! keying a table of the application's instead: its index is a small, dense slot number
//! (at most `max_peers` distinct values), reused after the peer is gone, and its generation
//! tells the peers that used one slot apart. [`PeerMap`] is that table.
//!
//! The pattern: insert when the host announces a peer ([`Event::Connected`], or
//! [`Event::ConnectRequest`] under manual admission) and remove on its
//! [`Event::Disconnected`], which the host queues exactly once for every id the
//! application has learned. An id kept after that finds nothing, even once its slot holds
//! a new peer.
//!
//! [`Event::Connected`]: crate::Event::Connected
//! [`Event::ConnectRequest`]: crate::Event::ConnectRequest
//! [`Event::Disconnected`]: crate::Event::Disconnected

use crate::event::PeerId;

/// A table of the application's data per peer: O(1) by [`PeerId`], and an id whose peer
/// is gone never reaches a later peer's entry (see the module docs for the pattern).
///
/// ```
/// use std::time::Instant;
/// use porous_proto::{Host, HostConfig, PeerMap};
///
/// struct Player { name: String, score: u32 }
///
/// let mut host = Host::with_seed(HostConfig::default(), 1)?;
/// let mut players = PeerMap::new();
/// let peer = host.connect(Instant::now(), "10.0.0.2:9000".parse()?)?;
/// players.insert(peer, Player { name: "ada".into(), score: 0 });
/// if let Some(p) = players.get_mut(peer) {
///     p.score += 10;
/// }
/// assert_eq!(players.get(peer).map(|p| p.score), Some(10));
/// // On `Event::Disconnected { peer, .. }`:
/// let gone = players.remove(peer);
/// assert_eq!(gone.map(|p| p.name).as_deref(), Some("ada"));
/// assert!(players.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PeerMap<T> {
    /// Indexed by [`PeerId::index`]: the generation of the peer the value belongs to.
    slots: Vec<Option<(u32, T)>>,
    len: usize,
}

impl<T> Default for PeerMap<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PeerMap<T> {
    /// An empty table.
    pub const fn new() -> Self {
        Self { slots: Vec::new(), len: 0 }
    }

    /// Stores `value` for `peer`. Returns the value its slot held before: `peer`'s own, or
    /// one an earlier peer of the slot left behind (its `Disconnected` went unhandled),
    /// which is dropped from the table either way.
    pub fn insert(&mut self, peer: PeerId, value: T) -> Option<T> {
        let i = peer.index() as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        let old = self.slots.get_mut(i)?.replace((peer.generation(), value));
        if old.is_none() {
            self.len += 1;
        }
        old.map(|(_, v)| v)
    }

    /// The value stored for `peer`, if any.
    pub fn get(&self, peer: PeerId) -> Option<&T> {
        match self.slots.get(peer.index() as usize)? {
            Some((g, v)) if *g == peer.generation() => Some(v),
            _ => None,
        }
    }

    /// The value stored for `peer`, mutably, if any.
    pub fn get_mut(&mut self, peer: PeerId) -> Option<&mut T> {
        match self.slots.get_mut(peer.index() as usize)? {
            Some((g, v)) if *g == peer.generation() => Some(v),
            _ => None,
        }
    }

    /// Whether a value is stored for `peer`.
    pub fn contains(&self, peer: PeerId) -> bool {
        self.get(peer).is_some()
    }

    /// Removes and returns the value stored for `peer`. A value of another peer of the same
    /// slot stays.
    pub fn remove(&mut self, peer: PeerId) -> Option<T> {
        let slot = self.slots.get_mut(peer.index() as usize)?;
        if slot.as_ref().is_some_and(|(g, _)| *g == peer.generation()) {
            self.len -= 1;
            return slot.take().map(|(_, v)| v);
        }
        None
    }

    /// Number of values stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every value.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.len = 0;
    }

    /// Every peer and its value, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (PeerId, &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|(g, v)| (PeerId { index: i as u32, generation: *g }, v)))
    }

    /// Every peer and its value, mutably, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (PeerId, &mut T)> + '_ {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|(g, v)| (PeerId { index: i as u32, generation: *g }, v)))
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn id(index: u32, generation: u32) -> PeerId {
        PeerId { index, generation }
    }

    #[test]
    fn a_stale_id_never_reaches_the_next_peer_of_its_slot() {
        let mut m = PeerMap::new();
        assert_eq!(m.insert(id(3, 0), "first"), None);
        assert_eq!(m.insert(id(0, 0), "other"), None);
        assert_eq!((m.len(), m.get(id(3, 0))), (2, Some(&"first")));
        // The slot's next peer: the old id finds nothing, the new one its own value.
        assert_eq!(m.insert(id(3, 1), "second"), Some("first"));
        assert_eq!(m.get(id(3, 0)), None);
        assert_eq!(m.remove(id(3, 0)), None, "a stale id removes nothing");
        assert_eq!(m.get(id(3, 1)), Some(&"second"));
        *m.get_mut(id(3, 1)).unwrap() = "changed";
        assert_eq!(m.iter().collect::<Vec<_>>(), [(id(0, 0), &"other"), (id(3, 1), &"changed")]);
        assert_eq!(m.remove(id(3, 1)), Some("changed"));
        assert!(!m.contains(id(3, 1)));
        assert_eq!(m.len(), 1);
        for (_, v) in m.iter_mut() {
            *v = "all";
        }
        assert_eq!(m.get(id(0, 0)), Some(&"all"));
        m.clear();
        assert!(m.is_empty() && m.get(id(0, 0)).is_none());
    }
}
