//! Draft-free speculative decoding (prompt lookup): a greedy sequence whose last few tokens
//! appeared earlier in its history (the prompt or its own answer) proposes what followed them
//! there, and the model verifies the proposal inside the batched step
//! ([`wick_backend::StepOp::Verify`]). Accepted tokens are exactly what greedy decoding would
//! have produced, so the answer is the same with or without speculation (bit for bit with
//! batch-invariant kernels); a sequence whose proposals keep failing drafts less, then not at
//! all for a while, so text that does not repeat costs (almost) nothing.

use wick_types::TokenId;

/// The shortest suffix of the history matched against earlier text, and the longest match
/// length measured.
const NGRAM_MIN: usize = 3;
const MATCH_MAX: usize = 32;
/// Decodes to wait before drafting again after a proposal was rejected outright, at first and
/// at most (it doubles on every outright rejection and resets on a full acceptance).
const BACKOFF_MIN: u32 = 4;
const BACKOFF_MAX: u32 = 256;

/// The tokens that followed the earlier occurrence of the history's end that matches it
/// longest (at least [`NGRAM_MIN`] tokens; among equals the latest, the most recent context
/// predicting best). A longer match is more likely to go on matching, so the draft may be
/// longer: a match of `m` tokens drafts at most `m²` (9 for a 3-token match), never more than
/// `max`. Measured on the edit task of `wick bench` (h): a 2-token minimum drafted too often
/// on chance matches (1.13× against 1.41× with 3), and a 6-token one too rarely (1.34×).
pub(crate) fn ngram_draft(history: &[TokenId], max: usize) -> Vec<TokenId> {
    let len = history.len();
    if max == 0 || len <= NGRAM_MIN {
        return Vec::new();
    }
    // `end`: where an earlier occurrence ends (exclusive); something must follow it.
    let mut best: Option<(usize, usize)> = None;
    for end in (NGRAM_MIN..len).rev() {
        let matched = (1..=end.min(MATCH_MAX))
            .take_while(|&k| history[end - k] == history[len - k])
            .count();
        if matched >= NGRAM_MIN && best.is_none_or(|(_, m)| matched > m) {
            best = Some((end, matched));
            if matched == MATCH_MAX {
                break;
            }
        }
    }
    let Some((end, matched)) = best else {
        return Vec::new();
    };
    let allowed = (matched * matched).min(max);
    history[end..len.min(end + allowed)].to_vec()
}

/// One sequence's drafting pace.
#[derive(Debug, Clone)]
pub(crate) struct Drafter {
    /// The most tokens this request may draft per step (0: speculation off).
    max: usize,
    /// The most tokens the next proposal may have.
    len: usize,
    /// Decodes left before drafting again.
    wait: u32,
    backoff: u32,
}

impl Drafter {
    pub(crate) fn new(max: usize) -> Self {
        Drafter {
            max,
            len: max,
            wait: 0,
            backoff: BACKOFF_MIN,
        }
    }

    /// The candidates for the next step (empty: decode plainly), at most `room`.
    pub(crate) fn propose(&mut self, history: &[TokenId], room: usize) -> Vec<TokenId> {
        if self.max == 0 {
            return Vec::new();
        }
        if self.wait > 0 {
            self.wait -= 1;
            return Vec::new();
        }
        ngram_draft(history, self.len.min(room))
    }

    /// Learns from a verified proposal of `drafted` tokens of which `accepted` were kept.
    pub(crate) fn record(&mut self, drafted: usize, accepted: usize) {
        if accepted == drafted {
            self.len = (self.len * 2).min(self.max);
            self.backoff = BACKOFF_MIN;
        } else if accepted == 0 {
            self.len = (self.len / 2).max(1);
            self.wait = self.backoff;
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        } else {
            self.len = (accepted + 1).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(ids: &[u32]) -> Vec<TokenId> {
        ids.iter().copied().map(TokenId).collect()
    }

    #[test]
    fn the_latest_longest_match_proposes_what_followed_it() {
        // "1 2 3 9 … 1 2 3": the 3-gram 1 2 3 matched longest, 9 8 … followed it.
        let h = t(&[1, 2, 3, 9, 8, 5, 2, 3, 7, 1, 2, 3]);
        assert_eq!(ngram_draft(&h, 2), t(&[9, 8]));
        assert_eq!(ngram_draft(&h, 20), t(&[9, 8, 5, 2, 3, 7, 1, 2, 3]));
        // "1 2 3" twice before the end, both 3-token matches: the latest wins.
        let h = t(&[1, 2, 3, 4, 1, 2, 3, 6, 0, 1, 2, 3]);
        assert_eq!(ngram_draft(&h, 4), t(&[6, 0, 1, 2]));
        // A 4-token match beats a later 3-token one; a 2-token match drafts nothing.
        let h = t(&[9, 1, 2, 3, 5, 7, 1, 2, 3, 6, 9, 1, 2, 3]);
        assert_eq!(ngram_draft(&h, 2), t(&[5, 7]));
        assert!(ngram_draft(&t(&[2, 3, 4, 2, 3]), 4).is_empty());
        // A long match drafts long.
        let long: Vec<u32> = (0..20).chain([99]).chain(0..10).collect();
        assert_eq!(
            ngram_draft(&t(&long), 64),
            t(&(10..20).chain([99]).chain(0..10).collect::<Vec<_>>())
        );
        // Nothing repeats: no proposal.
        assert!(ngram_draft(&t(&[1, 2, 3, 4, 5]), 4).is_empty());
        assert!(ngram_draft(&t(&[1, 2, 1, 2]), 0).is_empty());
    }

    #[test]
    fn rejections_shrink_the_draft_then_pause_it_and_acceptance_grows_it_back() {
        let mut d = Drafter::new(8);
        let h = t(&[
            1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4,
        ]);
        // "1 2 3 4" occurred twice before, each a 4-token match: the latest proposes what
        // followed it, up to the draft length.
        assert_eq!(d.propose(&h, 100), t(&[5, 6, 7, 8, 1, 2, 3, 4]));
        d.record(8, 2);
        assert_eq!(d.propose(&h, 100).len(), 3);
        d.record(3, 0);
        for _ in 0..BACKOFF_MIN {
            assert!(
                d.propose(&h, 100).is_empty(),
                "paused after an outright rejection"
            );
        }
        assert_eq!(d.propose(&h, 100).len(), 1);
        d.record(1, 1);
        d.record(2, 2);
        assert_eq!(d.len, 4);
        assert!(d.propose(&h, 0).is_empty(), "no room, no draft");
        assert!(Drafter::new(0).propose(&h, 100).is_empty(), "off");
    }

    proptest! {
        #[test]
        fn a_draft_is_always_a_continuation_found_earlier(
            history in proptest::collection::vec(0u32..4, 0..64),
            max in 0usize..10,
        ) {
            let h = t(&history);
            let draft = ngram_draft(&h, max);
            prop_assert!(draft.len() <= max);
            if !draft.is_empty() {
                // Some earlier window equals a suffix of the history and is followed by the draft.
                let found = (NGRAM_MIN..=MATCH_MAX).any(|n| {
                    h.len() > n && (0..h.len() - n).any(|i| {
                        h[i..i + n] == h[h.len() - n..]
                            && h[i + n..].starts_with(&draft)
                    })
                });
                prop_assert!(found);
            }
        }
    }
}
