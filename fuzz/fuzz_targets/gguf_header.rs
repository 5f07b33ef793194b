//! Any bytes as a GGUF file: a header or a clear error, never a panic or a huge allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = wick_models::GgufHeader::parse_bytes(data) {
        let _ = (header.architecture(), header.tensor_count(), header.version());
    }
});
