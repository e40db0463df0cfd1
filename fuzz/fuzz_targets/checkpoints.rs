#![no_main]
//! See `protomolt_fuzz::checkpoints`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| protomolt_fuzz::checkpoints(data));
