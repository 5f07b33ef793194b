//! `POST /tokenize` and `POST /detokenize` (llama.cpp server's shapes).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::extract::ApiJson;
use crate::wire::{DetokenizeRequest, TokenizeRequest};
use crate::{ApiError, AppState};

/// `{"content": "…", "add_special"?: bool}` → `{"tokens": [ids]}`. With `add_special` the
/// text's special-token spellings become control tokens.
pub(crate) async fn tokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let Some(content) = req.content else {
        return Err(ApiError::bad("content", "`content` is required"));
    };
    let served = state.model(req.model.as_deref())?;
    let tokens = served
        .llm
        .atokenize(&content, req.add_special.unwrap_or(false))
        .await?;
    let ids: Vec<u32> = tokens.iter().map(|t| t.0).collect();
    Ok(Json(json!({"tokens": ids})))
}

/// `{"tokens": [ids]}` → `{"content": "…"}`.
pub(crate) async fn detokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let Some(tokens) = req.tokens else {
        return Err(ApiError::bad("tokens", "`tokens` is required"));
    };
    let served = state.model(req.model.as_deref())?;
    let tokens = if tokens.is_empty() {
        Vec::new()
    } else {
        crate::completions::tokens(&tokens)?
    };
    let content = served.llm.adetokenize(&tokens).await?;
    Ok(Json(json!({"content": content})))
}
