//! Anthropic Messages request bodies as clients send them (serde, lenient: unknown fields such
//! as `cache_control` or `citations` are ignored, `null` is the same as absent). `convert` turns
//! them into the chat pipeline's request.

use serde::Deserialize;
use serde_json::Value;

/// `POST /v1/messages` and `POST /v1/messages/count_tokens`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct MessagesRequest {
    pub(crate) model: Option<String>,
    pub(crate) max_tokens: Option<i64>,
    pub(crate) system: Option<Content>,
    pub(crate) messages: Option<Vec<InputMessage>>,
    pub(crate) tools: Option<Vec<InputTool>>,
    /// Read by hand, for errors that list what is allowed.
    pub(crate) tool_choice: Option<Value>,
    pub(crate) stop_sequences: Option<Vec<String>>,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) top_k: Option<i64>,
    pub(crate) stream: Option<bool>,
    /// Accepted and ignored (`user_id` is for Anthropic's abuse detection).
    pub(crate) metadata: Option<Value>,
    /// `{"type": "enabled", "budget_tokens": N}`, `{"type": "disabled"}`, `adaptive` or
    /// `between_tools`.
    pub(crate) thinking: Option<Value>,
    /// `format` (`{"type": "json_schema", "schema": …}`) is read; `effort` is ignored.
    pub(crate) output_config: Option<OutputConfig>,
}

/// `output_config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct OutputConfig {
    pub(crate) format: Option<Value>,
}

/// One message of `messages`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct InputMessage {
    pub(crate) role: String,
    pub(crate) content: Content,
}

/// Content: a string, or content blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

/// One content block, any type; the fields a type does not use stay `None`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Block {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// `text`.
    pub(crate) text: Option<String>,
    /// `thinking`.
    pub(crate) thinking: Option<String>,
    /// `tool_use`.
    pub(crate) id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) input: Option<Value>,
    /// `tool_result`.
    pub(crate) tool_use_id: Option<String>,
    pub(crate) content: Option<Box<Content>>,
    pub(crate) is_error: Option<bool>,
    /// `image`: `{"type": "base64", "media_type": "image/png", "data": "…"}`.
    pub(crate) source: Option<Value>,
}

/// One tool of `tools`: a client tool (`type` absent or `custom`) with its `input_schema`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct InputTool {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) input_schema: Option<Value>,
}
