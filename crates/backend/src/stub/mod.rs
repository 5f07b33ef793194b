//! [`StubBackend`]: every operation of the contract, deterministic and model-free.

mod grammar;
mod model;
mod projector;
mod sampler;
#[cfg(test)]
mod tests;
mod vocab;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

use crate::{
    AdapterId, Backend, BackendConfig, BackendError, Decoded, LayerPlacement, Logprobs, ModelInfo,
    Result, SamplerId, SpecialTokens, StepOp, StepResult, ThinkingTokens, Verified,
};
use grammar::LiteralGrammar;
use model::Sequence;
use sampler::Sampler;
use vocab::{Vocab, EOS, IM_END, THINK_END, THINK_START};

/// The training context the stub claims; `n_ctx` is capped to it.
const N_CTX_TRAIN: u32 = 1 << 16;

/// The stub's chat template: `ChatML`, as `SmolLM2` writes it but without its default system
/// prompt.
const CHAT_TEMPLATE: &str = r"{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// A deterministic backend with no model: the next token is a hash of the context.
///
/// Its vocabulary holds the `ChatML` control tokens (`<|endoftext|>` = 0, `<|im_start|>` = 1,
/// `<|im_end|>` = 2, `<think>` = 3, `</think>` = 4, `<tool_call>` = 5, `</tool_call>` = 6), the
/// 256 single bytes (token `7 + b`) and a few dozen English word pieces. Greedy decoding picks
/// word pieces, so output reads like (nonsense) text, and ends with an EOG token about one step
/// in sixteen. Samplers, literal-alternative grammars, adapters (which change the hash),
/// embeddings, speculative verification, snapshots and batched steps all work, so engine,
/// template and server tests run in milliseconds.
///
/// ```
/// use wick_backend::{Backend, BackendConfig, StubBackend};
/// use wick_types::{Grammar, SamplerOpts, SeqId};
///
/// let mut stub = StubBackend::new(&BackendConfig::new("unused.gguf")).unwrap();
/// let prompt = stub.tokenize("Is it?", false).unwrap();
/// stub.prefill(SeqId(0), &prompt).unwrap();
/// let yes_no = Grammar::Gbnf(r#"root ::= "yes" | "no""#.to_owned());
/// let sampler = stub
///     .sampler_new(&SamplerOpts { grammar: Some(yes_no), ..SamplerOpts::greedy() })
///     .unwrap();
/// let mut answer = Vec::new();
/// while let wick_backend::Decoded::Token(t) = stub.decode_one(SeqId(0), Some(sampler)).unwrap() {
///     answer.push(t);
/// }
/// let text = String::from_utf8(stub.detokenize(&answer).unwrap()).unwrap();
/// assert!(text == "yes" || text == "no");
/// ```
#[derive(Debug)]
pub struct StubBackend {
    info: ModelInfo,
    vocab: Vocab,
    tokenizer: Arc<StubTokenizer>,
    seqs: Vec<Sequence>,
    samplers: HashMap<u64, Sampler>,
    next_sampler: u64,
    adapters: HashMap<u64, PathBuf>,
    /// The active adapters: id to scale.
    active: BTreeMap<u64, f32>,
    next_adapter: u64,
    /// The fake projector, when [`StubBackend::with_projector`] gave one.
    projector: Option<Arc<projector::StubProjector>>,
    /// With [`StubBackend::with_recurrent`]: the tokens its cuts would evaluate again.
    rebuilt: Option<Arc<AtomicU64>>,
    /// With [`StubBackend::with_recurrent`], per sequence: the lengths of its last prompts,
    /// which a real backend checkpoints (a cut back to one evaluates nothing again).
    checkpoints: Vec<Vec<usize>>,
}

/// The stub's vocabulary, for any thread.
#[derive(Debug)]
struct StubTokenizer {
    vocab: Vocab,
    special: SpecialTokens,
}

impl crate::Tokenizer for StubTokenizer {
    fn special(&self) -> &SpecialTokens {
        &self.special
    }

    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        Ok(self.vocab.tokenize(text, special))
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>> {
        self.vocab.detokenize(tokens)
    }

    fn max_token_bytes(&self) -> Option<usize> {
        let longest = (0..self.vocab.n_vocab())
            .filter_map(|t| self.vocab.detokenize(&[TokenId(t)]).ok())
            .map(|piece| piece.len())
            .max()?;
        Some(2 * longest.max(1))
    }
}

impl StubBackend {
    /// A stub with `config`'s context layout (`n_ctx` per sequence, capped at 65,536, and
    /// `n_seq_max` sequences). The model path is ignored.
    ///
    /// # Errors
    ///
    /// [`BackendError::Config`] when `config` does not validate.
    pub fn new(config: &BackendConfig) -> Result<Self> {
        config.validate()?;
        let vocab = Vocab::new();
        let n_vocab = vocab.n_vocab();
        let n_params = u64::from(n_vocab) * u64::from(model::N_EMBD) * 2;
        let info = ModelInfo {
            name: "stub".to_owned(),
            architecture: "stub".to_owned(),
            model_size_bytes: n_params * 4,
            n_params,
            n_layer: 2,
            n_gpu_layers: 0,
            n_vocab,
            n_embd: model::N_EMBD,
            n_ctx: config.n_ctx.min(N_CTX_TRAIN),
            n_ctx_train: N_CTX_TRAIN,
            n_seq_max: config.n_seq_max,
            special: SpecialTokens {
                bos: None,
                eos: Some(EOS),
                add_bos: false,
                eog: vec![EOS, IM_END],
                control: Vocab::control_ids(),
                thinking: Some(ThinkingTokens {
                    start: THINK_START,
                    end: THINK_END,
                }),
            },
            chat_template: Some(CHAT_TEMPLATE.to_owned()),
            // The stub's next token is a hash of the context: nothing depends on batching.
            deterministic: true,
            build: format!("stub {}", env!("CARGO_PKG_VERSION")),
            placement: vec![LayerPlacement {
                device: "CPU".to_owned(),
                description: "stub".to_owned(),
                first_layer: 0,
                n_layers: 2,
                output: true,
                kv_bytes: 0,
                deterministic: true,
            }],
            max_active_adapters: u32::MAX,
            cpu_kernels: None,
            // The stub's context is a hash of every token: any prefix can be taken back.
            recurrent: false,
        };
        let tokenizer = Arc::new(StubTokenizer {
            vocab: vocab.clone(),
            special: info.special.clone(),
        });
        Ok(StubBackend {
            seqs: vec![Sequence::default(); config.n_seq_max as usize],
            checkpoints: vec![Vec::new(); config.n_seq_max as usize],
            info,
            vocab,
            tokenizer,
            samplers: HashMap::new(),
            next_sampler: 0,
            adapters: HashMap::new(),
            active: BTreeMap::new(),
            next_adapter: 0,
            projector: None,
            rebuilt: None,
        })
    }

    /// The stub as a model with a recurrent state ([`ModelInfo::recurrent`]): it still cuts
    /// any sequence back exactly, and adds to `rebuilt` the tokens a real one would evaluate
    /// again for each cut (a shorter `seq_rm_last` or `seq_copy`, a verify's rejected
    /// drafts) that does not end at a checkpoint (where one of the sequence's last
    /// [`crate::RECURRENT_CHECKPOINTS`] prefill ops ended), so a test sees what an engine made
    /// it redo.
    #[must_use]
    pub fn with_recurrent(mut self, rebuilt: Arc<AtomicU64>) -> Self {
        self.info.recurrent = true;
        self.rebuilt = Some(rebuilt);
        self
    }

    /// When the stub is recurrent: a checkpoint at sequence `i`'s length, the end of a
    /// prefill op (the last [`crate::RECURRENT_CHECKPOINTS`] are kept).
    fn checkpoint(&mut self, i: usize) {
        if self.rebuilt.is_none() {
            return;
        }
        let len = self.seqs[i].len();
        let checkpoints = &mut self.checkpoints[i];
        checkpoints.retain(|&m| m < len);
        checkpoints.push(len);
        if checkpoints.len() > crate::RECURRENT_CHECKPOINTS {
            checkpoints.remove(0);
        }
    }

    /// Counts a cut of sequence `i` that keeps `kept` of `len` tokens, when the stub is
    /// recurrent and `kept` is not a checkpoint of it.
    fn cut(&self, i: usize, kept: usize, len: usize) {
        let checkpoint = self.checkpoints[i].contains(&kept);
        if let (Some(rebuilt), true) = (&self.rebuilt, 0 < kept && kept < len && !checkpoint) {
            rebuilt.fetch_add(kept as u64, Ordering::Relaxed);
        }
    }

    /// The stub with a fake image projector ([`Backend::media_encoder`]): every image (PNG,
    /// JPEG, … by its first bytes) takes four positions whose ids derive from its bytes.
    #[must_use]
    pub fn with_projector(mut self) -> Self {
        self.projector = Some(Arc::new(projector::StubProjector::default()));
        self
    }

    /// Every token of `tokens` is in the vocabulary or a whole run of a held image.
    fn check_tokens(&self, tokens: &[TokenId]) -> Result<()> {
        // Without a projector a media id is just an id outside the vocabulary.
        let Some(projector) = &self.projector else {
            return self.vocab.check(tokens);
        };
        let text = wick_types::text_tokens(tokens);
        self.vocab.check(&text)?;
        if text.len() == tokens.len() {
            return Ok(());
        }
        projector.check(tokens)
    }

    /// The index of sequence `seq`.
    fn index(&self, seq: SeqId) -> Result<usize> {
        if seq.0 < self.info.n_seq_max {
            Ok(seq.0 as usize)
        } else {
            Err(BackendError::UnknownSequence {
                seq,
                n_seq_max: self.info.n_seq_max,
            })
        }
    }

    /// Checks that `seq` may grow to `needed` tokens.
    fn fits(&self, seq: SeqId, needed: usize) -> Result<()> {
        if needed > self.info.n_ctx as usize {
            return Err(BackendError::ContextFull {
                seq,
                needed,
                n_ctx: self.info.n_ctx,
            });
        }
        Ok(())
    }

    /// Every check of a prefill, without applying it.
    fn check_prefill(&self, seq: SeqId, tokens: &[TokenId]) -> Result<usize> {
        let i = self.index(seq)?;
        if tokens.is_empty() {
            return Err(BackendError::EmptyInput {
                what: "prefill without tokens",
            });
        }
        self.check_tokens(tokens)?;
        self.fits(seq, self.seqs[i].len() + tokens.len())?;
        Ok(i)
    }

    /// Every check of a decode, without applying it.
    fn check_decode(&self, seq: SeqId, sampler: Option<SamplerId>) -> Result<usize> {
        let i = self.index(seq)?;
        if let Some(s) = sampler {
            self.sampler(s)?;
        }
        if self.seqs[i].len() == 0 {
            return Err(BackendError::EmptyInput {
                what: "decode of an empty sequence (prefill it first)",
            });
        }
        self.fits(seq, self.seqs[i].len() + 1)?;
        Ok(i)
    }

    fn sampler(&self, id: SamplerId) -> Result<&Sampler> {
        self.samplers
            .get(&id.0)
            .ok_or(BackendError::UnknownSampler(id.0))
    }

    fn sampler_mut(&mut self, id: SamplerId) -> Result<&mut Sampler> {
        self.samplers
            .get_mut(&id.0)
            .ok_or(BackendError::UnknownSampler(id.0))
    }

    /// The greedy next token after a history with hash `history`, under the active adapters.
    fn greedy_after(&self, history: u64) -> TokenId {
        model::greedy(&self.vocab, model::context_hash(history, &self.active))
    }

    /// The next token of sequence `i` (already checked), drawn with a copy of `sampler` kept in
    /// `staged`: nothing changes until the caller commits the staged samplers, so a failure
    /// leaves every sampler as it was. With `distribution`, also the candidates a sampler drew
    /// from (`None` for greedy without a sampler: its distribution is the raw one).
    fn sample_next(
        &self,
        i: usize,
        sampler: Option<SamplerId>,
        staged: &mut HashMap<u64, Sampler>,
        distribution: bool,
    ) -> Result<(TokenId, Option<sampler::Candidates>)> {
        let seq = &self.seqs[i];
        let Some(id) = sampler else {
            return Ok((self.greedy_after(seq.hash()), None));
        };
        let sampler = match staged.entry(id.0) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(self.sampler(id)?.clone()),
        };
        let logits = model::logits(&self.vocab, model::context_hash(seq.hash(), &self.active));
        sampler.sample(&self.vocab, logits, seq.tokens(), distribution)
    }

    /// The log-probabilities of sequence `i`'s next position (raw logits, no sampler), for
    /// `token` sampled there.
    fn logprobs(&self, i: usize, token: TokenId, top: u8) -> Logprobs {
        let ctx = model::context_hash(self.seqs[i].hash(), &self.active);
        Logprobs::from_logits(&model::logits(&self.vocab, ctx), token, top)
    }

    fn decoded(&self, token: TokenId) -> Decoded {
        if self.info.special.is_eog(token) {
            Decoded::Eog(token)
        } else {
            Decoded::Token(token)
        }
    }

    /// Names the model and context layout in every snapshot.
    fn fingerprint(&self) -> String {
        format!(
            "stub:v1:n_vocab={}:n_ctx={}",
            self.info.n_vocab, self.info.n_ctx
        )
    }

    /// The tokens of a snapshot, checked against the vocabulary and the context window.
    fn unpack_tokens(&self, snapshot: &[u8]) -> Result<Vec<TokenId>> {
        let snap = crate::snapshot::decode(&self.fingerprint(), snapshot)?;
        let bad = |reason: String| BackendError::InvalidSnapshot { reason };
        // Media positions in a snapshot were computed when it was saved: only text is checked.
        let text = wick_types::text_tokens(&snap.tokens);
        if let Err(e) = self.vocab.check(&text) {
            return Err(bad(e.to_string()));
        }
        if snap.tokens.len() > self.info.n_ctx as usize {
            return Err(bad(format!(
                "it holds {} tokens but the context window holds {}",
                snap.tokens.len(),
                self.info.n_ctx
            )));
        }
        if !snap.payload.is_empty() {
            return Err(bad("the stub's snapshots carry no payload".to_owned()));
        }
        Ok(snap.tokens)
    }

    fn grammar(grammar: Option<&Grammar>) -> Result<Option<LiteralGrammar>> {
        grammar.map(LiteralGrammar::parse).transpose()
    }
}

/// A checked step operation, ready to apply.
impl StubBackend {
    /// Greedy verification of `candidates` after sequence `i`: the accepted ones, then the
    /// model's next token (nothing is appended).
    fn accept(&self, i: usize, candidates: &[TokenId]) -> Vec<TokenId> {
        let mut hash = self.seqs[i].hash();
        let mut out = Vec::with_capacity(candidates.len() + 1);
        let mut next = self.greedy_after(hash);
        while out.len() < candidates.len() && next == candidates[out.len()] {
            hash = model::extend_hash(hash, next);
            out.push(next);
            next = self.greedy_after(hash);
        }
        // The rejected drafts are taken off again.
        let len = self.seqs[i].len();
        self.cut(i, len + out.len(), len + candidates.len());
        out.push(next);
        out
    }
}

enum Planned<'a> {
    Prefill(&'a [TokenId]),
    Decode(TokenId, Option<Logprobs>),
    /// The accepted candidates and the next token.
    Verified(Vec<TokenId>),
}

impl Backend for StubBackend {
    fn name(&self) -> &'static str {
        "stub"
    }

    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn tokenizer(&self) -> crate::SharedTokenizer {
        self.tokenizer.clone()
    }

    fn media_encoder(&self) -> Option<crate::SharedMediaEncoder> {
        self.projector
            .clone()
            .map(|p| p as crate::SharedMediaEncoder)
    }

    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        Ok(self.vocab.tokenize(text, special))
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>> {
        self.vocab.detokenize(tokens)
    }

    fn prefill(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<()> {
        let i = self.check_prefill(seq, tokens)?;
        self.seqs[i].extend(tokens);
        Ok(())
    }

    fn decode_one(&mut self, seq: SeqId, sampler: Option<SamplerId>) -> Result<Decoded> {
        let i = self.check_decode(seq, sampler)?;
        let mut staged = HashMap::new();
        let (token, _) = self.sample_next(i, sampler, &mut staged, false)?;
        self.samplers.extend(staged);
        self.seqs[i].extend(&[token]);
        Ok(self.decoded(token))
    }

    fn seq_tokens(&self, seq: SeqId) -> Result<Vec<TokenId>> {
        Ok(self.seqs[self.index(seq)?].tokens().to_vec())
    }

    fn kv_pack(&mut self, seq: SeqId) -> Result<Vec<u8>> {
        let i = self.index(seq)?;
        Ok(crate::snapshot::encode(
            &self.fingerprint(),
            self.seqs[i].tokens(),
            &[],
        ))
    }

    fn kv_unpack(&mut self, seq: SeqId, snapshot: &[u8]) -> Result<()> {
        let i = self.index(seq)?;
        self.seqs[i].truncate(0);
        self.checkpoints[i].clear();
        let tokens = self.unpack_tokens(snapshot)?;
        self.seqs[i].extend(&tokens);
        Ok(())
    }

    /// Checks every operation and samples every decode before changing anything, so a step
    /// that fails changes nothing; then appends the tokens.
    fn step(&mut self, ops: &[(SeqId, StepOp)]) -> Result<Vec<(SeqId, StepResult)>> {
        crate::check_distinct(ops)?;
        let indices = ops
            .iter()
            .map(|(seq, op)| {
                op.check_shape()?;
                match op {
                    StepOp::Prefill(tokens) => self.check_prefill(*seq, tokens),
                    StepOp::PrefillDecode(tokens, decode) => {
                        let i = self.check_prefill(*seq, tokens)?;
                        if let Some(s) = decode.sampler() {
                            self.sampler(s)?;
                        }
                        self.fits(*seq, self.seqs[i].len() + tokens.len() + 1)?;
                        Ok(i)
                    }
                    StepOp::Verify(candidates) => {
                        let i = self.check_decode(*seq, None)?;
                        self.vocab.check(candidates)?;
                        self.fits(*seq, self.seqs[i].len() + candidates.len() + 1)?;
                        Ok(i)
                    }
                    decode => self.check_decode(*seq, decode.sampler()),
                }
            })
            .collect::<Result<Vec<usize>>>()?;
        let mut staged = HashMap::new();
        let planned = ops
            .iter()
            .zip(&indices)
            .map(|((_, op), &i)| match op {
                StepOp::Prefill(tokens) => Ok(Planned::Prefill(tokens)),
                StepOp::Verify(candidates) => Ok(Planned::Verified(self.accept(i, candidates))),
                decode => {
                    // The prompt's last chunk goes in before its first token is sampled.
                    self.seqs[i].extend(decode.prefix());
                    if matches!(decode, StepOp::PrefillDecode(..)) {
                        self.checkpoint(i);
                    }
                    let (token, candidates) = self.sample_next(
                        i,
                        decode.sampler(),
                        &mut staged,
                        decode.after_sampling(),
                    )?;
                    let logprobs = decode.logprobs().map(|top| match &candidates {
                        Some(candidates) => Logprobs::from_candidates(candidates, token, top),
                        None => self.logprobs(i, token, top),
                    });
                    Ok(Planned::Decode(token, logprobs))
                }
            })
            .collect::<Result<Vec<Planned<'_>>>>()?;
        self.samplers.extend(staged);
        let mut out = Vec::with_capacity(ops.len());
        for ((seq, i), plan) in ops.iter().map(|(seq, _)| *seq).zip(indices).zip(planned) {
            let result = match plan {
                Planned::Prefill(tokens) => {
                    self.seqs[i].extend(tokens);
                    self.checkpoint(i);
                    StepResult::Prefilled
                }
                Planned::Verified(tokens) => {
                    self.seqs[i].extend(&tokens);
                    StepResult::Verified(crate::classify_appended(
                        &self.info,
                        self.seqs[i].tokens(),
                        tokens.len(),
                    ))
                }
                Planned::Decode(token, logprobs) => {
                    self.seqs[i].extend(&[token]);
                    let decoded = self.decoded(token);
                    let thinking = self.info.special.thinking;
                    let result =
                        crate::thinking::classify(thinking, self.seqs[i].tokens(), decoded);
                    match logprobs {
                        Some(l) => StepResult::WithLogprobs(Box::new(result), l),
                        None => result,
                    }
                }
            };
            out.push((seq, result));
        }
        Ok(out)
    }

    fn sampler_new(&mut self, opts: &SamplerOpts) -> Result<SamplerId> {
        let sampler = Sampler::new(&self.vocab, opts)?;
        let id = self.next_sampler;
        self.next_sampler += 1;
        self.samplers.insert(id, sampler);
        Ok(SamplerId(id))
    }

    fn sampler_configure(&mut self, sampler: SamplerId, opts: &SamplerOpts) -> Result<()> {
        self.sampler(sampler)?;
        let fresh = Sampler::new(&self.vocab, opts)?;
        *self.sampler_mut(sampler)? = fresh;
        Ok(())
    }

    fn sampler_clear(&mut self, sampler: SamplerId) -> Result<()> {
        self.sampler_mut(sampler)?.clear();
        Ok(())
    }

    fn sampler_free(&mut self, sampler: SamplerId) -> Result<()> {
        self.samplers
            .remove(&sampler.0)
            .map(drop)
            .ok_or(BackendError::UnknownSampler(sampler.0))
    }

    fn set_grammar(&mut self, sampler: SamplerId, grammar: Option<&Grammar>) -> Result<()> {
        self.sampler(sampler)?;
        let parsed = Self::grammar(grammar)?;
        self.sampler_mut(sampler)?.set_grammar(parsed);
        Ok(())
    }

    fn load_adapter(&mut self, path: &Path) -> Result<AdapterId> {
        let fail = |reason: String| BackendError::Adapter {
            path: path.to_path_buf(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if !meta.is_file() {
            return Err(fail("not a regular file".to_owned()));
        }
        std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
        let id = self.next_adapter;
        self.next_adapter += 1;
        self.adapters.insert(id, path.to_path_buf());
        Ok(AdapterId(id))
    }

    fn apply_adapters(&mut self, adapters: &[(AdapterId, f32)]) -> Result<()> {
        if let Some((id, _)) = adapters
            .iter()
            .find(|(id, _)| !self.adapters.contains_key(&id.0))
        {
            return Err(BackendError::UnknownAdapter(id.0));
        }
        self.active = adapters.iter().map(|&(id, scale)| (id.0, scale)).collect();
        Ok(())
    }

    fn unload_adapter(&mut self, adapter: AdapterId) -> Result<()> {
        self.adapters
            .remove(&adapter.0)
            .ok_or(BackendError::UnknownAdapter(adapter.0))?;
        self.active.remove(&adapter.0);
        Ok(())
    }

    fn embed(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(BackendError::EmptyInput {
                what: "embedding of no tokens",
            });
        }
        self.vocab.check(tokens)?;
        Ok(model::embed(tokens))
    }

    fn logits(
        &mut self,
        seq: SeqId,
        tokens: &[TokenId],
        each: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        let i = self.index(seq)?;
        if tokens.is_empty() {
            return Err(BackendError::EmptyInput {
                what: "logits needs at least one token",
            });
        }
        self.vocab.check(tokens)?;
        self.fits(seq, self.seqs[i].len() + tokens.len())?;
        let known = usize::from(self.seqs[i].len() > 0);
        let mut after = self.seqs[i].clone();
        after.extend(tokens);
        let first = after.len() - tokens.len() - known;
        for n in first..after.len() {
            let ctx = model::context_hash(after.hash_of(n + 1), &self.active);
            #[allow(clippy::cast_possible_truncation)] // the stub's logits are small
            let row: Vec<f32> = model::logits(&self.vocab, ctx)
                .into_iter()
                .map(|l| l as f32)
                .collect();
            each(&row);
        }
        self.seqs[i] = after;
        Ok(())
    }

    fn verify(&mut self, seq: SeqId, candidates: &[TokenId]) -> Result<Verified> {
        let i = self.index(seq)?;
        if candidates.is_empty() {
            return Err(BackendError::EmptyInput {
                what: "verify without candidates",
            });
        }
        self.vocab.check(candidates)?;
        if self.seqs[i].len() == 0 {
            return Err(BackendError::EmptyInput {
                what: "verify on an empty sequence (prefill it first)",
            });
        }
        self.fits(seq, self.seqs[i].len() + candidates.len() + 1)?;
        let tokens = self.accept(i, candidates);
        self.seqs[i].extend(&tokens);
        let (&next, accepted) = tokens
            .split_last()
            .expect("invariant: the next token is last");
        Ok(Verified {
            accepted: accepted.len(),
            next: self.decoded(next),
        })
    }

    fn seq_rm(&mut self, seq: SeqId) -> Result<()> {
        let i = self.index(seq)?;
        self.seqs[i].truncate(0);
        self.checkpoints[i].clear();
        Ok(())
    }

    fn seq_rm_last(&mut self, seq: SeqId, n: usize) -> Result<()> {
        let i = self.index(seq)?;
        let keep = self.seqs[i].len().saturating_sub(n);
        self.cut(i, keep, self.seqs[i].len());
        self.seqs[i].truncate(keep);
        self.checkpoints[i].retain(|&m| m <= keep);
        Ok(())
    }

    fn seq_copy(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        let (s, d) = (self.index(src)?, self.index(dst)?);
        let len = self.seqs[s].len();
        if n > len {
            return Err(BackendError::InvalidArgument {
                op: "seq_copy",
                reason: format!("cannot copy {n} tokens of sequence {src}, it holds {len}"),
            });
        }
        self.cut(s, n, len);
        self.seqs[d] = self.seqs[s].prefix(n);
        self.checkpoints[d] = self.checkpoints[s]
            .iter()
            .copied()
            .filter(|&m| m <= n)
            .collect();
        Ok(())
    }

    fn seq_clear(&mut self) -> Result<()> {
        self.seqs.iter_mut().for_each(|s| s.truncate(0));
        self.checkpoints.iter_mut().for_each(Vec::clear);
        Ok(())
    }
}
