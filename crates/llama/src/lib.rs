//! wick's llama.cpp backend: the [`wick_backend::Backend`] contract over `llama-cpp-2`.
//!
//! A [`LlamaBackend`] owns the model and its context and runs no thread of its own: the thread
//! that owns it (the engine's, one per model) calls straight into llama.cpp, so a step costs no
//! channel round trip. Every input is checked before it reaches llama.cpp, so bad input is an
//! error, never an abort.
//!
//! ```no_run
//! use wick_backend::{Backend, BackendConfig};
//! use wick_llama::LlamaBackend;
//! use wick_types::SeqId;
//!
//! let mut backend = LlamaBackend::load(&BackendConfig::new("SmolLM2-135M-Instruct.Q4_1.gguf"))?;
//! let prompt = backend.tokenize_prompt("The capital of France is", false)?;
//! backend.prefill(SeqId(0), &prompt)?;
//! let next = backend.decode_one(SeqId(0), None)?;
//! println!("{}", String::from_utf8_lossy(&backend.detokenize(&[next.token()])?));
//! # Ok::<(), wick_backend::BackendError>(())
//! ```
#![deny(missing_docs)]

mod eval;
mod ffi;
mod gguf;
mod handle;
mod load;
mod media;
mod rpc;
mod sampler;
mod vocab;
mod worker;

pub use ffi::{ggml_quantize, GgmlKernels, GgmlProduct};
pub use gguf::check_gguf;
pub use handle::LlamaBackend;
pub use load::{devices, DeviceInfo};
pub use rpc::{probe as probe_rpc_worker, serve_rpc_worker, RpcWorkerConfig};
