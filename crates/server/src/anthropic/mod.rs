//! Anthropic's Messages API: `POST /v1/messages` (whole, or as Anthropic's server-sent
//! events) and `POST /v1/messages/count_tokens`. A request is converted into the chat
//! pipeline's (`convert`), validated by the checks every chat API shares, and answered by the
//! same engine, template, tool-call parser and prompt cache as `/v1/chat/completions`; only
//! the shapes differ, and errors take Anthropic's shape (`ApiError::response_in`).

mod blocks;
mod convert;
mod wire;

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use wick::{AsyncChatStream, ChatResponse, Event, FinishReason, Usage};

use crate::chat::{begin, is_later_call, Begun};
use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::SamplingDefaults;
use crate::{sse, ApiError, AppState};
use blocks::{AnthropicUsage, Blocks, ContentBlock, MessageObject};
use convert::Purpose;
pub(crate) use wire::MessagesRequest;

/// Checks a request body the way `POST /v1/messages` (`count`: its `count_tokens`) does.
pub(crate) fn check(req: MessagesRequest, count: bool) -> Result<(), ApiError> {
    let purpose = if count {
        Purpose::Count
    } else {
        Purpose::Answer
    };
    convert::valid(req, purpose, &SamplingDefaults::default()).map(drop)
}

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(state): State<AppState>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Response {
    answer(state, body)
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Anthropic))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt as an answer would
/// render it (system, messages, tools, thinking), rendered and tokenized without generating.
pub(crate) async fn count_tokens(
    State(state): State<AppState>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Response {
    count(&state, body)
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Anthropic))
}

async fn count(
    state: &AppState,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let ApiJson(req) = body?;
    let valid = convert::valid(req, Purpose::Count, &state.config().sampling)?;
    let served = state.model(valid.model.as_deref()).await?;
    // A prompt too long to answer is still counted: the count is what was asked for.
    let tokens = served.llm.chat_tokens(&valid.chat, &valid.options)?;
    let input_tokens = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
    Ok(axum::Json(serde_json::json!({ "input_tokens": input_tokens })).into_response())
}

async fn answer(
    state: AppState,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let ApiJson(req) = body?;
    let valid = convert::valid(req, Purpose::Answer, &state.config().sampling)?;
    let Begun {
        served,
        stream,
        first,
        live,
        ..
    } = begin(&state, valid.model.as_deref(), valid.chat, &valid.options).await?;
    let id = message_id();
    if valid.stream {
        let shutdown = state.shutdown_token();
        let run = StreamRun {
            state,
            prompt_tokens: stream.prompt_tokens(),
            stream: sse::resume(Ok(first), stream),
            blocks: Blocks::default(),
            id,
            model: served.id,
            single_call: valid.single_call,
            last: Instant::now(),
            started: false,
            done: false,
            _live: live,
        };
        return Ok(sse::response(
            sse::frames(run),
            shutdown,
            Dialect::Anthropic,
        ));
    }
    let mut stream = stream;
    let mut blocks = Blocks::default();
    let mut out = Vec::new();
    let (mut reason, mut usage, mut stop) = (None, None, None);
    let mut next = Some(Ok::<_, wick::Error>(first));
    while let Some(item) = next {
        let mut item = item?;
        blocks.push(&events(&mut item, valid.single_call), &mut out);
        reason = item.finish_reason.or(reason);
        usage = item.usage.or(usage);
        stop = item.stop_sequence.take().or(stop);
        next = stream.next().await;
    }
    let usage = usage.unwrap_or_default();
    state.metrics().usage(&usage);
    drop(live);
    let content = blocks.finish(&mut out);
    let message = MessageObject {
        id: &id,
        kind: "message",
        role: "assistant",
        model: &served.id,
        content: &content,
        stop_reason: Some(blocks::stop_reason(reason, stop.as_deref())),
        stop_sequence: stop.as_deref(),
        usage: AnthropicUsage::from(usage),
    };
    Ok(axum::Json(message).into_response())
}

/// An item's events, with `parallel tool use` off keeping the first call only.
fn events(item: &mut ChatResponse, single_call: bool) -> Vec<Event> {
    let mut events = std::mem::take(&mut item.events);
    if single_call {
        events.retain(|e| !is_later_call(e));
    }
    events
}

/// A fresh message id: `msg_` and 24 hex digits.
fn message_id() -> String {
    crate::objects::new_id("msg_")
}

/// `message_start`, `message_delta` and `message_stop`.
#[derive(Debug, Serialize)]
#[serde(tag = "type")]
enum MessageEvent<'a> {
    #[serde(rename = "message_start")]
    Start { message: MessageObject<'a> },
    #[serde(rename = "message_delta")]
    Delta {
        delta: StopDelta,
        usage: AnthropicUsage,
    },
    #[serde(rename = "message_stop")]
    Stop,
}

/// `message_delta.delta`.
#[derive(Debug, Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<String>,
}

/// A streamed answer in progress.
struct StreamRun {
    state: AppState,
    stream: sse::Resumed<AsyncChatStream>,
    /// The prompt's length in tokens (for `message_start`).
    prompt_tokens: u32,
    blocks: Blocks,
    id: String,
    model: String,
    single_call: bool,
    last: Instant,
    /// Whether `message_start` went out.
    started: bool,
    done: bool,
    _live: LiveGuard,
}

impl sse::Run for StreamRun {
    fn next_frames(&mut self) -> impl std::future::Future<Output = Option<Vec<Bytes>>> + Send {
        self.step()
    }
}

impl StreamRun {
    /// The frames of the next item; `None` after the end.
    async fn step(&mut self) -> Option<Vec<Bytes>> {
        if self.done {
            return None;
        }
        let mut frames = Vec::new();
        if !self.started {
            self.started = true;
            let start = MessageEvent::Start {
                message: MessageObject {
                    id: &self.id,
                    kind: "message",
                    role: "assistant",
                    model: &self.model,
                    content: &[],
                    stop_reason: None,
                    stop_sequence: None,
                    usage: AnthropicUsage::prompt(self.prompt_tokens),
                },
            };
            frames.push(sse::named("message_start", &start));
            frames.push(sse::ping());
        }
        let item = futures_util::StreamExt::next(&mut self.stream).await;
        let now = Instant::now();
        self.state.metrics().token(now - self.last);
        self.last = now;
        match item {
            Some(Ok(mut item)) => {
                let mut out = Vec::new();
                self.blocks
                    .push(&events(&mut item, self.single_call), &mut out);
                frames.extend(out.iter().map(|e| sse::named(e.name(), e)));
                if item.finish_reason.is_some() || item.usage.is_some() {
                    let usage = item.usage.unwrap_or_default();
                    frames.extend(self.end(item.finish_reason, usage, item.stop_sequence));
                }
            }
            Some(Err(e)) => {
                self.done = true;
                let e = ApiError::from(e);
                self.state.metrics().error();
                frames.extend(sse::error_tail(&e, Dialect::Anthropic, 0));
            }
            None => {
                // The engine ended without a last item: close what is open.
                frames.extend(self.end(None, Usage::default(), None));
            }
        }
        Some(frames)
    }

    /// The closing frames: the open block's stop, `message_delta`, `message_stop`.
    fn end(
        &mut self,
        reason: Option<FinishReason>,
        usage: Usage,
        stop_sequence: Option<String>,
    ) -> Vec<Bytes> {
        self.done = true;
        self.state.metrics().usage(&usage);
        let mut out = Vec::new();
        let _: Vec<ContentBlock> = self.blocks.finish(&mut out);
        let mut frames: Vec<Bytes> = out.iter().map(|e| sse::named(e.name(), e)).collect();
        let delta = MessageEvent::Delta {
            delta: StopDelta {
                stop_reason: blocks::stop_reason(reason, stop_sequence.as_deref()),
                stop_sequence,
            },
            usage: AnthropicUsage::from(usage),
        };
        frames.push(sse::named("message_delta", &delta));
        frames.push(sse::named("message_stop", &MessageEvent::Stop));
        frames
    }
}
