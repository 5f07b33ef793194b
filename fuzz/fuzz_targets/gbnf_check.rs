//! Any text as a GBNF grammar through wick's checker (which stands in front of llama.cpp's
//! parser): a verdict, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = wick_backend::check_gbnf(text);
});
