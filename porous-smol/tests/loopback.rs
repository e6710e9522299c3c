//! The adapter over real UDP on loopback on smol: the behaviour suite every runtime runs
//! (porous-async/tests/common/loopback.rs), each scenario under a generous deadline.

use std::future::Future;
use std::time::Duration;

/// What the shared scenarios use, from this crate and this runtime.
mod rt {
    use std::future::Future;
    use std::time::Duration;

    pub(crate) use porous_smol::{
        ConnectError, DELIVERY_QUEUE, DisconnectReason, Disconnected, Error, Events, Host, HostConfig, HostEvent,
        Packet, Peer, PeerId, PeerInfo, PeerState, SendError, SendMode,
    };
    pub(crate) use smol::net::UdpSocket;

    /// Spawns `task` on smol's global executor; awaiting the result gives its output.
    pub(crate) fn spawn<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> impl Future<Output = T> {
        smol::spawn(task)
    }

    /// Spawns `task` on smol's global executor and lets it run on its own.
    pub(crate) fn spawn_detached(task: impl Future<Output = ()> + Send + 'static) {
        smol::spawn(task).detach();
    }

    pub(crate) async fn sleep(duration: Duration) {
        smol::Timer::after(duration).await;
    }
}

#[path = "../../porous-async/tests/common/loopback.rs"]
mod scenarios;

const DEADLINE: Duration = Duration::from_secs(30);

fn run(test: impl Future<Output = ()>) {
    smol::block_on(smol::future::or(test, async {
        smol::Timer::after(DEADLINE).await;
        panic!("the test missed its deadline");
    }));
}

/// Every scenario, as a test on smol.
macro_rules! on_smol {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(scenarios::$name());
            }
        )*
    };
}

scenarios::every_scenario!(on_smol);
