//! The admission scenarios every async runtime crate runs (connect data, manual accept
//! and reject, disconnect codes, a secure server deciding on token holders, over loopback
//! UDP), written once. A runtime's
//! `tests/admission.rs` includes this file as a module beside a module `rt` that names its
//! crate's types and its `spawn`, and runs each scenario under a deadline on its runtime.

use crate::rt::{
    ConfigError, ConnectError, DisconnectReason, Disconnected, Error, Host, HostConfig, Packet, SecureConfig, SendMode,
    spawn, token,
};

pub(crate) async fn bind(config: &HostConfig) -> Host {
    Host::bind("127.0.0.1:0", config.clone()).await.expect("bind")
}

pub(crate) fn manual() -> HostConfig {
    let mut config = HostConfig::default();
    config.manual_accept = true;
    config
}

/// A server that decides on each request reads the connect data, rejects one client with
/// a code (which that client reads), admits another, and a disconnection code travels
/// each way.
pub(crate) async fn connect_data_admission_and_disconnect_codes() {
    let server = bind(&manual()).await;
    let addr = server.local_addr();
    let (alice, mallory) = (bind(&HostConfig::default()).await, bind(&HostConfig::default()).await);

    // The server decides on the first two requests from their data, in whatever order
    // they arrive.
    let deciding = spawn({
        let server = server.clone();
        async move {
            let mut admitted = None;
            for _ in 0..2 {
                let request = server.incoming().await.expect("a request");
                if request.data().starts_with(b"v1 ") {
                    let id = request.id();
                    let peer = request.accept().await.expect("admitted");
                    assert_eq!(peer.id(), id);
                    admitted = Some(peer);
                } else {
                    assert_eq!(&request.data()[..], b"v0 ticket:forged");
                    request.reject(403);
                }
            }
            admitted.expect("alice was admitted")
        }
    });
    let refused = spawn({
        let mallory = mallory.clone();
        async move { mallory.connect_with(addr, &b"v0 ticket:forged"[..]).await }
    });
    let to_server = alice.connect_with(addr, b"v1 ticket:alice").await.expect("alice connects");
    let to_alice = deciding.await;
    match refused.await {
        Err(Error::Failed(reason)) => assert_eq!(reason, DisconnectReason::rejected(403)),
        other => panic!("mallory was not rejected: {other:?}"),
    }
    assert_eq!(&to_alice.connect_data()[..], b"v1 ticket:alice");
    assert_eq!(to_alice.remote(), alice.local_addr());
    assert!(to_server.connect_data().is_empty(), "replies carry no connect data");

    // The server kicks alice with a code, gracefully; alice reads it.
    to_alice.send(0, &b"bye"[..], SendMode::Reliable).unwrap();
    assert_eq!(to_alice.disconnect_with(7).await, DisconnectReason::Local);
    assert_eq!(to_server.recv().await.unwrap(), Packet::new(0, SendMode::Reliable, "bye"));
    assert_eq!(to_server.recv().await, Err(Disconnected(DisconnectReason::remote(7))));

    // The other way (a new client: the old connection lingers on both sides for a while):
    // bob quits with a code.
    let bob = bind(&HostConfig::default()).await;
    let deciding = spawn({
        let server = server.clone();
        async move {
            let request = server.incoming().await.expect("a request");
            request.accept().await.expect("admitted")
        }
    });
    let to_server = bob.connect_with(addr, b"v1 bob").await.expect("bob connects");
    let to_bob = deciding.await;
    assert_eq!(&to_bob.connect_data()[..], b"v1 bob");
    assert_eq!(to_server.disconnect_with(42).await, DisconnectReason::Local);
    assert_eq!(to_bob.recv().await, Err(Disconnected(DisconnectReason::remote(42))));

    // A request the server drops undecided is rejected with code 0.
    let carol = bind(&HostConfig::default()).await;

    let dropping = spawn({
        let server = server.clone();
        async move { drop(server.incoming().await.expect("a request")) }
    });
    let refused = carol.connect(addr).await;
    dropping.await;
    assert!(matches!(refused, Err(Error::Failed(DisconnectReason::Rejected { code: 0, .. }))), "{refused:?}");
}

/// The calls' errors: connect data too large for a request, and `incoming` on a host that
/// admits requests by itself.
pub(crate) async fn admission_errors_are_reported() {
    let (server, client) = (bind(&HostConfig::default()).await, bind(&HostConfig::default()).await);
    assert!(matches!(server.incoming().await, Err(Error::ManualAcceptOff)));
    let max = HostConfig::default().peer.max_connect_data();
    let too_large = client.connect_with(server.local_addr(), &vec![0; max + 1]).await;
    assert!(
        matches!(too_large, Err(Error::Connect(ConnectError::DataTooLarge { size, max: m, .. })) if size == max + 1 && m == max),
        "{too_large:?}"
    );
    // The automatic path hands the connect data over too.
    let accepting = spawn({
        let server = server.clone();
        async move { server.accept().await.expect("accept") }
    });
    let _to_server = client.connect_with(server.local_addr(), &b"v1"[..]).await.expect("connect");
    assert_eq!(&accepting.await.connect_data()[..], b"v1");
}

/// Secure mode with manual admission: the server decides on each request from its token's
/// client id and user data (verified before it is asked), rejects one holder with a code
/// and admits another, whose connection carries them again; a secure client cannot send
/// connect data of its own.
pub(crate) async fn a_secure_server_decides_on_token_holders() {
    let key = token::PrivateKey::from_bytes([0x42; 32]);
    let unix = 1_800_000_000;
    // Tokens name the server's address: bound once to a port the system picks, with no
    // public address configured, the server takes the address it bound.
    let mut server_config = manual();
    server_config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), std::time::Instant::now(), unix));
    let server = Host::bind("127.0.0.1:0", server_config).await.expect("bind");
    let addr = server.local_addr();
    let mut client_config = HostConfig::default();
    client_config.secure = Some(SecureConfig::client());
    let (ada, eve) = (bind(&client_config).await, bind(&client_config).await);
    let token_for = |client_id: u64, user_data: &[u8]| {
        let mut params = token::TokenParams::new(client_id, vec![addr], unix, std::time::Duration::from_secs(30));
        params.user_data = user_data.to_vec();
        token::generate_from_entropy(&key, &params).expect("a token")
    };

    let plain = ada.connect_with(addr, &b"v1"[..]).await;
    assert!(matches!(plain, Err(Error::Connect(ConnectError::TokenRequired))), "{plain:?}");

    let deciding = spawn({
        let server = server.clone();
        async move {
            let mut admitted = None;
            for _ in 0..2 {
                let request = server.incoming().await.expect("a request");
                match request.client_id() {
                    Some(7) => {
                        assert_eq!(&request.data()[..], b"name=ada");
                        admitted = Some(request.accept().await.expect("admitted"));
                    }
                    Some(666) => {
                        assert_eq!(&request.data()[..], b"name=eve");
                        request.reject(403);
                    }
                    other => panic!("a request with client id {other:?}"),
                }
            }
            admitted.expect("ada was admitted")
        }
    });
    let refused = spawn({
        let (eve, t) = (eve.clone(), token_for(666, b"name=eve"));
        async move { eve.connect_with_token(addr, &t).await }
    });
    let to_server = ada.connect_with_token(addr, &token_for(7, b"name=ada")).await.expect("ada connects");
    let to_ada = deciding.await;
    match refused.await {
        Err(Error::Failed(reason)) => assert_eq!(reason, DisconnectReason::rejected(403)),
        other => panic!("eve was not rejected: {other:?}"),
    }
    assert_eq!((to_ada.client_id(), &to_ada.connect_data()[..]), (Some(7), &b"name=ada"[..]));
    assert_eq!((to_server.client_id(), to_server.connect_data().len()), (None, 0));
    to_server.send(0, &b"hi"[..], SendMode::Reliable).unwrap();
    assert_eq!(to_ada.recv().await.unwrap(), Packet::new(0, SendMode::Reliable, "hi"));
}

/// A secure server bound to an unspecified address (`0.0.0.0`, as behind a load balancer)
/// cannot tell which address tokens name it by: it refuses every token until it is told,
/// then admits those naming the address it was told. A server on a socket the
/// application bound learns a specific address as `bind` does.
pub(crate) async fn a_secure_server_learns_or_is_told_its_address() {
    let key = token::PrivateKey::from_bytes([0x24; 32]);
    let unix = 1_800_000_000;
    let now = std::time::Instant::now();
    let mut server_config = HostConfig::default();
    server_config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), now, unix));
    let server = Host::bind("0.0.0.0:0", server_config.clone()).await.expect("bind");
    // Clients reach it on loopback: the address its tokens must name.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.local_addr().port()));
    let token = |client_id: u64| {
        let params = token::TokenParams::new(client_id, vec![addr], unix, std::time::Duration::from_secs(30));
        token::generate_from_entropy(&key, &params).expect("a token")
    };
    let mut client_config = HostConfig::default();
    client_config.secure = Some(SecureConfig::client());
    client_config.peer.connect_timeout = std::time::Duration::from_millis(300);
    let client = bind(&client_config).await;
    let untold = client.connect_with_token(addr, &token(1)).await;
    assert!(matches!(untold, Err(Error::Failed(DisconnectReason::Timeout))), "{untold:?}");
    assert!(server.stats().wrong_server_tokens > 0, "{:?}", server.stats());

    server.set_public_addresses(vec![addr]).expect("a secure server takes addresses");
    let accepting = spawn({
        let server = server.clone();
        async move { server.accept().await.expect("accept") }
    });
    let to_server = client.connect_with_token(addr, &token(2)).await.expect("connects once the server was told");
    let to_client = accepting.await;
    assert_eq!(to_client.client_id(), Some(2));
    to_server.send(1, &b"told"[..], SendMode::Reliable).unwrap();
    assert_eq!(to_client.recv().await.unwrap(), Packet::new(1, SendMode::Reliable, "told"));

    // On a socket the application bound to a specific address, the address is learnt.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let own = Host::from_std(socket, server_config).expect("a host on the socket");
    let own_addr = own.local_addr();
    let params = token::TokenParams::new(3, vec![own_addr], unix, std::time::Duration::from_secs(30));
    let own_token = token::generate_from_entropy(&key, &params).expect("a token");
    let accepting = spawn({
        let own = own.clone();
        async move { own.accept().await.expect("accept") }
    });
    let to_own = client.connect_with_token(own_addr, &own_token).await.expect("connects to the adopted socket");
    assert_eq!(accepting.await.client_id(), Some(3));
    drop(to_own);

    // A plain host takes no addresses.
    let plain = bind(&HostConfig::default()).await;
    assert!(matches!(plain.set_public_addresses(vec![addr]), Err(ConfigError::Secure(_))));
}
