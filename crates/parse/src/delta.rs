//! OpenAI `chat.completion.chunk` choice deltas built from events (`openai-stream.md`).

use serde::Serialize;
use wick_types::FinishReason;

use crate::event::Event;

/// The function part of a tool-call delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionDelta {
    /// The complete name, in the call's first delta only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `""` in the first delta, then fragments.
    pub arguments: String,
}

/// One entry of `delta.tool_calls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallDelta {
    /// The call's position (0, 1, …).
    pub index: usize,
    /// The id, in the first delta only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `"function"`, in the first delta only.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Name and argument fragment.
    pub function: FunctionDelta,
}

/// `choices[].delta`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ChoiceDelta {
    /// `"assistant"` in the first chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// A content fragment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A reasoning fragment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool-call fragments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// One `choices[]` entry of a chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChoiceChunk {
    /// The choice index (0).
    pub index: u32,
    /// What changed.
    pub delta: ChoiceDelta,
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

    /// The chunks for `events` (the first call also yields the role chunk).
    pub fn push(&mut self, events: &[Event]) -> Vec<ChoiceChunk> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(chunk(
                ChoiceDelta {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    ..ChoiceDelta::default()
                },
                None,
            ));
        }
        for e in events {
            out.push(match e {
                Event::Content(s) => chunk(
                    ChoiceDelta {
                        content: Some(s.clone()),
                        ..ChoiceDelta::default()
                    },
                    None,
                ),
                Event::Reasoning(s) => chunk(
                    ChoiceDelta {
                        reasoning_content: Some(s.clone()),
                        ..ChoiceDelta::default()
                    },
                    None,
                ),
                Event::ToolCallStart { index, id, name } => tool(ToolCallDelta {
                    index: *index,
                    id: Some(id.clone()),
                    kind: Some("function"),
                    function: FunctionDelta {
                        name: Some(name.clone()),
                        arguments: String::new(),
                    },
                }),
                Event::ToolCallArgs { index, text } => tool(ToolCallDelta {
                    index: *index,
                    id: None,
                    kind: None,
                    function: FunctionDelta {
                        name: None,
                        arguments: text.clone(),
                    },
                }),
                Event::End { finish_reason } => chunk(ChoiceDelta::default(), Some(*finish_reason)),
            });
        }
        out
    }
}

fn chunk(delta: ChoiceDelta, finish_reason: Option<FinishReason>) -> ChoiceChunk {
    ChoiceChunk {
        index: 0,
        delta,
        logprobs: None,
        finish_reason,
    }
}

fn tool(t: ToolCallDelta) -> ChoiceChunk {
    chunk(
        ChoiceDelta {
            tool_calls: Some(vec![t]),
            ..ChoiceDelta::default()
        },
        None,
    )
}
