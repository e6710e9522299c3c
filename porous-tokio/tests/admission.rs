//! Connect data, manual admission and disconnect codes over loopback UDP, on tokio's
//! current-thread and multi-thread runtimes (the scenarios shared by every runtime are in
//! porous-async/tests/common/admission.rs). Deadlines, never sleeps.

use std::time::Duration;

use scenarios::{
    a_secure_server_decides_on_token_holders, a_secure_server_learns_or_is_told_its_address,
    admission_errors_are_reported, bind, connect_data_admission_and_disconnect_codes,
};

/// What the shared scenarios use, from this crate and this runtime.
mod rt {
    use std::future::Future;

    pub(crate) use porous_tokio::{
        ConfigError, ConnectError, DisconnectReason, Disconnected, Error, Host, HostConfig, Packet, SecureConfig,
        SendMode, token,
    };

    /// Spawns `task` on the test's runtime; awaiting the result gives its output.
    pub(crate) fn spawn<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> impl Future<Output = T> {
        let handle = tokio::spawn(task);
        async move { handle.await.expect("a spawned task panicked") }
    }
}

#[path = "../../porous-async/tests/common/admission.rs"]
mod scenarios;

use rt::{DisconnectReason, Error, HostConfig, spawn};

const DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "current_thread")]
async fn connect_data_admission_and_disconnect_codes_on_current_thread() {
    tokio::time::timeout(DEADLINE, connect_data_admission_and_disconnect_codes()).await.expect("deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_data_admission_and_disconnect_codes_on_multi_thread() {
    tokio::time::timeout(DEADLINE, connect_data_admission_and_disconnect_codes()).await.expect("deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_server_decides_on_token_holders_on_multi_thread() {
    tokio::time::timeout(DEADLINE, a_secure_server_decides_on_token_holders()).await.expect("deadline");
}

#[tokio::test(flavor = "current_thread")]
async fn admission_errors_are_reported_on_current_thread() {
    tokio::time::timeout(DEADLINE, admission_errors_are_reported()).await.expect("deadline");
}

/// Polls `condition` until it holds; the test's deadline bounds the wait.
async fn until(mut condition: impl FnMut() -> bool) {
    while !condition() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Requests nobody decides on: at most `max_pending` wait (the rest are deferred, not
/// queued), each times out, and one that timed out is never handed out afterwards.
async fn undecided_requests_are_bounded_and_time_out() {
    let mut config = HostConfig::default();
    config.peer.connect_timeout = Duration::from_millis(400);
    let mut server_config = config.clone();
    server_config.manual_accept = true;
    server_config.max_pending = 2;
    let server = bind(&server_config).await;
    let addr = server.local_addr();

    let mut attempts = Vec::new();
    for i in 0..4u8 {
        let client = bind(&config).await;
        attempts.push(spawn(async move { client.connect_with(addr, &[i]).await.map(drop) }));
    }
    for attempt in attempts {
        let result = attempt.await;
        assert!(matches!(result, Err(Error::Failed(DisconnectReason::Timeout))), "{result:?}");
    }
    assert!(server.stats().handshakes_deferred > 0, "{:?}", server.stats());
    until(|| server.stats().pending == 0).await;

    // Only the request that is still waiting is handed out.
    let late = bind(&config).await;
    let deciding = spawn({
        let server = server.clone();
        async move {
            let request = server.incoming().await.expect("a request");
            assert_eq!(&request.data()[..], b"late", "a request that timed out was handed out");
            request.accept().await.expect("admitted")
        }
    });
    let to_server = late.connect_with(addr, &b"late"[..]).await.expect("connect");
    assert_eq!(deciding.await.remote(), late.local_addr());
    drop(to_server);
}

#[tokio::test(flavor = "current_thread")]
async fn undecided_requests_are_bounded_and_time_out_on_current_thread() {
    tokio::time::timeout(DEADLINE, undecided_requests_are_bounded_and_time_out()).await.expect("deadline");
}

#[tokio::test(flavor = "current_thread")]
async fn a_secure_server_learns_or_is_told_its_address_on_current_thread() {
    tokio::time::timeout(DEADLINE, a_secure_server_learns_or_is_told_its_address()).await.expect("deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_server_learns_or_is_told_its_address_on_multi_thread() {
    tokio::time::timeout(DEADLINE, a_secure_server_learns_or_is_told_its_address()).await.expect("deadline");
}
