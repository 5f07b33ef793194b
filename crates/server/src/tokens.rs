//! `POST /tokenize` and `POST /detokenize` (llama.cpp server's shapes).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::extract::ApiJson;
use crate::wire::{DetokenizeRequest, TokenizeRequest};
use crate::{ApiError, AppState};

/// `{"content": "…", "add_special"?: bool, "with_pieces"?: bool}` → `{"tokens": [ids]}`. With
/// `add_special` the text's special-token spellings become control tokens; with `with_pieces`
/// each token is `{"id", "piece"}`, the piece a string when its bytes are UTF-8 and an array of
/// bytes when not (a token may hold part of a character), as llama-server answers.
pub(crate) async fn tokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let Some(content) = req.content else {
        return Err(ApiError::bad("content", "`content` is required"));
    };
    let served = state.model(req.model.as_deref()).await?;
    let tokens = served
        .llm
        .atokenize(&content, req.add_special.unwrap_or(false))
        .await?;
    if !req.with_pieces.unwrap_or(false) {
        let ids: Vec<u32> = tokens.iter().map(|t| t.0).collect();
        return Ok(Json(json!({"tokens": ids})));
    }
    let mut pieces = Vec::with_capacity(tokens.len());
    for token in tokens {
        let bytes = served.llm.token_bytes(token)?;
        let piece = match String::from_utf8(bytes) {
            Ok(text) => json!(text),
            Err(e) => json!(e.into_bytes()),
        };
        pieces.push(json!({"id": token.0, "piece": piece}));
    }
    Ok(Json(json!({"tokens": pieces})))
}

/// `{"tokens": [ids]}` → `{"content": "…"}`.
pub(crate) async fn detokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let Some(tokens) = req.tokens else {
        return Err(ApiError::bad("tokens", "`tokens` is required"));
    };
    let served = state.model(req.model.as_deref()).await?;
    let tokens = if tokens.is_empty() {
        Vec::new()
    } else {
        tokens
            .iter()
            .map(|&t| {
                u32::try_from(t)
                    .map(wick::TokenId)
                    .map_err(|_| ApiError::bad("tokens", format!("token id {t} is out of range")))
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    let content = served.llm.adetokenize(&tokens).await?;
    Ok(Json(json!({"content": content})))
}
