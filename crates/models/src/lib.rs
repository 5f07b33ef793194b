//! Model sources, verified resumable downloads, the model store and GGUF metadata.
#![deny(missing_docs)]
