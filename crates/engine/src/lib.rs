//! wick's engine: one thread per loaded model that batches every live request into each
//! [`Backend::step`](wick_backend::Backend::step) (continuous batching), reuses the longest
//! prompt prefix any sequence holds, stops on end-of-generation tokens and stop strings that
//! span tokens, and frees a sequence as soon as its stream is dropped.
//!
//! ```
//! use wick_backend::{BackendConfig, StubBackend};
//! use wick_engine::{Engine, EngineConfig, GenEvent, GenerateRequest};
//!
//! let backend = StubBackend::new(&BackendConfig::new("stub"))?;
//! let engine = Engine::start(Box::new(backend), EngineConfig::default())?;
//! let prompt = engine.with_backend(|b| b.tokenize("Hello there", false))??;
//! let request = GenerateRequest { prompt, max_tokens: Some(8), ..Default::default() };
//! let mut text = String::new();
//! for event in engine.submit(request)? {
//!     match event {
//!         GenEvent::Text(t) | GenEvent::TextWithLogprobs { text: t, .. } => text.push_str(&t),
//!         GenEvent::Progress(_) => unreachable!("only a request with `progress` gets these"),
//!         GenEvent::Done(done) => assert!(done.usage.completion_tokens <= 8),
//!         GenEvent::Error(e) => return Err(e.into()),
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod config;
mod diskcache;
mod error;
mod logprobs;
mod prompt;
mod ramcache;
mod request;
mod scheduler;
mod spec;
mod stop;
mod ticket;
mod utf8;
mod worker;

pub use config::EngineConfig;
pub use diskcache::{is_stale_temp, is_temp, remove_stale_temp_files, CacheStats, DiskCacheConfig};
pub use error::EngineError;
pub use logprobs::{Alternative, ScoredToken};
pub use prompt::{check_size, segment_tokens, special_texts, ChatFormat, RenderedPrompt};
pub use request::{Finished, GenEvent, GenerateRequest, PromptProgress};
pub use stop::{StopMatcher, StopScan};
pub use utf8::Utf8Stream;
pub use worker::{Engine, EngineThread, Generation};
