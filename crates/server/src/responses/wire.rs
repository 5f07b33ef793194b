//! Responses API request bodies as clients send them (serde, lenient: unknown fields are
//! ignored, `null` is the same as absent). `input` stays JSON here: its items are read one by
//! one in `convert`, so an error can name the item, and the items are stored as they came for
//! a later `previous_response_id`.

use serde::Deserialize;
use serde_json::{Map, Value};

/// `POST /v1/responses`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResponsesRequest {
    pub(crate) model: Option<String>,
    /// A string (one user message) or a list of items.
    pub(crate) input: Option<Value>,
    /// The system prompt (not carried over by `previous_response_id`, as in OpenAI's API).
    pub(crate) instructions: Option<String>,
    pub(crate) tools: Option<Vec<ResponseTool>>,
    /// Read by hand, for errors that list what is allowed.
    pub(crate) tool_choice: Option<Value>,
    pub(crate) parallel_tool_calls: Option<bool>,
    pub(crate) max_output_tokens: Option<i64>,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) text: Option<TextConfig>,
    pub(crate) reasoning: Option<ReasoningConfig>,
    pub(crate) stream: Option<bool>,
    /// Whether to keep the response for `GET` and `previous_response_id` (default true).
    pub(crate) store: Option<bool>,
    pub(crate) previous_response_id: Option<String>,
    /// Echoed back; otherwise ignored.
    pub(crate) metadata: Option<Map<String, Value>>,
    /// Echoed back; otherwise ignored.
    pub(crate) user: Option<String>,
    /// llama-server's: a stream reports the prompt's progress in `response.in_progress`
    /// events (`prompt_progress`).
    pub(crate) return_progress: Option<bool>,
    /// llama-server's: a stream's text deltas carry `timings`.
    pub(crate) timings_per_token: Option<bool>,
}

/// One tool of `tools`: flat, `{"type": "function", "name", "description", "parameters",
/// "strict"}` (not nested under `function` as in chat completions).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResponseTool {
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) parameters: Option<Value>,
    pub(crate) strict: Option<bool>,
}

/// `text`: `format` is read; `verbosity` is ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TextConfig {
    pub(crate) format: Option<Value>,
}

/// `reasoning`: `effort` goes to the template as `reasoning_effort`; `summary` is ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ReasoningConfig {
    pub(crate) effort: Option<String>,
}

/// One input item, any type; the fields a type does not use stay `None`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct InputItem {
    /// Absent on an easy message (`{"role", "content"}`).
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    /// `message`.
    pub(crate) role: Option<String>,
    pub(crate) content: Option<Value>,
    /// `function_call`.
    pub(crate) call_id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) arguments: Option<Value>,
    /// `function_call_output`.
    pub(crate) output: Option<Value>,
    /// `reasoning`: summary parts and (open models') reasoning text parts.
    pub(crate) summary: Option<Vec<TextPart>>,
}

/// A content part: `input_text`, `output_text`, `summary_text`, `reasoning_text`, `refusal`…
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TextPart {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) text: Option<String>,
    /// `refusal` parts carry their text here.
    pub(crate) refusal: Option<String>,
}
