//! The stub's fake projector: any image a stub prompt holds becomes four positions whose ids
//! derive from its bytes, so the engine's handling of media (rendering, caching, batching) is
//! tested without llama.cpp.

use std::sync::Arc;

use wick_types::{Media, MediaKind, TokenId};

use crate::media::{check, EncodedMedia, MediaEncoder, MediaTable};
use crate::Result;

/// Positions every image takes.
pub(crate) const POSITIONS: usize = 4;

/// Images only; four positions each.
#[derive(Debug, Default)]
pub(crate) struct StubProjector {
    table: MediaTable,
}

impl MediaEncoder for StubProjector {
    fn accepts(&self, kind: MediaKind) -> bool {
        kind == MediaKind::Image
    }

    fn encode(&self, media: &Media) -> Result<Arc<EncodedMedia>> {
        check(self, media)?;
        let digest = xxhash_rust::xxh3::xxh3_128(&media.bytes);
        self.table.register(digest, |hash| {
            Ok(EncodedMedia {
                kind: media.kind,
                tokens: (0..POSITIONS).map(|i| TokenId::media(hash, i)).collect(),
                digest,
                data: Box::new(()),
            })
        })
    }
}

impl StubProjector {
    /// Checks that every media id in `tokens` belongs to a whole run this projector encoded
    /// and that some request still holds.
    pub(crate) fn check(&self, tokens: &[TokenId]) -> Result<()> {
        self.table.check_runs(tokens)
    }
}
