//! Fuzz target `idempotency_key`: [`oncebox_core::fuzzing::idempotency_key_header`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oncebox_core::fuzzing::idempotency_key_header(data));
