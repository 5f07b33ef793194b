//! `GET /lora-adapters` and `POST /lora-adapters` (llama-server's shapes): the LoRA adapters
//! loaded with the model and their default scales.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::extract::ApiJson;
use crate::{ApiError, AppState};

/// `[{"id", "path", "scale", "task_name", "prompt_prefix"}, …]`, by id.
pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let served = state.model(None).await?;
    let adapters: Vec<Value> = served
        .llm
        .lora_adapters()
        .into_iter()
        .map(|a| {
            json!({
                "id": a.id,
                "path": a.path.display().to_string(),
                "scale": a.scale,
                // llama-server reads these from the adapter's metadata; wick's adapters carry
                // neither.
                "task_name": "",
                "prompt_prefix": "",
            })
        })
        .collect();
    Ok(Json(Value::Array(adapters)))
}

/// `[{"id": 0, "scale": 0.5}, …]` sets the scales requests without their own `lora` run at;
/// adapters left out are off. `{"success": true}`; nothing changes on a 400.
pub(crate) async fn set(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<Value>, ApiError> {
    let scales = crate::validate::lora(&body)?;
    let served = state.model(None).await?;
    served.llm.set_lora_scales(&scales)?;
    Ok(Json(json!({"success": true})))
}
