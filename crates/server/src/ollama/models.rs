//! Ollama's model routes: `GET /api/tags` (every served model) and `GET /api/ps` (the loaded
//! ones, with when each unloads), `POST /api/show` (details, GGUF metadata as
//! `model_info`, the chat template, `capabilities`), `POST /api/pull` and `DELETE /api/delete`
//! (through wick's verified model store), `GET /api/version`, and `GET /` (`HEAD /` too).

use std::path::Path;
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use wick::models::{
    GgufHeader, GgufValue, ModelError, ModelRef, ModelStore, ProgressFn, PullOptions, PullProgress,
};
use wick::Llm;

use super::wire::ModelRequest;
use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::{sse, ApiError, AppState, Listing, ServedModel};

/// What `/api/tags`, `/api/ps` and `/api/show` say about a served model.
struct Described {
    size: u64,
    digest: String,
    modified_at: String,
    details: Value,
    header: Option<GgufHeader>,
}

/// Reads the model file's header, size, time and SHA-256 (blocking: run off the async
/// threads). A loaded model is described by its backend, one not loaded by its file's header;
/// a model without a file (a test backend) by its backend alone.
fn describe(store: Option<&ModelStore>, path: Option<&Path>, llm: Option<&Llm>) -> Described {
    let info = llm.map(Llm::model_info);
    let header = path.and_then(|p| GgufHeader::read(p).ok());
    let file = path.and_then(|p| std::fs::metadata(p).ok());
    let digest = match (store, path) {
        (Some(store), Some(path)) => {
            wick::models::model_sha256(store.settings(), path).unwrap_or_default()
        }
        _ => String::new(),
    };
    let modified = file
        .as_ref()
        .and_then(|m| m.modified().ok())
        .unwrap_or_else(SystemTime::now);
    let family = info.map_or_else(
        || {
            header
                .as_ref()
                .and_then(GgufHeader::architecture)
                .unwrap_or_default()
                .to_owned()
        },
        |i| i.architecture.clone(),
    );
    let params = info.map_or_else(
        || header.as_ref().map_or(0, GgufHeader::parameter_count),
        |i| i.n_params,
    );
    let quantization = header
        .as_ref()
        .and_then(GgufHeader::quantization)
        .unwrap_or_default();
    Described {
        size: file.map_or(info.map_or(0, |i| i.model_size_bytes), |m| m.len()),
        digest,
        modified_at: super::time::rfc3339(modified),
        details: json!({
            "parent_model": "",
            "format": "gguf",
            "family": family,
            "families": [family],
            "parameter_size": human_count(params),
            "quantization_level": quantization,
        }),
        header,
    }
}

/// Every served model (`loaded_only`: the loaded ones), described.
async fn described(state: &AppState, loaded_only: bool) -> Vec<(Listing, Described)> {
    let models: Vec<Listing> = state
        .listings()
        .into_iter()
        .filter(|m| !loaded_only || m.llm.is_some())
        .collect();
    let store = state.model_store().ok();
    tokio::task::spawn_blocking(move || {
        models
            .into_iter()
            .map(|m| {
                let d = describe(store.as_ref(), m.path.as_deref(), m.llm.as_ref());
                (m, d)
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// `7_241_732_096` → `7.24B`, `134_515_008` → `134.52M`; `""` for an unknown count.
fn human_count(n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let x = n as f64;
    let (value, unit) = match n {
        0 => return String::new(),
        n if n >= 1_000_000_000 => (x / 1e9, "B"),
        n if n >= 1_000_000 => (x / 1e6, "M"),
        n if n >= 1_000 => (x / 1e3, "K"),
        _ => (x, ""),
    };
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

/// `GET /api/tags`: every served model, loaded or not.
pub(crate) async fn tags(State(state): State<AppState>) -> Response {
    let models: Vec<Value> = described(&state, false)
        .await
        .into_iter()
        .map(|(m, d)| {
            json!({"name": m.id, "model": m.id, "modified_at": d.modified_at, "size": d.size,
                   "digest": d.digest, "details": d.details})
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

/// `GET /api/ps`: the loaded models, each with when it will be unloaded if no request comes
/// (`expires_at`; a century from now for a model that stays: pinned, kept forever or loaded
/// at start, as Ollama shows `keep_alive: -1`).
pub(crate) async fn ps(State(state): State<AppState>) -> Response {
    let never = SystemTime::now() + Duration::from_secs(100 * 365 * 86_400);
    let models: Vec<Value> = described(&state, true)
        .await
        .into_iter()
        .filter_map(|(m, d)| {
            let llm = m.llm.as_ref()?;
            let info = llm.model_info();
            let vram = if info.n_layer == 0 {
                0
            } else {
                d.size * u64::from(info.n_gpu_layers.min(info.n_layer)) / u64::from(info.n_layer)
            };
            let expires = m.expires_at.unwrap_or(never);
            Some(
                json!({"name": m.id, "model": m.id, "size": d.size.max(m.bytes),
                        "digest": d.digest, "details": d.details,
                        "expires_at": super::time::rfc3339(expires), "size_vram": vram,
                        "context_length": llm.metadata().context_window}),
            )
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

/// `POST /api/show`.
pub(crate) async fn show(
    State(state): State<AppState>,
    body: Result<ApiJson<ModelRequest>, ApiError>,
) -> Response {
    let answer = async {
        let ApiJson(req) = body?;
        let Some(name) = req.named() else {
            return Err(ApiError::bad("model", "`model` is required"));
        };
        let served = super::resolve(&state, Some(name), None).await?;
        let store = state.model_store().ok();
        let verbose = req.verbose == Some(true);
        let described = {
            let served = served.clone();
            tokio::task::spawn_blocking(move || {
                describe(store.as_ref(), served.llm.model_path(), Some(&served.llm))
            })
            .await
            .map_err(|_| ApiError::Internal)?
        };
        Ok(axum::Json(show_body(&served, &described, verbose)).into_response())
    };
    answer
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Ollama))
}

fn show_body(served: &ServedModel, d: &Described, verbose: bool) -> Value {
    let info = served.llm.model_info();
    let meta = served.llm.metadata();
    let mut capabilities = vec!["completion"];
    if meta.is_function_calling_model {
        capabilities.push("tools");
    }
    if info.special.thinking.is_some() {
        capabilities.push("thinking");
    }
    let from = served
        .llm
        .model_path()
        .map_or_else(|| served.id.clone(), |p| p.display().to_string());
    json!({
        "modelfile": format!("# Modelfile generated by wick\nFROM {from}\n"),
        "parameters": format!("num_ctx {}", meta.context_window),
        "template": info.chat_template.clone().unwrap_or_default(),
        "details": d.details,
        "model_info": model_info(info, d.header.as_ref(), verbose),
        "capabilities": capabilities,
        "modified_at": d.modified_at,
    })
}

/// GGUF metadata keys and values: what the backend reports, then the file's own metadata.
/// Arrays (the vocabulary, merges) are `null` unless `verbose`, as Ollama shows them.
fn model_info(info: &wick::ModelInfo, header: Option<&GgufHeader>, verbose: bool) -> Value {
    let mut out = Map::new();
    let arch = &info.architecture;
    out.insert("general.architecture".into(), json!(arch));
    out.insert("general.name".into(), json!(info.name));
    out.insert("general.parameter_count".into(), json!(info.n_params));
    out.insert(format!("{arch}.context_length"), json!(info.n_ctx_train));
    out.insert(format!("{arch}.embedding_length"), json!(info.n_embd));
    out.insert(format!("{arch}.block_count"), json!(info.n_layer));
    for (key, value) in header.map(GgufHeader::metadata).into_iter().flatten() {
        out.insert(key.clone(), gguf_json(value, verbose));
    }
    Value::Object(out)
}

fn gguf_json(value: &GgufValue, verbose: bool) -> Value {
    match value {
        GgufValue::Uint(n) => json!(n),
        GgufValue::Int(n) => json!(n),
        GgufValue::Float(x) => json!(x),
        GgufValue::Bool(b) => json!(b),
        GgufValue::String(s) => json!(s),
        GgufValue::Array {
            values: Some(values),
            ..
        } if verbose => Value::Array(values.iter().map(|v| gguf_json(v, true)).collect()),
        _ => Value::Null,
    }
}

/// `GET /api/version`: wick's version.
pub(crate) async fn version() -> Response {
    axum::Json(json!({ "version": env!("CARGO_PKG_VERSION") })).into_response()
}

/// `GET /` and `HEAD /`: the text Ollama's clients probe for.
pub(crate) async fn root() -> &'static str {
    "Ollama is running"
}

/// A model store failure as the client's error.
fn store_error(e: ModelError) -> ApiError {
    match e {
        ModelError::UnknownName { name } => ApiError::ModelNotFound {
            model: name,
            served: "(not in the model store)".into(),
        },
        e @ (ModelError::BadReference { .. }
        | ModelError::BadName { .. }
        | ModelError::BadSha256 { .. }
        | ModelError::NameTaken { .. }
        | ModelError::NoMatch { .. }
        | ModelError::Ambiguous { .. }
        | ModelError::Gguf { .. }) => ApiError::bad("model", e.to_string()),
        e => ApiError::ModelFetch {
            message: e.to_string(),
        },
    }
}

/// `DELETE /api/delete`: removes a model from the store (a served model keeps running until
/// the server stops).
pub(crate) async fn remove(
    State(state): State<AppState>,
    body: Result<ApiJson<ModelRequest>, ApiError>,
) -> Response {
    let answer = async {
        let ApiJson(req) = body?;
        let Some(name) = req.named().map(str::to_owned) else {
            return Err(ApiError::bad("model", "`model` is required"));
        };
        let store = state.model_store()?;
        let removed = {
            let name = name.clone();
            tokio::task::spawn_blocking(move || store.remove(&name))
                .await
                .map_err(|_| ApiError::Internal)?
        };
        removed.map_err(store_error)?;
        state.store_model_removed(&name);
        Ok(().into_response())
    };
    answer
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Ollama))
}

/// `POST /api/pull`: fetches a model into the store (any reference `wick pull` takes),
/// verified. Streamed (the default): a status line at once, then while a file downloads
/// `{"status": "pulling FILE", "total", "completed"}` lines (at its start, each hundredth, its
/// end), then the digest and size, then `{"status": "success"}`, or an `{"error"}` line.
/// A server of the store's models serves the pulled model from then on.
pub(crate) async fn pull(
    State(state): State<AppState>,
    body: Result<ApiJson<ModelRequest>, ApiError>,
) -> Response {
    let started = async {
        let ApiJson(req) = body?;
        let Some(name) = req.named().map(str::to_owned) else {
            return Err(ApiError::bad("model", "`model` is required"));
        };
        let reference: ModelRef = name.parse().map_err(store_error)?;
        Ok((
            req.stream.unwrap_or(true),
            name,
            reference,
            state.model_store()?,
        ))
    };
    let (stream, name, reference, store) = match started.await {
        Ok(started) => started,
        Err(e) => return e.response_in(Dialect::Ollama),
    };
    if !stream {
        let fetch =
            tokio::task::spawn_blocking(move || store.pull(&reference, &PullOptions::default()));
        return match fetch.await {
            Ok(Ok(pulled)) => {
                state.store_model_added(&pulled.entry.name, &pulled.path);
                axum::Json(json!({"status": "success"})).into_response()
            }
            Ok(Err(e)) => store_error(e).response_in(Dialect::Ollama),
            Err(_) => ApiError::Internal.response_in(Dialect::Ollama),
        };
    }
    // The download reports its progress into a channel that closes when it ends.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<PullProgress>();
    let options = PullOptions::default().with_progress(ProgressFn::new(move |p| {
        let _ = tx.send(p.clone());
    }));
    let fetch = tokio::task::spawn_blocking(move || store.pull(&reference, &options));
    let first = sse::line(&json!({ "status": format!("pulling {name}") }));
    let progress = futures_util::stream::unfold(rx, |mut rx| async move {
        let p = rx.recv().await?;
        let line = sse::line(&json!({"status": format!("pulling {}", p.file),
                                     "total": p.total, "completed": p.completed}));
        Some((line, rx))
    });
    let rest = futures_util::stream::once(async move {
        let lines: Vec<Bytes> = match fetch.await {
            Ok(Ok(pulled)) => {
                state.store_model_added(&pulled.entry.name, &pulled.path);
                let digest = format!("sha256:{}", pulled.entry.sha256);
                let size = pulled.entry.size;
                vec![
                    sse::line(&json!({"status": format!("pulling {}", short(&digest)),
                                      "digest": digest, "total": size, "completed": size})),
                    sse::line(&json!({"status": "verifying sha256 digest"})),
                    sse::line(&json!({"status": format!("stored as {}", pulled.entry.name)})),
                    sse::line(&json!({"status": "success"})),
                ]
            }
            Ok(Err(e)) => sse::error_tail(&store_error(e), Dialect::Ollama, 0),
            Err(_) => sse::error_tail(&ApiError::Internal, Dialect::Ollama, 0),
        };
        futures_util::stream::iter(lines)
    });
    let rest = futures_util::StreamExt::chain(progress, futures_util::StreamExt::flatten(rest));
    let lines = futures_util::StreamExt::chain(futures_util::stream::iter([first]), rest);
    let body = Body::from_stream(futures_util::StreamExt::map(
        lines,
        Ok::<_, std::convert::Infallible>,
    ));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// `sha256:abcdef…` shortened to its first 12 hex digits, as Ollama's status lines show it.
fn short(digest: &str) -> &str {
    let end = digest.len().min("sha256:".len() + 12);
    &digest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_read_as_ollama_writes_them() {
        assert_eq!(human_count(7_241_732_096), "7.24B");
        assert_eq!(human_count(134_515_008), "134.52M");
        assert_eq!(human_count(8_000_000_000), "8B");
        assert_eq!(human_count(1_500), "1.5K");
        assert_eq!(human_count(0), "");
    }

    #[test]
    fn short_arrays_show_only_when_verbose() {
        let array = GgufValue::Array {
            len: 2,
            values: Some(vec![GgufValue::Uint(1), GgufValue::Uint(2)]),
        };
        assert_eq!(gguf_json(&array, false), Value::Null);
        assert_eq!(gguf_json(&array, true), json!([1, 2]));
        assert_eq!(gguf_json(&GgufValue::String("x".into()), false), json!("x"));
    }
}
