//! Samplers: `SamplerOpts` turned into llama.cpp sampler chains, and a grammar checked beside
//! the chain rather than inside it.

use std::collections::HashMap;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;
use wick_backend::{BackendError, SamplerId};
use wick_types::{Grammar, SamplerOpts, TokenId};

use crate::vocab::{from_llama, to_llama};

struct Entry {
    opts: SamplerOpts,
    /// Logit bias, penalties and the pick: everything but the grammar.
    chain: LlamaSampler,
    /// Kept out of the chain: masking the whole vocabulary at every step costs about as much as
    /// a forward pass of a small model, so [`Samplers::sample`] checks only the chain's pick.
    grammar: Option<LlamaSampler>,
}

/// Every sampler of a backend, by id.
pub(crate) struct Samplers {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// The candidates of a constrained pick, one per vocabulary token; kept between steps so
    /// they are not allocated again for each token.
    candidates: Vec<LlamaTokenData>,
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
            candidates: Vec::new(),
        }
    }

    pub(crate) fn create(
        &mut self,
        model: &LlamaModel,
        opts: &SamplerOpts,
    ) -> Result<SamplerId, BackendError> {
        let (chain, grammar) = build(model, opts)?;
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(
            id,
            Entry {
                opts: opts.clone(),
                chain,
                grammar,
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
        (entry.chain, entry.grammar) = build(model, opts)?;
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
        let entry = self.entry(id)?;
        entry.chain.reset();
        if let Some(grammar) = &mut entry.grammar {
            grammar.reset();
        }
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

    /// Picks the next token from output `idx` of the last pass with sampler `id` (greedy for
    /// `None`), and accepts it into the sampler's state (penalty window, grammar).
    ///
    /// A grammar is checked only for the token the chain picks (llama.cpp's
    /// `common_sampler_sample`): only when it rejects that token is it replaced by the pick
    /// under the grammar's mask (see `pick_constrained`). Greedy picks exactly what a full
    /// mask would (the argmax of all logits is the argmax of the allowed ones when allowed). A
    /// draw at a plain temperature stays exactly a draw from the masked distribution: an
    /// allowed token `x` comes out with `p(x) + (1 - p(A)) p(x) / p(A) = p(x) / p(A)`, `A` the
    /// allowed set. With top-k, top-p or min-p the first draw's cut is made before the mask,
    /// which leans slightly towards the tokens the model ranks highest (as llama.cpp does).
    ///
    /// # Errors
    ///
    /// [`BackendError::UnknownSampler`]; [`BackendError::Grammar`] when no token can continue
    /// the grammar.
    pub(crate) fn sample(
        &mut self,
        id: Option<SamplerId>,
        ctx: &LlamaContext<'_>,
        idx: i32,
    ) -> Result<LlamaToken, BackendError> {
        let Some(id) = id else {
            return Ok(argmax(ctx.get_logits_ith(idx)));
        };
        let entry = self
            .entries
            .get_mut(&id.0)
            .ok_or(BackendError::UnknownSampler(id.0))?;
        match &mut entry.grammar {
            None => Ok(entry.chain.sample(ctx, idx)),
            Some(grammar) => pick_constrained(
                &mut entry.chain,
                grammar,
                entry.opts.is_greedy(),
                ctx.get_logits_ith(idx),
                &mut self.candidates,
            ),
        }
    }

    /// [`Samplers::sample`] with sampler `id`, and the candidates the pick was drawn from with
    /// the logits it was drawn by (every token with a finite logit after bias, penalties and
    /// grammar for a greedy chain; what top-k, top-p and min-p keep, scaled by the
    /// temperature, for a draw): their softmax is the distribution llama-server reports as
    /// `post_sampling_probs`. The pick is the one [`Samplers::sample`] makes (the chain runs
    /// as `llama_sampler_sample` runs it: the same draw from the same random stream), but a
    /// grammar masks the whole vocabulary first, so the distribution is the constrained one.
    /// (Greedy decoding without a sampler draws from the raw distribution.)
    ///
    /// # Errors
    ///
    /// As [`Samplers::sample`].
    pub(crate) fn sample_distribution(
        &mut self,
        id: SamplerId,
        ctx: &LlamaContext<'_>,
        idx: i32,
    ) -> Result<(LlamaToken, Vec<(TokenId, f32)>), BackendError> {
        let logits = ctx.get_logits_ith(idx);
        let entry = self
            .entries
            .get_mut(&id.0)
            .ok_or(BackendError::UnknownSampler(id.0))?;
        let mut cur = candidates(logits, std::mem::take(&mut self.candidates));
        let token = match &mut entry.grammar {
            None => {
                cur.apply_sampler(&mut entry.chain);
                selected(&cur).map(|t| t.id())
            }
            Some(grammar) => masked_pick(&mut entry.chain, grammar, logits, &mut cur),
        };
        let distribution = cur
            .data
            .iter()
            .filter(|d| d.logit().is_finite())
            .map(|d| (from_llama(d.id()), d.logit()))
            .collect();
        self.candidates = cur.data;
        let token = token?;
        if let Some(grammar) = &mut entry.grammar {
            accept_constrained(grammar, token)?;
        }
        entry.chain.accept(token);
        Ok((token, distribution))
    }

    fn entry(&mut self, id: SamplerId) -> Result<&mut Entry, BackendError> {
        self.entries
            .get_mut(&id.0)
            .ok_or(BackendError::UnknownSampler(id.0))
    }
}

/// The token with the highest logit, the lowest id among equals: what llama.cpp's greedy
/// sampler picks, without the candidate array of the whole vocabulary it builds for each token
/// (about 590 KB for a 49k vocabulary, a few percent of a small model's decode step).
pub(crate) fn argmax(logits: &[f32]) -> LlamaToken {
    let mut best = 0;
    let mut best_logit = f32::NEG_INFINITY;
    for (i, &logit) in logits.iter().enumerate() {
        if logit > best_logit {
            best = i;
            best_logit = logit;
        }
    }
    LlamaToken::new(i32::try_from(best).expect("a vocabulary fits i32"))
}

/// How far down a greedy chain's ranking a rejected pick's replacement is looked for, token by
/// token, before the whole vocabulary is masked.
const GREEDY_WALK: usize = 64;

/// The chain's pick from `logits`, checked against `grammar` alone and, when it is rejected,
/// replaced by the pick from the logits the grammar masks; the token is accepted by both.
///
/// A greedy chain only shifts logits one token at a time (bias, penalties) and takes the
/// largest, so the full mask's pick is the first token the grammar allows in the chain's own
/// ranking: that ranking is walked first, and the vocabulary masked only when its head holds
/// no allowed token.
fn pick_constrained(
    chain: &mut LlamaSampler,
    grammar: &mut LlamaSampler,
    greedy: bool,
    logits: &[f32],
    buffer: &mut Vec<LlamaTokenData>,
) -> Result<LlamaToken, BackendError> {
    let mut cur = candidates(logits, std::mem::take(buffer));
    cur.apply_sampler(chain);
    let pick = selected(&cur)?.id();
    let token = if allows(grammar, pick) {
        Ok(pick)
    } else if let Some(best) = greedy
        .then(|| best_allowed(grammar, &cur.data, GREEDY_WALK))
        .flatten()
    {
        Ok(best)
    } else {
        masked_pick(chain, grammar, logits, &mut cur)
    };
    *buffer = cur.data;
    let token = token?;
    accept_constrained(grammar, token)?;
    chain.accept(token);
    Ok(token)
}

/// Advances `grammar` past `token`.
fn accept_constrained(grammar: &mut LlamaSampler, token: LlamaToken) -> Result<(), BackendError> {
    grammar
        .try_accept(token)
        .map_err(|e| BackendError::Grammar {
            reason: format!("llama.cpp could not advance the grammar ({e})"),
        })
}

/// The chain's pick from `logits` with the grammar applied first (the full mask), in `cur`.
fn masked_pick(
    chain: &mut LlamaSampler,
    grammar: &mut LlamaSampler,
    logits: &[f32],
    cur: &mut LlamaTokenDataArray,
) -> Result<LlamaToken, BackendError> {
    *cur = candidates(logits, std::mem::take(&mut cur.data));
    cur.apply_sampler(grammar);
    cur.apply_sampler(chain);
    let pick = selected(cur)?;
    // Every token masked (a grammar with no way on, or a bias of -inf on all it allows):
    // accepting the pick would abort inside llama.cpp for an end-of-generation token.
    if pick.logit() == f32::NEG_INFINITY {
        return Err(BackendError::Grammar {
            reason: "no token can continue the grammar".into(),
        });
    }
    Ok(pick.id())
}

/// The best of the `n` highest-ranked `scored` tokens (in token order, as a greedy chain left
/// them) that `grammar` allows; ties go to the lowest id, as llama.cpp's greedy sampler does.
/// `None` when none of them is allowed (or has a finite logit).
fn best_allowed(
    grammar: &mut LlamaSampler,
    scored: &[LlamaTokenData],
    n: usize,
) -> Option<LlamaToken> {
    let mut head: Vec<LlamaTokenData> = Vec::with_capacity(n + 1);
    for t in scored {
        if head.len() == n && head.last().is_some_and(|w| t.logit() <= w.logit()) {
            continue;
        }
        // After every token that ranks as high: an earlier (lower) id wins a tie.
        let at = head.partition_point(|h| h.logit() >= t.logit());
        head.insert(at, *t);
        head.truncate(n);
    }
    head.iter()
        .take_while(|t| t.logit() > f32::NEG_INFINITY)
        .map(LlamaTokenData::id)
        .find(|&id| allows(grammar, id))
}

/// One candidate per vocabulary token, in token order (as `llama_sampler_sample` builds them),
/// written into `buffer`.
fn candidates(logits: &[f32], mut buffer: Vec<LlamaTokenData>) -> LlamaTokenDataArray {
    buffer.clear();
    buffer.extend(
        (0..)
            .zip(logits)
            .map(|(id, &logit)| LlamaTokenData::new(LlamaToken(id), logit, 0.0)),
    );
    LlamaTokenDataArray::new(buffer, false)
}

fn selected(cur: &LlamaTokenDataArray) -> Result<LlamaTokenData, BackendError> {
    cur.selected
        .and_then(|i| cur.data.get(i))
        .copied()
        .ok_or_else(|| BackendError::Decode {
            reason: "the sampler chain selected no token".into(),
        })
}

/// Whether `grammar` allows `token` next; end-of-generation tokens only where it is complete.
fn allows(grammar: &mut LlamaSampler, token: LlamaToken) -> bool {
    let mut one = LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 1.0, 0.0)], false);
    one.apply_sampler(grammar);
    one.data
        .first()
        .is_some_and(|t| t.logit() > f32::NEG_INFINITY)
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
    opts.validate().map_err(|e| BackendError::SamplerOption {
        field: e.field,
        value: e.value,
        allowed: e.allowed,
    })?;
    Ok(())
}

/// The chain and, apart from it, the grammar sampler (see [`Stages`]).
fn build(
    model: &LlamaModel,
    opts: &SamplerOpts,
) -> Result<(LlamaSampler, Option<LlamaSampler>), BackendError> {
    let Stages {
        bias,
        grammar,
        rest,
    } = stages(model, opts)?;
    Ok((
        LlamaSampler::chain_simple(bias.into_iter().chain(rest)),
        grammar,
    ))
}

/// llama.cpp's order: logit bias, grammar, penalties, then greedy or the top-k/top-p/min-p/
/// temperature filters and a seeded draw. The grammar only sets logits to -inf, which the
/// bias and penalties keep, so running it before the whole chain masks as it would in place.
struct Stages {
    bias: Option<LlamaSampler>,
    grammar: Option<LlamaSampler>,
    rest: Vec<LlamaSampler>,
}

fn stages(model: &LlamaModel, opts: &SamplerOpts) -> Result<Stages, BackendError> {
    check_opts(opts)?;
    let n_vocab = model.n_vocab();
    let bias = if opts.logit_bias.is_empty() {
        None
    } else {
        let biases: Vec<LlamaLogitBias> = opts
            .logit_bias
            .iter()
            .map(|&(t, b)| {
                crate::vocab::check_range(&[t], u32::try_from(n_vocab).unwrap_or(0))
                    .map(|()| LlamaLogitBias::new(to_llama(t), b))
            })
            .collect::<Result<_, _>>()?;
        Some(LlamaSampler::logit_bias(n_vocab, &biases))
    };
    let grammar = match &opts.grammar {
        None => None,
        Some(grammar) => {
            let text = gbnf(grammar)?;
            // Checked here first: llama.cpp answers a bad grammar with a bare null and prints
            // the whole grammar to stderr.
            wick_backend::check_gbnf(&text).map_err(|e| BackendError::Grammar {
                reason: e.to_string(),
            })?;
            Some(LlamaSampler::grammar(model, &text, "root").map_err(|_| {
                BackendError::Grammar {
                    reason: "llama.cpp rejected the grammar (is every `<token>` in it exactly one \
                             token of this model's vocabulary?)"
                        .into(),
                }
            })?)
        }
    };
    let mut rest = Vec::new();
    if opts.has_penalties() {
        rest.push(LlamaSampler::penalties(
            n_vocab,
            i32::try_from(opts.penalty_last_n).unwrap_or(i32::MAX),
            opts.repetition_penalty,
            opts.frequency_penalty,
            opts.presence_penalty,
        ));
    }
    if opts.is_greedy() {
        rest.push(LlamaSampler::greedy());
    } else {
        if opts.top_k > 0 {
            rest.push(LlamaSampler::top_k(
                i32::try_from(opts.top_k).unwrap_or(i32::MAX),
            ));
        }
        if opts.top_p < 1.0 {
            rest.push(LlamaSampler::top_p(opts.top_p, 1));
        }
        if opts.min_p > 0.0 {
            rest.push(LlamaSampler::min_p(opts.min_p, 1));
        }
        rest.push(LlamaSampler::temp(opts.temperature));
        rest.push(LlamaSampler::dist(opts.seed));
    }
    Ok(Stages {
        bias,
        grammar,
        rest,
    })
}

#[cfg(test)]
mod tests;
