//! Fuzz target `config`: [`oncebox_core::fuzzing::config`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oncebox_core::fuzzing::config(data));
