//! The vocabulary every adapter re-exports is porous-proto's root, named in one program
//! (`tests/vocabulary/program.rs`) that each adapter compiles against its own re-exports
//! alone (`tests/reexports.rs` of porous-mio, porous-async, porous-tokio, porous-smol and
//! porous-async-std). Here it compiles against porous-proto itself, and this test holds
//! the program to everything public at the root of `src/lib.rs`, so that a name added
//! there is added to every adapter's test too.
// It reads the repository's files: not on the web (docs/architecture.md, Testing).
#![cfg(not(target_family = "wasm"))]

use porous_proto as adapter;

#[path = "vocabulary/program.rs"]
mod program;

#[test]
fn the_program_compiles_and_runs_against_porous_proto() {
    program::run();
}

/// Every name `src/lib.rs` makes public at the root (`pub use`, `pub mod`), except items
/// behind a `cfg` (the simulator's feature) and the hidden fuzzing hooks.
fn root_names() -> Vec<String> {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).expect("src/lib.rs");
    let mut names = Vec::new();
    let mut gated = false;
    let mut statement = String::new();
    for line in lib.lines().map(str::trim) {
        if statement.is_empty() {
            if line.starts_with("#[cfg(") || line.starts_with("#[doc(hidden)]") {
                gated = true;
                continue;
            }
            if line.starts_with("#[") || line.starts_with("//") {
                continue;
            }
            if !line.starts_with("pub use ") && !line.starts_with("pub mod ") {
                gated = false;
                continue;
            }
        }
        statement.push_str(line);
        statement.push(' ');
        if !line.ends_with(';') {
            continue;
        }
        if !gated {
            let body = statement.trim().trim_end_matches(';');
            let list = match (body.find('{'), body.rfind('}')) {
                (Some(open), Some(close)) => body[open + 1..close].to_string(),
                _ => body.rsplit("::").next().unwrap_or(body).trim_start_matches("pub mod ").to_string(),
            };
            for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let name = item.rsplit(" as ").next().unwrap_or(item).trim();
                names.push(name.to_string());
            }
        }
        statement.clear();
        gated = false;
    }
    names
}

#[test]
fn the_program_names_everything_public_at_porous_proto_s_root() {
    let program = include_str!("vocabulary/program.rs");
    let imports = &program[program.find("use crate::adapter::{").expect("the program's import")..];
    let imports = &imports[..imports.find("};").expect("its end")];
    let names = root_names();
    for expected in ["Bytes", "Event", "HostConfig", "PeerMap", "token", "wire", "seq", "DEFAULT_UNRELIABLE_DEADLINE"] {
        assert!(names.iter().any(|n| n == expected), "the parse of src/lib.rs missed {expected}: {names:?}");
    }
    assert!(!names.iter().any(|n| n == "sim" || n == "fuzzing"), "{names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !imports.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == n.as_str()))
        .collect();
    assert!(missing.is_empty(), "tests/vocabulary/program.rs does not name {missing:?}, public at porous-proto's root");
}
