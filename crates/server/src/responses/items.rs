//! The parser's events as Responses output items: one builder makes both the stream's item
//! events (`response.output_item.added`, the content part, text or argument deltas, their
//! `.done`s, `response.output_item.done`) and the whole response's `output`, so a streamed
//! answer is the whole answer, item for item.
//!
//! An item opens when an event of another kind arrives (text, reasoning, a function call) and
//! closes when the next one opens or the answer ends; items are numbered 0, 1, 2… in order.
//! Whitespace that would open an item is held until text follows it, so the template's
//! newlines between a thought and a call do not become empty-looking messages.

use serde::Serialize;
use wick::Event;

use crate::objects::new_id;

/// One output item.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum OutputItem {
    /// The model's reasoning: an open model's own text, as `reasoning_text` content (a
    /// summary is what a hosted model shows instead of its reasoning; there is none here).
    Reasoning {
        id: String,
        summary: Vec<Part>,
        content: Vec<Part>,
        status: &'static str,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<Part>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        /// A JSON text, as the model wrote it.
        arguments: String,
        status: &'static str,
    },
}

impl OutputItem {
    fn id(&self) -> &str {
        match self {
            OutputItem::Reasoning { id, .. }
            | OutputItem::Message { id, .. }
            | OutputItem::FunctionCall { id, .. } => id,
        }
    }

    fn set_status(&mut self, to: &'static str) {
        match self {
            OutputItem::Reasoning { status, .. }
            | OutputItem::Message { status, .. }
            | OutputItem::FunctionCall { status, .. } => *status = to,
        }
    }

    /// The text part of a message or reasoning item.
    fn part_mut(&mut self) -> Option<&mut Part> {
        match self {
            OutputItem::Reasoning { content, .. } | OutputItem::Message { content, .. } => {
                content.first_mut()
            }
            OutputItem::FunctionCall { .. } => None,
        }
    }
}

/// A content part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Part {
    OutputText { text: String, annotations: [(); 0] },
    ReasoningText { text: String },
}

impl Part {
    fn text_mut(&mut self) -> &mut String {
        match self {
            Part::OutputText { text, .. } | Part::ReasoningText { text } => text,
        }
    }
}

/// The item events of a stream (the response-level events are the stream's); numbered
/// (`sequence_number`) when framed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub(crate) enum ItemEvent {
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: Part,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: Part,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        item_id: String,
        output_index: usize,
        name: String,
        arguments: String,
    },
}

impl ItemEvent {
    /// The SSE `event:` name: the same as `type`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ItemEvent::ItemAdded { .. } => "response.output_item.added",
            ItemEvent::ItemDone { .. } => "response.output_item.done",
            ItemEvent::PartAdded { .. } => "response.content_part.added",
            ItemEvent::PartDone { .. } => "response.content_part.done",
            ItemEvent::TextDelta { .. } => "response.output_text.delta",
            ItemEvent::TextDone { .. } => "response.output_text.done",
            ItemEvent::ReasoningDelta { .. } => "response.reasoning_text.delta",
            ItemEvent::ReasoningDone { .. } => "response.reasoning_text.done",
            ItemEvent::ArgumentsDelta { .. } => "response.function_call_arguments.delta",
            ItemEvent::ArgumentsDone { .. } => "response.function_call_arguments.done",
        }
    }
}

/// The kind of text an item holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Reasoning,
}

/// Builds output items from events.
#[derive(Debug, Default)]
pub(crate) struct Output {
    /// The items so far; the last one is open while `open` says so.
    items: Vec<OutputItem>,
    open: bool,
    /// Whitespace that would open an item of this kind.
    held: Option<(Kind, String)>,
}

impl Output {
    /// Adds `events`; the item events they make go to `out`.
    pub(crate) fn push(&mut self, events: &[Event], out: &mut Vec<ItemEvent>) {
        for event in events {
            match event {
                Event::Content(text) => self.text(Kind::Text, text, out),
                Event::Reasoning(text) => self.text(Kind::Reasoning, text, out),
                Event::ToolCallStart { id, name, .. } => {
                    self.held = None;
                    self.close("completed", out);
                    self.start(
                        OutputItem::FunctionCall {
                            id: new_id("fc_"),
                            call_id: id.clone(),
                            name: name.clone(),
                            arguments: String::new(),
                            status: "in_progress",
                        },
                        out,
                    );
                }
                Event::ToolCallArgs { text, .. } if self.open => {
                    let output_index = self.items.len() - 1;
                    if let Some(OutputItem::FunctionCall { id, arguments, .. }) =
                        self.items.last_mut()
                    {
                        arguments.push_str(text);
                        out.push(ItemEvent::ArgumentsDelta {
                            item_id: id.clone(),
                            output_index,
                            delta: text.clone(),
                        });
                    }
                }
                // The end is the caller's (it carries the status and usage).
                _ => {}
            }
        }
    }

    /// Closes the last item (`incomplete`: the answer was cut at its token limit); every
    /// item. Held whitespace becomes a message only when there is nothing else to show.
    pub(crate) fn finish(&mut self, incomplete: bool, out: &mut Vec<ItemEvent>) -> Vec<OutputItem> {
        let status = if incomplete {
            "incomplete"
        } else {
            "completed"
        };
        if let Some((kind, text)) = self.held.take() {
            if self.items.is_empty() {
                self.open_text(kind, text, out);
            }
        }
        self.close(status, out);
        std::mem::take(&mut self.items)
    }

    fn text(&mut self, kind: Kind, text: &str, out: &mut Vec<ItemEvent>) {
        if text.is_empty() {
            return;
        }
        let open_kind = match self.items.last() {
            Some(OutputItem::Message { .. }) if self.open => Some(Kind::Text),
            Some(OutputItem::Reasoning { .. }) if self.open => Some(Kind::Reasoning),
            _ => None,
        };
        if open_kind == Some(kind) {
            self.append(kind, text.to_owned(), out);
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
        self.close("completed", out);
        self.open_text(kind, pending, out);
    }

    /// Opens a message or reasoning item holding `text`: the item and its part empty, then a
    /// delta.
    fn open_text(&mut self, kind: Kind, text: String, out: &mut Vec<ItemEvent>) {
        let (item, part) = match kind {
            Kind::Text => {
                let part = Part::OutputText {
                    text: String::new(),
                    annotations: [],
                };
                let item = OutputItem::Message {
                    id: new_id("msg_"),
                    status: "in_progress",
                    role: "assistant",
                    content: vec![],
                };
                (item, part)
            }
            Kind::Reasoning => {
                let part = Part::ReasoningText {
                    text: String::new(),
                };
                let item = OutputItem::Reasoning {
                    id: new_id("rs_"),
                    summary: vec![],
                    content: vec![],
                    status: "in_progress",
                };
                (item, part)
            }
        };
        let item_id = item.id().to_owned();
        self.start(item, out);
        out.push(ItemEvent::PartAdded {
            item_id,
            output_index: self.items.len() - 1,
            content_index: 0,
            part: part.clone(),
        });
        if let Some(OutputItem::Message { content, .. } | OutputItem::Reasoning { content, .. }) =
            self.items.last_mut()
        {
            content.push(part);
        }
        self.append(kind, text, out);
    }

    fn append(&mut self, kind: Kind, delta: String, out: &mut Vec<ItemEvent>) {
        let output_index = self.items.len() - 1;
        let Some(item) = self.items.last_mut() else {
            return;
        };
        let item_id = item.id().to_owned();
        if let Some(part) = item.part_mut() {
            part.text_mut().push_str(&delta);
        }
        out.push(match kind {
            Kind::Text => ItemEvent::TextDelta {
                item_id,
                output_index,
                content_index: 0,
                delta,
                logprobs: [],
            },
            Kind::Reasoning => ItemEvent::ReasoningDelta {
                item_id,
                output_index,
                content_index: 0,
                delta,
            },
        });
    }

    fn start(&mut self, item: OutputItem, out: &mut Vec<ItemEvent>) {
        out.push(ItemEvent::ItemAdded {
            output_index: self.items.len(),
            item: item.clone(),
        });
        self.items.push(item);
        self.open = true;
    }

    /// Closes the open item with `status`: its text's or arguments' `.done`, its part's, its
    /// own.
    fn close(&mut self, status: &'static str, out: &mut Vec<ItemEvent>) {
        if !self.open {
            return;
        }
        self.open = false;
        let output_index = self.items.len() - 1;
        let Some(item) = self.items.last_mut() else {
            return;
        };
        item.set_status(status);
        let item_id = item.id().to_owned();
        match item {
            OutputItem::FunctionCall {
                name, arguments, ..
            } => {
                if arguments.trim().is_empty() {
                    "{}".clone_into(arguments);
                }
                out.push(ItemEvent::ArgumentsDone {
                    item_id,
                    output_index,
                    name: name.clone(),
                    arguments: arguments.clone(),
                });
            }
            OutputItem::Message { content, .. } | OutputItem::Reasoning { content, .. } => {
                if let Some(part) = content.first() {
                    let text = match part {
                        Part::OutputText { text, .. } | Part::ReasoningText { text } => {
                            text.clone()
                        }
                    };
                    out.push(match part {
                        Part::OutputText { .. } => ItemEvent::TextDone {
                            item_id: item_id.clone(),
                            output_index,
                            content_index: 0,
                            text,
                            logprobs: [],
                        },
                        Part::ReasoningText { .. } => ItemEvent::ReasoningDone {
                            item_id: item_id.clone(),
                            output_index,
                            content_index: 0,
                            text,
                        },
                    });
                    out.push(ItemEvent::PartDone {
                        item_id,
                        output_index,
                        content_index: 0,
                        part: part.clone(),
                    });
                }
            }
        }
        out.push(ItemEvent::ItemDone {
            output_index,
            item: item.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(events: &[ItemEvent]) -> Vec<&'static str> {
        events.iter().map(ItemEvent::name).collect()
    }

    fn call(index: usize, text: &str) -> Event {
        Event::ToolCallArgs {
            index,
            text: text.into(),
        }
    }

    #[test]
    fn reasoning_text_and_a_call_become_three_items_in_order() {
        let events = [
            Event::Reasoning("Think".into()),
            Event::Reasoning(" more.".into()),
            Event::Content("\n\n".into()),
            Event::Content("Calling.".into()),
            Event::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "get_weather".into(),
            },
            call(0, "{\"city\":"),
            call(0, " \"Paris\"}"),
        ];
        let mut output = Output::default();
        let mut out = Vec::new();
        output.push(&events, &mut out);
        let items = output.finish(false, &mut out);
        assert_eq!(items.len(), 3, "{items:?}");
        let json = serde_json::to_value(&items).unwrap();
        assert_eq!(json[0]["type"], "reasoning");
        assert_eq!(json[0]["content"][0]["text"], "Think more.");
        assert_eq!(json[0]["summary"], serde_json::json!([]));
        assert_eq!(json[1]["type"], "message");
        assert_eq!(json[1]["content"][0]["type"], "output_text");
        assert_eq!(json[1]["content"][0]["text"], "\n\nCalling.");
        assert_eq!(json[1]["content"][0]["annotations"], serde_json::json!([]));
        assert_eq!(json[2]["type"], "function_call");
        assert_eq!(json[2]["call_id"], "call_1");
        assert_eq!(json[2]["arguments"], "{\"city\": \"Paris\"}");
        assert!(json
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["status"] == "completed"));
        assert_eq!(
            names(&out),
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
            ]
        );
        // Every `.done` item is the whole item.
        let done: Vec<&OutputItem> = out
            .iter()
            .filter_map(|e| match e {
                ItemEvent::ItemDone { item, .. } => Some(item),
                _ => None,
            })
            .collect();
        assert_eq!(done, items.iter().collect::<Vec<_>>());
    }

    #[test]
    fn whitespace_alone_is_a_message_only_when_nothing_else_came() {
        let mut output = Output::default();
        let mut out = Vec::new();
        output.push(&[Event::Content(" \n".into())], &mut out);
        assert!(out.is_empty());
        let items = output.finish(true, &mut out);
        assert_eq!(items.len(), 1);
        assert!(matches!(
            &items[0],
            OutputItem::Message {
                status: "incomplete",
                ..
            }
        ));

        let mut output = Output::default();
        let start = Event::ToolCallStart {
            index: 0,
            id: "c".into(),
            name: "f".into(),
        };
        output.push(&[Event::Content("\n".into()), start], &mut out);
        let items = output.finish(false, &mut out);
        assert_eq!(items.len(), 1);
        assert!(
            matches!(&items[0], OutputItem::FunctionCall { arguments, .. } if arguments == "{}"),
            "{items:?}"
        );
    }
}
