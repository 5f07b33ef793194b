//! Chat templates: Jinja as transformers renders it, llama.cpp's named templates, role
//! templates, and prompts as segments that user text can never inject control tokens into.
#![deny(missing_docs)]

mod named;
mod segment;

pub use named::{NamedError, NamedTemplate};
pub use segment::{Segment, SegmentKind, Segments};
