//! The stub's samplers: logit bias, llama.cpp-style penalties, an optional literal grammar, then
//! greedy or a seeded draw through temperature, top-k, top-p and min-p.

use std::collections::HashMap;

use wick_types::{SamplerOpts, TokenId};

use super::grammar::LiteralGrammar;
use super::model::{argmax, splitmix64, unit};
use super::vocab::Vocab;
use crate::{BackendError, Result};

/// The tokens a pick was drawn from, with the logits it was drawn by.
pub(super) type Candidates = Vec<(TokenId, f64)>;

/// Keeps the random draws of samplers apart from every other hash stream.
const RNG_SALT: u64 = 0x7361_6D70_6C65_0006;

/// One sampler: its options, its grammar's progress and its random stream.
#[derive(Debug, Clone)]
pub(super) struct Sampler {
    opts: SamplerOpts,
    grammar: Option<LiteralGrammar>,
    /// The random stream's key, from the seed.
    key: u64,
    /// Draws made since the sampler was created or cleared.
    draws: u64,
}

impl Sampler {
    /// A sampler with `opts` (including `opts.grammar`).
    ///
    /// # Errors
    ///
    /// [`BackendError::SamplerOption`] naming a non-finite or out-of-range option,
    /// [`BackendError::TokenOutOfRange`] for a biased token outside the vocabulary, and
    /// [`BackendError::Grammar`] for a grammar the stub cannot parse.
    pub(super) fn new(vocab: &Vocab, opts: &SamplerOpts) -> Result<Self> {
        validate(vocab, opts)?;
        let grammar = opts
            .grammar
            .as_ref()
            .map(LiteralGrammar::parse)
            .transpose()?;
        Ok(Sampler {
            opts: SamplerOpts {
                grammar: None,
                ..opts.clone()
            },
            grammar,
            key: splitmix64(u64::from(opts.seed) ^ RNG_SALT),
            draws: 0,
        })
    }

    /// Resets the random stream to the seed and the grammar to its start.
    pub(super) fn clear(&mut self) {
        self.draws = 0;
        if let Some(g) = &mut self.grammar {
            g.reset();
        }
    }

    /// Replaces (or removes) the grammar; the new one starts from scratch.
    pub(super) fn set_grammar(&mut self, grammar: Option<LiteralGrammar>) {
        self.grammar = grammar;
    }

    /// Picks the next token from the model's `logits` after `history`, and records it in the
    /// grammar. With `distribution`, also the candidates it was drawn from with the logits it
    /// was drawn by (their softmax is the draw's distribution; see
    /// [`crate::Logprobs::from_candidates`]).
    ///
    /// # Errors
    ///
    /// [`BackendError::Grammar`] when the grammar and logit biases leave no token, and
    /// [`BackendError::Decode`] when the logit biases alone ban every token.
    pub(super) fn sample(
        &mut self,
        vocab: &Vocab,
        mut logits: Vec<f64>,
        history: &[TokenId],
        distribution: bool,
    ) -> Result<(TokenId, Option<Candidates>)> {
        for &(token, bias) in &self.opts.logit_bias {
            if let Some(l) = logits.get_mut(token.0 as usize) {
                *l += f64::from(bias);
            }
        }
        self.penalize(&mut logits, history);
        if let Some(g) = &self.grammar {
            g.mask(vocab, &mut logits);
        }
        let (picked, candidates) = if self.opts.is_greedy() {
            let candidates = distribution.then(|| {
                (0u32..)
                    .zip(&logits)
                    .filter(|&(_, &l)| l > f64::NEG_INFINITY)
                    .map(|(id, &l)| (TokenId(id), l))
                    .collect()
            });
            (argmax(&logits), candidates)
        } else {
            let kept = self.kept(&logits);
            let candidates = distribution.then(|| {
                kept.iter()
                    .map(|&(id, logit, _)| (TokenId(id), logit))
                    .collect()
            });
            (self.draw(&kept), candidates)
        };
        let token = picked.ok_or_else(|| match self.grammar {
            Some(_) => BackendError::Grammar {
                reason: "no token satisfies the grammar: logit_bias bans every allowed one"
                    .to_owned(),
            },
            None => BackendError::Decode {
                reason: "logit_bias bans every token of the vocabulary".to_owned(),
            },
        })?;
        if let Some(g) = &mut self.grammar {
            g.accept(vocab, token);
        }
        Ok((token, candidates))
    }

    /// Applies the repetition, frequency and presence penalties over the last
    /// `penalty_last_n` tokens of `history`, as llama.cpp does: a positive logit is divided by
    /// the repetition penalty and a negative one multiplied by it.
    fn penalize(&self, logits: &mut [f64], history: &[TokenId]) {
        let n = self.opts.penalty_last_n as usize;
        if n == 0 || !self.opts.has_penalties() {
            return;
        }
        let mut counts: HashMap<TokenId, u32> = HashMap::new();
        for &t in &history[history.len().saturating_sub(n)..] {
            *counts.entry(t).or_default() += 1;
        }
        let repeat = f64::from(self.opts.repetition_penalty);
        let frequency = f64::from(self.opts.frequency_penalty);
        let presence = f64::from(self.opts.presence_penalty);
        for (token, count) in counts {
            let Some(l) = logits.get_mut(token.0 as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= repeat;
            } else {
                *l *= repeat;
            }
            *l -= f64::from(count) * frequency + presence;
        }
    }

    /// The tokens a seeded draw chooses among, most likely first: temperature, then top-k,
    /// top-p and min-p (each keeping at least one token). Each comes with its logit scaled by
    /// the temperature and its probability before top-p and min-p cut (the draw renormalises
    /// over what is kept). Empty when every logit is `-inf`.
    fn kept(&self, logits: &[f64]) -> Vec<(u32, f64, f64)> {
        let mut cands: Vec<(u32, f64)> = (0u32..)
            .zip(logits.iter().copied())
            .filter(|&(_, l)| l > f64::NEG_INFINITY)
            .collect();
        cands.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let Some(&(_, top)) = cands.first() else {
            return Vec::new();
        };
        if self.opts.top_k > 0 {
            cands.truncate(self.opts.top_k as usize);
        }
        let temperature = f64::from(self.opts.temperature);
        let mut kept: Vec<(u32, f64, f64)> = cands
            .iter()
            .map(|&(id, l)| {
                let scaled = (l - top) / temperature;
                (id, scaled, scaled.exp())
            })
            .collect();
        let sum: f64 = kept.iter().map(|k| k.2).sum();
        for k in &mut kept {
            k.2 /= sum;
        }

        let mut keep = kept.len();
        let top_p = f64::from(self.opts.top_p);
        if top_p < 1.0 {
            let mut cumulative = 0.0;
            keep = kept
                .iter()
                .position(|k| {
                    cumulative += k.2;
                    cumulative >= top_p
                })
                .map_or(keep, |i| i + 1);
        }
        let min_p = f64::from(self.opts.min_p);
        if min_p > 0.0 {
            let threshold = min_p * kept[0].2;
            keep = kept[..keep]
                .iter()
                .take_while(|k| k.2 >= threshold)
                .count()
                .max(1);
        }
        kept.truncate(keep);
        kept
    }

    /// One step of the sampler's random stream over the `kept` tokens. `None` when there are
    /// none.
    fn draw(&mut self, kept: &[(u32, f64, f64)]) -> Option<TokenId> {
        let &(last, _, _) = kept.last()?;
        let mut r = unit(self.next_random()) * kept.iter().map(|k| k.2).sum::<f64>();
        for &(id, _, p) in kept {
            if r < p {
                return Some(TokenId(id));
            }
            r -= p;
        }
        Some(TokenId(last))
    }

    /// The next number of the random stream.
    fn next_random(&mut self) -> u64 {
        self.draws += 1;
        splitmix64(self.key ^ splitmix64(self.draws))
    }
}

/// Checks every option: floats must be finite (a logit bias may be `-inf`, which bans a token),
/// the repetition penalty positive, and biased tokens in the vocabulary.
fn validate(vocab: &Vocab, opts: &SamplerOpts) -> Result<()> {
    opts.validate().map_err(|e| BackendError::SamplerOption {
        field: e.field,
        value: e.value,
        allowed: e.allowed,
    })?;
    for &(token, _) in &opts.logit_bias {
        vocab.check(&[token])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(vocab: &Vocab) -> Vec<f64> {
        vec![0.0; vocab.n_vocab() as usize]
    }

    fn opts() -> SamplerOpts {
        SamplerOpts::greedy()
    }

    #[test]
    fn greedy_takes_the_argmax_after_bias() {
        let vocab = Vocab::new();
        let mut logits = flat(&vocab);
        logits[50] = 3.0;
        logits[60] = 2.0;
        let mut s = Sampler::new(&vocab, &opts()).unwrap();
        assert_eq!(
            s.sample(&vocab, logits.clone(), &[], false).unwrap().0,
            TokenId(50)
        );
        let biased = SamplerOpts {
            logit_bias: vec![(TokenId(50), f32::NEG_INFINITY), (TokenId(70), 2.5)],
            ..opts()
        };
        let mut s = Sampler::new(&vocab, &biased).unwrap();
        assert_eq!(s.sample(&vocab, logits, &[], false).unwrap().0, TokenId(70));
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
        let vocab = Vocab::new();
        let s = Sampler::new(
            &vocab,
            &SamplerOpts {
                repetition_penalty: 2.0,
                frequency_penalty: 0.5,
                presence_penalty: 0.25,
                penalty_last_n: 3,
                ..opts()
            },
        )
        .unwrap();
        let mut logits = flat(&vocab);
        logits[10] = 4.0;
        logits[11] = -4.0;
        logits[12] = 4.0;
        let history = [TokenId(12), TokenId(10), TokenId(11), TokenId(10)];
        s.penalize(&mut logits, &history);
        assert!((logits[10] - (2.0 - 2.0 * 0.5 - 0.25)).abs() < 1e-12);
        assert!((logits[11] - (-8.0 - 0.5 - 0.25)).abs() < 1e-12);
        assert!(
            (logits[12] - 4.0).abs() < 1e-12,
            "token 12 is outside the window"
        );
        assert!(logits[13].abs() < 1e-12);
    }

    #[test]
    fn seeded_draws_repeat_after_clear_and_differ_across_seeds() {
        let vocab = Vocab::new();
        let logits = flat(&vocab);
        let draw_many = |s: &mut Sampler| -> Vec<TokenId> {
            (0..32)
                .map(|_| s.sample(&vocab, logits.clone(), &[], false).unwrap().0)
                .collect()
        };
        let hot = |seed| SamplerOpts {
            temperature: 1.0,
            seed,
            ..opts()
        };
        let mut a = Sampler::new(&vocab, &hot(7)).unwrap();
        let first = draw_many(&mut a);
        a.clear();
        assert_eq!(draw_many(&mut a), first);
        let mut b = Sampler::new(&vocab, &hot(7)).unwrap();
        assert_eq!(draw_many(&mut b), first);
        let mut c = Sampler::new(&vocab, &hot(8)).unwrap();
        assert_ne!(draw_many(&mut c), first);
        assert!(first.iter().collect::<std::collections::HashSet<_>>().len() > 10);
    }

    #[test]
    fn top_k_top_p_and_min_p_narrow_the_draw() {
        let vocab = Vocab::new();
        let mut logits = flat(&vocab);
        logits[20] = 10.0;
        logits[21] = 9.5;
        logits[22] = 9.0;
        let only = |o: SamplerOpts, allowed: &[u32]| {
            let mut s = Sampler::new(&vocab, &o).unwrap();
            for _ in 0..64 {
                let t = s.sample(&vocab, logits.clone(), &[], false).unwrap().0;
                assert!(allowed.contains(&t.0), "{t:?} with {o:?}");
            }
        };
        let hot = SamplerOpts {
            temperature: 1.0,
            ..opts()
        };
        only(
            SamplerOpts {
                top_k: 2,
                ..hot.clone()
            },
            &[20, 21],
        );
        only(
            SamplerOpts {
                top_p: 0.01,
                ..hot.clone()
            },
            &[20],
        );
        only(
            SamplerOpts {
                min_p: 0.3,
                ..hot.clone()
            },
            &[20, 21, 22],
        );
        only(
            SamplerOpts {
                min_p: 0.5,
                ..hot.clone()
            },
            &[20, 21],
        );
        only(SamplerOpts { min_p: 1.0, ..hot }, &[20]);
    }

    #[test]
    fn grammar_progress_is_tracked_and_cleared() {
        let vocab = Vocab::new();
        let o = SamplerOpts {
            grammar: Some(wick_types::Grammar::Gbnf(r#"root ::= "ab""#.to_owned())),
            ..opts()
        };
        let mut s = Sampler::new(&vocab, &o).unwrap();
        let run = |s: &mut Sampler| -> Vec<TokenId> {
            (0..3)
                .map(|_| s.sample(&vocab, flat(&vocab), &[], false).unwrap().0)
                .collect()
        };
        let a = TokenId(7 + u32::from(b'a'));
        let b = TokenId(7 + u32::from(b'b'));
        assert_eq!(run(&mut s), [a, b, TokenId(0)]);
        s.clear();
        assert_eq!(run(&mut s), [a, b, TokenId(0)]);
        s.set_grammar(None);
        let free = s.sample(&vocab, flat(&vocab), &[], false).unwrap().0;
        assert_eq!(free, TokenId(0), "flat logits: lowest id wins");
    }

    #[test]
    fn banning_every_allowed_token_is_an_error() {
        let vocab = Vocab::new();
        let o = SamplerOpts {
            grammar: Some(wick_types::Grammar::Gbnf(r#"root ::= "a""#.to_owned())),
            logit_bias: vec![(TokenId(7 + u32::from(b'a')), f32::NEG_INFINITY)],
            ..opts()
        };
        let mut s = Sampler::new(&vocab, &o).unwrap();
        let err = s.sample(&vocab, flat(&vocab), &[], false).unwrap_err();
        assert!(matches!(err, BackendError::Grammar { .. }), "{err:?}");

        let mut s = Sampler::new(&vocab, &opts()).unwrap();
        let banned = vec![f64::NEG_INFINITY; vocab.n_vocab() as usize];
        assert!(matches!(
            s.sample(&vocab, banned, &[], false),
            Err(BackendError::Decode { .. })
        ));
    }

    #[test]
    fn invalid_options_are_rejected() {
        let vocab = Vocab::new();
        let bad = [
            SamplerOpts {
                temperature: f32::NAN,
                ..opts()
            },
            SamplerOpts {
                top_p: f32::INFINITY,
                ..opts()
            },
            SamplerOpts {
                min_p: f32::NAN,
                ..opts()
            },
            SamplerOpts {
                repetition_penalty: 0.0,
                ..opts()
            },
            SamplerOpts {
                frequency_penalty: f32::NAN,
                ..opts()
            },
            SamplerOpts {
                presence_penalty: f32::NEG_INFINITY,
                ..opts()
            },
            SamplerOpts {
                logit_bias: vec![(TokenId(5), f32::INFINITY)],
                ..opts()
            },
            SamplerOpts {
                logit_bias: vec![(TokenId(5), f32::NAN)],
                ..opts()
            },
        ];
        for o in bad {
            assert!(
                matches!(
                    Sampler::new(&vocab, &o),
                    Err(BackendError::SamplerOption { .. })
                ),
                "{o:?}"
            );
        }
        let out_of_range = SamplerOpts {
            logit_bias: vec![(TokenId(vocab.n_vocab()), 1.0)],
            ..opts()
        };
        assert!(matches!(
            Sampler::new(&vocab, &out_of_range),
            Err(BackendError::TokenOutOfRange { .. })
        ));
        let bad_grammar = SamplerOpts {
            grammar: Some(wick_types::Grammar::Gbnf("root ::= x".to_owned())),
            ..opts()
        };
        assert!(matches!(
            Sampler::new(&vocab, &bad_grammar),
            Err(BackendError::Grammar { .. })
        ));
    }
}
