//! Log-probabilities of a decoded position: the log-softmax of the model's raw logits (before
//! logit bias, penalties, grammar or temperature), as llama.cpp's server reports `n_probs` with
//! `post_sampling_probs` off.

use wick_types::TokenId;

/// The most alternatives one position reports (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// A token and its log-probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLogprob {
    /// The token.
    pub token: TokenId,
    /// Its natural-log probability under the model's distribution (≤ 0; `-inf` for a token
    /// whose logit is `-inf`).
    pub logprob: f32,
}

/// The log-probabilities of one decoded position.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprobs {
    /// The token that was sampled, with its log-probability.
    pub sampled: TokenLogprob,
    /// The most likely tokens, most likely first (ties: lowest id first), as many as asked
    /// for (at most [`MAX_TOP_LOGPROBS`] and the vocabulary size).
    pub top: Vec<TokenLogprob>,
}

impl Logprobs {
    /// The log-probabilities of `sampled` and the `top` most likely tokens under `logits`
    /// (one per vocabulary entry), computed stably: the maximum is subtracted and the sum
    /// of exponentials accumulated in `f64`. `top` is capped at [`MAX_TOP_LOGPROBS`]. One pass
    /// over the logits for the normaliser and one for the top tokens.
    ///
    /// A `sampled` id outside `logits` gets `-inf`.
    pub fn from_logits<T: Copy + Into<f64>>(logits: &[T], sampled: TokenId, top: u8) -> Self {
        let log_norm = log_norm(logits.iter().map(|&l| l.into()));
        #[allow(clippy::cast_possible_truncation)]
        let at = |id: TokenId| {
            logits.get(id.0 as usize).map_or(f32::NEG_INFINITY, |&l| {
                (l.into() - log_norm).min(0.0) as f32
            })
        };
        let k = usize::from(top.min(MAX_TOP_LOGPROBS)).min(logits.len());
        let top = top_k((0u32..).zip(logits.iter().map(|&l| l.into())), k)
            .into_iter()
            .map(|(token, _)| TokenLogprob {
                token,
                logprob: at(token),
            })
            .collect();
        Logprobs {
            sampled: TokenLogprob {
                token: sampled,
                logprob: at(sampled),
            },
            top,
        }
    }

    /// The log-probabilities of the distribution a sampler drew `sampled` from: `candidates`
    /// are the tokens it kept, with the logits it drew by (after bias, penalties, filters and
    /// temperature), in any order; their softmax is the distribution. The `top` most likely
    /// come first (ties: lowest id first), and a token whose probability is 0 there (a `-inf`
    /// logit, or one too small to show in `f32`) is never among them. A `sampled` token that
    /// is not a candidate gets `-inf`.
    pub fn from_candidates<T: Copy + Into<f64>>(
        candidates: &[(TokenId, T)],
        sampled: TokenId,
        top: u8,
    ) -> Self {
        let log_norm = log_norm(candidates.iter().map(|&(_, l)| l.into()));
        #[allow(clippy::cast_possible_truncation)]
        let logprob = |l: f64| (l - log_norm).min(0.0) as f32;
        let k = usize::from(top.min(MAX_TOP_LOGPROBS)).min(candidates.len());
        let top = top_k(candidates.iter().map(|&(t, l)| (t.0, l.into())), k)
            .into_iter()
            .map(|(token, l)| TokenLogprob {
                token,
                logprob: logprob(l),
            })
            .filter(|t| t.logprob.exp() > 0.0)
            .collect();
        let sampled_logit = candidates.iter().find(|&&(t, _)| t == sampled);
        Logprobs {
            sampled: TokenLogprob {
                token: sampled,
                logprob: sampled_logit.map_or(f32::NEG_INFINITY, |&(_, l)| logprob(l.into())),
            },
            top,
        }
    }
}

/// The log-probabilities of every entry of `logits` (their log-softmax), normalised as
/// [`Logprobs::from_logits`] normalises them: what perplexity and KL divergence are
/// computed from.
#[must_use]
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let log_norm = log_norm(logits.iter().map(|&l| f64::from(l)));
    #[allow(clippy::cast_possible_truncation)]
    logits
        .iter()
        .map(|&l| (f64::from(l) - log_norm).min(0.0) as f32)
        .collect()
}

/// `ln Σ exp(l)` over the logits, stably (`0` when every logit is `-inf` or NaN).
fn log_norm(logits: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = logits
        .clone()
        .filter(|l| !l.is_nan())
        .fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return 0.0;
    }
    let sum: f64 = logits.map(|l| (l - max).exp()).sum();
    max + sum.ln()
}

/// The ids of the `k` highest logits with their logits, highest first, ties broken by the
/// lowest id (as greedy decoding breaks them). NaN logits are never picked. Linear in the
/// candidates for small `k`.
fn top_k(logits: impl Iterator<Item = (u32, f64)>, k: usize) -> Vec<(TokenId, f64)> {
    if k == 0 {
        return Vec::new();
    }
    // Sorted best first: higher logit, then lower id.
    let mut best: Vec<(f64, u32)> = Vec::with_capacity(k + 1);
    let before = |a: (f64, u32), b: (f64, u32)| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)).is_gt();
    for (id, l) in logits {
        if l.is_nan() || (best.len() == k && !before((l, id), best[k - 1])) {
            continue;
        }
        let at = best.partition_point(|&b| before(b, (l, id)));
        best.insert(at, (l, id));
        best.truncate(k);
    }
    best.into_iter().map(|(l, id)| (TokenId(id), l)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distribution_is_normalised_and_sorted() {
        let logits: [f32; 5] = [1.0, 3.0, 3.0, -2.0, 0.5];
        let lp = Logprobs::from_logits(&logits, TokenId(1), 5);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.token.0).collect();
        assert_eq!(ids, [1, 2, 0, 4, 3]);
        let sum: f64 = lp.top.iter().map(|t| f64::from(t.logprob).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{sum}");
        assert!(lp.top.iter().all(|t| t.logprob <= 0.0));
        assert_eq!(lp.sampled, lp.top[0]);
        assert!(lp.top.windows(2).all(|w| w[0].logprob >= w[1].logprob));
    }

    #[test]
    fn huge_logits_do_not_overflow_and_bans_are_minus_infinity() {
        let logits: [f64; 3] = [1e30, 1e30 - 1e15, f64::NEG_INFINITY];
        let lp = Logprobs::from_logits(&logits, TokenId(2), 2);
        assert!(lp.top.iter().all(|t| t.logprob.is_finite()));
        assert!(lp.sampled.logprob.is_infinite() && lp.sampled.logprob < 0.0);
        assert_eq!(Logprobs::from_logits(&logits, TokenId(9), 0).top, []);
    }

    #[test]
    fn a_sampled_distribution_is_renormalised_over_its_candidates() {
        // Unordered, one tie, one banned and one too unlikely for f32.
        let cands = [
            (TokenId(7), 0.0f32),
            (TokenId(3), 2.0),
            (TokenId(5), 2.0),
            (TokenId(9), f32::NEG_INFINITY),
            (TokenId(1), -200.0),
        ];
        let lp = Logprobs::from_candidates(&cands, TokenId(5), 20);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.token.0).collect();
        assert_eq!(ids, [3, 5, 7]);
        let sum: f64 = lp.top.iter().map(|t| f64::from(t.logprob).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-6, "{sum}");
        assert_eq!(lp.sampled, lp.top[1]);
        let gone = Logprobs::from_candidates(&cands, TokenId(42), 1);
        assert!(gone.sampled.logprob.is_infinite() && gone.sampled.logprob < 0.0);
        assert_eq!(gone.top.len(), 1);
        let one = Logprobs::from_candidates(&[(TokenId(4), -3.0)], TokenId(4), 5);
        assert!(one.sampled.logprob.abs() < f32::EPSILON);
        assert_eq!(one.top, [one.sampled]);
    }

    #[test]
    fn top_is_capped_by_the_limit_and_the_vocabulary() {
        let logits: Vec<f32> = (0..50u8).map(f32::from).collect();
        assert_eq!(
            Logprobs::from_logits(&logits, TokenId(0), 200).top.len(),
            20
        );
        assert_eq!(
            Logprobs::from_logits(&logits[..3], TokenId(0), 9).top.len(),
            3
        );
        let top = Logprobs::from_logits(&logits, TokenId(0), 3).top;
        assert_eq!(top[0].token, TokenId(49));
        assert_eq!(top[2].token, TokenId(47));
    }
}
