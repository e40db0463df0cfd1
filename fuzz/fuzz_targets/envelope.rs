#![no_main]
//! See `protomolt_fuzz::envelope`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| protomolt_fuzz::envelope(data));
