//! OpenAI's Responses API: `POST /v1/responses` (whole, or as numbered server-sent events),
//! `GET` and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`. A request is converted into the chat pipeline's
//! (`convert`), validated by the checks every chat API shares, and answered by the same
//! engine, template, tool-call parser and prompt cache as `/v1/chat/completions`; only the
//! shapes differ. Responses are stored (unless `store` is false) in a bounded in-memory store,
//! and `previous_response_id` continues one: its input and output, then the new input.

mod convert;
mod items;
mod list;
mod store;
mod wire;

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};
use wick::{AsyncChatStream, ChatResponse, Event, FinishReason, Usage};

use crate::chat::{begin, is_later_call, Begun};
use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::telemetry::{Asked, Clock, Progress, Timings};
use crate::SamplingDefaults;
use crate::{sse, ApiError, AppState};
use convert::{Converted, Echo};
use items::{ItemEvent, Output, OutputItem};
pub(crate) use store::ResponseStore;
use store::Stored;
pub(crate) use wire::ResponsesRequest;

/// Checks a request body the way `POST /v1/responses` does (without `previous_response_id`'s
/// look-up: the id is not checked, and no earlier items are added).
pub(crate) fn check(req: ResponsesRequest) -> Result<(), ApiError> {
    convert::convert(req, &[], &SamplingDefaults::default()).map(drop)
}

/// `POST /v1/responses`.
pub(crate) async fn create(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let history = match &req.previous_response_id {
        Some(id) => match state.responses().get(id) {
            Some(stored) => stored.history(),
            None => {
                return Err(ApiError::ResponseNotFound {
                    id: id.clone(),
                    previous: true,
                })
            }
        },
        None => Vec::new(),
    };
    let Converted { valid, items, echo } =
        convert::convert(req, &history, &state.config().sampling)?;
    let Begun {
        served,
        stream,
        first,
        live,
        clock,
    } = begin(&state, valid.model.as_deref(), valid.chat, &valid.options)
        .await
        .map_err(|e| e.too_long_in("input"))?;
    let mut conversation = history;
    conversation.extend(items);
    let head = Head {
        id: crate::objects::new_id("resp_"),
        created_at: crate::state::unix_now(),
        model: served.id,
        echo,
        conversation,
    };
    if valid.stream {
        let shutdown = state.shutdown_token();
        let run = StreamRun {
            state,
            stream: sse::resume(Ok(first), stream),
            output: Output::default(),
            head,
            single_call: valid.single_call,
            clock,
            telemetry: valid.telemetry,
            last: Instant::now(),
            sequence: 0,
            started: false,
            done: false,
            _live: live,
        };
        return Ok(sse::response(
            sse::frames(run),
            shutdown,
            Dialect::Responses,
        ));
    }
    let mut stream = stream;
    let mut output = Output::default();
    let mut out = Vec::new();
    let (mut reason, mut usage) = (None, None);
    let mut next = Some(Ok::<_, wick::Error>(first));
    while let Some(item) = next {
        let mut item = item?;
        output.push(&events(&mut item, valid.single_call), &mut out);
        out.clear();
        reason = item.finish_reason.or(reason);
        usage = item.usage.or(usage);
        next = stream.next().await;
    }
    drop(live);
    let usage = usage.unwrap_or_default();
    state.metrics().usage(&usage);
    let incomplete = reason == Some(FinishReason::Length);
    let items = output.finish(incomplete, &mut out);
    let response = head.finish(&state, &items, incomplete, usage);
    Ok(Json(response).into_response())
}

/// `GET /v1/responses/{id}`: a stored response.
pub(crate) async fn retrieve(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.responses().get(&id) {
        Some(stored) => Ok(Json(stored.response.clone())),
        None => Err(ApiError::ResponseNotFound {
            id,
            previous: false,
        }),
    }
}

/// `GET /v1/responses/{id}/input_items`: the stored response's input items, as a list.
pub(crate) async fn input_items(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<list::ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad("query", e.body_text()))?;
    match state.responses().get(&id) {
        Some(stored) => Ok(Json(list::input_items(&id, &stored.items, &query)?)),
        None => Err(ApiError::ResponseNotFound {
            id,
            previous: false,
        }),
    }
}

/// `DELETE /v1/responses/{id}`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if state.responses().remove(&id) {
        Ok(Json(
            json!({"id": id, "object": "response.deleted", "deleted": true}),
        ))
    } else {
        Err(ApiError::ResponseNotFound {
            id,
            previous: false,
        })
    }
}

/// An item's events, with `parallel_tool_calls: false` keeping the first call only.
fn events(item: &mut ChatResponse, single_call: bool) -> Vec<Event> {
    let mut events = std::mem::take(&mut item.events);
    if single_call {
        events.retain(|e| !is_later_call(e));
    }
    events
}

/// What every form of a response shares: its id, the request's settings, the conversation
/// it answers (for the store).
struct Head {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    conversation: Vec<Value>,
}

impl Head {
    /// The response object.
    fn object(&self, status: &str, output: &[OutputItem], usage: Option<Usage>) -> Value {
        let e = &self.echo;
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        let usage = usage.map(|u| {
            json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.prompt_tokens + u.completion_tokens,
            })
        });
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": e.instructions,
            "max_output_tokens": e.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": e.parallel_tool_calls,
            "previous_response_id": e.previous_response_id,
            "reasoning": e.reasoning,
            "store": e.store,
            "temperature": e.temperature,
            "text": e.text,
            "tool_choice": e.tool_choice,
            "tools": e.tools,
            "top_p": e.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": e.user,
            "metadata": e.metadata,
        })
    }

    /// The finished response object, stored when `store` asks for it.
    fn finish(
        &self,
        state: &AppState,
        items: &[OutputItem],
        incomplete: bool,
        usage: Usage,
    ) -> Value {
        let status = if incomplete {
            "incomplete"
        } else {
            "completed"
        };
        let response = self.object(status, items, Some(usage));
        if self.echo.store {
            let stored = Stored::new(response.clone(), self.conversation.clone());
            state.responses().put(self.id.clone(), stored);
        }
        response
    }
}

/// An event with its `sequence_number` (and llama-server's telemetry where it goes).
#[derive(Serialize)]
struct Numbered<'a, T: Serialize> {
    #[serde(flatten)]
    event: &'a T,
    sequence_number: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_progress: Option<Progress>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timings: Option<Timings>,
}

/// A streamed answer in progress.
struct StreamRun {
    state: AppState,
    stream: sse::Resumed<AsyncChatStream>,
    output: Output,
    head: Head,
    single_call: bool,
    clock: Clock,
    /// The telemetry the request asked for (progress as `response.in_progress` events,
    /// timings on text deltas).
    telemetry: Asked,
    last: Instant,
    /// The next event's `sequence_number`.
    sequence: u64,
    /// Whether `response.created` went out.
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
    /// One event, framed and numbered, with the telemetry given.
    fn frame(
        &mut self,
        name: &str,
        event: &impl Serialize,
        prompt_progress: Option<Progress>,
        timings: Option<Timings>,
    ) -> Bytes {
        let numbered = Numbered {
            event,
            sequence_number: self.sequence,
            prompt_progress,
            timings,
        };
        self.sequence += 1;
        sse::named(name, &numbered)
    }

    /// The item events, text deltas with `timings` when the request asked.
    fn frames(&mut self, events: &[ItemEvent]) -> Vec<Bytes> {
        let timings = self
            .telemetry
            .timings_per_token
            .then(|| self.clock.timings(None));
        events
            .iter()
            .map(|e| {
                let name = e.name();
                let timings = timings.filter(|_| name == "response.output_text.delta");
                self.frame(name, e, None, timings)
            })
            .collect()
    }

    /// A response-level event (`response.created`, `.completed`…).
    fn response_event(&mut self, kind: &str, response: &Value) -> Bytes {
        let event = json!({"type": kind, "response": response});
        self.frame(kind, &event, None, None)
    }

    /// The frames of the next item; `None` after the end.
    async fn step(&mut self) -> Option<Vec<Bytes>> {
        if self.done {
            return None;
        }
        let mut frames = Vec::new();
        if !self.started {
            self.started = true;
            let response = self.head.object("in_progress", &[], None);
            frames.push(self.response_event("response.created", &response));
            frames.push(self.response_event("response.in_progress", &response));
        }
        let item = futures_util::StreamExt::next(&mut self.stream).await;
        let now = Instant::now();
        // A progress report is not a token.
        if !matches!(&item, Some(Ok(i)) if i.progress.is_some()) {
            self.state.metrics().token(now - self.last);
        }
        self.last = now;
        match item {
            Some(Ok(item)) if item.progress.is_some() => {
                let progress = item.progress.as_ref().map(|p| self.clock.progress(p));
                if self.telemetry.progress {
                    let response = self.head.object("in_progress", &[], None);
                    let kind = "response.in_progress";
                    let event = json!({"type": kind, "response": response});
                    frames.push(self.frame(kind, &event, progress, None));
                }
            }
            Some(Ok(mut item)) => {
                self.clock.answered(&self.state, item.logprobs.len());
                let mut out = Vec::new();
                self.output
                    .push(&events(&mut item, self.single_call), &mut out);
                frames.extend(self.frames(&out));
                if item.finish_reason.is_some() || item.usage.is_some() {
                    let usage = item.usage.unwrap_or_default();
                    frames.extend(self.end(item.finish_reason, usage));
                }
            }
            Some(Err(e)) => {
                self.done = true;
                let e = ApiError::from(e);
                self.state.metrics().error();
                frames.extend(sse::error_tail(&e, Dialect::Responses, self.sequence));
            }
            None => frames.extend(self.end(None, Usage::default())),
        }
        Some(frames)
    }

    /// The closing frames: the open item's, then `response.completed` (or `.incomplete`).
    fn end(&mut self, reason: Option<FinishReason>, usage: Usage) -> Vec<Bytes> {
        self.done = true;
        self.state.metrics().usage(&usage);
        let incomplete = reason == Some(FinishReason::Length);
        let mut out = Vec::new();
        let items = self.output.finish(incomplete, &mut out);
        let mut frames = self.frames(&out);
        let response = self.head.finish(&self.state, &items, incomplete, usage);
        let kind = if incomplete {
            "response.incomplete"
        } else {
            "response.completed"
        };
        // llama-server's `timings` of the whole answer beside the response.
        let timings = self.clock.timings(Some(&usage));
        let event = json!({"type": kind, "response": response});
        frames.push(self.frame(kind, &event, None, Some(timings)));
        frames
    }
}
