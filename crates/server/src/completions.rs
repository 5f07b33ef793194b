//! `POST /v1/completions`: a raw prompt (text or tokens) continued, whole or streamed.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use wick::{AsyncCompletionStream, CompletionResponse, ScoredToken};

use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::objects::{Head, TextChoice, UsageField, NO_CHOICES};
use crate::telemetry::Clock;
use crate::wire::CompletionRequest;
use crate::{prompts, sse, validate, ApiError, AppState};

/// The completions handler: one prompt, whole or streamed, or a batch of prompts answered
/// whole (one choice each, by `index`, generated side by side).
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let ValidCompletion {
        model,
        inputs,
        options,
        logprobs,
        stream: streamed,
        include_usage,
    } = valid(req, &state.config().sampling)?;
    let served = state.model(model.as_deref()).await?;
    let head = Head::new("cmpl", served.id.clone());
    if streamed {
        let started = start(&state, &served.llm, only_one(inputs)?, &options).await?;
        let shutdown = state.shutdown_token();
        let run = StreamRun {
            _live: state.metrics().live(),
            state,
            stream: started.stream,
            head,
            include_usage,
            logprobs: logprobs.is_some(),
            held: Vec::new(),
            offset: 0,
            done: false,
        };
        return Ok(sse::response(sse::frames(run), shutdown, Dialect::OpenAi));
    }
    let answers = futures_util::future::try_join_all(inputs.into_iter().map(|item| async {
        Ok::<_, ApiError>(whole(&state, &served.llm, item, &options).await?.0)
    }))
    .await?;
    let mut usage = wick::Usage::default();
    for answer in &answers {
        let u = answer.usage.unwrap_or_default();
        usage.prompt_tokens += u.prompt_tokens;
        usage.completion_tokens += u.completion_tokens;
        usage.cached_tokens += u.cached_tokens;
    }
    let logprobs: Vec<_> = answers
        .iter()
        .map(|a| logprobs.map(|_| crate::logprobs::legacy(&a.logprobs, &mut 0)))
        .collect();
    let choices: Vec<_> = answers
        .iter()
        .zip(logprobs)
        .enumerate()
        .map(|(i, (a, logprobs))| TextChoice::new(&a.text, logprobs, a.finish_reason).at(i))
        .collect();
    let body = head.object(OBJECT, choices, UsageField::Counts(usage));
    Ok(axum::Json(body).into_response())
}

/// The one prompt of a streamed request: a batch is answered whole.
pub(crate) fn only_one(inputs: Vec<prompts::Item>) -> Result<prompts::Item, ApiError> {
    let n = inputs.len();
    let mut inputs = inputs.into_iter();
    match (inputs.next(), n) {
        (Some(item), 1) => Ok(item),
        _ => Err(ApiError::bad(
            "stream",
            format!("{n} prompts: a batch is answered whole, so stream one prompt at a time"),
        )),
    }
}

/// A completion started: its stream (the first item put back in front) and its clock.
pub(crate) struct Started {
    pub(crate) stream: sse::Resumed<AsyncCompletionStream>,
    pub(crate) clock: Clock,
}

/// Starts the completion of `item` and waits for its first item, which decides between an
/// HTTP error and a 200 (a prompt too long is one); its clock records the time to first token.
pub(crate) async fn start(
    state: &AppState,
    llm: &wick::Llm,
    item: prompts::Item,
    options: &wick::GenerateOptions,
) -> Result<Started, ApiError> {
    let input = prompts::completion_input(llm, item).await?;
    let at = Instant::now();
    let mut stream = llm
        .astream_complete_with(input, options)
        .await
        .map_err(|e| ApiError::from(e).too_long_in("prompt"))?;
    let Some(first) = stream.next().await else {
        return Err(ApiError::Internal);
    };
    let first = first?;
    // A progress report (asked for by a stream) comes before the first token.
    let clock = Clock::first_item(state, at, stream.prompt_tokens(), first.progress.is_some());
    Ok(Started {
        stream: sse::resume(Ok(first), stream),
        clock,
    })
}

/// The whole answer to `item`: the last item, with the text and every token's report, and
/// its clock.
pub(crate) async fn whole(
    state: &AppState,
    llm: &wick::Llm,
    item: prompts::Item,
    options: &wick::GenerateOptions,
) -> Result<(CompletionResponse, Started), ApiError> {
    let mut started = start(state, llm, item, options).await?;
    let mut tokens = Vec::new();
    let mut last = None;
    while let Some(item) = futures_util::StreamExt::next(&mut started.stream).await {
        let mut item = item?;
        tokens.append(&mut item.logprobs);
        last = Some(item);
    }
    let mut last = last.ok_or(ApiError::Internal)?;
    last.logprobs = tokens;
    if let Some(u) = &last.usage {
        state.metrics().usage(u);
    }
    Ok((last, started))
}

/// A text-completion request that passed every check.
#[derive(Debug)]
pub(crate) struct ValidCompletion {
    model: Option<String>,
    inputs: Vec<prompts::Item>,
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

    /// The prompts: one, or a batch.
    pub(crate) fn inputs(&self) -> &[prompts::Item] {
        &self.inputs
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
    let inputs = prompts::items(req.prompt, "prompt")?;
    let mut options = validate::options(
        &req.sampling,
        req.sampling.max_tokens,
        "max_tokens",
        defaults,
    )?;
    options.logprobs = logprobs;
    Ok(ValidCompletion {
        model: req.model,
        inputs,
        options,
        logprobs,
        stream: req.stream.unwrap_or(false),
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
    })
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
