//! `POST /v1/embeddings`: one vector per input, as floats or base64 (what the `openai`
//! package asks for by default); and llama-server's own `POST /embeddings` (`/embedding`).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::extract::ApiJson;
use crate::wire::{EmbeddingRequest, Prompt};
use crate::{ApiError, AppState};

/// The embeddings handler.
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<Json<Value>, ApiError> {
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad(
                "encoding_format",
                format!("encoding_format `{other}` (allowed: float, base64)"),
            ))
        }
    };
    if req.dimensions.is_some() {
        return Err(ApiError::Unsupported {
            message: "dimensions is not supported: the model's own size is returned".into(),
            param: "dimensions",
        });
    }
    let served = state.model(req.model.as_deref()).await?;
    let texts = inputs(&served.llm, req.input).await?;
    let mut data = Vec::with_capacity(texts.len());
    let mut prompt_tokens = 0;
    for (index, text) in texts.iter().enumerate() {
        prompt_tokens += served.llm.atokenize(text, false).await?.len();
        let vector = served
            .llm
            .aembed(text)
            .await
            .map_err(|e| ApiError::from(e).too_long_in("input"))?;
        let embedding = if base64 {
            Value::String(encode_base64(&vector))
        } else {
            json!(vector)
        };
        data.push(json!({"object": "embedding", "index": index, "embedding": embedding}));
    }
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": served.id,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    })))
}

/// llama-server's own embeddings body: `input` (or its older `content`), texts or tokens.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct NativeEmbeddingRequest {
    model: Option<String>,
    input: Option<Prompt>,
    content: Option<Prompt>,
}

/// llama-server's `POST /embeddings` (and `/embedding`): `[{"index", "embedding": [[…]]}]`,
/// each input's pooled vector inside a list, as llama-server answers for a pooled model (it
/// lists one vector per token only for models without pooling).
pub(crate) async fn native(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<NativeEmbeddingRequest>,
) -> Result<Json<Value>, ApiError> {
    let served = state.model(req.model.as_deref()).await?;
    let texts = inputs(&served.llm, req.input.or(req.content)).await?;
    let mut out = Vec::with_capacity(texts.len());
    for (index, text) in texts.iter().enumerate() {
        let vector = served
            .llm
            .aembed(text)
            .await
            .map_err(|e| ApiError::from(e).too_long_in("input"))?;
        out.push(json!({"index": index, "embedding": [vector]}));
    }
    Ok(Json(Value::Array(out)))
}

/// The input texts (token inputs are detokenized; at most [`crate::prompts::MAX_PROMPTS`]).
async fn inputs(llm: &wick::Llm, input: Option<Prompt>) -> Result<Vec<String>, ApiError> {
    let items = crate::prompts::items(input, "input")?;
    let mut texts = Vec::with_capacity(items.len());
    for item in items {
        texts.push(crate::prompts::text(llm, item).await?);
    }
    if texts.iter().any(String::is_empty) {
        return Err(ApiError::bad("input", "inputs must not be empty strings"));
    }
    Ok(texts)
}

/// Little-endian `f32`s, base64-encoded (standard alphabet, padded).
fn encode_base64(vector: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode_base64;

    #[test]
    fn base64_matches_known_encodings() {
        // 1.0f32 = 00 00 80 3f
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        assert_eq!(encode_base64(&[]), "");
        // 1.0, -2.0 = 00 00 80 3f 00 00 00 c0
        assert_eq!(encode_base64(&[1.0, -2.0]), "AACAPwAAAMA=");
    }
}
