//! Any bytes, given valid checksums, opened as a store and read every way the API allows.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::fuzz_store(data);
});
