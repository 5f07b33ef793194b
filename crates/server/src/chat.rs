//! `POST /v1/chat/completions`: one answer, or the same answer as `chat.completion.chunk`
//! server-sent events (`openai-stream.md`).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use wick::{AsyncChatStream, ChatResponse, Event, ParsedMessage, ScoredToken};
use wick_parse::DeltaBuilder;

use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::wire::ChatCompletionRequest;
use crate::{sse, validate, ApiError, AppState};

/// The chat-completions handler.
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let valid = validate::chat(req)?;
    let served = state.model(valid.model.as_deref())?;
    let started = Instant::now();
    let live = state.metrics().live();
    let mut stream = served
        .llm
        .astream_chat_json(valid.chat, &valid.options)
        .await?;
    // The first item decides between an HTTP error and a 200 (prefill errors are 4xx).
    let first = match stream.next().await {
        Some(item) => item?,
        None => return Err(ApiError::Internal),
    };
    state.metrics().first_token(started.elapsed());
    let head = Head::new("chatcmpl", served.id.clone());
    if valid.stream {
        let run = StreamRun {
            state,
            stream,
            deltas: DeltaBuilder::new(),
            head,
            include_usage: valid.include_usage,
            single_call: valid.single_call,
            held: valid.options.logprobs.map(|_| Vec::new()),
            pending: Some(first),
            last: Instant::now(),
            done: false,
            _live: live,
        };
        return Ok(sse::response(sse::frames(run)));
    }
    let mut last = finish(&state, stream, first).await?;
    if valid.single_call {
        last.message.tool_calls.truncate(1);
    }
    let logprobs = match valid.options.logprobs {
        Some(_) => crate::logprobs::chat(&last.logprobs),
        None => Value::Null,
    };
    Ok(axum::Json(whole(&head, &last, &logprobs)).into_response())
}

/// What every chunk of one response shares.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
}

impl Head {
    pub(crate) fn new(prefix: &str, model: String) -> Self {
        Head {
            id: new_id(prefix),
            created: crate::state::unix_now(),
            model,
        }
    }
}

/// A fresh response id: `prefix-` and 24 hex digits.
fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    #[allow(clippy::cast_possible_truncation)]
    let t = t as u64;
    format!(
        "{prefix}-{:016x}{n:08x}",
        t.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

/// Reads the stream to its end; the last item carries the whole message and usage, and
/// every item's tokens.
async fn finish(
    state: &AppState,
    mut stream: AsyncChatStream,
    first: ChatResponse,
) -> Result<ChatResponse, ApiError> {
    let mut last = first;
    let mut logprobs = std::mem::take(&mut last.logprobs);
    while let Some(item) = stream.next().await {
        last = item?;
        logprobs.append(&mut last.logprobs);
    }
    last.logprobs = logprobs;
    if let Some(usage) = &last.usage {
        state.metrics().usage(usage);
    }
    Ok(last)
}

/// The `usage` object.
pub(crate) fn usage_json(usage: Option<&wick::Usage>) -> Value {
    let u = usage.copied().unwrap_or_default();
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// The assistant message object of a whole answer.
fn message_json(m: &ParsedMessage) -> Value {
    let mut out = json!({"role": "assistant"});
    out["content"] = if m.content.is_empty() && !m.tool_calls.is_empty() {
        Value::Null
    } else {
        Value::String(m.content.clone())
    };
    if let Some(r) = &m.reasoning_content {
        out["reasoning_content"] = Value::String(r.clone());
    }
    if !m.tool_calls.is_empty() {
        out["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    out
}

/// The `chat.completion` object. Its `logprobs` cover every generated token, reasoning and
/// tool-call text included (what llama.cpp's server reports too), not only `content`.
fn whole(head: &Head, last: &ChatResponse, logprobs: &Value) -> Value {
    json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": [{
            "index": 0,
            "message": message_json(&last.message),
            "logprobs": logprobs,
            "finish_reason": last.finish_reason.or(last.message.finish_reason),
        }],
        "usage": usage_json(last.usage.as_ref()),
    })
}

/// Whether `e` belongs to a tool call after the first.
fn is_later_call(e: &Event) -> bool {
    match e {
        Event::ToolCallStart { index, .. } | Event::ToolCallArgs { index, .. } => *index > 0,
        _ => false,
    }
}

/// A streamed answer in progress.
struct StreamRun {
    state: AppState,
    stream: AsyncChatStream,
    deltas: DeltaBuilder,
    head: Head,
    include_usage: bool,
    single_call: bool,
    /// With log-probabilities asked for, the tokens not yet sent: they go with the next chunk
    /// that is sent (a parser may hold text back, e.g. while it could still open a tool call).
    held: Option<Vec<ScoredToken>>,
    pending: Option<ChatResponse>,
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
    /// The frames of the next item; `None` after the end.
    async fn step(&mut self) -> Option<Vec<Bytes>> {
        if self.done {
            return None;
        }
        let item = match self.pending.take() {
            Some(item) => Some(Ok(item)),
            None => self.stream.next().await,
        };
        let now = Instant::now();
        self.state.metrics().token(now - self.last);
        self.last = now;
        match item {
            Some(Ok(item)) => Some(self.chunks(item)),
            Some(Err(e)) => {
                self.done = true;
                let e = ApiError::from(e);
                self.state.metrics().error();
                Some(vec![sse::event(&e.body())])
            }
            None => {
                self.done = true;
                Some(vec![sse::done()])
            }
        }
    }

    fn chunks(&mut self, mut item: ChatResponse) -> Vec<Bytes> {
        if let Some(held) = &mut self.held {
            held.append(&mut item.logprobs);
        }
        let mut events = item.events;
        if self.single_call {
            events.retain(|e| !is_later_call(e));
        }
        if let Some(reason) = item.finish_reason {
            if !events.iter().any(|e| matches!(e, Event::End { .. })) {
                events.push(Event::End {
                    finish_reason: reason,
                });
            }
        }
        let choices = self.deltas.push(&events);
        let mut out = Vec::with_capacity(choices.len() + 1);
        for choice in choices {
            let mut choice = json!(choice);
            if let Some(held) = self.held.as_mut().filter(|h| !h.is_empty()) {
                choice["logprobs"] = crate::logprobs::chat(&std::mem::take(held));
            }
            out.push(self.chunk(&json!([choice]), None));
        }
        if let Some(usage) = &item.usage {
            self.state.metrics().usage(usage);
            if self.include_usage {
                out.push(self.chunk(&json!([]), Some(usage_json(Some(usage)))));
            }
        }
        out
    }

    fn chunk(&self, choices: &Value, usage: Option<Value>) -> Bytes {
        let mut chunk = json!({
            "id": self.head.id,
            "object": "chat.completion.chunk",
            "created": self.head.created,
            "model": self.head.model,
            "choices": choices,
        });
        if self.include_usage {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        sse::event(&chunk)
    }
}
