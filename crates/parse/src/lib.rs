//! Streaming output parsers: reasoning and tool calls in every format, OpenAI deltas.
//!
//! One push parser per output format turns raw model text, fed in pieces of any size, into
//! typed [`Event`]s that are never taken back: content and reasoning text, the start of a
//! tool call (index, id, complete name) and fragments of its arguments, whose concatenation is
//! the final arguments JSON object. The total work is linear in the output length: the only
//! text looked at twice is a bounded tail that could still be a marker, a call header that is
//! not committed yet, and (README L6) a call opened inside reasoning that is not closed yet.
//!
//! ```
//! use wick_parse::{EndedBy, Event, Format, ParseOptions, ParsedMessage, Parser};
//!
//! let mut parser = Parser::new(Format::Hermes, ParseOptions::new().id_seed(1));
//! let mut message = ParsedMessage::default();
//! for piece in ["<think>Weather?</think><tool_", "call>\n{\"name\": \"get_weather\", ",
//!               "\"arguments\": {\"city\": \"Par", "is\"}}\n</tool_call>"] {
//!     message.extend(&parser.feed(piece));
//! }
//! message.extend(&parser.finish(EndedBy::Stop));
//! assert_eq!(message.reasoning_content.as_deref(), Some("Weather?"));
//! assert_eq!(message.tool_calls[0].name, "get_weather");
//! assert_eq!(message.tool_calls[0].arguments, r#"{"city": "Paris"}"#);
//! ```
//!
//! The formats and the lenient rules are those of the shared tool-call corpus
//! (`shared/tool-calls/README.md`); [`Format::ALL`] lists them, [`Format::detect`] picks one
//! from a chat template. [`DeltaBuilder`] turns events into OpenAI chunk deltas.
#![deny(missing_docs)]

mod call_json;
mod delta;
mod detect;
mod engine;
mod error;
mod event;
mod formats;
mod grammar;
mod ids;
mod json_stream;
mod literal;
mod message;
mod out;
mod parser;
mod scan;
mod schema_grammar;
mod seq;
mod tools;
mod typed_args;

pub use delta::{ChoiceChunk, ChoiceDelta, DeltaBuilder, FunctionDelta, ToolCallDelta};
pub use error::ParseError;
pub use event::{EndedBy, Event};
pub use formats::Format;
pub use grammar::{tool_call_grammar, tool_call_grammar_for};
pub use message::{ParsedMessage, ParsedToolCall};
pub use parser::{ParseOptions, Parser};
pub use tools::ToolSchemas;
pub use wick_types::FinishReason;
