//! Streaming output parsers: reasoning and tool calls in every format, OpenAI deltas.
#![deny(missing_docs)]
