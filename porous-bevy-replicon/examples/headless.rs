//! A replicon game over POROUS in the terminal: a server and two clients in one process,
//! on loopback UDP. The server moves a dot around a circle; each client's copy follows,
//! and each client sends the server a ping event every second, which the server answers.
//!
//! ```sh
//! cargo run -p porous-bevy-replicon --example headless -- --seconds 5
//! ```
//!
//! It prints each client's copy, its round trip and its bytes per second twice a second,
//! and exits with 0 when both copies kept moving with the dot through the last second and
//! every ping but the last got its answer, 1 otherwise. (How far behind a copy is depends
//! on how busy the machine is; it is printed, not judged.)

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use bevy_replicon::prelude::*;
use porous_bevy_replicon::{HostConfig, PorousClient, PorousServer, RepliconPorousExt, RepliconPorousPlugins};
use serde::{Deserialize, Serialize};

/// Where the dot is, replicated.
#[derive(Component, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
struct Dot {
    x: f32,
    y: f32,
}

/// A client's ping; the server answers each with a [`Pong`].
#[derive(Event, Serialize, Deserialize, Clone, Copy, Debug)]
struct Ping(u32);

/// The server's answer.
#[derive(Event, Serialize, Deserialize, Clone, Copy, Debug)]
struct Pong(u32);

/// A client's count of pings sent and answers heard.
#[derive(Resource, Default, Debug)]
struct Pings {
    sent: u32,
    answered: u32,
}

fn replicon_app() -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, StatesPlugin, RepliconPlugins, RepliconPorousPlugins))
        .replicate::<Dot>()
        .add_client_event::<Ping>(Channel::Ordered)
        .add_server_event::<Pong>(Channel::Ordered);
    app.finish();
    app.cleanup();
    app
}

fn config(app: &App) -> HostConfig {
    app.world().resource::<RepliconChannels>().porous_config(HostConfig::default())
}

fn move_dot(time: Res<'_, Time>, mut dots: Query<'_, '_, &mut Dot, With<Replicated>>) {
    let angle = time.elapsed_secs();
    for mut dot in &mut dots {
        *dot = Dot { x: 100.0 * angle.cos(), y: 100.0 * angle.sin() };
    }
}

fn answer(ping: On<'_, '_, FromClient<Ping>>, mut commands: Commands<'_, '_>) {
    commands.server_trigger(ToClients { targets: SendTargets::Single(ping.client_id), message: Pong(ping.message.0) });
}

fn ping(mut commands: Commands<'_, '_>, mut pings: ResMut<'_, Pings>, time: Res<'_, Time>) {
    if time.elapsed_secs() >= pings.sent as f32 {
        commands.client_trigger(Ping(pings.sent));
        pings.sent += 1;
    }
}

fn heard(_: On<'_, '_, Pong>, mut pings: ResMut<'_, Pings>) {
    pings.answered += 1;
}

/// How the run went.
#[derive(Debug)]
struct Outcome {
    /// Each client's greatest distance from the server's dot over the last second.
    lag: Vec<f32>,
    /// How many frames of the last second each client's copy moved in.
    moves: Vec<u32>,
    /// Each client's pings sent and answered.
    pings: Vec<(u32, u32)>,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.moves.iter().all(|&m| m >= 5) && self.pings.iter().all(|&(sent, got)| sent > 1 && got + 1 >= sent)
    }
}

fn run(seconds: f32, print: bool) -> Result<Outcome, Box<dyn std::error::Error>> {
    let mut server = replicon_app();
    server.add_observer(answer).add_systems(Update, move_dot);
    let config_ = config(&server);
    server.insert_resource(PorousServer::bind("127.0.0.1:0", config_)?);
    server.world_mut().spawn((Replicated, Dot { x: 100.0, y: 0.0 }));
    let addr = server.world().resource::<PorousServer>().local_addr();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut client = replicon_app();
        client
            .init_resource::<Pings>()
            .add_observer(heard)
            .add_systems(Update, ping.run_if(in_state(ClientState::Connected)));
        let config_ = config(&client);
        client.insert_resource(PorousClient::connect(addr, config_)?);
        clients.push(client);
    }

    let frame = Duration::from_secs(1) / 60;
    let start = Instant::now();
    let mut next = start;
    let mut lag = vec![0.0f32; clients.len()];
    let mut moves = vec![0; clients.len()];
    let mut last: Vec<Option<Dot>> = vec![None; clients.len()];
    let mut printed = 0;
    while start.elapsed().as_secs_f32() < seconds {
        server.update();
        let at = *server.world_mut().query::<&Dot>().single(server.world())?;
        let recent = start.elapsed().as_secs_f32() > seconds - 1.0;
        let mut line = format!("{:5.1} s  server ({:7.1}, {:7.1})", start.elapsed().as_secs_f32(), at.x, at.y);
        for (i, c) in clients.iter_mut().enumerate() {
            c.update();
            let copy = c.world_mut().query_filtered::<&Dot, With<Remote>>().iter(c.world()).next().copied();
            let stats = *c.world().resource::<ClientStats>();
            match copy {
                Some(d) => {
                    if recent {
                        lag[i] = lag[i].max((d.x - at.x).hypot(d.y - at.y));
                        moves[i] += u32::from(last[i].is_some_and(|l| l != d));
                    }
                    last[i] = Some(d);
                    line += &format!(
                        "  client {i} ({:7.1}, {:7.1}) rtt {:4.1} ms in {:6.0} B/s",
                        d.x,
                        d.y,
                        stats.rtt * 1e3,
                        stats.received_bps
                    );
                }
                None => {
                    if recent {
                        lag[i] = f32::INFINITY;
                    }
                    line += &format!("  client {i} (no copy yet)");
                }
            }
        }
        if print && start.elapsed() >= Duration::from_millis(500) * printed {
            println!("{line}");
            printed += 1;
        }
        next += frame;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let pings = clients
        .iter()
        .map(|c| {
            let p = c.world().resource::<Pings>();
            (p.sent, p.answered)
        })
        .collect();
    Ok(Outcome { lag, moves, pings })
}

fn main() -> ExitCode {
    let mut seconds = 5.0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--seconds", Some(s)) => seconds = s,
            _ => {
                eprintln!("usage: headless [--seconds S]");
                return ExitCode::from(2);
            }
        }
    }
    match run(seconds, true) {
        Ok(outcome) => {
            println!(
                "over the last second, the copies were at most {:?} units behind and moved in {:?} frames; \
                 pings sent and answered: {:?}",
                outcome.lag, outcome.moves, outcome.pings
            );
            if outcome.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("could not run: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_clients_follow_and_every_ping_is_answered() {
        let outcome = super::run(3.0, false).expect("runs");
        assert!(outcome.ok(), "{outcome:?}");
    }
}
