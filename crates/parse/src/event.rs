//! The typed events a parser emits.

use wick_types::FinishReason;

/// One piece of parsed model output, in output order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Text for `content`.
    Content(String),
    /// Text for `reasoning_content`.
    Reasoning(String),
    /// A tool call begins; its name and id are complete and never change.
    ToolCallStart {
        /// Position of the call in the message (0, 1, …).
        index: usize,
        /// The call id (from the model where the format carries one, else generated).
        id: String,
        /// The function name.
        name: String,
    },
    /// A fragment of the call's `arguments` JSON text.
    ToolCallArgs {
        /// The call the fragment belongs to.
        index: usize,
        /// The fragment; all fragments of a call concatenate to a JSON object text.
        text: String,
    },
    /// The output ended.
    End {
        /// Why, per the README's C4.
        finish_reason: FinishReason,
    },
}

/// Why the model stopped generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EndedBy {
    /// An end-of-generation token, a stop token or a stop string.
    #[default]
    Stop,
    /// The token budget (`max_tokens`) or the context ran out.
    Length,
}

impl std::str::FromStr for EndedBy {
    type Err = crate::ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stop" => Ok(EndedBy::Stop),
            "length" => Ok(EndedBy::Length),
            other => Err(crate::ParseError::UnknownEndedBy {
                name: other.to_owned(),
            }),
        }
    }
}
