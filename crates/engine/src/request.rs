//! What a caller asks of the engine and what it hands back.

use wick_backend::AdapterSet;
use wick_types::{FinishReason, SamplerOpts, TokenId, Usage};

use crate::{EngineError, ScoredToken};

/// One generation: prompt tokens in, text out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateRequest {
    /// The prompt, already tokenized (control text with special-token parsing on, content
    /// with it off).
    pub prompt: Vec<TokenId>,
    /// At most this many generated tokens; `None`: until the context window is full.
    pub max_tokens: Option<u32>,
    /// How tokens are chosen (greedy by default), including an optional grammar.
    pub sampler: SamplerOpts,
    /// Generation ends before the first of these strings; it is never emitted.
    pub stop: Vec<String>,
    /// Log-probabilities: `None` (the default) for none; `Some(k)` for each generated token's
    /// own and its position's `k` most likely alternatives (capped at 20), in
    /// [`GenEvent::TextWithLogprobs`] events instead of [`GenEvent::Text`].
    pub logprobs: Option<u8>,
    /// With [`GenerateRequest::logprobs`]: report the distribution each token was drawn from
    /// (after logit bias, penalties, grammar, top-k, top-p, min-p and temperature;
    /// llama-server's `post_sampling_probs`) instead of the model's raw one.
    pub logprobs_after_sampling: bool,
    /// Report the prompt's progress ([`GenEvent::Progress`]): once when the request starts
    /// (what the prompt cache held) and after each chunk of the prompt is computed.
    pub progress: bool,
    /// The most tokens to draft per step by prompt lookup (speculative decoding, greedy
    /// requests without log-probabilities only; the answer is the same either way); `None`:
    /// the engine's [`crate::EngineConfig::spec_max`], `Some(0)`: off.
    pub spec_max: Option<usize>,
    /// The LoRA adapters the request runs under (the empty set: the base model). Requests of
    /// different sets never share a step, and a prefix computed under one set is never
    /// reused under another.
    pub adapters: AdapterSet,
    /// The images (or sounds) whose positions the prompt holds, as the model's projector
    /// encoded them; the request keeps them alive while its prompt is computed.
    pub media: Vec<std::sync::Arc<wick_backend::EncodedMedia>>,
    /// A prompt length worth a checkpoint on a model with a recurrent state
    /// ([`wick_backend::ModelInfo::recurrent`]): the start of the last message's text
    /// ([`crate::RenderedPrompt::checkpoint`]). A prompt chunk ends there, so a later prompt
    /// that shares everything before it — another question after the same system prompt, an
    /// edited last message — starts from it instead of from nothing. Ignored elsewhere.
    pub checkpoint: Option<usize>,
}

/// How a generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// `Stop` (end-of-generation token or stop string) or `Length`.
    pub finish_reason: FinishReason,
    /// Token accounting; `cached_tokens` counts prompt tokens reused from another sequence.
    pub usage: Usage,
    /// The stop string that ended generation, if one did.
    pub stop: Option<String>,
}

/// How far a request's prompt is computed (llama-server's `prompt_progress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptProgress {
    /// The prompt's length in tokens.
    pub total: u32,
    /// How many of them came from the prompt cache, at most all but the last: the last
    /// prompt position is computed with the first token even when the cache held it (as
    /// llama-server counts; a request's usage counts a prompt held whole as all cached).
    pub cached: u32,
    /// How many are computed so far, the cached ones included (`total` once it is done).
    pub processed: u32,
}

/// One event of a generation's stream.
#[derive(Debug)]
pub enum GenEvent {
    /// New text: non-empty, never a split UTF-8 character, never part of a stop string.
    Text(String),
    /// New text (possibly empty) with the tokens it completes, in order, for a request with
    /// [`GenerateRequest::logprobs`]. A token is reported with the event whose text holds its
    /// last byte; the end-of-generation token and tokens swallowed whole by a stop string are
    /// never reported. Either `text` or `tokens` is non-empty.
    TextWithLogprobs {
        /// New text, as in [`GenEvent::Text`].
        text: String,
        /// The generated tokens this text completes.
        tokens: Vec<ScoredToken>,
    },
    /// The prompt's progress, for a request with [`GenerateRequest::progress`]: first when it
    /// starts (`processed == cached`), then after each computed chunk, the last one
    /// (`processed == total`) before any text.
    Progress(PromptProgress),
    /// The end; nothing follows.
    Done(Finished),
    /// The generation failed; nothing follows.
    Error(EngineError),
}
