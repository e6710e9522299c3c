//! What the loopback demo (`cargo run -p porous-mio --example loopback`) and the adapters'
//! loopback benches (`cargo bench -p porous-mio --bench loopback`, `-p porous-tokio`) share,
//! so that each is about its own adapter: a relay on 127.0.0.1 that loses, delays and
//! jitters datagrams ([`relay`]); packets that name and check themselves and the record of
//! one stream of them ([`stream`]); the demo's verdict on a run ([`verdict`]); the bulk
//! transfer's measurements with their raw UDP baselines ([`bulk`]); and the demo's
//! `--plot` ([`plot`]). Not published: a test bed, not a library.

pub mod bulk;
pub mod plot;
pub mod relay;
pub mod rng;
pub mod stream;
pub mod verdict;
