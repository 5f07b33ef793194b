//! `POST /api/embed` (`input`: one text or several → `embeddings`) and the older
//! `POST /api/embeddings` (`prompt` → `embedding`), on the same model call as
//! `/v1/embeddings`.

use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::wire::{EmbedRequest, EmbeddingsRequest, Input};
use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::{ApiError, AppState, ServedModel};

/// Most inputs in one request (as `/v1/embeddings`).
const MAX_INPUTS: usize = 256;

/// `POST /api/embed`.
pub(crate) async fn embed(
    State(state): State<AppState>,
    body: Result<ApiJson<EmbedRequest>, ApiError>,
) -> Response {
    let received = Instant::now();
    let answer = async {
        let ApiJson(req) = body?;
        if req.dimensions.is_some() {
            return Err(ApiError::Unsupported {
                message: "dimensions is not supported: the model's own size is returned".into(),
                param: "dimensions",
            });
        }
        let texts = match req.input {
            None => return Err(ApiError::bad("input", "`input` is required")),
            Some(Input::One(text)) => vec![text],
            Some(Input::Many(texts)) => texts,
        };
        if texts.is_empty() || texts.len() > MAX_INPUTS {
            return Err(ApiError::bad(
                "input",
                format!("{} inputs given (allowed: 1 to {MAX_INPUTS})", texts.len()),
            ));
        }
        let keep_alive = super::convert::keep_alive(req.keep_alive.as_ref())?;
        let served = super::resolve(&state, req.model.as_deref(), keep_alive).await?;
        let submitted = Instant::now();
        let mut embeddings = Vec::with_capacity(texts.len());
        let mut count = 0;
        for text in &texts {
            let (vector, tokens) = one(&served, text).await?;
            embeddings.push(vector);
            count += tokens;
        }
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok(axum::Json(json!({
            "model": served.id,
            "embeddings": embeddings,
            "total_duration": nanos(received.elapsed()),
            "load_duration": nanos(submitted - received),
            "prompt_eval_count": count,
        }))
        .into_response())
    };
    answer
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Ollama))
}

/// `POST /api/embeddings`.
pub(crate) async fn embeddings(
    State(state): State<AppState>,
    body: Result<ApiJson<EmbeddingsRequest>, ApiError>,
) -> Response {
    let answer = async {
        let ApiJson(req) = body?;
        let keep_alive = super::convert::keep_alive(req.keep_alive.as_ref())?;
        let served = super::resolve(&state, req.model.as_deref(), keep_alive).await?;
        let Some(prompt) = req.prompt else {
            return Err(ApiError::bad("prompt", "`prompt` is required"));
        };
        if prompt.is_empty() {
            // Ollama's answer to an empty prompt.
            return Ok(axum::Json(json!({ "embedding": [] })).into_response());
        }
        let (embedding, _) = one(&served, &prompt).await?;
        Ok(axum::Json(json!({ "embedding": embedding })).into_response())
    };
    answer
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Ollama))
}

/// The embedding of `text` and its token count.
async fn one(served: &ServedModel, text: &str) -> Result<(Vec<f32>, usize), ApiError> {
    if text.is_empty() {
        return Err(ApiError::bad("input", "inputs must not be empty strings"));
    }
    let tokens = served.llm.atokenize(text, false).await?.len();
    let vector = served
        .llm
        .aembed(text)
        .await
        .map_err(|e| ApiError::from(e).too_long_in("input"))?;
    Ok((vector, tokens))
}
