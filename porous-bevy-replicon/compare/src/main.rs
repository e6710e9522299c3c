//! The same replicon game over POROUS (`porous-bevy-replicon`) and over renet
//! (`bevy_replicon_renet`), measured side by side in one run, rounds alternating A B A B.
//!
//! The game: a server replicates `--entities` entities, each moved every tick, to
//! `--clients` clients; every client sends the server one input event per tick. Replicon
//! ticks every frame, the frames are paced at 60 Hz on the real clock, everything runs on
//! loopback UDP in one thread. Each client reaches the server through a relay of its own
//! (two threads that forward datagrams and count them), so both backends' bytes are
//! counted the same way, as UDP payloads on the wire.
//!
//! Per round and backend it prints the UDP payload bytes and datagrams per tick each way,
//! and the CPU time the app updates took on this thread's CPU clock (not wall time: the
//! relays and the rest of the machine do not count) per client per tick, the server's and
//! a client's apart. Then the median and range of each figure over the rounds.
//!
//! ```sh
//! cargo run --release --manifest-path porous-bevy-replicon/compare/Cargo.toml -- \
//!     --clients 8 --entities 64 --ticks 600 --rounds 4
//! ```

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use bevy::ecs::schedule::ScheduleLabel;
use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use bevy_replicon::prelude::*;
use bevy_replicon_renet::netcode::{
    ClientAuthentication, NetcodeClientTransport, NetcodeServerTransport, ServerAuthentication, ServerConfig,
};
use bevy_replicon_renet::renet::ConnectionConfig;
use bevy_replicon_renet::{RenetChannelsExt, RenetClient, RenetServer, RepliconRenetPlugins};
use porous_bevy_replicon::{HostConfig, PorousClient, PorousServer, RepliconPorousExt, RepliconPorousPlugins};
use serde::{Deserialize, Serialize};

/// A replicated position.
#[derive(Component, Serialize, Deserialize, Clone, Copy, Debug)]
struct Pos([f32; 2]);

/// A client's input, one per tick.
#[derive(Event, Serialize, Deserialize, Clone, Copy, Debug)]
struct Input(u32);

/// Inputs the server received.
#[derive(Resource, Default)]
struct Inputs(u64);

/// Ticks a client has sent inputs for.
#[derive(Resource, Default)]
struct Sent(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Porous,
    Renet,
}

#[derive(Clone, Copy, Debug)]
struct Args {
    clients: usize,
    entities: usize,
    ticks: u32,
    rounds: usize,
}

/// Datagrams and bytes one relay forwarded, each way.
#[derive(Default, Debug)]
struct Counts {
    up_bytes: AtomicU64,
    up_datagrams: AtomicU64,
    down_bytes: AtomicU64,
    down_datagrams: AtomicU64,
}

/// A client's way to the server: a socket the client sends to (`front`) and one that
/// talks to the server (`back`), a thread forwarding each way.
struct Relay {
    front: UdpSocket,
    back: UdpSocket,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    fn bind() -> std::io::Result<Self> {
        let front = UdpSocket::bind("127.0.0.1:0")?;
        let back = UdpSocket::bind("127.0.0.1:0")?;
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(50)))?;
        }
        Ok(Self { front, back, counts: Arc::default(), stop: Arc::default(), threads: Vec::new() })
    }

    fn addr(&self) -> SocketAddr {
        self.front.local_addr().expect("bound")
    }

    fn start(&mut self, server: SocketAddr) -> std::io::Result<()> {
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let (front, back) = (self.front.try_clone()?, self.back.try_clone()?);
        let (counts, stop, seen) = (self.counts.clone(), self.stop.clone(), client.clone());
        self.threads.push(std::thread::spawn(move || {
            let mut buf = vec![0; 65_536];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(from);
                    counts.up_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    counts.up_datagrams.fetch_add(1, Ordering::Relaxed);
                    let _ = back.send_to(&buf[..n], server);
                }
            }
        }));
        let (front, back) = (self.front.try_clone()?, self.back.try_clone()?);
        let (counts, stop) = (self.counts.clone(), self.stop.clone());
        self.threads.push(std::thread::spawn(move || {
            let mut buf = vec![0; 65_536];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, _)) = back.recv_from(&mut buf) {
                    let to = *client.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(to) = to {
                        counts.down_bytes.fetch_add(n as u64, Ordering::Relaxed);
                        counts.down_datagrams.fetch_add(1, Ordering::Relaxed);
                        let _ = front.send_to(&buf[..n], to);
                    }
                }
            }
        }));
        Ok(())
    }

    fn reset(&self) {
        for c in
            [&self.counts.up_bytes, &self.counts.up_datagrams, &self.counts.down_bytes, &self.counts.down_datagrams]
        {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn base(backend: Backend) -> App {
    let mut app = App::new();
    // Replicon ticks every frame, so each frame replicates.
    let server = ServerPlugin { tick_schedule: Some(PostUpdate.intern()), ..Default::default() };
    app.add_plugins((MinimalPlugins, StatesPlugin, RepliconPlugins.set(server)));
    match backend {
        Backend::Porous => app.add_plugins(RepliconPorousPlugins),
        Backend::Renet => app.add_plugins(RepliconRenetPlugins),
    };
    app.replicate::<Pos>().add_client_event::<Input>(Channel::Ordered);
    app.finish();
    app.cleanup();
    app
}

fn move_all(mut positions: Query<'_, '_, &mut Pos>, time: Res<'_, Time>) {
    let t = time.elapsed_secs();
    for (i, mut p) in positions.iter_mut().enumerate() {
        p.0 = [(t + i as f32).sin() * 100.0, (t + i as f32).cos() * 100.0];
    }
}

fn count_input(_: On<'_, '_, FromClient<Input>>, mut inputs: ResMut<'_, Inputs>) {
    inputs.0 += 1;
}

fn send_input(mut commands: Commands<'_, '_>, mut sent: ResMut<'_, Sent>) {
    commands.client_trigger(Input(sent.0));
    sent.0 += 1;
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
}

/// The apps of one round, connected.
struct Game {
    server: App,
    clients: Vec<App>,
    relays: Vec<Relay>,
}

fn setup(backend: Backend, args: Args) -> Game {
    let mut server = base(backend);
    server.init_resource::<Inputs>().add_observer(count_input).add_systems(Update, move_all);
    for i in 0..args.entities {
        server.world_mut().spawn((Replicated, Pos([i as f32, 0.0])));
    }
    let mut relays: Vec<Relay> = (0..args.clients).map(|_| Relay::bind().expect("relay")).collect();
    let fronts: Vec<SocketAddr> = relays.iter().map(Relay::addr).collect();
    let server_addr = match backend {
        Backend::Porous => {
            let config = server.world().resource::<RepliconChannels>().porous_config(HostConfig::default());
            let s = PorousServer::bind("127.0.0.1:0", config).expect("bind");
            let addr = s.local_addr();
            server.insert_resource(s);
            addr
        }
        Backend::Renet => {
            let channels = server.world().resource::<RepliconChannels>();
            let connection = ConnectionConfig {
                server_channels_config: channels.server_configs(),
                client_channels_config: channels.client_configs(),
                ..Default::default()
            };
            let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
            let addr = socket.local_addr().expect("bound");
            let config = ServerConfig {
                current_time: unix_now(),
                max_clients: args.clients,
                protocol_id: 0,
                // The clients reach the server at their relays' addresses.
                public_addresses: fronts.clone(),
                authentication: ServerAuthentication::Unsecure,
            };
            let transport = NetcodeServerTransport::new(config, socket).expect("transport");
            server.insert_resource(RenetServer::new(connection)).insert_resource(transport);
            addr
        }
    };
    for r in &mut relays {
        r.start(server_addr).expect("relay");
    }
    let clients = fronts
        .iter()
        .enumerate()
        .map(|(i, &front)| {
            let mut client = base(backend);
            client.init_resource::<Sent>().add_systems(Update, send_input.run_if(in_state(ClientState::Connected)));
            match backend {
                Backend::Porous => {
                    let config = client.world().resource::<RepliconChannels>().porous_config(HostConfig::default());
                    client.insert_resource(PorousClient::connect(front, config).expect("client"));
                }
                Backend::Renet => {
                    let channels = client.world().resource::<RepliconChannels>();
                    let connection = ConnectionConfig {
                        server_channels_config: channels.server_configs(),
                        client_channels_config: channels.client_configs(),
                        ..Default::default()
                    };
                    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
                    let auth = ClientAuthentication::Unsecure {
                        client_id: i as u64 + 1,
                        protocol_id: 0,
                        server_addr: front,
                        user_data: None,
                    };
                    let transport = NetcodeClientTransport::new(unix_now(), auth, socket).expect("transport");
                    client.insert_resource(RenetClient::new(connection)).insert_resource(transport);
                }
            }
            client
        })
        .collect();
    Game { server, clients, relays }
}

fn replicated(app: &mut App) -> usize {
    app.world_mut().query_filtered::<(), With<Remote>>().iter(app.world()).count()
}

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The figures of one round.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    /// UDP payload bytes per tick, server to all clients.
    down_bytes: f64,
    down_datagrams: f64,
    /// UDP payload bytes per tick, all clients to the server.
    up_bytes: f64,
    up_datagrams: f64,
    /// The server's update, CPU microseconds per client per tick.
    server_us: f64,
    /// A client's update, CPU microseconds per tick.
    client_us: f64,
}

fn round(backend: Backend, args: Args) -> Figures {
    let mut game = setup(backend, args);
    let frame = Duration::from_secs(1) / 60;
    let mut next = Instant::now();
    let pace = |next: &mut Instant| {
        *next += frame;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    };
    // Connect, and let the replication of every entity complete.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        game.server.update();
        let mut ready = true;
        for c in &mut game.clients {
            c.update();
            ready &= replicated(c) == args.entities;
        }
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "{backend:?}: the clients did not get every entity in 20 s");
        pace(&mut next);
    }
    for _ in 0..60 {
        game.server.update();
        for c in &mut game.clients {
            c.update();
        }
        pace(&mut next);
    }
    for r in &game.relays {
        r.reset();
    }
    let inputs_before = game.server.world().resource::<Inputs>().0;
    let (mut server_cpu, mut client_cpu) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..args.ticks {
        let t0 = thread_cpu();
        game.server.update();
        let t1 = thread_cpu();
        for c in &mut game.clients {
            c.update();
        }
        let t2 = thread_cpu();
        server_cpu += t1 - t0;
        client_cpu += t2 - t1;
        pace(&mut next);
    }
    let inputs = game.server.world().resource::<Inputs>().0 - inputs_before;
    let expected = u64::from(args.ticks) * args.clients as u64;
    assert!(inputs * 10 >= expected * 9, "{backend:?}: {inputs} inputs of {expected}");
    for c in &mut game.clients {
        assert_eq!(replicated(c), args.entities);
    }
    let sum = |f: fn(&Counts) -> &AtomicU64| -> f64 {
        game.relays.iter().map(|r| f(&r.counts).load(Ordering::Relaxed)).sum::<u64>() as f64 / f64::from(args.ticks)
    };
    let per = f64::from(args.ticks) * args.clients as f64;
    Figures {
        down_bytes: sum(|c| &c.down_bytes),
        down_datagrams: sum(|c| &c.down_datagrams),
        up_bytes: sum(|c| &c.up_bytes),
        up_datagrams: sum(|c| &c.up_datagrams),
        server_us: server_cpu.as_secs_f64() * 1e6 / per,
        client_us: client_cpu.as_secs_f64() * 1e6 / per,
    }
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len().is_multiple_of(2) { (v[mid - 1] + v[mid]) / 2.0 } else { v[mid] };
    (median, v[0], v[v.len() - 1])
}

fn parse() -> Args {
    let mut args = Args { clients: 8, entities: 64, ticks: 600, rounds: 4 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value: usize = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: compare [--clients N] [--entities E] [--ticks T] [--rounds R]");
            std::process::exit(2);
        });
        match flag.as_str() {
            "--clients" => args.clients = value,
            "--entities" => args.entities = value,
            "--ticks" => args.ticks = value as u32,
            "--rounds" => args.rounds = value,
            _ => {
                eprintln!("unknown flag {flag}");
                std::process::exit(2);
            }
        }
    }
    args
}

fn main() {
    let args = parse();
    println!(
        "{} clients, {} entities moving every tick, one input per client per tick, {} ticks at 60 Hz per round",
        args.clients, args.entities, args.ticks
    );
    println!(
        "round backend  down B/tick  down dgr/tick  up B/tick  up dgr/tick  server us/client/tick  us/client app/tick"
    );
    let mut all: Vec<(Backend, Figures)> = Vec::new();
    for r in 0..args.rounds {
        for backend in [Backend::Porous, Backend::Renet] {
            let f = round(backend, args);
            println!(
                "{r:5} {:7} {:12.0} {:14.1} {:10.0} {:12.1} {:22.1} {:18.1}",
                format!("{backend:?}"),
                f.down_bytes,
                f.down_datagrams,
                f.up_bytes,
                f.up_datagrams,
                f.server_us,
                f.client_us
            );
            all.push((backend, f));
        }
    }
    println!("\nmedian [min, max] over {} rounds", args.rounds);
    for backend in [Backend::Porous, Backend::Renet] {
        let of = |g: fn(&Figures) -> f64| {
            median_range(all.iter().filter(|(b, _)| *b == backend).map(|(_, f)| g(f)).collect())
        };
        let show =
            |name: &str, (m, lo, hi): (f64, f64, f64)| println!("  {backend:?} {name}: {m:.1} [{lo:.1}, {hi:.1}]");
        show("down bytes/tick", of(|f| f.down_bytes));
        show("down datagrams/tick", of(|f| f.down_datagrams));
        show("up bytes/tick", of(|f| f.up_bytes));
        show("up datagrams/tick", of(|f| f.up_datagrams));
        show("server CPU us/client/tick", of(|f| f.server_us));
        show("CPU us per client app per tick", of(|f| f.client_us));
    }
}
