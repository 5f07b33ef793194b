//! wick as a library: load a GGUF model and complete, chat and stream, sync or async.
//!
//! Every `Llm` built with the same model file and model settings shares one loaded model and
//! one engine thread, which batches all their requests together (continuous batching).
//!
//! ```no_run
//! use wick::{Llm, Message, Role};
//!
//! let llm = Llm::builder().temperature(0.0).max_new_tokens(64).build()?;
//! let answer = llm.chat(&[Message::new(Role::User, "What is the capital of France?")])?;
//! println!("{}", answer.text());
//! for item in llm.stream_complete("Write a haiku about rain.", false)? {
//!     let item = item?;
//!     print!("{}", item.delta);
//!     if let Some(usage) = item.usage {
//!         // The last item: it also carries the whole text.
//!         println!("\n{} tokens: {:?}", usage.completion_tokens, item.text);
//!     }
//! }
//! # Ok::<(), wick::Error>(())
//! ```
//!
//! Stream items carry only what they add (a [`CompletionResponse::delta`], a
//! [`ChatResponse::events`] list, their tokens' log-probabilities), so a long answer costs
//! time and memory in proportion to its length; the whole answer (`text`, `message`) is
//! assembled once and handed out with the last item of the stream, the one with
//! `finish_reason` and `usage`. Whole responses ([`Llm::complete`], [`Llm::chat`]) are that
//! last item with every token's log-probabilities.
#![deny(missing_docs)]

mod builder;
mod chat;
mod completion;
mod error;
mod from_backend;
mod llm;
mod lora;
mod options;
mod registry;
mod response;
mod source;

pub use builder::{
    CompletionToPrompt, KvCache, LlmBuilder, MessagesToPrompt, ModelKwargs, ModelSource, Reasoning,
};
pub use chat::{AsyncChatStream, ChatResponse, ChatStream};
pub use completion::{AsyncCompletionStream, CompletionStream};
pub use error::{Error, Result};
pub use llm::Llm;
pub use lora::LoraAdapter;
pub use options::{GenerateOptions, PromptInput, ToolChoice};
pub use response::{CompletionResponse, LlmMetadata};
pub use wick_backend::{
    check_gbnf, BackendConfig, BackendError, CacheType, CpuKernels, GbnfError, GpuLayers,
    KernelMode, LayerPlacement, ModelInfo, SpecialTokens, StubBackend,
};
pub use wick_engine::{
    Alternative, CacheStats, EngineError, EngineThread, PromptProgress, ScoredToken,
};
#[cfg(feature = "llama")]
pub use wick_llama::{probe_rpc_worker, serve_rpc_worker, RpcWorkerConfig};
/// The model store (references, verified downloads, the local index), for servers and tools
/// that manage models beside answering with them.
pub use wick_models as models;
pub use wick_parse::{
    ChoiceChunk, ChoiceDelta, DeltaBuilder, Event, Format, ParsedMessage, ParsedToolCall,
};
pub use wick_types::{
    ChatRequest, ErrorClass, FinishReason, Grammar, Media, MediaKind, Message, MessageToolCall,
    Role, SamplerOpts, TokenId, Tool, Usage, MEDIA_MARKER,
};

/// How many models are loaded in this process right now (the model cache's live entries).
pub fn loaded_models() -> usize {
    registry::live_models()
}
