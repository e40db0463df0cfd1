#![no_main]
//! See `protomolt_fuzz::rules`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| protomolt_fuzz::rules(data));
