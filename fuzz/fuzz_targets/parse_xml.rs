//! Fuzzes the xml parser family (see `wick_fuzz::run`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick_parse::Format;

const FORMATS: &[Format] = &[Format::Qwen3CoderXml, Format::SeedOss, Format::MinimaxM2, Format::Glm45, Format::DeepseekDsml];

fuzz_target!(|data: &[u8]| wick_fuzz::run(FORMATS, data));
