//! How a failure reads to the client that caused it, whatever layer it came from.

/// The client-facing class of an error. Each error type of wick classifies its own variants
/// (`BackendError::class`, `EngineError::class`, `wick::Error::class`), each with an
/// exhaustive `match` in its own crate, and an API maps classes to its wire errors in one
/// exhaustive `match`: no error ever falls through a catch-all arm.
///
/// Deliberately not `#[non_exhaustive]`: a new class must be mapped by every API, and the
/// compiler says where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request is wrong; `param` names the field at fault when one is known.
    Invalid {
        /// The field at fault.
        param: Option<&'static str>,
    },
    /// The prompt does not fit the context window.
    ContextLength {
        /// Tokens of the prompt (a lower bound when `at_least`).
        prompt_tokens: usize,
        /// Whether `prompt_tokens` is a lower bound (the prompt was refused untokenized).
        at_least: bool,
        /// Tokens one sequence may hold.
        n_ctx: usize,
    },
    /// The request asks for something this build does not do.
    Unsupported {
        /// What it asks for.
        param: &'static str,
    },
    /// Every sequence is busy and the queue is full: retry later.
    Busy,
    /// A failure on the server's side; its details are for the log, not the client.
    Internal,
}
