//! The worker: the model, its contexts and every sequence, owned by the thread that steps them
//! (the engine's).

use std::collections::HashMap;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::{LlamaLoraAdapter, LlamaModel};
use wick_backend::{
    check_distinct, snapshot, thinking, BackendConfig, BackendError, Decoded, Logprobs, ModelInfo,
    StepOp, StepResult, Verified,
};
use wick_types::{SeqId, TokenId};

use crate::eval::{eval, Outputs, Pass};
use crate::sampler::Samplers;
use crate::vocab::{check_range, from_llama, to_llama};

type Result<T> = std::result::Result<T, BackendError>;

/// Everything that outlives a context: it is carried over when the context is rebuilt (to load
/// an adapter, which needs the model mutably).
pub(crate) struct State {
    pub(crate) config: BackendConfig,
    pub(crate) info: ModelInfo,
    pub(crate) fingerprint: String,
    pub(crate) seqs: Vec<Vec<TokenId>>,
    pub(crate) samplers: Samplers,
    pub(crate) adapters: HashMap<u64, LlamaLoraAdapter>,
    pub(crate) active_adapter: Option<(u64, f32)>,
    pub(crate) next_adapter: u64,
    /// The model's projector (`--mmproj`), when it has one.
    pub(crate) projector: Option<std::sync::Arc<crate::media::Projector>>,
    /// A recurrent model's checkpoints, per sequence: see [`Checkpoint`].
    pub(crate) checkpoints: Vec<Vec<Checkpoint>>,
}

/// A recurrent model's state of a sequence after its first `kept` tokens: the recurrent part
/// only (a hybrid's attention cells can be cut back as they are). Taken at the end of each
/// prompt chunk (`Prefill`: its cells then hold all but the pending last token), before the
/// last token of each prompt (`PrefillDecode`) and of each `logits` call, so that a cut back
/// to such a length restores it instead of evaluating the prompt again. A sequence keeps its
/// last [`wick_backend::RECURRENT_CHECKPOINTS`]; a cut below one drops it.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    kept: usize,
    state: Vec<u8>,
}

/// The model and its contexts, as the backend holds them.
///
/// Invariant: the KV cells of sequence `s` hold every token of `state.seqs[s]` but the last,
/// at positions `0..len - 1`; the last token is evaluated by the next decode.
pub(crate) struct Worker<'m> {
    pub(crate) model: &'m LlamaModel,
    pub(crate) ctx: LlamaContext<'m>,
    pub(crate) embed_ctx: Option<LlamaContext<'m>>,
    pub(crate) state: State,
}

impl std::fmt::Debug for Worker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("model", &self.state.info.name)
            .finish_non_exhaustive()
    }
}

fn seq_i32(index: usize) -> i32 {
    i32::try_from(index).expect("invariant: sequence ids are below n_seq_max")
}

fn pos_u32(pos: usize) -> u32 {
    u32::try_from(pos).expect("invariant: positions are below n_ctx")
}

impl Worker<'_> {
    pub(crate) fn index(&self, seq: SeqId) -> Result<usize> {
        let index = seq.0 as usize;
        if index < self.state.seqs.len() {
            Ok(index)
        } else {
            Err(BackendError::UnknownSequence {
                seq,
                n_seq_max: self.state.info.n_seq_max,
            })
        }
    }

    fn n_ctx(&self) -> usize {
        self.state.info.n_ctx as usize
    }

    fn check_fits(&self, seq: SeqId, needed: usize) -> Result<()> {
        if needed > self.n_ctx() {
            return Err(BackendError::ContextFull {
                seq,
                needed,
                n_ctx: self.state.info.n_ctx,
            });
        }
        Ok(())
    }

    /// Moves the state out, to carry it into a new context; an empty one is left behind.
    pub(crate) fn take_state(&mut self) -> State {
        let empty = State {
            config: self.state.config.clone(),
            info: self.state.info.clone(),
            fingerprint: String::new(),
            seqs: Vec::new(),
            samplers: Samplers::new(),
            adapters: HashMap::new(),
            active_adapter: None,
            next_adapter: 0,
            projector: self.state.projector.clone(),
            checkpoints: Vec::new(),
        };
        std::mem::replace(&mut self.state, empty)
    }

    pub(crate) fn seq_tokens(&self, seq: SeqId) -> Result<Vec<TokenId>> {
        Ok(self.state.seqs[self.index(seq)?].clone())
    }

    /// Checks a prompt's tokens: text in the vocabulary, media whole runs the projector holds.
    fn check_prompt(&self, tokens: &[TokenId]) -> Result<()> {
        crate::vocab::check_tokens(
            tokens,
            self.state.info.n_vocab,
            self.state.projector.as_deref(),
        )
    }

    /// Checks one op and turns it into a pass over the KV cache.
    fn plan(&self, seq: SeqId, op: &StepOp) -> Result<Pass> {
        let index = self.index(seq)?;
        let history = &self.state.seqs[index];
        match op {
            StepOp::Prefill(tokens) => {
                if tokens.is_empty() {
                    return Err(BackendError::EmptyInput {
                        what: "prefill needs at least one token",
                    });
                }
                self.check_prompt(tokens)?;
                self.check_fits(seq, history.len() + tokens.len())?;
                // The old last token and all new ones but the last go into the cache.
                Ok(extend(
                    index,
                    history,
                    &tokens[..tokens.len() - 1],
                    Outputs::None,
                ))
            }
            StepOp::PrefillDecode(tokens, decode) => {
                op.check_shape()?;
                self.check_prompt(tokens)?;
                self.state.samplers.check(decode.sampler())?;
                self.check_fits(seq, history.len() + tokens.len() + 1)?;
                // The old last token and every new one go in; the last new one's logits give
                // the first sampled token.
                Ok(extend(index, history, tokens, Outputs::Last))
            }
            StepOp::Verify(candidates) => {
                op.check_shape()?;
                check_range(candidates, self.state.info.n_vocab)?;
                let Some(&last) = history.last() else {
                    return Err(BackendError::EmptyInput {
                        what: "verify needs a sequence with at least one token",
                    });
                };
                self.check_fits(seq, history.len() + candidates.len())?;
                // The pending last token and every candidate; each position's logits say
                // whether the next candidate is what greedy decoding picks there.
                Ok(Pass {
                    seq: seq_i32(index),
                    start: history.len() - 1,
                    tokens: std::iter::once(last)
                        .chain(candidates.iter().copied())
                        .map(to_llama)
                        .collect(),
                    outputs: Outputs::All,
                })
            }
            decode => {
                let Some(&last) = history.last() else {
                    return Err(BackendError::EmptyInput {
                        what: "decode needs a sequence with at least one token",
                    });
                };
                self.state.samplers.check(decode.sampler())?;
                self.check_fits(seq, history.len() + 1)?;
                Ok(Pass {
                    seq: seq_i32(index),
                    start: history.len() - 1,
                    tokens: vec![to_llama(last)],
                    outputs: Outputs::Last,
                })
            }
        }
    }

    /// Every op in as few forward passes as the batch size allows.
    pub(crate) fn step(&mut self, ops: &[(SeqId, StepOp)]) -> Result<Vec<(SeqId, StepResult)>> {
        check_distinct(ops)?;
        let mut passes = ops
            .iter()
            .map(|(seq, op)| self.plan(*seq, op))
            .collect::<Result<Vec<_>>>()?;
        // Where each pass started, for `recover` (which only acts on a recurrent model).
        let origins: Vec<(i32, usize)> = if self.state.info.recurrent {
            passes.iter().map(|p| (p.seq, p.start)).collect()
        } else {
            Vec::new()
        };
        if self.state.info.recurrent {
            // Each prompt's tokens but its last first, then a checkpoint of the state there.
            let heads: Vec<Pass> = ops
                .iter()
                .zip(&mut passes)
                .filter(|((_, op), _)| matches!(op, StepOp::PrefillDecode(..)))
                .filter_map(|(_, pass)| split_last(pass))
                .collect();
            self.eval_and_checkpoint(&heads, &origins, |_| {})?;
        }
        let mut sampled: Vec<Option<(TokenId, Option<Logprobs>)>> = vec![None; ops.len()];
        // A verify's greedy pick at each of its positions, in order.
        let mut predicted: Vec<Vec<TokenId>> = vec![Vec::new(); ops.len()];
        let samplers = &mut self.state.samplers;
        let evaluated = eval(
            &mut self.ctx,
            self.state.config.n_batch as usize,
            self.state.projector.as_deref(),
            &passes,
            |ctx, p, _, idx| {
                let op = &ops[p].1;
                if matches!(op, StepOp::Verify(_)) {
                    predicted[p].push(from_llama(samplers.sample(None, ctx, idx)?));
                    return Ok(());
                }
                sampled[p] = Some(match op.logprobs() {
                    None => (from_llama(samplers.sample(op.sampler(), ctx, idx)?), None),
                    // Greedy decoding without a sampler draws from the raw distribution.
                    Some(top) if let (true, Some(id)) = (op.after_sampling(), op.sampler()) => {
                        let (token, candidates) = samplers.sample_distribution(id, ctx, idx)?;
                        let token = from_llama(token);
                        let logprobs = Logprobs::from_candidates(&candidates, token, top);
                        (token, Some(logprobs))
                    }
                    Some(top) => {
                        // The raw logits of this output, read before the sampler sees them.
                        let logits = ctx.get_logits_ith(idx).to_vec();
                        let token = from_llama(samplers.sample(op.sampler(), ctx, idx)?);
                        (token, Some(Logprobs::from_logits(&logits, token, top)))
                    }
                });
                Ok(())
            },
        );
        if let Err(e) = evaluated {
            self.recover(&origins);
            return Err(e);
        }
        let mut out = Vec::with_capacity(ops.len());
        for (((seq, op), token), predicted) in ops.iter().zip(sampled).zip(predicted) {
            let result = match (op, token) {
                (StepOp::Verify(candidates), _) => self.accept(*seq, candidates, &predicted)?,
                (StepOp::Prefill(tokens), _) => {
                    let index = seq.0 as usize;
                    self.state.seqs[index].extend_from_slice(tokens);
                    if self.state.info.recurrent {
                        // The cells hold every token but the pending last: a checkpoint.
                        let kept = self.state.seqs[index].len() - 1;
                        self.checkpoint(index, kept);
                    }
                    StepResult::Prefilled
                }
                (_, Some((t, logprobs))) => {
                    self.state.seqs[seq.0 as usize].extend_from_slice(op.prefix());
                    let result = self.append_decoded(seq.0 as usize, t);
                    match logprobs {
                        Some(l) => StepResult::WithLogprobs(Box::new(result), l),
                        None => result,
                    }
                }
                (_, None) => {
                    return Err(BackendError::Decode {
                        reason: "llama.cpp produced no logits for a decode".into(),
                    })
                }
            };
            out.push((*seq, result));
        }
        Ok(out)
    }

    /// Appends the decoded token `t` to sequence `index` and classifies it.
    fn append_decoded(&mut self, index: usize, t: TokenId) -> StepResult {
        let decoded = if self.model.vocab().is_eog(to_llama(t)) {
            Decoded::Eog(t)
        } else {
            Decoded::Token(t)
        };
        let history = &mut self.state.seqs[index];
        history.push(t);
        thinking::classify(self.state.info.special.thinking, history, decoded)
    }

    /// Keeps the candidates of a verify that match the greedy picks at their positions, then
    /// the pick after them; drops the cells of the rest.
    fn accept(
        &mut self,
        seq: SeqId,
        candidates: &[TokenId],
        predicted: &[TokenId],
    ) -> Result<StepResult> {
        let index = seq.0 as usize;
        let accepted = candidates
            .iter()
            .zip(predicted)
            .take_while(|(c, p)| c == p)
            .count();
        let Some(&next) = predicted.get(accepted) else {
            return Err(BackendError::Decode {
                reason: "llama.cpp produced no logits for a verify".into(),
            });
        };
        let history = &mut self.state.seqs[index];
        history.extend_from_slice(&candidates[..accepted]);
        history.push(next);
        // Keep the cells of the history and the accepted candidates; the next token is pending.
        let kept = history.len() - 1;
        self.remove_cells(index, kept)?;
        Ok(StepResult::Verified(wick_backend::classify_appended(
            &self.state.info,
            &self.state.seqs[index],
            accepted + 1,
        )))
    }

    /// A one-operation step of [`StepOp::Verify`].
    pub(crate) fn verify(&mut self, seq: SeqId, candidates: &[TokenId]) -> Result<Verified> {
        let results = self.step(&[(seq, StepOp::Verify(candidates.to_vec()))])?;
        let Some((_, StepResult::Verified(tokens))) = results.into_iter().next() else {
            return Err(BackendError::Decode {
                reason: "verify produced no result".into(),
            });
        };
        let next =
            tokens
                .last()
                .and_then(StepResult::decoded)
                .ok_or_else(|| BackendError::Decode {
                    reason: "verify produced no token".into(),
                })?;
        // `decoded` reports reasoning tokens as plain ones; an end of generation stays one.
        Ok(Verified {
            accepted: tokens.len() - 1,
            next,
        })
    }

    /// [`wick_backend::Backend::logits`]: the pending last token (if any) and `tokens` in one
    /// pass with every output; the new last token's cell is removed again, so the sequence
    /// keeps the invariant that its last token is pending.
    pub(crate) fn logits(
        &mut self,
        seq: SeqId,
        tokens: &[TokenId],
        each: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        if tokens.is_empty() {
            return Err(BackendError::EmptyInput {
                what: "logits needs at least one token",
            });
        }
        check_range(tokens, self.state.info.n_vocab)?;
        let index = self.index(seq)?;
        let history = &self.state.seqs[index];
        self.check_fits(seq, history.len() + tokens.len())?;
        let mut pass = extend(index, history, tokens, Outputs::All);
        let origins = [(pass.seq, pass.start)];
        if self.state.info.recurrent {
            // The state before the last token is kept, so that the cut below restores it.
            let head: Vec<Pass> = split_last(&mut pass).into_iter().collect();
            self.eval_and_checkpoint(&head, &origins, &mut *each)?;
        }
        let evaluated = eval(
            &mut self.ctx,
            self.state.config.n_batch as usize,
            None,
            std::slice::from_ref(&pass),
            |ctx, _, _, idx| {
                each(ctx.get_logits_ith(idx));
                Ok(())
            },
        );
        if let Err(e) = evaluated {
            self.recover(&origins);
            return Err(e);
        }
        self.state.seqs[index].extend_from_slice(tokens);
        let kept = self.state.seqs[index].len() - 1;
        self.remove_cells(index, kept)
    }

    /// Keeps the first `n` tokens of `seq`.
    pub(crate) fn truncate(&mut self, seq: SeqId, n: usize) -> Result<()> {
        let index = self.index(seq)?;
        let n = n.min(self.state.seqs[index].len());
        self.state.seqs[index].truncate(n);
        self.remove_cells(index, n.saturating_sub(1))
    }

    /// Removes sequence `index`'s cells from position `from` on, keeping those of the first
    /// `from` tokens of `state.seqs[index]`.
    ///
    /// A model with a recurrent state (Mamba, RWKV, LFM2's short convolutions, hybrids) holds
    /// its state after the last position only, and llama.cpp refuses to take it back: the
    /// latest [`Checkpoint`] at or before `from` is restored and the tokens between it and
    /// `from` evaluated again (none when the cut ends at it); with no checkpoint, the sequence
    /// is cleared and its first `from` tokens evaluated again. The same bits either way in the
    /// deterministic mode. When that evaluation fails, the sequence is left empty.
    fn remove_cells(&mut self, index: usize, from: usize) -> Result<()> {
        self.state.checkpoints[index].retain(|c| c.kept <= from);
        let removed = self
            .ctx
            .clear_kv_cache_seq(Some(pos_u32(index)), Some(pos_u32(from)), None)
            .unwrap_or(false);
        if removed {
            return Ok(());
        }
        // The latest checkpoint at or before `from`: its recurrent state, the attention cells
        // cut back to it, and the tokens between it and `from` evaluated again.
        let start = self.restore_checkpoint(index).unwrap_or_else(|| {
            let _ = self
                .ctx
                .clear_kv_cache_seq(Some(pos_u32(index)), None, None);
            self.state.checkpoints[index].clear();
            0
        });
        if start == from {
            return Ok(());
        }
        let pass = Pass {
            seq: seq_i32(index),
            start,
            tokens: self.state.seqs[index][start..from]
                .iter()
                .map(|&t| to_llama(t))
                .collect(),
            outputs: Outputs::None,
        };
        let rebuilt = eval(
            &mut self.ctx,
            self.state.config.n_batch as usize,
            self.state.projector.as_deref(),
            std::slice::from_ref(&pass),
            |_, _, _, _| Ok(()),
        );
        if rebuilt.is_err() {
            let _ = self
                .ctx
                .clear_kv_cache_seq(Some(pos_u32(index)), None, None);
            self.state.seqs[index].clear();
            self.state.checkpoints[index].clear();
        }
        rebuilt
    }

    /// Sequence `index` back at its latest checkpoint (all of them are at or before the cut
    /// being made): its recurrent state restored, its attention cells after it removed.
    /// Returns the checkpoint's `kept`, or `None` when there is none or llama.cpp refuses.
    fn restore_checkpoint(&mut self, index: usize) -> Option<usize> {
        let checkpoint = self.state.checkpoints[index].last()?;
        let restored = crate::ffi::set_seq_partial_state_bytes(
            &mut self.ctx,
            seq_i32(index),
            &checkpoint.state,
        ) && self
            .ctx
            .clear_kv_cache_seq(Some(pos_u32(index)), Some(pos_u32(checkpoint.kept)), None)
            .unwrap_or(false);
        restored.then_some(checkpoint.kept)
    }

    /// Evaluates `heads` (each the part of a pass before its last token; their outputs to
    /// `each`, in order), then takes a checkpoint of each head's sequence. On failure the
    /// sequences of `origins` are recovered.
    fn eval_and_checkpoint(
        &mut self,
        heads: &[Pass],
        origins: &[(i32, usize)],
        mut each: impl FnMut(&[f32]),
    ) -> Result<()> {
        if heads.is_empty() {
            return Ok(());
        }
        let evaluated = eval(
            &mut self.ctx,
            self.state.config.n_batch as usize,
            self.state.projector.as_deref(),
            heads,
            |ctx, _, _, idx| {
                each(ctx.get_logits_ith(idx));
                Ok(())
            },
        );
        if let Err(e) = evaluated {
            self.recover(origins);
            return Err(e);
        }
        for head in heads {
            let index = usize::try_from(head.seq).unwrap_or(0);
            self.checkpoint(index, head.start + head.tokens.len());
        }
        Ok(())
    }

    /// Keeps the recurrent state of sequence `index`, whose cells hold its first `kept`
    /// tokens, as its latest checkpoint (the oldest goes past
    /// [`wick_backend::RECURRENT_CHECKPOINTS`]).
    fn checkpoint(&mut self, index: usize, kept: usize) {
        if kept == 0 {
            return;
        }
        let Some(state) = crate::ffi::seq_partial_state_bytes(&self.ctx, seq_i32(index)) else {
            return;
        };
        let checkpoints = &mut self.state.checkpoints[index];
        checkpoints.retain(|c| c.kept < kept);
        checkpoints.push(Checkpoint { kept, state });
        if checkpoints.len() > wick_backend::RECURRENT_CHECKPOINTS {
            checkpoints.remove(0);
        }
    }

    /// After a failed evaluation: every sequence of `origins` (a pass's sequence and start)
    /// holds the cells of its tokens but the last again. [`eval`] removes the new cells
    /// itself; a recurrent state cannot be taken back that way, so such a sequence is rebuilt.
    fn recover(&mut self, origins: &[(i32, usize)]) {
        if !self.state.info.recurrent {
            return;
        }
        for &(seq, start) in origins {
            let index = usize::try_from(seq).unwrap_or(0);
            if self.remove_cells(index, start).is_err() {
                tracing::warn!(
                    "sequence {index} could not be rebuilt after a failed evaluation; it is \
                     empty now"
                );
            }
        }
    }

    pub(crate) fn seq_rm_last(&mut self, seq: SeqId, n: usize) -> Result<()> {
        let len = self.state.seqs[self.index(seq)?].len();
        self.truncate(seq, len.saturating_sub(n))
    }

    pub(crate) fn seq_copy(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        let (s, d) = (self.index(src)?, self.index(dst)?);
        let available = self.state.seqs[s].len();
        if n > available {
            return Err(BackendError::InvalidArgument {
                op: "seq_copy",
                reason: format!("cannot copy {n} tokens of sequence {src}, it holds {available}"),
            });
        }
        if s == d {
            return self.truncate(dst, n);
        }
        self.truncate(dst, 0)?;
        if n > 1 {
            self.copy_cells(s, d, available)?;
            self.state.seqs[d] = self.state.seqs[s][..n].to_vec();
            let copied = self.state.checkpoints[s]
                .iter()
                .filter(|c| c.kept < n)
                .map(|c| Checkpoint {
                    kept: c.kept,
                    state: c.state.clone(),
                })
                .collect();
            self.state.checkpoints[d] = copied;
            return self.remove_cells(d, n - 1);
        }
        self.state.seqs[d] = self.state.seqs[s][..n].to_vec();
        Ok(())
    }

    /// Copies every KV cell of sequence `s` (holding `len` tokens) to the empty sequence `d`.
    ///
    /// Each sequence has its own KV stream, and llama.cpp copies a whole stream — all `n_ctx`
    /// cells, used or not. A short sequence is cheaper to move through its state bytes, which
    /// hold only its used cells.
    fn copy_cells(&mut self, s: usize, d: usize, len: usize) -> Result<()> {
        if len * 4 < self.n_ctx() {
            if let Some(bytes) = crate::ffi::seq_state_bytes(&self.ctx, seq_i32(s)) {
                if crate::ffi::set_seq_state_bytes(&mut self.ctx, seq_i32(d), &bytes) {
                    return Ok(());
                }
                self.remove_cells(d, 0)?;
            }
        }
        self.ctx
            .kv_cache_seq_cp(seq_i32(s), seq_i32(d), None, None)
            .map_err(|e| BackendError::Decode {
                reason: e.to_string(),
            })
    }

    pub(crate) fn seq_clear(&mut self) {
        self.ctx.clear_kv_cache();
        for s in &mut self.state.seqs {
            s.clear();
        }
        for c in &mut self.state.checkpoints {
            c.clear();
        }
    }

    pub(crate) fn kv_pack(&mut self, seq: SeqId) -> Result<Vec<u8>> {
        let index = self.index(seq)?;
        let payload = crate::ffi::seq_state_bytes(&self.ctx, seq_i32(index)).ok_or_else(|| {
            BackendError::Decode {
                reason: "llama.cpp wrote a state of unexpected size".into(),
            }
        })?;
        Ok(snapshot::encode(
            &self.state.fingerprint,
            &self.state.seqs[index],
            &payload,
        ))
    }

    pub(crate) fn kv_unpack(&mut self, seq: SeqId, bytes: &[u8]) -> Result<()> {
        let index = self.index(seq)?;
        self.truncate(seq, 0)?;
        let snap = snapshot::decode(&self.state.fingerprint, bytes)?;
        let invalid = |reason: String| BackendError::InvalidSnapshot { reason };
        // Media positions in a snapshot were computed when it was saved: only text is checked.
        let text = wick_types::text_tokens(&snap.tokens);
        check_range(&text, self.state.info.n_vocab).map_err(|e| invalid(e.to_string()))?;
        if snap.tokens.len() > self.n_ctx() {
            return Err(invalid(format!(
                "{} tokens do not fit a window of {}",
                snap.tokens.len(),
                self.n_ctx()
            )));
        }
        if !crate::ffi::set_seq_state_bytes(&mut self.ctx, seq_i32(index), snap.payload) {
            self.remove_cells(index, 0)?;
            return Err(invalid("llama.cpp refused the KV state".into()));
        }
        let expected = i32::try_from(snap.tokens.len()).unwrap_or(i32::MAX) - 2;
        let pos_max = self.ctx.kv_cache_seq_pos_max(seq_i32(index)).max(-1);
        if pos_max != expected.max(-1) {
            self.remove_cells(index, 0)?;
            return Err(invalid(format!(
                "the KV state ends at position {pos_max}, the tokens need {expected}"
            )));
        }
        self.state.seqs[index] = snap.tokens;
        Ok(())
    }

    pub(crate) fn embed(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(BackendError::EmptyInput {
                what: "embed needs at least one token",
            });
        }
        check_range(tokens, self.state.info.n_vocab)?;
        self.check_fits(SeqId(0), tokens.len())?;
        if self.embed_ctx.is_none() {
            let params = crate::load::embedding_params(&self.state.config, self.state.info.n_ctx);
            let runtime = crate::load::runtime()?;
            let model = self.model;
            let ctx = crate::ffi::with_cpu_kernels(self.state.info.cpu_kernels.is_some(), || {
                model.new_context(runtime, params)
            })
            .map_err(|e| BackendError::Decode {
                reason: format!("cannot create the embedding context: {e}"),
            })?;
            self.embed_ctx = Some(ctx);
        }
        let ctx = self
            .embed_ctx
            .as_mut()
            .expect("invariant: created just above");
        ctx.clear_kv_cache();
        let pass = Pass {
            seq: 0,
            start: 0,
            tokens: tokens.iter().copied().map(to_llama).collect(),
            outputs: Outputs::All,
        };
        eval(
            ctx,
            tokens.len(),
            None,
            std::slice::from_ref(&pass),
            |_, _, _, _| Ok(()),
        )?;
        let raw = ctx
            .embeddings_seq_ith(0)
            .map_err(|e| BackendError::Decode {
                reason: format!("no pooled embedding: {e}"),
            })?;
        let norm = raw
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        Ok(raw.iter().map(|x| x / norm).collect())
    }

    /// Makes `adapters` the active set. One adapter at most has a non-zero scale: llama.cpp's
    /// `llama_set_adapters_lora` takes several, but llama-cpp-2 0.1.160 calls it with one and
    /// keeps the context and adapter pointers a wider call needs crate-private, so binding it
    /// here would mean a fork of the crate or reading its private fields by layout.
    pub(crate) fn apply_adapters(&mut self, adapters: &[(u64, f32)]) -> Result<()> {
        for (id, _) in adapters {
            if !self.state.adapters.contains_key(id) {
                return Err(BackendError::UnknownAdapter(*id));
            }
        }
        // An adapter at scale 0 changes nothing.
        let adapters: Vec<(u64, f32)> = adapters
            .iter()
            .copied()
            .filter(|&(_, s)| s != 0.0)
            .collect();
        match adapters.as_slice() {
            [] => self.set_active(None),
            [one] => self.set_active(Some(*one)),
            _ => Err(BackendError::Unsupported {
                backend: "llama",
                op: "apply_adapters with more than one adapter at once",
            }),
        }
    }

    /// Makes `active` the one adapter in use (or none), here and after any context rebuild.
    pub(crate) fn set_active(&mut self, active: Option<(u64, f32)>) -> Result<()> {
        let err = |e: &dyn std::fmt::Display| BackendError::Decode {
            reason: format!("cannot set the LoRA adapter: {e}"),
        };
        match active {
            Some((id, scale)) => {
                let adapter = self
                    .state
                    .adapters
                    .get_mut(&id)
                    .ok_or(BackendError::UnknownAdapter(id))?;
                self.ctx
                    .lora_adapter_set(adapter, scale)
                    .map_err(|e| err(&e))?;
            }
            None => {
                if let Some(adapter) = self.state.adapters.values_mut().next() {
                    self.ctx.lora_adapter_remove(adapter).map_err(|e| err(&e))?;
                }
            }
        }
        self.state.active_adapter = active;
        Ok(())
    }

    pub(crate) fn unload_adapter(&mut self, id: u64) -> Result<()> {
        if !self.state.adapters.contains_key(&id) {
            return Err(BackendError::UnknownAdapter(id));
        }
        if self.state.active_adapter.is_some_and(|(a, _)| a == id) {
            self.set_active(None)?;
        }
        // llama.cpp frees an adapter's weights with its model; wick forgets the handle.
        self.state.adapters.remove(&id);
        Ok(())
    }
}

/// Splits the last token off `pass` (which keeps it, with the last output wanted): the rest
/// of the pass, with every output `pass` wanted (no tokens when the pass has one), unless the
/// pass starts the sequence with one token or none (there is no state before it).
fn split_last(pass: &mut Pass) -> Option<Pass> {
    let n = pass.tokens.len();
    if n == 0 || pass.start + n < 2 {
        return None;
    }
    let head = Pass {
        seq: pass.seq,
        start: pass.start,
        tokens: pass.tokens[..n - 1].to_vec(),
        outputs: if pass.outputs == Outputs::All {
            Outputs::All
        } else {
            Outputs::None
        },
    };
    pass.start += n - 1;
    pass.tokens.drain(..n - 1);
    Some(head)
}

/// The pass that evaluates the pending last token of `history` (sequence `index`) and then
/// `tokens` after it.
fn extend(index: usize, history: &[TokenId], tokens: &[TokenId], outputs: Outputs) -> Pass {
    let start = history.len().saturating_sub(1);
    Pass {
        seq: seq_i32(index),
        start,
        tokens: history[start..]
            .iter()
            .chain(tokens)
            .map(|&t| to_llama(t))
            .collect(),
        outputs,
    }
}
