//! A client and a server host fed a script of network events, stranger and forged
//! datagrams and API calls; every step checks caps and delivery guarantees.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    porous_proto::fuzzing::host(data);
});
