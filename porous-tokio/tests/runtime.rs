//! What is particular to tokio: the runtime a host needs, and handles used from outside it.

use std::time::Duration;

use futures_lite::future;
use porous_tokio::{DisconnectReason, Error, Host, HostConfig, Packet, SendMode, TokioRuntime};

#[test]
fn bind_outside_a_runtime_is_an_error_not_a_panic() {
    let result = future::block_on(Host::bind("127.0.0.1:0", HostConfig::default()));
    match result {
        Err(Error::Io(e)) => assert!(e.to_string().contains("tokio runtime"), "{e}"),
        other => panic!("expected an IO error, got {other:?}"),
    }
    assert!(TokioRuntime::current().is_err());
}

/// The driver runs on the runtime; the handles work from any thread and any executor.
#[test]
fn handles_work_from_other_threads_and_executors() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (server, client) = runtime.block_on(async {
        let server = Host::bind("127.0.0.1:0", HostConfig::default()).await.unwrap();
        let client = Host::bind("127.0.0.1:0", HostConfig::default()).await.unwrap();
        (server, client)
    });
    let other_thread = std::thread::spawn(move || {
        future::block_on(async {
            let (to_server, to_client) = future::zip(client.connect(server.local_addr()), server.accept()).await;
            let (to_server, to_client) = (to_server.unwrap(), to_client.unwrap());
            to_server.send(1, &b"from another executor"[..], SendMode::Passive).unwrap();
            let packet = to_client.recv().await.unwrap();
            assert_eq!(packet, Packet::new(1, SendMode::Passive, &b"from another executor"[..]));
            let (reason, end) = future::zip(to_server.disconnect(), to_client.recv()).await;
            assert_eq!(reason, DisconnectReason::Local);
            assert_eq!(end.unwrap_err().0, DisconnectReason::remote(0));
        });
    });
    other_thread.join().unwrap();
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// A runtime chosen explicitly, through the runtime-independent handle.
#[test]
fn a_host_can_run_on_a_runtime_given_by_handle() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let explicit = TokioRuntime::from_handle(runtime.handle().clone());
    // Bound from outside the runtime: the driver goes where the handle says.
    let host = porous_async::Host::bind_with(&explicit, "127.0.0.1:0", HostConfig::default()).unwrap();
    runtime.block_on(async {
        let peer = Host::bind("127.0.0.1:0", HostConfig::default()).await.unwrap();
        let (a, b) = tokio::join!(peer.connect(host.local_addr()), host.accept());
        let (a, b) = (a.unwrap(), b.unwrap());
        b.send(0, &b"explicit"[..], SendMode::Reliable).unwrap();
        assert_eq!(a.recv().await.unwrap().data, &b"explicit"[..]);
    });
}
