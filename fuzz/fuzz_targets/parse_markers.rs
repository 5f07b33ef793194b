//! Fuzzes the markers parser family (see `wick_fuzz::run`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick_parse::Format;

const FORMATS: &[Format] = &[Format::MistralArgs, Format::DeepseekR1, Format::DeepseekV31, Format::KimiK2, Format::FunctionaryV31, Format::FunctionaryV32, Format::GptOss];

fuzz_target!(|data: &[u8]| wick_fuzz::run(FORMATS, data));
