//! Fuzzes the json parser family (see `wick_fuzz::run`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick_parse::Format;

const FORMATS: &[Format] = &[Format::ContentOnly, Format::Generic, Format::Hermes, Format::Llama3x, Format::MistralNemo, Format::Magistral, Format::CommandR7b, Format::FirefunctionV2, Format::Granite, Format::NemotronV2, Format::Apertus, Format::Apriel15, Format::GigachatV3];

fuzz_target!(|data: &[u8]| wick_fuzz::run(FORMATS, data));
