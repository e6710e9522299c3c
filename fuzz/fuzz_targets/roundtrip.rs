//! An arbitrary valid datagram encodes, decodes to itself and matches its predicted size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    porous_proto::fuzzing::roundtrip(data);
});
