use serde::{Deserialize, Serialize};

/// A constraint on what a sampler may produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Grammar {
    /// A GBNF grammar (llama.cpp's grammar format) whose start rule is `root`.
    Gbnf(String),
    /// A JSON schema, as JSON text, converted to a grammar by the backend.
    JsonSchema(String),
}

/// Sampling options for one sequence (seed 001's `sampler_opts`).
///
/// The defaults are greedy decoding: temperature 0, every filter off, no penalty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerOpts {
    /// Softmax temperature; `0` (or less) means greedy: always the most likely token.
    pub temperature: f32,
    /// Keep only the `k` most likely tokens; `0` disables.
    pub top_k: u32,
    /// Keep the smallest set of tokens whose probabilities add up to `p`; `1.0` disables.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; `0.0` disables.
    pub min_p: f32,
    /// Divide the logits of recently seen tokens by this; `1.0` disables.
    pub repetition_penalty: f32,
    /// Subtract `count × frequency_penalty` from a seen token's logit; `0.0` disables.
    pub frequency_penalty: f32,
    /// Subtract this from the logit of any token seen before; `0.0` disables.
    pub presence_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: u32,
    /// Seed of the random draw; the same seed and context give the same tokens.
    pub seed: u32,
    /// Added to the logits of specific tokens before sampling (`-inf` bans a token).
    pub logit_bias: Vec<(crate::TokenId, f32)>,
    /// Constrain output to a grammar.
    pub grammar: Option<Grammar>,
}

impl Default for SamplerOpts {
    fn default() -> Self {
        SamplerOpts {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
            logit_bias: Vec::new(),
            grammar: None,
        }
    }
}

impl SamplerOpts {
    /// Greedy decoding, no constraint.
    pub fn greedy() -> Self {
        SamplerOpts::default()
    }

    /// Whether sampling always picks the most likely (allowed) token.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Whether any repetition, frequency or presence penalty is active.
    pub fn has_penalties(&self) -> bool {
        (self.repetition_penalty - 1.0).abs() > f32::EPSILON
            || self.frequency_penalty != 0.0
            || self.presence_penalty != 0.0
    }
}
