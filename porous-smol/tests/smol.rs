//! What is particular to smol: executors of the application's own, and no async-std.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use porous_smol::{DisconnectReason, HostConfig, Packet, SendMode, SmolRuntime};

/// Drivers on an executor the application runs itself.
#[test]
fn drivers_run_on_an_executor_of_the_application() {
    let executor = Arc::new(smol::Executor::new());
    let runtime = SmolRuntime::with_executor(Arc::clone(&executor));
    let server = porous_async::Host::bind_with(&runtime, "127.0.0.1:0", HostConfig::default()).unwrap();
    let client = porous_async::Host::bind_with(&runtime, "127.0.0.1:0", HostConfig::default()).unwrap();
    // One thread of the application runs the executor: the drivers and the test itself.
    smol::block_on(executor.run(async {
        let deadline = async {
            smol::Timer::after(Duration::from_secs(30)).await;
            panic!("the test missed its deadline");
        };
        smol::future::or(deadline, async {
            let (to_server, to_client) = smol::future::zip(client.connect(server.local_addr()), server.accept()).await;
            let (to_server, to_client) = (to_server.unwrap(), to_client.unwrap());
            to_client.send(3, &b"own executor"[..], SendMode::Unreliable).unwrap();
            assert_eq!(to_server.recv().await.unwrap(), Packet::new(3, SendMode::Unreliable, &b"own executor"[..]));
            let (reason, end) = smol::future::zip(to_client.disconnect(), to_server.recv()).await;
            assert_eq!(reason, DisconnectReason::Local);
            assert_eq!(end.unwrap_err().0, DisconnectReason::remote(0));
        })
        .await;
    }));
}

/// A smol application compiles no async-std: porous-smol's normal dependencies, as cargo
/// resolves them, do not include it.
#[test]
fn porous_smol_does_not_depend_on_async_std() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| String::from("cargo"));
    let tree = Command::new(cargo)
        .args(["tree", "--offline", "--locked", "-p", "porous-smol", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(tree.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&tree.stderr));
    let crates: Vec<String> = String::from_utf8_lossy(&tree.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(crates.iter().any(|c| c == "smol"), "the tree lists smol: {crates:?}");
    assert!(crates.iter().any(|c| c == "porous-async"), "{crates:?}");
    assert!(!crates.iter().any(|c| c == "async-std" || c == "tokio"), "{crates:?}");
}
