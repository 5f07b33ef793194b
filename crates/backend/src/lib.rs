//! The backend contract of wick (seed 001), a deterministic stub, and the conformance suite every
//! backend passes.
//!
//! A [`Backend`] holds one model and a context of sequences. The engine tokenizes, prefills and
//! decodes through it; [`StubBackend`] implements every operation deterministically (the next
//! token is a hash of the sequence's history) so engine, template and server tests run in
//! milliseconds without a model file.
//!
//! ```
//! use wick_backend::{Backend, BackendConfig, StubBackend};
//! use wick_types::SeqId;
//!
//! let mut backend = StubBackend::new(&BackendConfig::new("unused.gguf")).unwrap();
//! let prompt = backend.tokenize_prompt("<|im_start|>user\nhi<|im_end|>", true).unwrap();
//! backend.prefill(SeqId(0), &prompt).unwrap();
//! let first = backend.decode_one(SeqId(0), None).unwrap();
//! // Deterministic: the same history always gives the same token.
//! backend.seq_rm_last(SeqId(0), 1).unwrap();
//! assert_eq!(backend.decode_one(SeqId(0), None).unwrap(), first);
//! ```
//!
//! Backends do not format chats: prompts are rendered by `wick-template` and tokenized on the
//! caller's side ([`Tokenizer`]), one path for every backend.
//!
//! | operation | required | stub | llama |
//! |---|---|---|---|
//! | tokenize (`special` flag), detokenize (bytes) | yes | yes | yes |
//! | prefill, decode_one, seq_tokens | yes | yes | yes |
//! | decode_one_logprobs (log-probabilities of the raw logits) | default: via step | yes | yes |
//! | kv_pack / kv_unpack (checksummed snapshots) | yes | yes | yes |
//! | step (batched prefill + decode) | default: one at a time | yes | one batch |
//! | samplers, grammar | optional | literal-alternative grammars | GBNF + JSON schema |
//! | adapters, embed, verify, seq_rm*, seq_copy, seq_clear | optional | yes | yes |
//! | thinking_signature | optional | yes | yes |
#![deny(missing_docs)]

mod config;
pub mod conformance;
mod contract;
mod error;
mod gbnf;
mod info;
mod logprobs;
pub mod media;
pub mod snapshot;
mod stub;
pub mod thinking;
mod tokenizer;

pub use config::{BackendConfig, CacheType, GpuLayers, KernelMode};
pub use contract::{
    check_distinct, classify_appended, AdapterId, AdapterSet, Backend, Decoded, SamplerId, StepOp,
    StepResult, Verified,
};
pub use error::{BackendError, Result};
pub use gbnf::{check_gbnf, GbnfError};
pub use info::{
    CpuKernels, LayerPlacement, ModelInfo, SpecialTokens, ThinkingTokens, RECURRENT_CHECKPOINTS,
    THINKING_MARKERS,
};
pub use logprobs::{log_softmax, Logprobs, TokenLogprob, MAX_TOP_LOGPROBS};
pub use media::{EncodedMedia, MediaEncoder, SharedMediaEncoder};
pub use stub::StubBackend;
pub use tokenizer::{SharedTokenizer, Tokenizer};
