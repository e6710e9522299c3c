//! What the loopback demo (`cargo run -p porous-mio --example loopback`), the adapters'
//! loopback benches (`cargo bench -p porous-mio --bench loopback`, `-p porous-tokio`) and
//! their address-change tests share, so that each is about its own adapter: a relay on
//! 127.0.0.1 that loses, delays and jitters datagrams ([`relay`]); one that rebinds as a
//! NAT does ([`rebind`]); packets that name and check themselves and the record of one
//! stream of them ([`stream`]); the demo's verdict on a run ([`verdict`]); the bulk
//! transfer's measurements with their raw UDP baselines ([`bulk`]); and the demo's
//! `--plot` ([`plot`]). Not published: a test bed, not a library.

pub mod bulk;
pub mod plot;
pub mod rebind;
pub mod relay;
pub mod rng;
pub mod stream;
pub mod verdict;
