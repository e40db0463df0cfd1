#![no_main]
//! See `protomolt_fuzz::request_record`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| protomolt_fuzz::request_record(data));
