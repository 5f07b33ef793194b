//! The whole-message view: events accumulated into `content`, `reasoning_content` and
//! `tool_calls`.

use serde::Serialize;
use wick_types::FinishReason;

use crate::event::{EndedBy, Event};
use crate::parser::{ParseOptions, Parser};
use crate::Format;

/// One parsed tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParsedToolCall {
    /// The call id.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments, a JSON object text.
    pub arguments: String,
}

/// A parsed assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ParsedMessage {
    /// The text outside reasoning and calls (`""` when none).
    pub content: String,
    /// The reasoning text; `None` when there is none or it is all whitespace.
    pub reasoning_content: Option<String>,
    /// The tool calls in order.
    pub tool_calls: Vec<ParsedToolCall>,
    /// Set by [`Event::End`].
    pub finish_reason: Option<FinishReason>,
}

impl ParsedMessage {
    /// Parses a whole output: feeds it at once and finishes.
    pub fn parse(format: Format, options: ParseOptions, output: &str, ended_by: EndedBy) -> Self {
        let mut p = Parser::new(format, options);
        let mut m = ParsedMessage::default();
        m.extend(&p.feed(output));
        m.extend(&p.finish(ended_by));
        m
    }

    /// Accumulates events.
    pub fn extend(&mut self, events: &[Event]) {
        for e in events {
            self.push(e);
        }
    }

    /// Accumulates one event.
    pub fn push(&mut self, event: &Event) {
        match event {
            Event::Content(s) => self.content.push_str(s),
            Event::Reasoning(s) => self
                .reasoning_content
                .get_or_insert_with(String::new)
                .push_str(s),
            Event::ToolCallStart { id, name, .. } => self.tool_calls.push(ParsedToolCall {
                id: id.clone(),
                name: name.clone(),
                arguments: String::new(),
            }),
            Event::ToolCallArgs { index, text } => {
                if let Some(call) = self.tool_calls.get_mut(*index) {
                    call.arguments.push_str(text);
                }
            }
            Event::End { finish_reason } => {
                self.finish_reason = Some(*finish_reason);
                if self
                    .reasoning_content
                    .as_deref()
                    .is_some_and(|r| r.trim().is_empty())
                {
                    self.reasoning_content = None;
                }
            }
        }
    }
}
