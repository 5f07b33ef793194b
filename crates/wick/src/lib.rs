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
//!     print!("{}", item?.delta);
//! }
//! # Ok::<(), wick::Error>(())
//! ```
#![deny(missing_docs)]

mod builder;
mod chat;
mod completion;
mod error;
mod json_chat;
mod llm;
mod options;
mod registry;
mod response;
mod source;

pub use builder::{
    CompletionToPrompt, KvCache, LlmBuilder, MessagesToPrompt, ModelKwargs, ModelSource,
};
pub use chat::{AsyncChatStream, ChatResponse, ChatStream};
pub use completion::{AsyncCompletionStream, CompletionStream};
pub use error::{Error, Result};
pub use json_chat::JsonChat;
pub use llm::Llm;
pub use options::{GenerateOptions, PromptInput, ToolChoice};
pub use response::{CompletionResponse, LlmMetadata};
pub use wick_backend::KernelMode;
pub use wick_engine::{Alternative, CacheStats, ScoredToken};
pub use wick_parse::{Event, Format, ParsedMessage, ParsedToolCall};
pub use wick_types::{
    ChatRequest, FinishReason, Grammar, Message, Role, SamplerOpts, TokenId, Tool, Usage,
};

/// How many models are loaded in this process right now (the model cache's live entries).
pub fn loaded_models() -> usize {
    registry::live_models()
}
