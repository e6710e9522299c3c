//! The `host` target's scripts with both hosts in secure mode: connect tokens, sealed
//! datagrams, strangers with valid and bad tokens, a forger without keys.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    porous_proto::fuzzing::host_secure(data);
});
