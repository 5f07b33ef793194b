//! Samplers: `SamplerOpts` turned into llama.cpp sampler chains.

use std::collections::HashMap;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use wick_backend::{BackendError, SamplerId};
use wick_types::{Grammar, SamplerOpts};

use crate::vocab::to_llama;

struct Entry {
    opts: SamplerOpts,
    chain: LlamaSampler,
}

/// Every sampler of a backend, by id.
pub(crate) struct Samplers {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    greedy: LlamaSampler,
}

impl std::fmt::Debug for Samplers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Samplers")
            .field("ids", &self.entries.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Samplers {
    pub(crate) fn new() -> Self {
        Samplers {
            entries: HashMap::new(),
            next_id: 1,
            greedy: LlamaSampler::greedy(),
        }
    }

    pub(crate) fn create(
        &mut self,
        model: &LlamaModel,
        opts: &SamplerOpts,
    ) -> Result<SamplerId, BackendError> {
        let chain = build(model, opts)?;
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(
            id,
            Entry {
                opts: opts.clone(),
                chain,
            },
        );
        Ok(SamplerId(id))
    }

    pub(crate) fn configure(
        &mut self,
        model: &LlamaModel,
        id: SamplerId,
        opts: &SamplerOpts,
    ) -> Result<(), BackendError> {
        let entry = self.entry(id)?;
        entry.chain = build(model, opts)?;
        entry.opts = opts.clone();
        Ok(())
    }

    pub(crate) fn set_grammar(
        &mut self,
        model: &LlamaModel,
        id: SamplerId,
        grammar: Option<&Grammar>,
    ) -> Result<(), BackendError> {
        let mut opts = self.entry(id)?.opts.clone();
        opts.grammar = grammar.cloned();
        self.configure(model, id, &opts)
    }

    pub(crate) fn clear(&mut self, id: SamplerId) -> Result<(), BackendError> {
        self.entry(id)?.chain.reset();
        Ok(())
    }

    pub(crate) fn free(&mut self, id: SamplerId) -> Result<(), BackendError> {
        self.entries
            .remove(&id.0)
            .map(drop)
            .ok_or(BackendError::UnknownSampler(id.0))
    }

    /// Checks that `id` (if any) exists.
    pub(crate) fn check(&self, id: Option<SamplerId>) -> Result<(), BackendError> {
        match id {
            Some(id) if !self.entries.contains_key(&id.0) => {
                Err(BackendError::UnknownSampler(id.0))
            }
            _ => Ok(()),
        }
    }

    /// The chain for `id`, or the greedy sampler for `None`.
    pub(crate) fn chain(
        &mut self,
        id: Option<SamplerId>,
    ) -> Result<&mut LlamaSampler, BackendError> {
        match id {
            None => Ok(&mut self.greedy),
            Some(id) => Ok(&mut self.entry(id)?.chain),
        }
    }

    fn entry(&mut self, id: SamplerId) -> Result<&mut Entry, BackendError> {
        self.entries
            .get_mut(&id.0)
            .ok_or(BackendError::UnknownSampler(id.0))
    }
}

/// Turns a grammar into GBNF text (JSON schemas through llama.cpp's converter).
fn gbnf(grammar: &Grammar) -> Result<String, BackendError> {
    match grammar {
        Grammar::Gbnf(text) => Ok(text.clone()),
        Grammar::JsonSchema(schema) => {
            llama_cpp_2::json_schema_to_grammar(schema).map_err(|e| BackendError::Grammar {
                reason: format!("cannot convert the JSON schema to a grammar: {e}"),
            })
        }
        _ => Err(BackendError::Grammar {
            reason: "unknown grammar kind".into(),
        }),
    }
}

fn check_opts(opts: &SamplerOpts) -> Result<(), BackendError> {
    let bad =
        |field: &'static str, value: f32, allowed: &'static str| BackendError::SamplerOption {
            field,
            value: value.to_string(),
            allowed,
        };
    if !opts.temperature.is_finite() {
        return Err(bad("temperature", opts.temperature, "a finite number"));
    }
    if !(opts.top_p > 0.0 && opts.top_p <= 1.0) {
        return Err(bad("top_p", opts.top_p, "greater than 0 and at most 1"));
    }
    if !(0.0..=1.0).contains(&opts.min_p) {
        return Err(bad("min_p", opts.min_p, "0 to 1"));
    }
    if !(opts.repetition_penalty > 0.0 && opts.repetition_penalty.is_finite()) {
        return Err(bad(
            "repetition_penalty",
            opts.repetition_penalty,
            "a finite number above 0",
        ));
    }
    if !opts.frequency_penalty.is_finite() || !opts.presence_penalty.is_finite() {
        return Err(bad(
            "frequency_penalty/presence_penalty",
            opts.frequency_penalty + opts.presence_penalty,
            "finite numbers",
        ));
    }
    Ok(())
}

/// The chain: logit bias, grammar, penalties, then greedy or the top-k/top-p/min-p/temperature
/// filters and a seeded draw (llama.cpp's own order).
fn build(model: &LlamaModel, opts: &SamplerOpts) -> Result<LlamaSampler, BackendError> {
    check_opts(opts)?;
    let n_vocab = model.n_vocab();
    let mut chain = Vec::new();
    if !opts.logit_bias.is_empty() {
        let biases: Vec<LlamaLogitBias> = opts
            .logit_bias
            .iter()
            .map(|&(t, b)| {
                crate::vocab::check_range(&[t], u32::try_from(n_vocab).unwrap_or(0))
                    .map(|()| LlamaLogitBias::new(to_llama(t), b))
            })
            .collect::<Result<_, _>>()?;
        chain.push(LlamaSampler::logit_bias(n_vocab, &biases));
    }
    if let Some(grammar) = &opts.grammar {
        let text = gbnf(grammar)?;
        let sampler =
            LlamaSampler::grammar(model, &text, "root").map_err(|e| BackendError::Grammar {
                reason: format!("llama.cpp rejected the grammar ({e})"),
            })?;
        chain.push(sampler);
    }
    if opts.has_penalties() {
        chain.push(LlamaSampler::penalties(
            n_vocab,
            i32::try_from(opts.penalty_last_n).unwrap_or(i32::MAX),
            opts.repetition_penalty,
            opts.frequency_penalty,
            opts.presence_penalty,
        ));
    }
    if opts.is_greedy() {
        chain.push(LlamaSampler::greedy());
    } else {
        if opts.top_k > 0 {
            chain.push(LlamaSampler::top_k(
                i32::try_from(opts.top_k).unwrap_or(i32::MAX),
            ));
        }
        if opts.top_p < 1.0 {
            chain.push(LlamaSampler::top_p(opts.top_p, 1));
        }
        if opts.min_p > 0.0 {
            chain.push(LlamaSampler::min_p(opts.min_p, 1));
        }
        chain.push(LlamaSampler::temp(opts.temperature));
        chain.push(LlamaSampler::dist(opts.seed));
    }
    Ok(LlamaSampler::chain_simple(chain))
}
