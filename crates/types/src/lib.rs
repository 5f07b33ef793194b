//! The shared vocabulary of wick: plain data types that every other crate speaks.
//!
//! Nothing here does I/O; every type is `serde`-serialisable so the same values travel
//! through the library, the CLI and the HTTP server unchanged.
//!
//! ```
//! use wick_types::{Message, Role, SamplerOpts};
//!
//! let chat = vec![Message::new(Role::System, "Be brief."), Message::new(Role::User, "Hi!")];
//! assert_eq!(chat[1].role.as_str(), "user");
//! let greedy = SamplerOpts::greedy();
//! assert!(greedy.is_greedy());
//! ```
#![deny(missing_docs)]

mod chat;
mod class;
mod ids;
mod media;
mod sampling;

pub use chat::{ChatRequest, FinishReason, Message, MessageToolCall, Role, Tool, Usage};
pub use class::ErrorClass;
pub use ids::{SeqId, TokenId};
pub use media::{common_prefix, scrub, text_tokens, Media, MediaKind, MEDIA_MARKER};
pub use sampling::{Grammar, InvalidSampler, SamplerOpts, MAX_TOP_K};

/// Lower-case hex of `bytes` (digests in file names, fingerprints and checks).
///
/// ```
/// assert_eq!(wick_types::hex(&[0x0f, 0xa0]), "0fa0");
/// ```
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
