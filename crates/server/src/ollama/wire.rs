//! Ollama request bodies as clients send them (serde, lenient: unknown fields and unknown
//! `options` are ignored, `null` is the same as absent). Fields wick has no use for are
//! accepted by being ignored: `truncate`, `insecure` (downloads are always verified). `convert` turns the chat and
//! generate requests into the chat pipeline's.

use serde::Deserialize;
use serde_json::Value;

use crate::wire::WireTool;

/// `POST /api/chat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChatRequest {
    pub(crate) model: Option<String>,
    pub(crate) messages: Option<Vec<Message>>,
    /// OpenAI's function tools, in the same shape.
    pub(crate) tools: Option<Vec<WireTool>>,
    /// `"json"`, or a JSON schema object.
    pub(crate) format: Option<Value>,
    pub(crate) options: Option<Options>,
    /// Ollama streams unless told not to.
    pub(crate) stream: Option<bool>,
    /// `true`/`false`, or an effort (`"low"`, `"medium"`, `"high"`).
    pub(crate) think: Option<Value>,
    /// How long the model stays loaded once idle: seconds or a duration (`"5m"`); negative
    /// is forever, `0` unloads it when the answer ends.
    pub(crate) keep_alive: Option<Value>,
}

/// One message of `messages`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Message {
    pub(crate) role: String,
    pub(crate) content: Option<String>,
    /// Base64 images, for a model with a projector (`--mmproj`).
    pub(crate) images: Option<Vec<Value>>,
    /// An assistant turn's reasoning, in history.
    pub(crate) thinking: Option<String>,
    pub(crate) tool_calls: Option<Vec<ToolCall>>,
    /// A `tool` message's function name.
    pub(crate) tool_name: Option<String>,
}

/// A tool call, as Ollama shapes it: arguments as an object.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ToolCall {
    pub(crate) function: FunctionCall,
}

/// The function of a [`ToolCall`].
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct FunctionCall {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
}

/// `options`: the sampling and length settings Ollama takes; others (`num_keep`, `mirostat`,
/// `num_thread`, `repeat_last_n`, …) are accepted and ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Options {
    pub(crate) num_ctx: Option<i64>,
    pub(crate) num_predict: Option<i64>,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_k: Option<i64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) min_p: Option<f64>,
    pub(crate) repeat_penalty: Option<f64>,
    pub(crate) presence_penalty: Option<f64>,
    pub(crate) frequency_penalty: Option<f64>,
    pub(crate) seed: Option<i64>,
    pub(crate) stop: Option<Vec<String>>,
}

/// `POST /api/generate`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct GenerateRequest {
    pub(crate) model: Option<String>,
    pub(crate) prompt: Option<String>,
    pub(crate) suffix: Option<String>,
    pub(crate) system: Option<String>,
    pub(crate) template: Option<String>,
    /// Earlier answers' tokens (a deprecated way to continue): refused unless empty.
    pub(crate) context: Option<Vec<i64>>,
    /// The prompt as it is, without the chat template.
    pub(crate) raw: Option<bool>,
    pub(crate) images: Option<Vec<Value>>,
    pub(crate) format: Option<Value>,
    pub(crate) options: Option<Options>,
    pub(crate) stream: Option<bool>,
    pub(crate) think: Option<Value>,
    /// As [`ChatRequest::keep_alive`].
    pub(crate) keep_alive: Option<Value>,
}

/// `POST /api/embed`'s `input`: one text or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Input {
    One(String),
    Many(Vec<String>),
}

/// `POST /api/embed`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct EmbedRequest {
    pub(crate) model: Option<String>,
    pub(crate) input: Option<Input>,
    pub(crate) dimensions: Option<i64>,
    /// As [`ChatRequest::keep_alive`].
    pub(crate) keep_alive: Option<Value>,
}

/// `POST /api/embeddings` (the older embedding route).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct EmbeddingsRequest {
    pub(crate) model: Option<String>,
    pub(crate) prompt: Option<String>,
    /// As [`ChatRequest::keep_alive`].
    pub(crate) keep_alive: Option<Value>,
}

/// `POST /api/show`, `DELETE /api/delete` and `POST /api/pull`: a model by `model` (or the
/// older `name`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ModelRequest {
    pub(crate) model: Option<String>,
    pub(crate) name: Option<String>,
    /// `/api/show`: the long metadata arrays too.
    pub(crate) verbose: Option<bool>,
    /// `/api/pull`: stream progress lines (the default) or answer once.
    pub(crate) stream: Option<bool>,
}

impl ModelRequest {
    /// The model named, by `model` or `name`.
    pub(crate) fn named(&self) -> Option<&str> {
        self.model
            .as_deref()
            .or(self.name.as_deref())
            .filter(|m| !m.is_empty())
    }
}
