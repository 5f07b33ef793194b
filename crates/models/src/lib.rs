//! Model sources, verified resumable downloads, the model store and GGUF metadata.
#![deny(missing_docs)]

mod error;
mod ggml_types;
mod gguf;
mod reference;

pub use error::{GgufError, ModelError};
pub use gguf::{GgufHeader, GgufValue, SpecialToken};
pub use reference::{HfRepo, ModelRef, ACCEPTED_FORMS, DEFAULT_QUANT};
