//! Arbitrary bytes into every datagram decoder: no panic, and what decodes re-encodes to
//! itself. Input: 12 bytes of expansion references, then the datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    porous_proto::fuzzing::decode_frame(data);
});
