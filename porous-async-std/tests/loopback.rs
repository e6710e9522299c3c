//! The adapter over real UDP on loopback on async-std: the behaviour suite every runtime
//! runs (porous-async/tests/common/loopback.rs), each scenario under a generous deadline,
//! and the tests only this crate runs.

use std::future::Future;
use std::time::{Duration, Instant};

use async_std::future::timeout;
use async_std::task;

use rt::{ConnectError, DisconnectReason, Disconnected, Error, Host, HostConfig, Packet, SendMode};
use scenarios::bind;

/// What the shared scenarios use, from this crate and this runtime.
mod rt {
    use std::future::Future;
    use std::time::Duration;

    pub(crate) use async_std::net::UdpSocket;
    pub(crate) use porous_async_std::{
        ConnectError, DELIVERY_QUEUE, DisconnectReason, Disconnected, Error, Events, Host, HostConfig, HostEvent,
        Packet, Peer, PeerId, PeerInfo, PeerState, SendError, SendMode,
    };

    /// Spawns `task`; awaiting the result gives its output.
    pub(crate) fn spawn<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> impl Future<Output = T> {
        async_std::task::spawn(task)
    }

    /// Spawns `task` and lets it run on its own.
    pub(crate) fn spawn_detached(task: impl Future<Output = ()> + Send + 'static) {
        drop(async_std::task::spawn(task));
    }

    pub(crate) async fn sleep(duration: Duration) {
        async_std::task::sleep(duration).await;
    }
}

#[path = "../../porous-async/tests/common/loopback.rs"]
mod scenarios;

const DEADLINE: Duration = Duration::from_secs(30);

fn run(test: impl Future<Output = ()>) {
    task::block_on(async { timeout(DEADLINE, test).await.expect("the test missed its deadline") });
}

/// Every scenario, as a test on async-std.
macro_rules! on_async_std {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(scenarios::$name());
            }
        )*
    };
}

scenarios::every_scenario!(on_async_std);

#[test]
fn handles_run_under_smol() {
    smol::block_on(async {
        let deadline = async {
            smol::Timer::after(DEADLINE).await;
            panic!("the test missed its deadline");
        };
        smol::future::or(deadline, async {
            let server = Host::bind("127.0.0.1:0", HostConfig::default()).await.unwrap();
            let client = Host::bind("127.0.0.1:0", HostConfig::default()).await.unwrap();
            let (to_client, to_server) = smol::future::zip(server.accept(), client.connect(server.local_addr())).await;
            let (to_client, to_server) = (to_client.unwrap(), to_server.unwrap());
            to_server.send(1, &b"smol"[..], SendMode::Passive).unwrap();
            assert_eq!(to_client.recv().await.unwrap(), Packet::new(1, SendMode::Passive, "smol"));
            to_client.send(2, &b"ack"[..], SendMode::Reliable).unwrap();
            assert_eq!(to_server.recv().await.unwrap(), Packet::new(2, SendMode::Reliable, "ack"));
            let (left, right) = smol::future::zip(to_server.disconnect(), to_client.recv()).await;
            assert_eq!(left, DisconnectReason::Local);
            assert_eq!(right, Err(Disconnected(DisconnectReason::remote(0))));
        })
        .await;
    });
}

/// Secure mode through the async adapter: a client connects with a connect token, the
/// server's accepted peer carries the token's client id and user data, traffic flows; a
/// plain connect from a secure host is refused by its core.
#[test]
fn a_client_connects_with_a_token_and_the_server_learns_who_it_is() {
    use porous_async_std::SecureConfig;
    use porous_async_std::token::{self, PrivateKey, TokenParams};
    run(async {
        let key = PrivateKey::from_bytes([0x42; 32]);
        let unix = 1_800_000_000;
        let mut server_config = HostConfig::default();
        server_config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), Instant::now(), unix));
        let server = Host::bind("127.0.0.1:0", server_config).await.expect("bind");
        let addr = server.local_addr();
        let mut client_config = HostConfig::default();
        client_config.secure = Some(SecureConfig::client());
        let client = bind(&client_config).await;
        let mut params = TokenParams::new(42, vec![addr], unix, Duration::from_secs(30));
        params.user_data = b"name=ada".to_vec();
        let t = token::generate_from_entropy(&key, &params).unwrap();

        assert!(matches!(client.connect(addr).await, Err(Error::Connect(ConnectError::TokenRequired))));
        let accepting = task::spawn({
            let server = server.clone();
            async move { server.accept().await.expect("accept") }
        });
        let to_server = client.connect_with_token(addr, &t).await.expect("connect");
        let to_client = accepting.await;
        assert_eq!((to_client.client_id(), &to_client.connect_data()[..]), (Some(42), &b"name=ada"[..]));
        assert_eq!((to_server.client_id(), to_server.connect_data().len()), (None, 0));
        to_server.send(0, "ping", SendMode::Reliable).unwrap();
        assert_eq!(to_client.recv().await.unwrap(), Packet::new(0, SendMode::Reliable, "ping"));
    });
}
