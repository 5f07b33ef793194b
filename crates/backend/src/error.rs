use std::path::PathBuf;
use wick_types::{ErrorClass, SeqId, TokenId};

/// Everything a backend operation can fail with.
///
/// Bad input is always one of these errors: a backend never panics or aborts on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The backend does not implement this optional operation.
    #[error("the {backend} backend does not support `{op}`")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// The operation asked for.
        op: &'static str,
    },
    /// The model file could not be loaded.
    #[error("cannot load model {path}: {reason}")]
    Load {
        /// The file asked for.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// An RPC worker (`wick rpc-worker`, llama.cpp's `rpc-server`) cannot be used: it does
    /// not answer, or speaks another protocol version.
    #[error("RPC worker {endpoint}: {reason}")]
    RpcWorker {
        /// Its `HOST:PORT`.
        endpoint: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A configuration value is out of its allowed range.
    #[error("invalid backend config: `{field}` = {value} ({allowed})")]
    Config {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A sampling option is out of its allowed range.
    #[error("invalid sampler option: `{field}` = {value} ({allowed})")]
    SamplerOption {
        /// The option's name.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// An argument does not fit the operation (a copy longer than its source, …).
    #[error("invalid argument to `{op}`: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The sequence id is not below the context's `n_seq_max`.
    #[error("unknown sequence {seq}: this context has sequences 0..{n_seq_max}")]
    UnknownSequence {
        /// The id asked for.
        seq: SeqId,
        /// The number of sequences the context holds.
        n_seq_max: u32,
    },
    /// A sequence appears more than once in one step.
    #[error("sequence {seq} appears more than once in one step")]
    DuplicateSequence {
        /// The repeated sequence.
        seq: SeqId,
    },
    /// A token id is not in the vocabulary.
    #[error("token id {token} is out of range: the vocabulary has {n_vocab} tokens")]
    TokenOutOfRange {
        /// The id given.
        token: TokenId,
        /// The vocabulary size.
        n_vocab: u32,
    },
    /// An operation needs input it did not get (an empty prompt, a decode of an empty sequence…).
    #[error("empty input: {what}")]
    EmptyInput {
        /// What was empty.
        what: &'static str,
    },
    /// The sequence would outgrow its share of the context window.
    #[error("sequence {seq} needs {needed} tokens but its context window holds {n_ctx}")]
    ContextFull {
        /// The sequence.
        seq: SeqId,
        /// Tokens the operation needs in all.
        needed: usize,
        /// Tokens one sequence may hold.
        n_ctx: u32,
    },
    /// A grammar or JSON schema was rejected.
    #[error("invalid grammar: {reason}")]
    Grammar {
        /// Why it was rejected.
        reason: String,
    },
    /// No sampler with this id exists (never created, or freed).
    #[error("unknown sampler {0}")]
    UnknownSampler(u64),
    /// No adapter with this id exists (never loaded, or unloaded).
    #[error("unknown adapter {0}")]
    UnknownAdapter(u64),
    /// An adapter file could not be loaded.
    #[error("cannot load adapter {path}: {reason}")]
    Adapter {
        /// The file asked for.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A KV snapshot is truncated, corrupt or from another model or context layout.
    #[error("rejected KV snapshot: {reason}")]
    InvalidSnapshot {
        /// Why it was rejected.
        reason: String,
    },
    /// Text could not be tokenized or rendered.
    #[error("cannot tokenize: {reason}")]
    Tokenize {
        /// Why.
        reason: String,
    },
    /// The chat template could not be applied.
    #[error("cannot apply chat template: {reason}")]
    Template {
        /// Why.
        reason: String,
    },
    /// The model failed to evaluate a batch.
    #[error("decode failed: {reason}")]
    Decode {
        /// What the engine reported.
        reason: String,
    },
    /// An image or sound in the prompt cannot be used: not of a format or kind the model's
    /// projector takes, corrupt, too large, or the model has no projector.
    #[error("{reason}")]
    Media {
        /// What is wrong, naming the medium.
        reason: String,
    },
    /// The model's context is gone: rebuilding it (to load an adapter) failed, so the backend
    /// can serve nothing more; load the model again.
    #[error("the model's context could not be rebuilt; load the model again")]
    ContextGone,
}

impl BackendError {
    /// How this error reads to the client ([`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            BackendError::SamplerOption { field, .. } => ErrorClass::Invalid { param: Some(field) },
            BackendError::TokenOutOfRange { .. } => ErrorClass::Invalid {
                param: Some("tokens"),
            },
            BackendError::EmptyInput { .. } | BackendError::Tokenize { .. } => {
                ErrorClass::Invalid {
                    param: Some("input"),
                }
            }
            BackendError::Grammar { .. } => ErrorClass::Invalid {
                param: Some("response_format"),
            },
            BackendError::Template { .. } | BackendError::Media { .. } => ErrorClass::Invalid {
                param: Some("messages"),
            },
            BackendError::ContextFull { needed, n_ctx, .. } => ErrorClass::ContextLength {
                prompt_tokens: *needed,
                at_least: false,
                n_ctx: *n_ctx as usize,
            },
            BackendError::Unsupported { op, .. } => ErrorClass::Unsupported { param: op },
            BackendError::Load { .. }
            | BackendError::RpcWorker { .. }
            | BackendError::Config { .. }
            | BackendError::InvalidArgument { .. }
            | BackendError::UnknownSequence { .. }
            | BackendError::DuplicateSequence { .. }
            | BackendError::UnknownSampler(_)
            | BackendError::UnknownAdapter(_)
            | BackendError::Adapter { .. }
            | BackendError::InvalidSnapshot { .. }
            | BackendError::Decode { .. }
            | BackendError::ContextGone => ErrorClass::Internal,
        }
    }
}

/// Shorthand for results of backend operations.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;
