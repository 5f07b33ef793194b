//! The crate's error type.

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// A format name that is not one of [`crate::Format::ALL`].
    #[error("unknown format `{name}`; known formats: {known}")]
    UnknownFormat {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// An `ended_by` value other than `stop` or `length`.
    #[error("unknown end reason `{name}`; expected `stop` or `length`")]
    UnknownEndedBy {
        /// The value given.
        name: String,
    },
    /// No tool-call grammar exists for this format (or no tool was named).
    #[error(
        "cannot force a tool call in format `{format}`: it needs at least one tool and a \
         JSON-style call syntax; use tool_choice auto"
    )]
    NoToolGrammar {
        /// The format's name.
        format: String,
    },
}
