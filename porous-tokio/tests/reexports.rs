//! Everything an application names comes from the adapter, so its Cargo.toml needs no
//! porous-proto and no bytes: the vocabulary program every crate compiles against its own
//! re-exports alone (porous-proto/tests/vocabulary/program.rs, which names everything at
//! porous-proto's root), and what the async adapters add
//! (porous-async/tests/common/reexports.rs).

use porous_tokio as adapter;

#[path = "../../porous-proto/tests/vocabulary/program.rs"]
mod program;

#[path = "../../porous-async/tests/common/reexports.rs"]
mod adds;

#[test]
fn the_vocabulary_program_compiles_and_runs_against_the_adapter_alone() {
    program::run();
}

#[test]
fn the_async_vocabulary_and_payloads_the_one_way() {
    adds::check();
}
