//! The engine's errors.

use wick_backend::BackendError;
use wick_types::ErrorClass;

/// Why a request was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Every sequence is busy and the queue is full: retry later.
    #[error("busy: {live} sequences are generating and {queued} requests are queued; retry later")]
    Busy {
        /// Sequences that generate at once (`n_seq_max`).
        live: usize,
        /// The queue bound behind them.
        queued: usize,
    },
    /// The prompt does not fit the context window (it must leave room for one token).
    #[error(
        "the prompt has {prompt_tokens} tokens but the context window holds {n_ctx}; \
         shorten the prompt or raise the context size"
    )]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// The context window of one sequence.
        n_ctx: usize,
    },
    /// The prompt's text is so long that it cannot fit the context window, whatever its
    /// tokens: refused before tokenizing it.
    #[error(
        "the prompt's {bytes} bytes make at least {min_tokens} tokens but the context window \
         holds {n_ctx}; shorten the prompt or raise the context size"
    )]
    PromptTooLarge {
        /// The prompt's text, in bytes.
        bytes: usize,
        /// A lower bound on its tokens.
        min_tokens: usize,
        /// The context window of one sequence.
        n_ctx: usize,
    },
    /// A request value is out of range.
    #[error("invalid {field}: {value} (allowed: {allowed})")]
    InvalidRequest {
        /// The field.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The chat template failed (its own error, e.g. `raise_exception`).
    #[error(transparent)]
    Template(#[from] wick_template::TemplateError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The engine's worker has stopped.
    #[error("the engine has stopped")]
    Stopped,
}

impl EngineError {
    /// How this error reads to the client ([`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            EngineError::Busy { .. } => ErrorClass::Busy,
            EngineError::PromptTooLong {
                prompt_tokens,
                n_ctx,
            } => ErrorClass::ContextLength {
                prompt_tokens: *prompt_tokens,
                at_least: false,
                n_ctx: *n_ctx,
            },
            EngineError::PromptTooLarge {
                min_tokens, n_ctx, ..
            } => ErrorClass::ContextLength {
                prompt_tokens: *min_tokens,
                at_least: true,
                n_ctx: *n_ctx,
            },
            EngineError::InvalidRequest { field, .. } => ErrorClass::Invalid { param: Some(field) },
            EngineError::Template(_) => ErrorClass::Invalid {
                param: Some("messages"),
            },
            EngineError::Backend(b) => b.class(),
            EngineError::Stopped => ErrorClass::Internal,
        }
    }
}
