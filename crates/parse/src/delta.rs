//! OpenAI `chat.completion.chunk` choice deltas built from events (`openai-stream.md`); they
//! borrow the events' text, so serializing a chunk copies it once, onto the wire.

use serde::Serialize;
use wick_types::FinishReason;

use crate::event::Event;

/// The function part of a tool-call delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionDelta<'e> {
    /// The complete name, in the call's first delta only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'e str>,
    /// `""` in the first delta, then fragments.
    pub arguments: &'e str,
}

/// One entry of `delta.tool_calls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallDelta<'e> {
    /// The call's position (0, 1, …).
    pub index: usize,
    /// The id, in the first delta only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'e str>,
    /// `"function"`, in the first delta only.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Name and argument fragment.
    pub function: FunctionDelta<'e>,
}

/// `choices[].delta`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ChoiceDelta<'e> {
    /// `"assistant"` in the first chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// A content fragment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'e str>,
    /// A reasoning fragment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'e str>,
    /// Tool-call fragments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta<'e>>>,
}

/// One `choices[]` entry of a chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChoiceChunk<'e> {
    /// The choice index (0).
    pub index: u32,
    /// What changed.
    pub delta: ChoiceDelta<'e>,
    /// Always `null` (no logprobs).
    pub logprobs: Option<()>,
    /// Set on the last chunk only.
    pub finish_reason: Option<FinishReason>,
}

/// Turns events into chunk choices: a first `role` chunk, one chunk per event, and the
/// finishing chunk with `delta: {}`.
#[derive(Debug, Clone, Default)]
pub struct DeltaBuilder {
    started: bool,
}

impl DeltaBuilder {
    /// A builder for one response.
    pub fn new() -> Self {
        Self::default()
    }

    /// The chunks for `events` (the first call also yields the role chunk), borrowing their
    /// text.
    pub fn push<'e>(&mut self, events: &'e [Event]) -> Vec<ChoiceChunk<'e>> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(chunk(
                ChoiceDelta {
                    role: Some("assistant"),
                    content: Some(""),
                    ..ChoiceDelta::default()
                },
                None,
            ));
        }
        for e in events {
            out.push(match e {
                Event::Content(s) => chunk(
                    ChoiceDelta {
                        content: Some(s),
                        ..ChoiceDelta::default()
                    },
                    None,
                ),
                Event::Reasoning(s) => chunk(
                    ChoiceDelta {
                        reasoning_content: Some(s),
                        ..ChoiceDelta::default()
                    },
                    None,
                ),
                Event::ToolCallStart { index, id, name } => tool(ToolCallDelta {
                    index: *index,
                    id: Some(id),
                    kind: Some("function"),
                    function: FunctionDelta {
                        name: Some(name),
                        arguments: "",
                    },
                }),
                Event::ToolCallArgs { index, text } => tool(ToolCallDelta {
                    index: *index,
                    id: None,
                    kind: None,
                    function: FunctionDelta {
                        name: None,
                        arguments: text,
                    },
                }),
                Event::End { finish_reason } => chunk(ChoiceDelta::default(), Some(*finish_reason)),
            });
        }
        out
    }
}

fn chunk(delta: ChoiceDelta<'_>, finish_reason: Option<FinishReason>) -> ChoiceChunk<'_> {
    ChoiceChunk {
        index: 0,
        delta,
        logprobs: None,
        finish_reason,
    }
}

fn tool(t: ToolCallDelta<'_>) -> ChoiceChunk<'_> {
    chunk(
        ChoiceDelta {
            tool_calls: Some(vec![t]),
            ..ChoiceDelta::default()
        },
        None,
    )
}
