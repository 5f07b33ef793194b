//! `POST /v1/chat/completions`: one answer, or the same answer as `chat.completion.chunk`
//! server-sent events (`openai-stream.md`).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use wick::DeltaBuilder;
use wick::{AsyncChatStream, ChatRequest, ChatResponse, Event, GenerateOptions, ScoredToken};

use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::objects::{ChatChoice, ChunkChoice, Head, UsageField, NO_CHOICES, PROGRESS_CHOICE};
use crate::telemetry::{Asked, Clock};
use crate::wire::ChatCompletionRequest;
use crate::{sse, validate, ApiError, AppState, ServedModel};

/// The chat-completions handler. A streamed answer on a model that is not loaded yet starts
/// its stream at once: `: keep-alive` comments go out while the model loads (a client with a
/// read timeout does not give up), and a failed load ends the stream with its error event.
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let valid = validate::chat(req, &state.config().sampling)?;
    if valid.stream && state.needs_load(valid.model.as_deref()) {
        let shutdown = state.shutdown_token();
        let frames = futures_util::stream::once(async move {
            match streamed(state, valid).await {
                Ok(frames) => futures_util::future::Either::Left(frames),
                Err(e) => futures_util::future::Either::Right(futures_util::stream::iter(
                    sse::error_tail(&e, Dialect::OpenAi, 0),
                )),
            }
        });
        let frames = futures_util::StreamExt::flatten(frames);
        return Ok(sse::response(frames, shutdown, Dialect::OpenAi));
    }
    if valid.stream {
        let shutdown = state.shutdown_token();
        let frames = streamed(state, valid).await?;
        return Ok(sse::response(frames, shutdown, Dialect::OpenAi));
    }
    let shows_logprobs = valid.shown_logprobs.is_some();
    let Begun {
        served,
        stream,
        first,
        clock,
        live: _live,
    } = begin(&state, valid.model.as_deref(), valid.chat, &valid.options).await?;
    let head = Head::new("chatcmpl", served.id.clone());
    let mut last = finish(&state, stream, first).await?;
    if valid.single_call {
        last.message.tool_calls.truncate(1);
    }
    let logprobs = shows_logprobs.then(|| crate::logprobs::chat(&last.logprobs));
    let finish_reason = last.finish_reason.or(last.message.finish_reason);
    let choice = ChatChoice::new(&last.message, logprobs, finish_reason);
    let usage = last.usage.unwrap_or_default();
    let body = head
        .object("chat.completion", [choice], UsageField::Counts(usage))
        .with_timings(clock.timings(Some(&usage)));
    Ok(axum::Json(body).into_response())
}

/// A streamed answer's frames, once the model is held and the answer's first item is in.
async fn streamed(
    state: AppState,
    valid: validate::ValidChat,
) -> Result<impl futures_core::Stream<Item = Bytes> + Send + 'static, ApiError> {
    let shows_logprobs = valid.shown_logprobs.is_some();
    let Begun {
        served,
        stream,
        first,
        live,
        clock,
    } = begin(&state, valid.model.as_deref(), valid.chat, &valid.options).await?;
    let run = StreamRun {
        state,
        stream: sse::resume(Ok(first), stream),
        clock,
        telemetry: valid.telemetry,
        deltas: DeltaBuilder::new(),
        head: Head::new("chatcmpl", served.id.clone()),
        include_usage: valid.include_usage,
        single_call: valid.single_call,
        held: shows_logprobs.then(Vec::new),
        last: Instant::now(),
        done: false,
        _live: live,
    };
    Ok(sse::frames(run))
}

/// A chat answer begun: its first item is in, so a failure before it (a prompt too long, a
/// bad grammar, a full queue) is still an HTTP error and not a broken stream.
pub(crate) struct Begun {
    pub(crate) served: ServedModel,
    pub(crate) stream: AsyncChatStream,
    pub(crate) first: ChatResponse,
    pub(crate) live: LiveGuard,
    /// The answer's clock: the time to its first token is recorded once it comes (after the
    /// prompt's progress reports, when the request asked for them).
    pub(crate) clock: Clock,
}

/// Starts answering `chat` on the model `model` names: every chat API's way into the engine.
pub(crate) async fn begin(
    state: &AppState,
    model: Option<&str>,
    chat: ChatRequest,
    options: &GenerateOptions,
) -> Result<Begun, ApiError> {
    begin_held(state, state.model(model).await?, chat, options).await
}

/// [`begin`] on a model the request holds already (Ollama's, taken with its `keep_alive`).
pub(crate) async fn begin_held(
    state: &AppState,
    served: ServedModel,
    chat: ChatRequest,
    options: &GenerateOptions,
) -> Result<Begun, ApiError> {
    let started = Instant::now();
    let live = state.metrics().live();
    let mut stream = served.llm.astream_chat_with(&chat, options).await?;
    // The first item decides between an HTTP error and a 200 (prefill errors are 4xx); a
    // progress report means the prompt was taken.
    let first = match stream.next().await {
        Some(item) => item?,
        None => return Err(ApiError::Internal),
    };
    let clock = Clock::first_item(
        state,
        started,
        stream.prompt_tokens(),
        first.progress.is_some(),
    );
    Ok(Begun {
        served,
        stream,
        first,
        live,
        clock,
    })
}

/// Reads the stream to its end; the last item carries the whole message and usage, and
/// every item's tokens.
async fn finish(
    state: &AppState,
    mut stream: AsyncChatStream,
    first: ChatResponse,
) -> Result<ChatResponse, ApiError> {
    debug_assert!(first.progress.is_none(), "only streams report progress");
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

/// Whether `e` belongs to a tool call after the first.
pub(crate) fn is_later_call(e: &Event) -> bool {
    match e {
        Event::ToolCallStart { index, .. } | Event::ToolCallArgs { index, .. } => *index > 0,
        _ => false,
    }
}

/// A streamed answer in progress.
struct StreamRun {
    state: AppState,
    stream: sse::Resumed<AsyncChatStream>,
    clock: Clock,
    /// The telemetry the request asked for.
    telemetry: Asked,
    deltas: DeltaBuilder,
    head: Head,
    include_usage: bool,
    single_call: bool,
    /// With log-probabilities asked for, the tokens not yet sent: they go with the next chunk
    /// that is sent (a parser may hold text back, e.g. while it could still open a tool call).
    held: Option<Vec<ScoredToken>>,
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
        let item = futures_util::StreamExt::next(&mut self.stream).await;
        let now = Instant::now();
        // A progress report is not a token.
        if !matches!(&item, Some(Ok(i)) if i.progress.is_some()) {
            self.state.metrics().token(now - self.last);
        }
        self.last = now;
        match item {
            Some(Ok(item)) => Some(self.chunks(item)),
            Some(Err(e)) => {
                self.done = true;
                let e = ApiError::from(e);
                self.state.metrics().error();
                Some(sse::error_tail(&e, Dialect::OpenAi, 0))
            }
            None => {
                self.done = true;
                Some(vec![sse::done()])
            }
        }
    }

    fn chunks(&mut self, mut item: ChatResponse) -> Vec<Bytes> {
        if let Some(progress) = item.progress {
            let progress = self.clock.progress(&progress);
            if !self.telemetry.progress {
                return Vec::new();
            }
            let usage = UsageField::null_if(self.include_usage);
            let chunk = self.head.object(CHUNK, [PROGRESS_CHOICE], usage);
            return vec![sse::event(&chunk.with_progress(progress))];
        }
        self.clock.answered(&self.state, item.logprobs.len());
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
        let include_usage = self.include_usage;
        let timings = self
            .telemetry
            .timings_per_token
            .then(|| self.clock.timings(None));
        let mut out = Vec::new();
        for choice in self.deltas.push(&events) {
            // The held tokens go with the first chunk of this item.
            let tokens = self.held.as_mut().map(std::mem::take).unwrap_or_default();
            let logprobs = (!tokens.is_empty()).then(|| crate::logprobs::chat(&tokens));
            let choice = ChunkChoice::new(choice, logprobs);
            let usage = UsageField::null_if(include_usage);
            let mut chunk = self.head.object(CHUNK, [choice], usage);
            if let Some(timings) = timings {
                chunk = chunk.with_timings(timings);
            }
            out.push(sse::event(&chunk));
        }
        if let Some(usage) = item.usage {
            self.state.metrics().usage(&usage);
            if include_usage {
                // llama-server's `timings` of the whole answer go with the usage.
                let timings = self.clock.timings(Some(&usage));
                let chunk = self
                    .head
                    .object(CHUNK, NO_CHOICES, UsageField::Counts(usage))
                    .with_timings(timings);
                out.push(sse::event(&chunk));
            }
        }
        out
    }
}

/// The `object` of a streamed chat's chunks.
const CHUNK: &str = "chat.completion.chunk";
