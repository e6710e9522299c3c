//! The adapter over real UDP on loopback on tokio's current-thread and multi-thread
//! runtimes: every scenario of the behaviour suite every runtime runs
//! (porous-async/tests/common/loopback.rs) runs on both, under a generous deadline.

use std::future::Future;
use std::time::Duration;

/// What the shared scenarios use, from this crate and this runtime.
mod rt {
    use std::future::Future;
    use std::time::Duration;

    pub(crate) use porous_tokio::{
        ConnectError, DELIVERY_QUEUE, DisconnectReason, Disconnected, Error, Events, Host, HostConfig, HostEvent,
        Packet, Peer, PeerId, PeerInfo, PeerState, SendError, SendMode,
    };
    pub(crate) use tokio::net::UdpSocket;

    /// Spawns `task` on the test's runtime; awaiting the result gives its output.
    pub(crate) fn spawn<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> impl Future<Output = T> {
        let handle = tokio::spawn(task);
        async move { handle.await.expect("a spawned task panicked") }
    }

    /// Spawns `task` on the test's runtime and lets it run on its own.
    pub(crate) fn spawn_detached(task: impl Future<Output = ()> + Send + 'static) {
        drop(tokio::spawn(task));
    }

    pub(crate) async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

#[path = "../../porous-async/tests/common/loopback.rs"]
mod scenarios;

const DEADLINE: Duration = Duration::from_secs(30);

async fn within_deadline(test: impl Future<Output = ()>) {
    tokio::time::timeout(DEADLINE, test).await.expect("the test missed its deadline");
}

/// Every scenario, on tokio's current-thread runtime and on its multi-thread runtime.
macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod current_thread {
            $(
                #[tokio::test(flavor = "current_thread")]
                async fn $name() {
                    super::within_deadline(super::scenarios::$name()).await;
                }
            )*
        }
        mod multi_thread {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::within_deadline(super::scenarios::$name()).await;
                }
            )*
        }
    };
}

scenarios::every_scenario!(on_both_runtimes);
