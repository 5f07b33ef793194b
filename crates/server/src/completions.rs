//! `POST /v1/completions`: a raw prompt (text or tokens) continued, whole or streamed.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use wick::{AsyncCompletionStream, CompletionResponse, PromptInput, TokenId};

use crate::chat::{usage_json, Head};
use crate::extract::ApiJson;
use crate::wire::{CompletionRequest, Prompt};
use crate::{sse, validate, ApiError, AppState};

/// The completions handler.
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    if req.echo == Some(true) {
        return Err(ApiError::Unsupported {
            message: "echo is not supported yet".into(),
            param: "echo",
        });
    }
    if req.logprobs.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::Unsupported {
            message: "logprobs are not supported yet; leave `logprobs` unset".into(),
            param: "logprobs",
        });
    }
    let input = prompt(req.prompt)?;
    let options = validate::options(&req.sampling, req.sampling.max_tokens, "max_tokens")?;
    let served = state.model(req.model.as_deref())?;
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
    let include_usage = req
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    if req.stream.unwrap_or(false) {
        let frames = frames(state, stream, first, head, include_usage);
        return Ok(sse::response(frames));
    }
    let mut last = first;
    while let Some(item) = stream.next().await {
        last = item?;
    }
    if let Some(u) = &last.usage {
        state.metrics().usage(u);
    }
    let body = object(
        &head,
        &last.text,
        &last,
        Some(usage_json(last.usage.as_ref())),
    );
    Ok(axum::Json(body).into_response())
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

/// A `text_completion` object carrying `text`.
fn object(head: &Head, text: &str, item: &CompletionResponse, usage: Option<Value>) -> Value {
    let mut body = json!({
        "id": head.id,
        "object": "text_completion",
        "created": head.created,
        "model": head.model,
        "choices": [{"text": text, "index": 0, "logprobs": null,
                     "finish_reason": item.finish_reason}],
    });
    if let Some(usage) = usage {
        body["usage"] = usage;
    }
    body
}

fn frames(
    state: AppState,
    stream: AsyncCompletionStream,
    first: CompletionResponse,
    head: Head,
    include_usage: bool,
) -> impl futures_core::Stream<Item = Bytes> + Send + 'static {
    let live = state.metrics().live();
    let run = (stream, Some(first), false, live);
    let steps = futures_util::stream::unfold(run, move |(mut stream, pending, done, live)| {
        let head = head.clone();
        let state = state.clone();
        async move {
            if done {
                return None;
            }
            let item = match pending {
                Some(item) => Some(Ok(item)),
                None => stream.next().await,
            };
            let (frames, done) = match item {
                Some(Ok(item)) => (chunk_frames(&state, &head, &item, include_usage), false),
                Some(Err(e)) => (vec![sse::event(&ApiError::from(e).body())], true),
                None => (vec![sse::done()], true),
            };
            Some((
                futures_util::stream::iter(frames),
                (stream, None, done, live),
            ))
        }
    });
    futures_util::StreamExt::flatten(steps)
}

fn chunk_frames(
    state: &AppState,
    head: &Head,
    item: &CompletionResponse,
    include_usage: bool,
) -> Vec<Bytes> {
    let mut out = Vec::new();
    let null_usage = include_usage.then_some(Value::Null);
    if !item.delta.is_empty() || item.finish_reason.is_some() {
        out.push(sse::event(&object(head, &item.delta, item, null_usage)));
    }
    if let Some(usage) = &item.usage {
        state.metrics().usage(usage);
        if include_usage {
            let mut chunk = object(head, "", item, Some(usage_json(Some(usage))));
            chunk["choices"] = json!([]);
            out.push(sse::event(&chunk));
        }
    }
    out
}
