//! The model routes: `GET /v1/models` (and llama-server's `/models`) lists every served model
//! with its state, `GET /v1/models/{id}` one of them (an id may hold slashes), and
//! llama-server's router routes `POST /models/load` and `POST /models/unload`
//! (`{"model": NAME}` → `{"success": true}`).

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::extract::ApiJson;
use crate::{ApiError, AppState, Listing, ModelStatus};

/// A model as `/v1/models` (and llama-server's `/models`) lists it: its names and tags, its
/// state (`status.value`: `loaded`, `loading`, `unloaded` or `failed`, with the reason),
/// whether it is pinned, its file and memory estimate (`size`, bytes), and once loaded when
/// it unloads if idle (`expires_at`, Unix seconds, `null` for never), the requests holding
/// it, its context window and where and how it runs (`meta`).
fn model_json(state: &AppState, m: &Listing) -> Value {
    let mut status = json!({"value": m.status.name()});
    if let ModelStatus::Failed(reason) = &m.status {
        status["failed"] = json!(true);
        status["reason"] = json!(reason);
    }
    let mut entry = json!({"id": m.id, "object": "model", "created": state.created(),
                           "owned_by": "wick", "aliases": m.aliases, "tags": m.tags,
                           "status": status, "pinned": m.pinned});
    if let Some(path) = &m.path {
        entry["path"] = json!(path.display().to_string());
    }
    if m.bytes > 0 {
        entry["size"] = json!(m.bytes);
    }
    if m.llm.is_some() {
        // Unix seconds; `null`: stays loaded.
        entry["expires_at"] = json!(m.expires_at.map(|t| t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())));
        entry["in_flight"] = json!(m.in_flight);
    }
    if let Some(llm) = &m.llm {
        let meta = llm.metadata();
        entry["context_window"] = json!(meta.context_window);
        entry["meta"] = json!({"deterministic": meta.deterministic, "build": meta.build,
               "recurrent": meta.recurrent,
               "placement": placement_json(&meta.placement),
               "cpu_kernels": meta.cpu_kernels.as_ref().map(|k| json!({
                   "level": k.level, "matmul_types": k.matmul_types,
                   "attention": k.attention, "same_bits_on": k.same_bits_on}))});
    }
    entry
}

/// Where the layers run and their KV cache lives: `[{"device": "RPC0", "description":
/// "10.0.0.2:50052", "first_layer": 0, "n_layers": 30, "output": true, "kv_cache": {"device":
/// "RPC0", "bytes": 94371840}}, …]`.
fn placement_json(placement: &[wick::LayerPlacement]) -> Value {
    placement
        .iter()
        .map(|p| {
            json!({"device": p.device, "description": p.description,
                   "first_layer": p.first_layer, "n_layers": p.n_layers, "output": p.output,
                   "kv_cache": {"device": p.device, "bytes": p.kv_bytes},
                   "deterministic": p.deterministic})
        })
        .collect()
}

pub(crate) async fn list(State(state): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = state
        .listings()
        .iter()
        .map(|m| model_json(&state, m))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let model = state.model_named(Some(&id))?;
    Ok(Json(model_json(&state, &model)))
}

/// `POST /models/load` and `/models/unload`'s body.
#[derive(Debug, Deserialize)]
pub(crate) struct ModelName {
    model: Option<String>,
}

impl ModelName {
    fn required(self) -> Result<String, ApiError> {
        self.model.filter(|m| !m.is_empty()).ok_or_else(|| {
            ApiError::bad("model", "`model` is required: the model to load or unload")
        })
    }
}

/// `POST /models/load`: starts loading the model (llama-server answers before the load ends;
/// `GET /models` shows `loading`, then `loaded` or `failed` with the reason). An unknown name
/// is a 404 at once.
pub(crate) async fn load(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ModelName>,
) -> Result<Json<Value>, ApiError> {
    let name = req.required()?;
    let id = state.model_named(Some(&name))?.id;
    tokio::spawn(async move {
        // The load's outcome shows in the listing; the lease ends at once.
        if let Err(e) = state.load_model(&id).await {
            eprintln!("wick serve: {e}");
        }
    });
    Ok(Json(json!({"success": true})))
}

/// `POST /models/unload`: unloads the model now when idle, else once its requests end.
pub(crate) async fn unload(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ModelName>,
) -> Result<Json<Value>, ApiError> {
    let name = req.required()?;
    let id = state.model_named(Some(&name))?.id;
    state.unload_model(&id)?;
    Ok(Json(json!({"success": true})))
}
