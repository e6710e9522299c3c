//! Writes a packet capture of a simulated lossy game, for Wireshark with POROUS's
//! dissector (`tools/wireshark/porous.lua`):
//!
//! ```text
//! cargo run --release -p porous-proto --features sim --example capture -- game.pcapng
//! wireshark -X lua_script:tools/wireshark/porous.lua game.pcapng
//! ```
//!
//! A server machine runs a plain host (10.0.0.1, IPv4) and a secure one ([fd00::1],
//! IPv6). A plain client connects with connect data, a secure client with a connect token,
//! and a client of another game version is refused. Both games run for three seconds at
//! 60 Hz over lossy links (5% loss, duplicates, corruption, reordering): reliable inputs,
//! unreliable states, passive positions, chat lines on an unordered channel, a 3,000-byte
//! packet each way in fragments; then each client disconnects with a code. Every datagram
//! is in the capture at the time it was sent, with its fate as the packet's comment
//! (delivered after how long, lost, duplicated, corrupted). The same seed gives the same
//! file, byte for byte.

mod scenario;

use std::fs::File;
use std::io::BufWriter;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(path), None) = (args.next(), args.next()) else {
        eprintln!("usage: capture FILE   (writes a pcapng capture of a simulated game)");
        return ExitCode::from(2);
    };
    let records = scenario::simulate(scenario::SEED, 180);
    let written = File::create(&path).and_then(|f| scenario::write_capture(&records, BufWriter::new(f)));
    if let Err(e) = written {
        eprintln!("capture: {path}: {e}");
        return ExitCode::FAILURE;
    }
    let lost = records.iter().filter(|r| !matches!(r.fate, porous_proto::sim::Fate::Delivered(_))).count();
    println!("wrote {path}: {} datagrams ({lost} lost, corrupted or dropped)", records.len());
    ExitCode::SUCCESS
}
