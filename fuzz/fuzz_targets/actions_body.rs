#![no_main]
//! See `protomolt_fuzz::actions_body`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| protomolt_fuzz::actions_body(data));
