//! Any bytes as a KV snapshot file (the disk prompt cache's envelope): a snapshot or a clear
//! error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick_backend::snapshot;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = snapshot::decode("fuzz-fingerprint", data) {
        let _ = s;
    }
    let _ = snapshot::read_tokens(data);
});
