//! Any bytes as an image or a sound from a client: sniffed, sized from its header and checked
//! (`wick_backend::media`), a format or a clear refusal, never a panic.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use wick_backend::media::{check, dimensions, sniff, EncodedMedia, MediaEncoder};
use wick_backend::Result;
use wick_types::{Media, MediaKind};

/// A projector taking every kind, so `check` reaches every branch.
#[derive(Debug)]
struct Any;

impl MediaEncoder for Any {
    fn accepts(&self, _: MediaKind) -> bool {
        true
    }

    fn encode(&self, _: &Media) -> Result<Arc<EncodedMedia>> {
        unreachable!("check never encodes")
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = sniff(data);
    let _ = dimensions(data);
    let _ = check(&Any, &Media::image(data.to_vec()));
    let _ = check(&Any, &Media::audio(data.to_vec()));
});
