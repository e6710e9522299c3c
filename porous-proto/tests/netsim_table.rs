//! The presets table of `docs/simulated.md` (one seed per preset, the simulator's exact
//! figures) checked against the document, so congestion control, loss recovery or latency
//! regressions show in review. `cargo bench -p porous-proto --bench netsim` rewrites it
//! with the rest of the document; `POROUS_BLESS=1` here rewrites this table alone.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

#[path = "../benches/netsim/workloads.rs"]
#[allow(dead_code)]
mod workloads;

#[test]
#[cfg_attr(target_family = "wasm", ignore = "reads the snapshot from the file system")]
fn simulated_figures_match_the_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/simulated.md");
    let doc = std::fs::read_to_string(path).expect("docs/simulated.md exists");
    let table = workloads::presets::table();
    let want = workloads::splice(&doc, "netsim", &table);
    if std::env::var_os("POROUS_BLESS").is_some() {
        std::fs::write(path, &want).expect("write docs/simulated.md");
    } else {
        assert!(
            doc == want,
            "simulated figures changed; run `cargo bench -p porous-proto --bench netsim` (or POROUS_BLESS=1 \
             on this test) and review docs/simulated.md\n{table}"
        );
    }
}
