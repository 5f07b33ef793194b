//! The parser's events as Anthropic content blocks: one builder makes both the stream's
//! `content_block_*` events and the whole message's `content`, so a streamed answer is the
//! whole answer, block for block.
//!
//! A block opens when an event of another kind arrives (text, thinking, a tool call) and
//! closes when the next one opens or the answer ends; blocks are numbered 0, 1, 2… in order.
//! Whitespace that would open a block is held until text follows it, so the template's
//! newlines between a thought and a call do not become empty-looking blocks.

use serde::Serialize;
use serde_json::{Map, Value};
use wick::{Event, FinishReason, Usage};

/// One content block of a message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContentBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        /// Anthropic signs its thinking; a local model's is not signed.
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// A `content_block_delta`'s `delta`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub(crate) enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
}

/// The block events of a stream (`message_start` and the closing events are the stream's).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub(crate) enum BlockEvent {
    #[serde(rename = "content_block_start")]
    Start {
        index: usize,
        content_block: ContentBlock,
    },
    #[serde(rename = "content_block_delta")]
    Delta { index: usize, delta: Delta },
    #[serde(rename = "content_block_stop")]
    Stop { index: usize },
}

impl BlockEvent {
    /// The SSE `event:` name: the same as `type`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            BlockEvent::Start { .. } => "content_block_start",
            BlockEvent::Delta { .. } => "content_block_delta",
            BlockEvent::Stop { .. } => "content_block_stop",
        }
    }
}

/// The kind of text a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
}

/// Builds blocks from events.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    /// The blocks so far; the last one is open while `open` says so.
    content: Vec<ContentBlock>,
    open: bool,
    /// The open tool call's arguments so far (parsed into `input` when it closes).
    args: String,
    /// Whitespace that would open a block of this kind.
    held: Option<(Kind, String)>,
}

impl Blocks {
    /// Adds `events`; the block events they make go to `out`.
    pub(crate) fn push(&mut self, events: &[Event], out: &mut Vec<BlockEvent>) {
        for event in events {
            match event {
                Event::Content(text) => self.text(Kind::Text, text, out),
                Event::Reasoning(text) => self.text(Kind::Thinking, text, out),
                Event::ToolCallStart { id, name, .. } => {
                    self.held = None;
                    self.close(out);
                    self.start(
                        ContentBlock::ToolUse {
                            id: tool_use_id(id),
                            name: name.clone(),
                            input: Value::Object(Map::new()),
                        },
                        out,
                    );
                }
                Event::ToolCallArgs { text, .. }
                    if self.open
                        && matches!(self.content.last(), Some(ContentBlock::ToolUse { .. })) =>
                {
                    self.args.push_str(text);
                    self.delta(
                        Delta::InputJson {
                            partial_json: text.clone(),
                        },
                        out,
                    );
                }
                // The end is the caller's (it carries the stop reason and usage).
                _ => {}
            }
        }
    }

    /// Closes the last block; the whole content. Held whitespace becomes a text block only
    /// when there is nothing else to show.
    pub(crate) fn finish(&mut self, out: &mut Vec<BlockEvent>) -> Vec<ContentBlock> {
        self.close(out);
        if let Some((kind, text)) = self.held.take() {
            if self.content.is_empty() {
                self.open_text(kind, text, out);
                self.close(out);
            }
        }
        std::mem::take(&mut self.content)
    }

    fn text(&mut self, kind: Kind, text: &str, out: &mut Vec<BlockEvent>) {
        if text.is_empty() {
            return;
        }
        let open_kind = match self.content.last() {
            Some(ContentBlock::Text { .. }) if self.open => Some(Kind::Text),
            Some(ContentBlock::Thinking { .. }) if self.open => Some(Kind::Thinking),
            _ => None,
        };
        if open_kind == Some(kind) {
            self.append(text);
            self.delta(delta(kind, text.to_owned()), out);
            return;
        }
        let mut pending = match self.held.take() {
            Some((held_kind, held)) if held_kind == kind => held,
            _ => String::new(),
        };
        pending.push_str(text);
        if pending.trim().is_empty() {
            self.held = Some((kind, pending));
            return;
        }
        self.close(out);
        self.open_text(kind, pending, out);
    }

    /// Opens a text or thinking block holding `text`: a start with it empty, then a delta.
    fn open_text(&mut self, kind: Kind, text: String, out: &mut Vec<BlockEvent>) {
        let empty = match kind {
            Kind::Text => ContentBlock::Text {
                text: String::new(),
            },
            Kind::Thinking => ContentBlock::Thinking {
                thinking: String::new(),
                signature: String::new(),
            },
        };
        self.start(empty, out);
        self.append(&text);
        self.delta(delta(kind, text), out);
    }

    fn append(&mut self, more: &str) {
        if let Some(ContentBlock::Text { text } | ContentBlock::Thinking { thinking: text, .. }) =
            self.content.last_mut()
        {
            text.push_str(more);
        }
    }

    fn start(&mut self, block: ContentBlock, out: &mut Vec<BlockEvent>) {
        out.push(BlockEvent::Start {
            index: self.content.len(),
            content_block: block.clone(),
        });
        self.content.push(block);
        self.open = true;
    }

    fn delta(&self, delta: Delta, out: &mut Vec<BlockEvent>) {
        out.push(BlockEvent::Delta {
            index: self.content.len() - 1,
            delta,
        });
    }

    fn close(&mut self, out: &mut Vec<BlockEvent>) {
        if !self.open {
            return;
        }
        self.open = false;
        let args = std::mem::take(&mut self.args);
        if let Some(ContentBlock::ToolUse { input, name, .. }) = self.content.last_mut() {
            // The parser's fragments concatenate to a JSON object; anything else is logged
            // and shown as `{}` (an Anthropic `input` is always an object).
            match serde_json::from_str::<Value>(&args) {
                Ok(value @ Value::Object(_)) => *input = value,
                _ if args.trim().is_empty() => {}
                _ => tracing::warn!("tool call `{name}`: arguments are not a JSON object: {args}"),
            }
        }
        out.push(BlockEvent::Stop {
            index: self.content.len() - 1,
        });
    }
}

fn delta(kind: Kind, text: String) -> Delta {
    match kind {
        Kind::Text => Delta::Text { text },
        Kind::Thinking => Delta::Thinking { thinking: text },
    }
}

/// A tool call's id as Anthropic spells them (`toolu_…`).
fn tool_use_id(id: &str) -> String {
    if id.starts_with("toolu_") {
        id.to_owned()
    } else {
        format!("toolu_{}", id.strip_prefix("call_").unwrap_or(id))
    }
}

/// Anthropic's `stop_reason` for how the answer ended.
pub(crate) fn stop_reason(
    reason: Option<FinishReason>,
    stop_sequence: Option<&str>,
) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "max_tokens",
        Some(FinishReason::ToolCalls) => "tool_use",
        _ if stop_sequence.is_some() => "stop_sequence",
        _ => "end_turn",
    }
}

/// A message's `usage`: `input_tokens` counts the prompt tokens not read from the cache
/// (Anthropic's split), `cache_read_input_tokens` the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[allow(clippy::struct_field_names)] // Anthropic's names
pub(crate) struct AnthropicUsage {
    input_tokens: u32,
    cache_creation_input_tokens: u32,
    cache_read_input_tokens: u32,
    output_tokens: u32,
}

impl AnthropicUsage {
    /// `message_start`'s usage: the prompt's tokens, before the answer says how many the cache
    /// served (`message_delta` has the final split).
    pub(crate) fn prompt(input_tokens: u32) -> Self {
        AnthropicUsage {
            input_tokens,
            ..AnthropicUsage::default()
        }
    }
}

impl From<Usage> for AnthropicUsage {
    fn from(u: Usage) -> Self {
        AnthropicUsage {
            input_tokens: u.prompt_tokens.saturating_sub(u.cached_tokens),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: u.cached_tokens,
            output_tokens: u.completion_tokens,
        }
    }
}

/// The `message` object, whole or (empty, in `message_start`) to come.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MessageObject<'a> {
    pub(crate) id: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) role: &'static str,
    pub(crate) model: &'a str,
    pub(crate) content: &'a [ContentBlock],
    pub(crate) stop_reason: Option<&'static str>,
    pub(crate) stop_sequence: Option<&'a str>,
    pub(crate) usage: AnthropicUsage,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<Event> {
        vec![
            Event::Reasoning("Let me ".into()),
            Event::Reasoning("think.".into()),
            Event::Content("\n\n".into()),
            Event::ToolCallStart {
                index: 0,
                id: "call_7".into(),
                name: "get_weather".into(),
            },
            Event::ToolCallArgs {
                index: 0,
                text: "{\"city\": ".into(),
            },
            Event::ToolCallArgs {
                index: 0,
                text: "\"Paris\"}".into(),
            },
            Event::Content(" Done".into()),
            Event::Content(".".into()),
            Event::End {
                finish_reason: FinishReason::ToolCalls,
            },
        ]
    }

    /// The events under every split into items give the same block events and content.
    #[test]
    fn blocks_are_numbered_in_order_and_deltas_concatenate_under_any_split() {
        let all = events();
        let mut expected = None;
        for split in 0..=all.len() {
            let mut blocks = Blocks::default();
            let mut out = Vec::new();
            blocks.push(&all[..split], &mut out);
            blocks.push(&all[split..], &mut out);
            let content = blocks.finish(&mut out);
            let got = (out, content);
            match &expected {
                None => expected = Some(got),
                Some(e) => assert_eq!(&got, e, "split at {split}"),
            }
        }
        let (out, content) = expected.unwrap();
        assert_eq!(
            content,
            [
                ContentBlock::Thinking {
                    thinking: "Let me think.".into(),
                    signature: String::new()
                },
                ContentBlock::ToolUse {
                    id: "toolu_7".into(),
                    name: "get_weather".into(),
                    input: serde_json::json!({"city": "Paris"})
                },
                ContentBlock::Text {
                    text: " Done.".into()
                },
            ]
        );
        // start, delta…, stop per block, indices 0, 1, 2 in order.
        let names: Vec<String> = out
            .iter()
            .map(|e| match e {
                BlockEvent::Start { index, .. } => format!("start {index}"),
                BlockEvent::Delta { index, .. } => format!("delta {index}"),
                BlockEvent::Stop { index } => format!("stop {index}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "start 0", "delta 0", "delta 0", "stop 0", "start 1", "delta 1", "delta 1",
                "stop 1", "start 2", "delta 2", "delta 2", "stop 2"
            ]
        );
        // The deltas of each block concatenate to it.
        let mut json = String::new();
        for e in &out {
            if let BlockEvent::Delta {
                index: 1,
                delta: Delta::InputJson { partial_json },
            } = e
            {
                json.push_str(partial_json);
            }
        }
        assert_eq!(json, r#"{"city": "Paris"}"#);
        let start = serde_json::to_string(&out[4]).unwrap();
        assert_eq!(
            start,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_7","name":"get_weather","input":{}}}"#
        );
    }

    #[test]
    fn an_answer_of_whitespace_alone_is_one_text_block() {
        let mut blocks = Blocks::default();
        let mut out = Vec::new();
        blocks.push(&[Event::Content(" ".into())], &mut out);
        assert!(out.is_empty());
        let content = blocks.finish(&mut out);
        assert_eq!(content, [ContentBlock::Text { text: " ".into() }]);
        assert_eq!(out.len(), 3);
        let mut empty = Blocks::default();
        assert!(empty.finish(&mut out).is_empty());
    }

    #[test]
    fn usage_splits_cached_tokens_out_of_input_tokens() {
        let usage = AnthropicUsage::from(Usage {
            prompt_tokens: 10,
            completion_tokens: 3,
            cached_tokens: 4,
        });
        assert_eq!(
            serde_json::to_string(&usage).unwrap(),
            r#"{"input_tokens":6,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":3}"#
        );
    }
}
