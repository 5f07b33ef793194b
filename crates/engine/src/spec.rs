//! Draft-free speculative decoding (prompt lookup): a greedy sequence whose last few tokens
//! appeared earlier in its history (the prompt or its own answer) proposes what followed them
//! there, and the model verifies the proposal inside the batched step
//! ([`wick_backend::StepOp::Verify`]). Accepted tokens are exactly what greedy decoding would
//! have produced, so the answer is the same with or without speculation (bit for bit with
//! batch-invariant kernels); a sequence whose proposals keep failing drafts less, then not at
//! all for a while, so text that does not repeat costs (almost) nothing.
//!
//! With a draft model (a second, smaller model of the same vocabulary) the draft model
//! proposes instead: each speculating sequence has a twin sequence in the draft model, brought
//! up to date with what the main sequence holds (a common prefix kept, the rest prefilled),
//! then decoded greedily for the draft's length, every twin in the same batched step of the
//! draft model.

use wick_backend::{Backend, BackendError, StepOp};
use wick_types::{SeqId, TokenId};

use crate::diskcache::common_prefix;
use crate::EngineError;

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
    // Media positions are never drafted: they come from an image, not from the model.
    history[end..len.min(end + allowed)]
        .iter()
        .copied()
        .take_while(|t| !t.is_media())
        .collect()
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

    /// The most tokens to draft for the next step (0: decode plainly), at most `room`.
    pub(crate) fn budget(&mut self, room: usize) -> usize {
        if self.max == 0 {
            return 0;
        }
        if self.wait > 0 {
            self.wait -= 1;
            return 0;
        }
        self.len.min(room)
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

/// A draft model and what each of its sequences holds (sequence `i` twins slot `i`).
pub(crate) struct DraftModel {
    backend: Box<dyn Backend>,
    held: Vec<Vec<TokenId>>,
}

impl std::fmt::Debug for DraftModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftModel")
            .field("backend", &self.backend.name())
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl DraftModel {
    /// `backend` as the draft model of a model whose token pieces are `pieces`, for `slots`
    /// sequences.
    ///
    /// # Errors
    ///
    /// [`BackendError::Config`] (`model_draft`) when the vocabularies differ (the draft's
    /// tokens would mean other text), the draft holds fewer sequences or less context, or it
    /// keeps a recurrent state (its sequences are cut back after every rejected draft).
    pub(crate) fn new(
        backend: Box<dyn Backend>,
        pieces: &[Vec<u8>],
        slots: usize,
        n_ctx: u32,
    ) -> Result<Self, EngineError> {
        let refuse = |value: String, allowed| {
            EngineError::Backend(BackendError::Config {
                field: "model_draft",
                value,
                allowed,
            })
        };
        let info = backend.info();
        if info.recurrent {
            return Err(refuse(
                format!("{} (it keeps a recurrent state)", info.name),
                "a draft model whose state can be cut back (attention layers only): a \
                 recurrent one would evaluate its whole sequence again after every rejected \
                 draft",
            ));
        }
        let same = "a draft model with the model's vocabulary (the same tokens, ids and text)";
        if info.n_vocab as usize != pieces.len() {
            return Err(refuse(
                format!(
                    "{} ({} tokens, the model has {})",
                    info.name,
                    info.n_vocab,
                    pieces.len()
                ),
                same,
            ));
        }
        let ids: Vec<TokenId> = (0..info.n_vocab).map(TokenId).collect();
        let draft_pieces = backend.token_pieces(&ids)?;
        if let Some((id, (a, b))) = pieces
            .iter()
            .zip(&draft_pieces)
            .enumerate()
            .find(|(_, (a, b))| a != b)
        {
            return Err(refuse(
                format!(
                    "{}: token {id} is {:?} in the model and {:?} in the draft",
                    info.name,
                    String::from_utf8_lossy(a),
                    String::from_utf8_lossy(b)
                ),
                same,
            ));
        }
        if (info.n_seq_max as usize) < slots || info.n_ctx < n_ctx {
            return Err(refuse(
                format!(
                    "{} ({} sequences of {} tokens, the model {slots} of {n_ctx})",
                    info.name, info.n_seq_max, info.n_ctx
                ),
                "a draft context at least as large as the model's",
            ));
        }
        Ok(DraftModel {
            backend,
            held: vec![Vec::new(); slots],
        })
    }

    /// Drafts up to `n` greedy tokens after `history` for each `(slot, history, n)`, in as
    /// many batched steps of the draft model as the longest draft. A draft ends early at an
    /// end-of-generation token. Should the draft model fail, it proposes nothing this time and
    /// its sequences start afresh next time: speculation never fails a request.
    pub(crate) fn propose(&mut self, wants: &[(usize, &[TokenId], usize)]) -> Vec<Vec<TokenId>> {
        let mut drafts = vec![Vec::new(); wants.len()];
        let mut ops = Vec::new();
        // Which want each op serves.
        let mut serving = Vec::new();
        for (k, &(slot, history, n)) in wants.iter().enumerate() {
            // A draft model reads text only: a prompt with an image is not drafted for.
            if n == 0 || history.is_empty() || history.iter().any(|t| t.is_media()) {
                continue;
            }
            let seq = twin(slot);
            let held = &mut self.held[slot];
            let mut keep = common_prefix(held, history);
            if keep < held.len() {
                let cut = if keep == 0 {
                    self.backend.seq_rm(seq)
                } else {
                    self.backend.seq_rm_last(seq, held.len() - keep)
                };
                if cut.is_err() {
                    let _ = self.backend.seq_rm(seq);
                    keep = 0;
                }
                held.truncate(keep);
            }
            let op = if keep < history.len() {
                StepOp::PrefillDecode(history[keep..].to_vec(), Box::new(StepOp::Decode(None)))
            } else {
                StepOp::Decode(None)
            };
            ops.push((seq, op));
            serving.push(k);
        }
        while !ops.is_empty() {
            let results = match self.backend.step(&ops) {
                Ok(results) => results,
                Err(e) => {
                    tracing::warn!("draft model failed, no draft this step: {e}");
                    for &(seq, _) in &ops {
                        let _ = self.backend.seq_rm(seq);
                        self.held[seq.0 as usize].clear();
                    }
                    return vec![Vec::new(); wants.len()];
                }
            };
            let mut next_ops = Vec::new();
            let mut next_serving = Vec::new();
            for (((seq, op), (_, result)), k) in ops.iter().zip(results).zip(&serving) {
                let held = &mut self.held[seq.0 as usize];
                held.extend_from_slice(op.prefix());
                let Some(decoded) = result.decoded() else {
                    continue;
                };
                held.push(decoded.token());
                if matches!(decoded, wick_backend::Decoded::Eog(_)) {
                    continue;
                }
                drafts[*k].push(decoded.token());
                if drafts[*k].len() < wants[*k].2 {
                    next_ops.push((*seq, StepOp::Decode(None)));
                    next_serving.push(*k);
                }
            }
            ops = next_ops;
            serving = next_serving;
        }
        drafts
    }
}

/// The draft model's sequence for slot `slot`.
fn twin(slot: usize) -> SeqId {
    SeqId(u32::try_from(slot).expect("invariant: slots fit in u32"))
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
        assert_eq!(d.budget(100), 8);
        d.record(8, 2);
        assert_eq!(d.budget(100), 3);
        d.record(3, 0);
        for _ in 0..BACKOFF_MIN {
            assert_eq!(d.budget(100), 0, "paused after an outright rejection");
        }
        assert_eq!(d.budget(100), 1);
        d.record(1, 1);
        d.record(2, 2);
        assert_eq!(d.len, 4);
        assert_eq!(d.budget(0), 0, "no room, no draft");
        assert_eq!(Drafter::new(0).budget(100), 0, "off");
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
