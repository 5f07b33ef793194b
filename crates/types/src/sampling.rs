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

/// The largest `top_k` accepted.
pub const MAX_TOP_K: u32 = 1_000_000;

/// Each option's allowed values, as [`SamplerOpts::validate`] checks them.
const LIMITS: &[(&str, &str)] = &[
    ("temperature", "0 to 2 (0: greedy)"),
    ("top_p", "greater than 0 and at most 1"),
    ("min_p", "0 to 1"),
    ("top_k", "0 to 1000000 (0: off)"),
    (
        "repetition_penalty",
        "greater than 0 and at most 10 (1: off)",
    ),
    ("frequency_penalty", "-2 to 2"),
    ("presence_penalty", "-2 to 2"),
    ("logit_bias", "a finite number, or -inf to ban a token"),
];

/// A sampling option out of its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSampler {
    /// The option.
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

impl std::fmt::Display for InvalidSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid {}: {} (allowed: {})",
            self.field, self.value, self.allowed
        )
    }
}

impl std::error::Error for InvalidSampler {}

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

    /// Checks every option against its allowed range — the one place that owns the limits
    /// (the server, the library's builder and every backend call this).
    ///
    /// # Errors
    ///
    /// [`InvalidSampler`] naming the first option out of range.
    pub fn validate(&self) -> Result<(), InvalidSampler> {
        let check = |ok: bool, field: &'static str, value: f32| {
            if ok {
                Ok(())
            } else {
                Err(InvalidSampler {
                    field,
                    value: value.to_string(),
                    allowed: LIMITS
                        .iter()
                        .find(|(f, _)| *f == field)
                        .map_or("", |(_, a)| *a),
                })
            }
        };
        let t = self.temperature;
        check(t.is_finite() && (0.0..=2.0).contains(&t), "temperature", t)?;
        check(self.top_p > 0.0 && self.top_p <= 1.0, "top_p", self.top_p)?;
        check((0.0..=1.0).contains(&self.min_p), "min_p", self.min_p)?;
        #[allow(clippy::cast_precision_loss)]
        check(self.top_k <= MAX_TOP_K, "top_k", self.top_k as f32)?;
        let r = self.repetition_penalty;
        check(r > 0.0 && r <= 10.0, "repetition_penalty", r)?;
        let f = self.frequency_penalty;
        check((-2.0..=2.0).contains(&f), "frequency_penalty", f)?;
        let p = self.presence_penalty;
        check((-2.0..=2.0).contains(&p), "presence_penalty", p)?;
        for &(_, bias) in &self.logit_bias {
            // -inf bans a token; +inf or NaN would turn a logit a grammar masked into NaN.
            check(
                bias == f32::NEG_INFINITY || bias.is_finite(),
                "logit_bias",
                bias,
            )?;
        }
        Ok(())
    }

    /// Whether any repetition, frequency or presence penalty is active.
    pub fn has_penalties(&self) -> bool {
        (self.repetition_penalty - 1.0).abs() > f32::EPSILON
            || self.frequency_penalty != 0.0
            || self.presence_penalty != 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_validate_owns_every_limit() {
        assert!(SamplerOpts::greedy().validate().is_ok());
        let ok = SamplerOpts {
            temperature: 2.0,
            top_p: 0.01,
            min_p: 1.0,
            top_k: MAX_TOP_K,
            repetition_penalty: 10.0,
            frequency_penalty: -2.0,
            presence_penalty: 2.0,
            logit_bias: vec![
                (crate::TokenId(1), f32::NEG_INFINITY),
                (crate::TokenId(2), 1e6),
            ],
            ..SamplerOpts::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        let cases: Vec<(SamplerOpts, &str)> = vec![
            (
                SamplerOpts {
                    temperature: 2.5,
                    ..ok.clone()
                },
                "temperature",
            ),
            (
                SamplerOpts {
                    temperature: f32::NAN,
                    ..ok.clone()
                },
                "temperature",
            ),
            (
                SamplerOpts {
                    top_p: 0.0,
                    ..ok.clone()
                },
                "top_p",
            ),
            (
                SamplerOpts {
                    min_p: -0.1,
                    ..ok.clone()
                },
                "min_p",
            ),
            (
                SamplerOpts {
                    top_k: MAX_TOP_K + 1,
                    ..ok.clone()
                },
                "top_k",
            ),
            (
                SamplerOpts {
                    repetition_penalty: 0.0,
                    ..ok.clone()
                },
                "repetition_penalty",
            ),
            (
                SamplerOpts {
                    frequency_penalty: 2.5,
                    ..ok.clone()
                },
                "frequency_penalty",
            ),
            (
                SamplerOpts {
                    presence_penalty: f32::INFINITY,
                    ..ok.clone()
                },
                "presence_penalty",
            ),
            (
                SamplerOpts {
                    logit_bias: vec![(crate::TokenId(1), f32::INFINITY)],
                    ..ok.clone()
                },
                "logit_bias",
            ),
        ];
        for (opts, field) in cases {
            let e = opts.validate().expect_err(field);
            assert_eq!(e.field, field);
            assert!(!e.allowed.is_empty(), "{e}");
        }
    }
}
