//! Fuzz target `intake_json`: [`oncebox_core::fuzzing::intake_json`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oncebox_core::fuzzing::intake_json(data));
