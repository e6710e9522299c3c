//! Arbitrary bytes into every connect-token decoder: the client's, the server's, and the
//! decoder behind the seal (the input sealed under the test key). No panic, nothing
//! forged accepted, and what opens re-generates to the same values.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    porous_proto::fuzzing::decode_token(data);
});
