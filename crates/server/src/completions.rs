//! `POST /v1/completions`: a raw prompt (text or tokens) continued, whole or streamed.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use wick::{AsyncCompletionStream, CompletionResponse, PromptInput, ScoredToken, TokenId};

use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::objects::{Head, TextChoice, UsageField, NO_CHOICES};
use crate::wire::{CompletionRequest, Prompt};
use crate::{sse, validate, ApiError, AppState};

/// The completions handler.
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let ValidCompletion {
        model,
        input,
        options,
        logprobs,
        stream: streamed,
        include_usage,
    } = valid(req, &state.config().sampling)?;
    let served = state.model(model.as_deref())?;
    let started = Instant::now();
    let mut stream = served
        .llm
        .astream_complete_with(input, &options)
        .await
        .map_err(|e| ApiError::from(e).too_long_in("prompt"))?;
    let first = match stream.next().await {
        Some(item) => item?,
        None => return Err(ApiError::Internal),
    };
    state.metrics().first_token(started.elapsed());
    let head = Head::new("cmpl", served.id.clone());
    if streamed {
        let shutdown = state.shutdown_token();
        let run = StreamRun {
            _live: state.metrics().live(),
            state,
            stream: sse::resume(Ok(first), stream),
            head,
            include_usage,
            logprobs: logprobs.is_some(),
            held: Vec::new(),
            offset: 0,
            done: false,
        };
        return Ok(sse::response(sse::frames(run), shutdown, Dialect::OpenAi));
    }
    let mut last = first;
    let mut tokens = std::mem::take(&mut last.logprobs);
    while let Some(item) = stream.next().await {
        last = item?;
        tokens.append(&mut last.logprobs);
    }
    last.logprobs = tokens;
    if let Some(u) = &last.usage {
        state.metrics().usage(u);
    }
    let logprobs = logprobs.map(|_| crate::logprobs::legacy(&last.logprobs, &mut 0));
    let choice = TextChoice::new(&last.text, logprobs, last.finish_reason);
    let usage = UsageField::Counts(last.usage.unwrap_or_default());
    let body = head.object(OBJECT, [choice], usage);
    Ok(axum::Json(body).into_response())
}

/// A text-completion request that passed every check.
#[derive(Debug)]
pub(crate) struct ValidCompletion {
    model: Option<String>,
    input: PromptInput,
    options: wick::GenerateOptions,
    logprobs: Option<u8>,
    stream: bool,
    include_usage: bool,
}

impl ValidCompletion {
    /// The model the request names.
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The generation options.
    pub(crate) fn options(&self) -> &wick::GenerateOptions {
        &self.options
    }

    /// The prompt.
    pub(crate) fn input(&self) -> PromptInput {
        self.input.clone()
    }
}

/// Checks a text-completion request.
pub(crate) fn valid(
    req: CompletionRequest,
    defaults: &crate::SamplingDefaults,
) -> Result<ValidCompletion, ApiError> {
    if req.echo == Some(true) {
        return Err(ApiError::Unsupported {
            message: "echo is not supported yet".into(),
            param: "echo",
        });
    }
    let logprobs = validate::completion_logprobs(req.logprobs.as_ref())?;
    let input = prompt(req.prompt)?;
    let mut options = validate::options(
        &req.sampling,
        req.sampling.max_tokens,
        "max_tokens",
        defaults,
    )?;
    options.logprobs = logprobs;
    Ok(ValidCompletion {
        model: req.model,
        input,
        options,
        logprobs,
        stream: req.stream.unwrap_or(false),
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
    })
}

/// The prompt as text (sent as a formatted prompt: its special-token text is kept) or tokens.
fn prompt(prompt: Option<Prompt>) -> Result<PromptInput, ApiError> {
    let text = |text: String| PromptInput::Text {
        text,
        formatted: true,
    };
    let batch = || {
        ApiError::bad(
            "prompt",
            "one prompt per request: batches are not supported",
        )
    };
    match prompt {
        None => Err(ApiError::bad("prompt", "`prompt` is required")),
        Some(Prompt::Text(t)) => Ok(text(t)),
        Some(Prompt::Texts(mut v)) if v.len() == 1 => Ok(text(v.remove(0))),
        Some(Prompt::Tokens(t)) => tokens(&t).map(PromptInput::Tokens),
        Some(Prompt::TokenLists(v)) if v.len() == 1 => tokens(&v[0]).map(PromptInput::Tokens),
        Some(Prompt::Texts(_) | Prompt::TokenLists(_)) => Err(batch()),
    }
}

/// Token ids as given, each a non-negative 32-bit integer.
pub(crate) fn tokens(ids: &[i64]) -> Result<Vec<TokenId>, ApiError> {
    if ids.is_empty() {
        return Err(ApiError::bad("prompt", "the token list is empty"));
    }
    ids.iter()
        .map(|&t| {
            u32::try_from(t)
                .map(TokenId)
                .map_err(|_| ApiError::bad("tokens", format!("token id {t} is out of range")))
        })
        .collect()
}

/// The `object` of a completion and of its chunks.
const OBJECT: &str = "text_completion";

/// A streamed completion in progress.
struct StreamRun {
    state: AppState,
    stream: sse::Resumed<AsyncCompletionStream>,
    head: Head,
    include_usage: bool,
    /// Whether the request asked for log-probabilities.
    logprobs: bool,
    /// Tokens not yet sent: they go with the next chunk that is sent.
    held: Vec<ScoredToken>,
    /// Characters of text sent so far (for `text_offset`).
    offset: usize,
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
        let item = futures_util::StreamExt::next(&mut self.stream).await;
        Some(match item {
            Some(Ok(item)) => self.chunks(item),
            Some(Err(e)) => {
                self.done = true;
                vec![sse::event(&ApiError::from(e).body()), sse::done()]
            }
            None => {
                self.done = true;
                vec![sse::done()]
            }
        })
    }

    fn chunks(&mut self, mut item: CompletionResponse) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.held.append(&mut item.logprobs);
        if !item.delta.is_empty() || item.finish_reason.is_some() {
            let held = std::mem::take(&mut self.held);
            let logprobs = self
                .logprobs
                .then(|| crate::logprobs::legacy(&held, &mut self.offset));
            let choice = TextChoice::new(&item.delta, logprobs, item.finish_reason);
            let usage = UsageField::null_if(self.include_usage);
            out.push(sse::event(&self.head.object(OBJECT, [choice], usage)));
        }
        if let Some(usage) = item.usage {
            self.state.metrics().usage(&usage);
            if self.include_usage {
                let usage = UsageField::Counts(usage);
                out.push(sse::event(&self.head.object(OBJECT, NO_CHOICES, usage)));
            }
        }
        out
    }
}
