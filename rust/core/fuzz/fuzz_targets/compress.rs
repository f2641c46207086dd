//! A document, a dictionary and a level from the fuzzer's bytes, compressed and decoded back.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::fuzz_compress(data);
});
