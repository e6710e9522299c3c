//! Connect data, manual admission and disconnect codes over loopback UDP on smol: the
//! scenarios every runtime runs (porous-async/tests/common/admission.rs). Deadlines, never
//! sleeps.

use std::future::Future;
use std::time::Duration;

use scenarios::{
    a_secure_server_decides_on_token_holders, a_secure_server_learns_or_is_told_its_address,
    admission_errors_are_reported, connect_data_admission_and_disconnect_codes,
};

/// What the shared scenarios use, from this crate and this runtime.
mod rt {
    use std::future::Future;

    pub(crate) use porous_smol::{
        ConfigError, ConnectError, DisconnectReason, Disconnected, Error, Host, HostConfig, Packet, SecureConfig,
        SendMode, token,
    };

    /// Spawns `task` on smol's global executor; awaiting the result gives its output.
    pub(crate) fn spawn<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> impl Future<Output = T> {
        smol::spawn(task)
    }
}

#[path = "../../porous-async/tests/common/admission.rs"]
mod scenarios;

const DEADLINE: Duration = Duration::from_secs(30);

fn run(test: impl Future<Output = ()>) {
    smol::block_on(smol::future::or(test, async {
        smol::Timer::after(DEADLINE).await;
        panic!("the test missed its deadline");
    }));
}

#[test]
fn connect_data_admission_and_disconnect_codes_on_smol() {
    run(connect_data_admission_and_disconnect_codes());
}

#[test]
fn admission_errors_are_reported_on_smol() {
    run(admission_errors_are_reported());
}

#[test]
fn a_secure_server_decides_on_token_holders_on_smol() {
    run(a_secure_server_decides_on_token_holders());
}

#[test]
fn a_secure_server_learns_or_is_told_its_address_on_smol() {
    run(a_secure_server_learns_or_is_told_its_address());
}
