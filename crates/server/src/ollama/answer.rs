//! Answers to `/api/chat` and `/api/generate`, whole or as NDJSON: partial lines
//! (`done: false`) with each item's text, then one last line (`done: true`) with
//! `done_reason`, the token counts and the nanosecond durations. Tool calls go out whole, on
//! a line of their own before the last one, with the arguments as an object. The whole answer
//! is assembled from the same pieces as the stream, so the two are equal.

use std::time::Instant;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use wick::{
    AsyncChatStream, AsyncCompletionStream, ChatResponse, CompletionResponse, Event, FinishReason,
    ParsedToolCall, Usage,
};

use crate::error::Dialect;
use crate::metrics::LiveGuard;
use crate::{sse, ApiError, AppState};

/// Which route's shape: `message` objects (`/api/chat`) or `response` text (`/api/generate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Chat,
    Generate,
}

/// Where the items come from: the chat pipeline (templated, parsed) or a raw completion.
pub(crate) enum Items {
    Chat(Box<AsyncChatStream>),
    Raw(Box<AsyncCompletionStream>),
}

impl Items {
    async fn next(&mut self) -> Option<Result<Piece, wick::Error>> {
        match self {
            Items::Chat(s) => s.next().await.map(|r| r.map(Piece::from_chat)),
            Items::Raw(s) => s.next().await.map(|r| r.map(Piece::from_raw)),
        }
    }
}

/// What one item adds, and on the last one how the answer ended.
#[derive(Debug, Default)]
pub(crate) struct Piece {
    content: String,
    thinking: String,
    last: Option<Last>,
}

/// The end of an answer.
#[derive(Debug, Default)]
struct Last {
    reason: Option<FinishReason>,
    usage: Usage,
    tool_calls: Vec<ParsedToolCall>,
}

impl Piece {
    pub(crate) fn from_chat(item: ChatResponse) -> Self {
        let mut piece = Piece::default();
        for event in &item.events {
            match event {
                Event::Content(text) => piece.content.push_str(text),
                Event::Reasoning(text) => piece.thinking.push_str(text),
                _ => {}
            }
        }
        if item.finish_reason.is_some() || item.usage.is_some() {
            piece.last = Some(Last {
                reason: item.finish_reason.or(item.message.finish_reason),
                usage: item.usage.unwrap_or_default(),
                tool_calls: item.message.tool_calls,
            });
        }
        piece
    }

    pub(crate) fn from_raw(item: CompletionResponse) -> Self {
        let last = (item.finish_reason.is_some() || item.usage.is_some()).then(|| Last {
            reason: item.finish_reason,
            usage: item.usage.unwrap_or_default(),
            tool_calls: Vec::new(),
        });
        Piece {
            content: item.delta,
            thinking: String::new(),
            last,
        }
    }
}

/// When the request arrived, when its prompt went to the engine, when the first item came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) received: Instant,
    pub(crate) submitted: Instant,
    pub(crate) first: Instant,
}

/// One NDJSON line, or the whole answer.
#[derive(Debug, Serialize)]
struct Line<'a> {
    model: &'a str,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
    done: bool,
    #[serde(flatten)]
    stats: Option<Stats>,
}

/// `message` of a chat line.
#[derive(Debug, Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolCall<'a>>,
}

/// A tool call as Ollama shapes it.
#[derive(Debug, Serialize)]
struct OutToolCall<'a> {
    function: OutFunction<'a>,
}

#[derive(Debug, Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    /// An object (a model's arguments that are not JSON are passed on as a string).
    arguments: Value,
}

/// The last line's fields.
#[derive(Debug, Serialize)]
pub(crate) struct Stats {
    done_reason: &'static str,
    total_duration: u64,
    load_duration: u64,
    prompt_eval_count: u32,
    prompt_eval_duration: u64,
    eval_count: u32,
    eval_duration: u64,
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Stats {
    fn new(reason: &'static str, usage: Usage, timing: Timing) -> Self {
        let now = Instant::now();
        Stats {
            done_reason: reason,
            total_duration: nanos(now - timing.received),
            load_duration: nanos(timing.submitted - timing.received),
            prompt_eval_count: usage.prompt_tokens,
            prompt_eval_duration: nanos(timing.first - timing.submitted),
            eval_count: usage.completion_tokens,
            eval_duration: nanos(now - timing.first),
        }
    }
}

fn done_reason(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "length",
        _ => "stop",
    }
}

fn tool_calls(calls: &[ParsedToolCall]) -> Vec<OutToolCall<'_>> {
    calls
        .iter()
        .map(|c| OutToolCall {
            function: OutFunction {
                name: &c.name,
                arguments: serde_json::from_str(&c.arguments)
                    .unwrap_or_else(|_| Value::String(c.arguments.clone())),
            },
        })
        .collect()
}

/// A line of `shape` for `model`.
fn line<'a>(
    shape: Shape,
    model: &'a str,
    content: &'a str,
    thinking: &'a str,
    calls: &'a [ParsedToolCall],
) -> Line<'a> {
    let thinking = (!thinking.is_empty()).then_some(thinking);
    let (message, response, thinking) = match shape {
        Shape::Chat => (
            Some(OutMessage {
                role: "assistant",
                content,
                thinking,
                tool_calls: tool_calls(calls),
            }),
            None,
            None,
        ),
        Shape::Generate => (None, Some(content), thinking),
    };
    Line {
        model,
        created_at: super::time::now(),
        message,
        response,
        thinking,
        done: false,
        stats: None,
    }
}

/// The answer to a load-only request (no messages, an empty prompt): done at once.
pub(crate) fn loaded(shape: Shape, model: &str) -> Response {
    done_without_answer(shape, model, "load")
}

/// The answer to an empty request with `keep_alive: 0`: the model is unloaded.
pub(crate) fn unloaded(shape: Shape, model: &str) -> Response {
    done_without_answer(shape, model, "unload")
}

fn done_without_answer(shape: Shape, model: &str, reason: &str) -> Response {
    let mut body = line(shape, model, "", "", &[]);
    body.done = true;
    let mut value = serde_json::to_value(&body).unwrap_or_default();
    value["done_reason"] = Value::from(reason);
    axum::Json(value).into_response()
}

/// An answer begun: its first piece is in.
pub(crate) struct Answer {
    pub(crate) state: AppState,
    pub(crate) shape: Shape,
    pub(crate) model: String,
    pub(crate) items: Items,
    pub(crate) first: Piece,
    pub(crate) timing: Timing,
    pub(crate) live: LiveGuard,
}

impl Answer {
    /// The answer as one JSON object.
    pub(crate) async fn whole(mut self) -> Result<Response, ApiError> {
        let (mut content, mut thinking) = (String::new(), String::new());
        let mut next = Some(Ok(std::mem::take(&mut self.first)));
        let mut last = None;
        while let Some(piece) = next {
            let piece = piece?;
            content.push_str(&piece.content);
            thinking.push_str(&piece.thinking);
            if piece.last.is_some() {
                last = piece.last;
            }
            next = self.items.next().await;
        }
        let last = last.unwrap_or_default();
        self.state.metrics().usage(&last.usage);
        let mut body = line(
            self.shape,
            &self.model,
            &content,
            &thinking,
            &last.tool_calls,
        );
        body.done = true;
        body.stats = Some(Stats::new(
            done_reason(last.reason),
            last.usage,
            self.timing,
        ));
        Ok(axum::Json(body).into_response())
    }

    /// The answer as NDJSON lines.
    pub(crate) fn stream(self) -> Response {
        let shutdown = self.state.shutdown_token();
        let run = StreamRun {
            pending: Some(Ok(self.first)),
            state: self.state,
            shape: self.shape,
            model: self.model,
            items: self.items,
            timing: self.timing,
            last: Instant::now(),
            done: false,
            _live: self.live,
        };
        sse::response(sse::frames(run), shutdown, Dialect::Ollama)
    }
}

/// A streamed answer in progress.
struct StreamRun {
    state: AppState,
    shape: Shape,
    model: String,
    items: Items,
    pending: Option<Result<Piece, wick::Error>>,
    timing: Timing,
    /// When the last item came (the time-per-token metric).
    last: Instant,
    done: bool,
    _live: LiveGuard,
}

impl sse::Run for StreamRun {
    fn next_frames(&mut self) -> impl std::future::Future<Output = Option<Vec<Bytes>>> + Send {
        self.step()
    }
}

impl StreamRun {
    async fn step(&mut self) -> Option<Vec<Bytes>> {
        if self.done {
            return None;
        }
        let item = match self.pending.take() {
            Some(item) => Some(item),
            None => self.items.next().await,
        };
        let now = Instant::now();
        self.state.metrics().token(now - self.last);
        self.last = now;
        let mut frames = Vec::new();
        match item {
            Some(Ok(piece)) => {
                if !piece.content.is_empty() || !piece.thinking.is_empty() {
                    let partial = line(
                        self.shape,
                        &self.model,
                        &piece.content,
                        &piece.thinking,
                        &[],
                    );
                    frames.push(sse::line(&partial));
                }
                if let Some(last) = piece.last {
                    frames.extend(self.end(&last));
                }
            }
            Some(Err(e)) => {
                self.done = true;
                self.state.metrics().error();
                frames.extend(sse::error_tail(&ApiError::from(e), Dialect::Ollama, 0));
            }
            None => frames.extend(self.end(&Last::default())),
        }
        Some(frames)
    }

    /// The tool calls' line (when there are calls, in a chat) and the last line.
    fn end(&mut self, last: &Last) -> Vec<Bytes> {
        self.done = true;
        self.state.metrics().usage(&last.usage);
        let mut frames = Vec::new();
        if self.shape == Shape::Chat && !last.tool_calls.is_empty() {
            let calls = line(self.shape, &self.model, "", "", &last.tool_calls);
            frames.push(sse::line(&calls));
        }
        let mut body = line(self.shape, &self.model, "", "", &[]);
        body.done = true;
        body.stats = Some(Stats::new(
            done_reason(last.reason),
            last.usage,
            self.timing,
        ));
        frames.push(sse::line(&body));
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: &str) -> ParsedToolCall {
        ParsedToolCall {
            id: "call_1".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn tool_calls_go_out_as_ollama_shapes_them_with_object_arguments() {
        let calls = [call("get_weather", r#"{"city": "Paris"}"#)];
        let line = line(Shape::Chat, "m", "", "", &calls);
        let value = serde_json::to_value(&line).unwrap();
        assert_eq!(
            value["message"]["tool_calls"],
            json!([{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])
        );
        assert_eq!(value["message"]["role"], "assistant");
        assert!(value["message"].get("thinking").is_none());
        assert_eq!(value["done"], false);
        assert!(value.get("done_reason").is_none(), "{value}");
    }

    #[test]
    fn generate_lines_carry_response_and_thinking_and_no_message() {
        let value = serde_json::to_value(line(Shape::Generate, "m", "hi", "hmm", &[])).unwrap();
        assert_eq!(value["response"], "hi");
        assert_eq!(value["thinking"], "hmm");
        assert!(value.get("message").is_none(), "{value}");
    }

    #[test]
    fn only_a_length_stop_is_length() {
        assert_eq!(done_reason(Some(FinishReason::Length)), "length");
        assert_eq!(done_reason(Some(FinishReason::ToolCalls)), "stop");
        assert_eq!(done_reason(None), "stop");
    }
}
