//! POROUS's simulator under Bevy apps (feature `sim`): several apps, each with its own
//! server or client resource, on one seeded in-memory network with latency, loss and the
//! rest of [`LinkConditions`].
//!
//! [`SimNetwork`] is a cheap handle to one [`Network`] whose hosts live in the apps'
//! resources; [`SimNetwork::transport`] gives each host its [`SimTransport`]. The test
//! moves the network's clock ([`SimNetwork::advance`]) and Bevy's
//! (`TimeUpdateStrategy::ManualDuration`) by the same step each frame, and updates the
//! apps in a fixed order: the run is then a function of the seed.
//!
//! ```
//! use std::time::Duration;
//! use bevy_app::App;
//! use porous_bevy::sim::{LinkConditions, SimNetwork};
//! use porous_bevy::{HostConfig, PorousClient, PorousPlugin, PorousServer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let net = SimNetwork::new(7);
//! let (server_addr, client_addr) = ("10.0.0.1:5000".parse()?, "10.0.0.2:5000".parse()?);
//! net.with(|n| n.set_link_both(server_addr, client_addr, LinkConditions::wifi()));
//!
//! let mut server = App::new();
//! server.add_plugins((bevy_time::TimePlugin, PorousPlugin));
//! server.insert_resource(PorousServer::sim(&net, server_addr, HostConfig::default())?);
//! let mut client = App::new();
//! client.add_plugins((bevy_time::TimePlugin, PorousPlugin));
//! client.insert_resource(PorousClient::sim(&net, client_addr, server_addr, HostConfig::default())?);
//!
//! let frame = Duration::from_secs(1) / 60;
//! for app in [&mut server, &mut client] {
//!     app.insert_resource(bevy_time::TimeUpdateStrategy::ManualDuration(frame));
//! }
//! for _ in 0..60 {
//!     net.advance(frame);
//!     server.update();
//!     client.update();
//! }
//! assert!(client.world().resource::<PorousClient>().is_connected());
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
pub use porous_proto::sim::{
    BurstLoss, LinkConditions, LinkStats, Nat, NatKind, NatStats, Network, TapRecord, TraceRecord,
};
use porous_proto::{ConfigError, Host, HostConfig};

use crate::{PorousClient, PorousServer, Transport};

/// The network and the datagrams it delivered to hosts that have not read them yet.
struct Shared {
    net: Network,
    /// Datagrams due, by destination, in the order the network handed them over.
    inboxes: BTreeMap<SocketAddr, VecDeque<(SocketAddr, Bytes)>>,
}

impl Shared {
    /// Moves every datagram due by now into its destination's inbox: one host's
    /// transport takes them all off the links, whoever they are for.
    fn sort_arrivals(&mut self) {
        while let Some(a) = self.net.pop_arrival() {
            self.inboxes.entry(a.to).or_default().push_back((a.from, a.payload));
        }
    }
}

/// A handle to one simulated network, shared by the transports of the hosts on it.
/// Cloning it gives another handle to the same network.
#[derive(Clone)]
pub struct SimNetwork {
    shared: Arc<Mutex<Shared>>,
}

impl fmt::Debug for SimNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimNetwork").field("net", &self.lock().net).finish()
    }
}

impl SimNetwork {
    /// An empty network whose randomness all derives from `seed`; its links are perfect
    /// with 10 ms of latency until set otherwise ([`SimNetwork::with`]).
    pub fn new(seed: u64) -> Self {
        let shared = Shared { net: Network::new(seed), inboxes: BTreeMap::new() };
        Self { shared: Arc::new(Mutex::new(shared)) }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic elsewhere while holding the lock leaves the network as it was between
        // two calls: still consistent.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f` with the network: to set links ([`Network::set_link_both`]), script
    /// losses, read link counters, or switch on the trace or the tap.
    pub fn with<R>(&self, f: impl FnOnce(&mut Network) -> R) -> R {
        f(&mut self.lock().net)
    }

    /// Moves the network's clock forward by `by`. Call it once per frame with the step
    /// the apps' clocks take.
    pub fn advance(&self, by: Duration) {
        let mut shared = self.lock();
        let to = shared.net.now() + by;
        shared.net.advance_to(to);
    }

    /// The network's time.
    pub fn now(&self) -> Instant {
        self.lock().net.now()
    }

    /// A transport for a host at `addr` on this network.
    pub fn transport(&self, addr: SocketAddr) -> SimTransport {
        SimTransport { net: self.clone(), addr }
    }

    /// A core for a host on this network: its generator is drawn from the network's, so
    /// that hosts made in the same order get the same randomness for the same seed.
    pub fn host(&self, config: HostConfig) -> Result<Host, ConfigError> {
        let seed = self.lock().net.random();
        Host::new(config, porous_proto::sim::seeded_rng(seed))
    }
}

/// The transport of a host on a [`SimNetwork`].
#[derive(Debug)]
pub struct SimTransport {
    net: SimNetwork,
    addr: SocketAddr,
}

impl Transport for SimTransport {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn receive(&mut self, now: Instant, core: &mut Host) {
        let mut shared = self.net.lock();
        shared.sort_arrivals();
        if let Some(inbox) = shared.inboxes.get_mut(&self.addr) {
            for (from, payload) in inbox.drain(..) {
                core.handle_datagram(now, from, &payload);
            }
        }
    }

    fn send(&mut self, core: &mut Host) {
        self.net.lock().net.route(self.addr, core);
    }
}

impl PorousServer {
    /// A server at `addr` on a simulated network (feature `sim`).
    pub fn sim(net: &SimNetwork, addr: SocketAddr, config: HostConfig) -> Result<Self, ConfigError> {
        Ok(Self::new(net.host(config)?, net.transport(addr)))
    }
}

impl PorousClient {
    /// A client at `addr` on a simulated network that connects to `server` (feature
    /// `sim`). Like [`PorousClient::connect`], its host accepts no incoming connections.
    pub fn sim(
        net: &SimNetwork,
        addr: SocketAddr,
        server: SocketAddr,
        config: HostConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(net.host(crate::client_config(config))?, net.transport(addr), server))
    }
}
