//! Request bodies as clients send them (serde, lenient: unknown fields are ignored, `null`
//! is the same as absent). `validate` turns them into domain types.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChatCompletionRequest {
    pub(crate) model: Option<String>,
    pub(crate) messages: Option<Vec<WireMessage>>,
    pub(crate) tools: Option<Vec<WireTool>>,
    pub(crate) tool_choice: Option<Value>,
    pub(crate) parallel_tool_calls: Option<bool>,
    pub(crate) response_format: Option<Value>,
    #[serde(flatten)]
    pub(crate) sampling: WireSampling,
    pub(crate) max_completion_tokens: Option<i64>,
    pub(crate) logprobs: Option<bool>,
    pub(crate) top_logprobs: Option<i64>,
    pub(crate) stream: Option<bool>,
    pub(crate) stream_options: Option<StreamOptions>,
    pub(crate) reasoning_effort: Option<String>,
    pub(crate) chat_template_kwargs: Option<Map<String, Value>>,
    /// Whether the prompt opens the assistant's turn (default true; false for `/apply-template`
    /// of a whole conversation).
    pub(crate) add_generation_prompt: Option<bool>,
    /// Whether the answer continues the last message (vLLM's and transformers' name);
    /// unset: when the last message is the assistant's, as llama-server prefills.
    pub(crate) continue_final_message: Option<bool>,
}

/// The fields chat and text completions share.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireSampling {
    pub(crate) stop: Option<Stop>,
    pub(crate) max_tokens: Option<i64>,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) top_k: Option<i64>,
    pub(crate) min_p: Option<f64>,
    pub(crate) repetition_penalty: Option<f64>,
    pub(crate) frequency_penalty: Option<f64>,
    pub(crate) presence_penalty: Option<f64>,
    pub(crate) seed: Option<i64>,
    pub(crate) logit_bias: Option<BTreeMap<String, f64>>,
    pub(crate) n: Option<i64>,
    /// A GBNF grammar the output must match (llama.cpp server's extension).
    pub(crate) grammar: Option<String>,
    /// A JSON schema the output must match (llama.cpp server's extension).
    pub(crate) json_schema: Option<Value>,
    /// The most tokens to draft per step by prompt lookup (wick's extension; 0: off).
    pub(crate) spec_max: Option<i64>,
    /// llama-server's spelling of the same (a dotted top-level key).
    #[serde(rename = "speculative.n_max")]
    pub(crate) speculative_n_max: Option<i64>,
    /// LoRA adapter scales, llama-server's `[{"id": 0, "scale": 0.5}, …]` (adapters left out
    /// are off); absent: the server's defaults.
    pub(crate) lora: Option<Value>,
    /// llama-server's: a streamed answer reports the prompt's progress (`prompt_progress`)
    /// before its first token.
    pub(crate) return_progress: Option<bool>,
    /// llama-server's: streamed chunks carry `timings` as the answer goes.
    pub(crate) timings_per_token: Option<bool>,
    /// llama-server's: end-of-generation tokens are banned, so the answer runs to `max_tokens`.
    pub(crate) ignore_eos: Option<bool>,
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: Option<bool>,
}

/// One message; fields beyond these are passed to the chat template as they are.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireMessage {
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) content: Option<Content>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<WireToolCall>>,
    #[serde(flatten)]
    pub(crate) rest: Map<String, Value>,
}

/// Message content: text, or an array of content parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One content part: `{"type": "text", "text": "…"}`, `{"type": "image_url", "image_url":
/// {"url": "data:image/png;base64,…"}}` (or the URL alone), `{"type": "input_audio",
/// "input_audio": {"data": "<base64>", "format": "wav"}}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ContentPart {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) text: Option<String>,
    #[serde(default)]
    pub(crate) image_url: Option<Value>,
    #[serde(default)]
    pub(crate) input_audio: Option<Value>,
}

/// An assistant message's tool call.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    pub(crate) id: Option<String>,
    pub(crate) function: WireFunctionCall,
}

/// The function of a tool call; `arguments` is a JSON text (an object is accepted too).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireFunctionCall {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
}

/// `tools[]`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireTool {
    #[serde(rename = "type", default)]
    pub(crate) kind: Option<String>,
    pub(crate) function: WireFunction,
}

/// A tool's function definition.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireFunction {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) parameters: Option<Value>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CompletionRequest {
    pub(crate) model: Option<String>,
    pub(crate) prompt: Option<Prompt>,
    #[serde(flatten)]
    pub(crate) sampling: WireSampling,
    pub(crate) echo: Option<bool>,
    pub(crate) logprobs: Option<Value>,
    pub(crate) stream: Option<bool>,
    pub(crate) stream_options: Option<StreamOptions>,
}

/// A prompt or embedding input as sent: read by [`crate::prompts::items`].
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub(crate) struct Prompt(pub(crate) Value);

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct EmbeddingRequest {
    pub(crate) model: Option<String>,
    pub(crate) input: Option<Prompt>,
    pub(crate) encoding_format: Option<String>,
    pub(crate) dimensions: Option<i64>,
}

/// `POST /tokenize`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TokenizeRequest {
    pub(crate) model: Option<String>,
    pub(crate) content: Option<String>,
    pub(crate) add_special: Option<bool>,
    /// llama-server's `with_pieces`: each token as `{"id", "piece"}`.
    pub(crate) with_pieces: Option<bool>,
}

/// `POST /detokenize`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct DetokenizeRequest {
    pub(crate) model: Option<String>,
    pub(crate) tokens: Option<Vec<i64>>,
}
