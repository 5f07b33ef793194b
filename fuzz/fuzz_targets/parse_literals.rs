//! Fuzzes the literals parser family (see `wick_fuzz::run`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick_parse::Format;

const FORMATS: &[Format] = &[Format::Lfm2, Format::Llama3xBuiltin, Format::Gemma4, Format::FunctionGemma];

fuzz_target!(|data: &[u8]| wick_fuzz::run(FORMATS, data));
