//! Per-request settings that override the builder's.

use wick_types::{SamplerOpts, TokenId};

/// Settings of one request; unset fields keep the [`crate::LlmBuilder`]'s values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens to generate; `None`: the builder's `max_new_tokens`.
    pub max_tokens: Option<u32>,
    /// The whole sampler (temperature included); `None`: the builder's.
    pub sampling: Option<SamplerOpts>,
    /// Stop strings added to the builder's (and the template's, for chats).
    pub stop: Vec<String>,
    /// Whether and which tool the model must call (chats with tools only).
    pub tool_choice: ToolChoice,
    /// Log-probabilities: `None` (the default) for none; `Some(k)` for each generated token's
    /// log-probability and its position's `k` most likely alternatives (capped at 20), in the
    /// responses' `logprobs`.
    pub logprobs: Option<u8>,
    /// With [`GenerateOptions::logprobs`]: report the distribution each token was drawn from
    /// (after logit bias, penalties, grammar, top-k, top-p, min-p and temperature;
    /// llama-server's `post_sampling_probs`) instead of the model's raw one. Alternatives
    /// with no chance there are left out, so fewer than asked for may come.
    pub logprobs_after_sampling: bool,
    /// Never end at an end-of-generation token: they are banned (llama-server's
    /// `ignore_eos`), and the chat template's end-of-turn texts are not stops, so the answer
    /// runs to `max_tokens` or a stop string the request gives.
    pub ignore_eos: bool,
    /// Stream items that report the prompt's progress
    /// ([`crate::CompletionResponse::progress`]): one when the request starts (what the
    /// prompt cache held), then one after each computed chunk, before the first text.
    pub progress: bool,
    /// The most tokens to draft per step by prompt lookup (speculative decoding, for greedy
    /// answers without log-probabilities; the answer is the same either way); `None`: the
    /// model's [`crate::ModelKwargs::spec_max`], `Some(0)`: off.
    pub spec_max: Option<usize>,
    /// LoRA adapter scales, `(id, scale)` as [`crate::Llm::lora_adapters`] numbers them; an
    /// adapter not listed is off. `None`: the [`crate::Llm`]'s current default scales.
    pub lora: Option<Vec<(usize, f32)>>,
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// No tool call: the request's tools are not shown to the model.
    None,
    /// The model must call one of the tools (its output is constrained to a call).
    Required,
    /// The model must call this function.
    Function(String),
}

/// A completion prompt: text, or tokens as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text; with `formatted` it is sent as it is (special-token text becomes control tokens),
    /// otherwise it is formatted as one user message.
    Text {
        /// The prompt.
        text: String,
        /// Whether it already is a formatted prompt.
        formatted: bool,
    },
    /// Prompt tokens.
    Tokens(Vec<TokenId>),
    /// A formatted prompt holding images (or sounds), each where a `<__media__>` marker
    /// stands (llama-server's `multimodal_data`; the model needs a projector).
    Media {
        /// The prompt, sent as it is (special-token text becomes control tokens).
        text: String,
        /// One medium per marker, in order.
        media: Vec<wick_types::Media>,
    },
}
