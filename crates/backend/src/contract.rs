use std::path::Path;

use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

use crate::{BackendError, Logprobs, ModelInfo, Result, MAX_TOP_LOGPROBS};

/// A sampler created with [`Backend::sampler_new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SamplerId(pub u64);

/// An adapter loaded with [`Backend::load_adapter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AdapterId(pub u64);

/// The adapters a computation runs under, each with its scale: sorted by id, one entry per
/// adapter, no zero scale (an adapter at scale 0 changes nothing, so a set with one is the set
/// without it). The empty set is the base model.
///
/// Two sets are equal when they hold the same adapters at bit-identical scales: the engine
/// never batches requests of different sets together, and never reuses a prefix computed
/// under one set for another.
#[derive(Debug, Clone, Default)]
pub struct AdapterSet(Vec<(AdapterId, f32)>);

impl AdapterSet {
    /// The set of `adapters`; for an id given twice the last scale counts, and adapters at
    /// scale 0 are left out.
    pub fn new(adapters: impl IntoIterator<Item = (AdapterId, f32)>) -> Self {
        let mut by_id = std::collections::BTreeMap::new();
        for (id, scale) in adapters {
            by_id.insert(id, scale);
        }
        AdapterSet(by_id.into_iter().filter(|&(_, s)| s != 0.0).collect())
    }

    /// The adapters with their scales, by id.
    pub fn as_slice(&self) -> &[(AdapterId, f32)] {
        &self.0
    }

    /// Whether this is the base model (no adapter).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many adapters are active.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl PartialEq for AdapterSet {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && x.to_bits() == y.to_bits())
    }
}

impl Eq for AdapterSet {}

impl std::hash::Hash for AdapterSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for (id, scale) in &self.0 {
            id.hash(state);
            scale.to_bits().hash(state);
        }
    }
}

/// The token a decode produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decoded {
    /// An ordinary token: generation goes on.
    Token(TokenId),
    /// An end-of-generation token (EOS, end of turn, …).
    Eog(TokenId),
}

impl Decoded {
    /// The token, whichever kind it is.
    pub fn token(self) -> TokenId {
        match self {
            Decoded::Token(t) | Decoded::Eog(t) => t,
        }
    }

    /// Whether it ends generation.
    pub fn is_eog(self) -> bool {
        matches!(self, Decoded::Eog(_))
    }
}

/// One operation of a batched [`Backend::step`].
#[derive(Debug, Clone, PartialEq)]
pub enum StepOp {
    /// Append these tokens to the sequence.
    Prefill(Vec<TokenId>),
    /// Sample the sequence's next token with this sampler (greedy when `None`) and append it.
    Decode(Option<SamplerId>),
    /// [`StepOp::Decode`] that also reports the position's log-probabilities: its result is a
    /// [`StepResult::WithLogprobs`] around what the plain decode would have returned.
    DecodeLogprobs {
        /// The sampler (greedy when `None`).
        sampler: Option<SamplerId>,
        /// How many most likely alternatives to report (0: only the sampled token's; capped
        /// at [`MAX_TOP_LOGPROBS`]).
        top: u8,
        /// Report the distribution the token was drawn from instead of the model's raw one:
        /// the candidates left after logit bias, penalties, grammar, top-k, top-p, min-p and
        /// temperature, renormalised (llama-server's `post_sampling_probs`). A greedy pick's
        /// distribution is the softmax of the biased, penalised and masked logits. Tokens
        /// with no chance there are never listed among the alternatives.
        after_sampling: bool,
    },
    /// Append these tokens, then decode as the inner [`StepOp::Decode`] or
    /// [`StepOp::DecodeLogprobs`] says, in the same forward pass: a prompt's last chunk and its
    /// first token in one step. The result is the inner decode's.
    PrefillDecode(Vec<TokenId>, Box<StepOp>),
    /// Greedy speculative verification of these candidates (at least one) after the
    /// sequence's history, in the same forward pass as the other operations: the longest
    /// prefix of them that greedy decoding would have produced is kept, then the model's own
    /// next token is appended. The result is a [`StepResult::Verified`].
    Verify(Vec<TokenId>),
}

impl StepOp {
    /// The sampler of a decode (of either kind); `None` for a prefill or a greedy decode.
    pub fn sampler(&self) -> Option<SamplerId> {
        match self {
            StepOp::Prefill(_) | StepOp::Verify(_) => None,
            StepOp::Decode(sampler) | StepOp::DecodeLogprobs { sampler, .. } => *sampler,
            StepOp::PrefillDecode(_, decode) => decode.sampler(),
        }
    }

    /// How many alternatives a [`StepOp::DecodeLogprobs`] wants (capped); `None` for other ops.
    pub fn logprobs(&self) -> Option<u8> {
        match self {
            StepOp::DecodeLogprobs { top, .. } => Some((*top).min(MAX_TOP_LOGPROBS)),
            StepOp::PrefillDecode(_, decode) => decode.logprobs(),
            _ => None,
        }
    }

    /// Whether a [`StepOp::DecodeLogprobs`] reports the sampled distribution rather than the
    /// raw one (`after_sampling`); `false` for other ops.
    pub fn after_sampling(&self) -> bool {
        match self {
            StepOp::DecodeLogprobs { after_sampling, .. } => *after_sampling,
            StepOp::PrefillDecode(_, decode) => decode.after_sampling(),
            _ => false,
        }
    }

    /// The tokens this op appends before it decodes (empty for a plain decode).
    pub fn prefix(&self) -> &[TokenId] {
        match self {
            StepOp::Prefill(tokens) | StepOp::PrefillDecode(tokens, _) => tokens,
            _ => &[],
        }
    }

    /// Whether the op samples a token.
    pub fn decodes(&self) -> bool {
        !matches!(self, StepOp::Prefill(_))
    }

    /// Checks the shape of a [`StepOp::PrefillDecode`] (at least one token, and a plain decode
    /// inside) and of a [`StepOp::Verify`] (at least one candidate).
    ///
    /// # Errors
    ///
    /// [`BackendError::InvalidArgument`] naming what is wrong; [`BackendError::EmptyInput`]
    /// for a verify without candidates.
    pub fn check_shape(&self) -> Result<()> {
        if matches!(self, StepOp::Verify(candidates) if candidates.is_empty()) {
            return Err(BackendError::EmptyInput {
                what: "verify needs at least one candidate",
            });
        }
        if let StepOp::PrefillDecode(tokens, decode) = self {
            let reason = if tokens.is_empty() {
                "it needs at least one token to prefill"
            } else if !matches!(**decode, StepOp::Decode(_) | StepOp::DecodeLogprobs { .. }) {
                "its inner op must be a Decode or a DecodeLogprobs"
            } else {
                return Ok(());
            };
            return Err(BackendError::InvalidArgument {
                op: "PrefillDecode",
                reason: reason.to_owned(),
            });
        }
        Ok(())
    }
}

/// What one [`StepOp`] produced.
#[derive(Debug, Clone, PartialEq)]
pub enum StepResult {
    /// The prefill was evaluated.
    Prefilled,
    /// A token outside any reasoning block.
    Token(Decoded),
    /// A token inside a reasoning block (including the opening token).
    ThinkingToken(TokenId),
    /// The token that closed a reasoning block.
    ThinkingEnd(TokenId),
    /// The result of a [`StepOp::DecodeLogprobs`]: the plain decode's result (never itself a
    /// `WithLogprobs`) and the log-probabilities of the position it was sampled at.
    WithLogprobs(Box<StepResult>, Logprobs),
    /// The result of a [`StepOp::Verify`]: every token appended, in order (the accepted
    /// candidates, then the model's next token), each as a greedy decode would have reported
    /// it; never empty.
    Verified(Vec<StepResult>),
}

impl StepResult {
    /// The decoded token, if this result carries one.
    pub fn token(&self) -> Option<TokenId> {
        match self {
            StepResult::Prefilled => None,
            StepResult::Token(d) => Some(d.token()),
            StepResult::ThinkingToken(t) | StepResult::ThinkingEnd(t) => Some(*t),
            StepResult::WithLogprobs(inner, _) => inner.token(),
            StepResult::Verified(tokens) => tokens.last().and_then(StepResult::token),
        }
    }

    /// The results of each token this result appended: a [`StepResult::Verified`]'s list, or
    /// the result itself.
    pub fn each(&self) -> &[StepResult] {
        match self {
            StepResult::Verified(tokens) => tokens,
            other => std::slice::from_ref(other),
        }
    }

    /// The result without its log-probabilities.
    pub fn plain(&self) -> &StepResult {
        match self {
            StepResult::WithLogprobs(inner, _) => inner.plain(),
            other => other,
        }
    }

    /// The log-probabilities, for the result of a [`StepOp::DecodeLogprobs`].
    pub fn logprobs(&self) -> Option<&Logprobs> {
        match self {
            StepResult::WithLogprobs(_, logprobs) => Some(logprobs),
            _ => None,
        }
    }

    /// The decoded token as [`Backend::decode_one`] reports it (a reasoning token is a
    /// [`Decoded::Token`]); `None` for a prefill.
    pub fn decoded(&self) -> Option<Decoded> {
        match self.plain() {
            StepResult::Token(d) => Some(*d),
            StepResult::ThinkingToken(t) | StepResult::ThinkingEnd(t) => Some(Decoded::Token(*t)),
            StepResult::Verified(tokens) => tokens.last().and_then(StepResult::decoded),
            StepResult::Prefilled | StepResult::WithLogprobs(..) => None,
        }
    }
}

/// The answer of a speculative [`Backend::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// How many leading candidates the model accepted.
    pub accepted: usize,
    /// The model's own token after the accepted ones.
    pub next: Decoded,
}

/// The error of a decode that produced no token.
fn no_token(op: &'static str) -> BackendError {
    BackendError::Decode {
        reason: format!("{op}: a decode produced no token"),
    }
}

/// Checks that every sequence appears at most once in a step.
///
/// # Errors
///
/// [`BackendError::DuplicateSequence`] naming the first repeated sequence.
pub fn check_distinct(ops: &[(SeqId, StepOp)]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(ops.len());
    for (seq, _) in ops {
        if !seen.insert(*seq) {
            return Err(BackendError::DuplicateSequence { seq: *seq });
        }
    }
    Ok(())
}

/// The results of the last `n` tokens of `history` (which ends with them), each classified as
/// a decode would have reported it: end of generation, reasoning, or an ordinary token.
pub fn classify_appended(info: &ModelInfo, history: &[TokenId], n: usize) -> Vec<StepResult> {
    let start = history.len().saturating_sub(n);
    (start..history.len())
        .map(|end| {
            let token = history[end];
            let decoded = if info.special.is_eog(token) {
                Decoded::Eog(token)
            } else {
                Decoded::Token(token)
            };
            crate::thinking::classify(info.special.thinking, &history[..=end], decoded)
        })
        .collect()
}

/// The backend contract of seed 001: what the engine needs from an inference engine.
///
/// A backend holds one loaded model and a context of `n_seq_max` sequences. Each sequence is a
/// token history; its KV cells always hold every token of it except the last, which is evaluated
/// (together with the tokens of other sequences) by the next decode. This keeps the contract
/// stateless about logits: any operation may follow any other.
///
/// * [`Backend::prefill`] appends tokens; [`Backend::decode_one`] samples the next token, appends
///   it and returns it. Both are checked: unknown sequences, out-of-range token ids, empty input
///   and context overflow are errors, never a panic or an abort inside the engine.
/// * [`Backend::decode_one_logprobs`] and [`StepOp::DecodeLogprobs`] also report the
///   log-probabilities of the decoded position: the log-softmax of the model's raw logits
///   there (before logit bias, penalties, grammar and temperature), the sampled token's and the
///   `top` most likely tokens' ([`Logprobs`]). Greedy decoding without bias samples the first
///   of them. The default [`Backend::step`] cannot compute them and answers
///   [`BackendError::Unsupported`].
/// * [`Backend::tokenize`] takes an explicit `special`: with `false`, text such as
///   `<|im_start|>` is plain text and never yields a control token. User content must always be
///   tokenized with `false`.
/// * [`Backend::kv_pack`] / [`Backend::kv_unpack`] move a sequence, tokens and KV state, into and
///   out of an opaque, checksummed byte snapshot.
/// * Every other operation is optional: its default returns [`BackendError::Unsupported`], except
///   [`Backend::step`], which falls back to one operation at a time.
///
/// Dropping the backend is `terminate`: it frees the model and context.
pub trait Backend: Send {
    /// A short name for errors and logs (`"llama"`, `"stub"`).
    fn name(&self) -> &'static str;

    /// The model and context this backend holds.
    fn info(&self) -> &ModelInfo;

    /// Tokenizes `text` without adding BOS. With `special`, control-token text (such as
    /// `<|im_start|>`) becomes control tokens; without it, it stays plain text.
    ///
    /// # Errors
    ///
    /// [`BackendError::Tokenize`] when the text cannot be tokenized.
    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>>;

    /// A tokenizer of this model's vocabulary that any thread may use while the backend runs
    /// elsewhere (prompts are rendered and tokenized on the callers' side, never on the
    /// model's thread). It tokenizes exactly as [`Backend::tokenize`] does.
    fn tokenizer(&self) -> crate::SharedTokenizer;

    /// The model's projector (images or sounds into prompt positions), shared with the
    /// threads that render prompts; `None` for a model without one. Prompts may then hold the
    /// ids it hands out ([`wick_types::TokenId::media`]) for as long as the
    /// [`crate::EncodedMedia`] it returned lives: [`Backend::prefill`] and [`Backend::step`]
    /// evaluate them (a run whole, never a part of one).
    fn media_encoder(&self) -> Option<crate::SharedMediaEncoder> {
        None
    }

    /// The bytes of `tokens`, control tokens rendered as their text. A token may end inside a
    /// UTF-8 character, so this is bytes, not a string.
    ///
    /// # Errors
    ///
    /// [`BackendError::TokenOutOfRange`] for an id not in the vocabulary.
    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>>;

    /// Appends `tokens` to sequence `seq`.
    ///
    /// # Errors
    ///
    /// Unknown sequence, empty or out-of-range tokens, or a sequence that would outgrow its
    /// context window.
    fn prefill(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<()>;

    /// Samples the next token of `seq` with `sampler` (greedy when `None`), appends it and
    /// returns it.
    ///
    /// # Errors
    ///
    /// Unknown sequence or sampler, an empty sequence, or a full context window.
    fn decode_one(&mut self, seq: SeqId, sampler: Option<SamplerId>) -> Result<Decoded>;

    /// [`Backend::decode_one`] that also returns the log-probabilities of the decoded position
    /// (the sampled token's and the `top` most likely tokens', `top` capped at
    /// [`MAX_TOP_LOGPROBS`]). The default runs a one-operation [`Backend::step`] of
    /// [`StepOp::DecodeLogprobs`].
    ///
    /// # Errors
    ///
    /// As [`Backend::decode_one`], and [`BackendError::Unsupported`] for a backend that cannot
    /// compute log-probabilities.
    fn decode_one_logprobs(
        &mut self,
        seq: SeqId,
        sampler: Option<SamplerId>,
        top: u8,
    ) -> Result<(Decoded, Logprobs)> {
        let op = StepOp::DecodeLogprobs {
            sampler,
            top,
            after_sampling: false,
        };
        let results = self.step(&[(seq, op)])?;
        match results.into_iter().next().map(|(_, r)| r) {
            Some(StepResult::WithLogprobs(inner, logprobs)) => inner
                .decoded()
                .map(|d| (d, logprobs))
                .ok_or_else(|| no_token("decode_one_logprobs")),
            _ => Err(no_token("decode_one_logprobs")),
        }
    }

    /// The bytes of each token on its own ([`Backend::detokenize`] of each); their
    /// concatenation is the detokenization of all of them. The default calls
    /// [`Backend::detokenize`] once per token.
    ///
    /// # Errors
    ///
    /// [`BackendError::TokenOutOfRange`] for an id not in the vocabulary.
    fn token_pieces(&self, tokens: &[TokenId]) -> Result<Vec<Vec<u8>>> {
        tokens
            .iter()
            .map(|t| self.detokenize(std::slice::from_ref(t)))
            .collect()
    }

    /// The token history of `seq`.
    ///
    /// # Errors
    ///
    /// [`BackendError::UnknownSequence`].
    fn seq_tokens(&self, seq: SeqId) -> Result<Vec<TokenId>>;

    /// Snapshots sequence `seq` (its tokens and KV state) into opaque, checksummed bytes.
    ///
    /// # Errors
    ///
    /// Unknown sequence, or a backend that cannot read its state.
    fn kv_pack(&mut self, seq: SeqId) -> Result<Vec<u8>>;

    /// Replaces sequence `seq` with a snapshot from [`Backend::kv_pack`] (of any sequence of a
    /// backend with the same model and context layout). Decoding then continues exactly as it
    /// would have from the original.
    ///
    /// # Errors
    ///
    /// [`BackendError::InvalidSnapshot`] for a truncated, corrupt or mismatched snapshot; the
    /// sequence is then left empty.
    fn kv_unpack(&mut self, seq: SeqId, snapshot: &[u8]) -> Result<()>;

    /// Tokenizes a prompt: BOS first when the model wants it, then `text` (see
    /// [`Backend::tokenize`]).
    ///
    /// # Errors
    ///
    /// As [`Backend::tokenize`].
    fn tokenize_prompt(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        let special_tokens = &self.info().special;
        let mut out = Vec::new();
        if special_tokens.add_bos {
            out.extend(special_tokens.bos);
        }
        out.extend(self.tokenize(text, special)?);
        Ok(out)
    }

    /// Runs many prefill and decode operations; backends that can batch evaluate them all in one
    /// forward pass. Each sequence may appear at most once. Results come in the order of `ops`.
    ///
    /// The default runs the operations one at a time; it answers [`BackendError::Unsupported`]
    /// for a [`StepOp::DecodeLogprobs`], which needs the logits.
    ///
    /// # Errors
    ///
    /// The first operation's error; operations before it may have been applied.
    fn step(&mut self, ops: &[(SeqId, StepOp)]) -> Result<Vec<(SeqId, StepResult)>> {
        check_distinct(ops)?;
        let mut out = Vec::with_capacity(ops.len());
        for (seq, op) in ops {
            op.check_shape()?;
            let op = match op {
                StepOp::PrefillDecode(tokens, decode) => {
                    self.prefill(*seq, tokens)?;
                    &**decode
                }
                op => op,
            };
            let result = match op {
                StepOp::Prefill(tokens) => {
                    self.prefill(*seq, tokens)?;
                    StepResult::Prefilled
                }
                StepOp::Decode(sampler) => {
                    let decoded = self.decode_one(*seq, *sampler)?;
                    crate::thinking::classify(
                        self.info().special.thinking,
                        &self.seq_tokens(*seq)?,
                        decoded,
                    )
                }
                StepOp::DecodeLogprobs { .. } => return Err(self.unsupported("logprobs")),
                StepOp::Verify(candidates) => {
                    let verified = self.verify(*seq, candidates)?;
                    let history = self.seq_tokens(*seq)?;
                    StepResult::Verified(classify_appended(
                        self.info(),
                        &history,
                        verified.accepted + 1,
                    ))
                }
                StepOp::PrefillDecode(..) => unreachable!("invariant: unwrapped above"),
            };
            out.push((*seq, result));
        }
        Ok(out)
    }

    /// Creates a sampler.
    ///
    /// # Errors
    ///
    /// Invalid options or grammar, or [`BackendError::Unsupported`].
    fn sampler_new(&mut self, opts: &SamplerOpts) -> Result<SamplerId> {
        let _ = opts;
        Err(self.unsupported("sampler_new"))
    }

    /// Replaces a sampler's options (its history is reset).
    ///
    /// # Errors
    ///
    /// Unknown sampler, invalid options, or [`BackendError::Unsupported`].
    fn sampler_configure(&mut self, sampler: SamplerId, opts: &SamplerOpts) -> Result<()> {
        let _ = (sampler, opts);
        Err(self.unsupported("sampler_configure"))
    }

    /// Resets a sampler's history (penalty window, grammar state, random draw).
    ///
    /// # Errors
    ///
    /// Unknown sampler, or [`BackendError::Unsupported`].
    fn sampler_clear(&mut self, sampler: SamplerId) -> Result<()> {
        let _ = sampler;
        Err(self.unsupported("sampler_clear"))
    }

    /// Frees a sampler.
    ///
    /// # Errors
    ///
    /// Unknown sampler, or [`BackendError::Unsupported`].
    fn sampler_free(&mut self, sampler: SamplerId) -> Result<()> {
        let _ = sampler;
        Err(self.unsupported("sampler_free"))
    }

    /// Sets (or with `None` removes) the grammar that constrains a sampler.
    ///
    /// # Errors
    ///
    /// [`BackendError::Grammar`] for a grammar that does not parse, unknown sampler, or
    /// [`BackendError::Unsupported`].
    fn set_grammar(&mut self, sampler: SamplerId, grammar: Option<&Grammar>) -> Result<()> {
        let _ = (sampler, grammar);
        Err(self.unsupported("set_grammar"))
    }

    /// Loads a LoRA adapter file; it has no effect until [`Backend::apply_adapters`].
    ///
    /// # Errors
    ///
    /// [`BackendError::Adapter`], or [`BackendError::Unsupported`].
    fn load_adapter(&mut self, path: &Path) -> Result<AdapterId> {
        let _ = path;
        Err(self.unsupported("load_adapter"))
    }

    /// Makes exactly these adapters active, each with its scale (an empty list removes all).
    /// The cells computed from then on are computed under them; cells computed before keep
    /// what they were computed under.
    ///
    /// # Errors
    ///
    /// Unknown adapter, more than [`ModelInfo::max_active_adapters`] with a non-zero scale,
    /// or [`BackendError::Unsupported`].
    fn apply_adapters(&mut self, adapters: &[(AdapterId, f32)]) -> Result<()> {
        let _ = adapters;
        Err(self.unsupported("apply_adapters"))
    }

    /// Frees an adapter (deactivating it first).
    ///
    /// # Errors
    ///
    /// Unknown adapter, or [`BackendError::Unsupported`].
    fn unload_adapter(&mut self, adapter: AdapterId) -> Result<()> {
        let _ = adapter;
        Err(self.unsupported("unload_adapter"))
    }

    /// A pooled, L2-normalised embedding of `tokens` of length [`ModelInfo::n_embd`].
    ///
    /// # Errors
    ///
    /// Empty or out-of-range tokens, or [`BackendError::Unsupported`].
    fn embed(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        let _ = tokens;
        Err(self.unsupported("embed"))
    }

    /// Appends `tokens` to `seq` and hands `each` the raw logits (length [`ModelInfo::n_vocab`])
    /// of every position they make known, in order: the distribution of `tokens[0]` (when the
    /// sequence held tokens before), of `tokens[1]`, …, and of the token after the last. This
    /// is what perplexity and KL divergence are computed from.
    ///
    /// # Errors
    ///
    /// Unknown sequence, empty or out-of-range tokens, a full context, or
    /// [`BackendError::Unsupported`].
    fn logits(
        &mut self,
        seq: SeqId,
        tokens: &[TokenId],
        each: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        let _ = (seq, tokens, each);
        Err(self.unsupported("logits"))
    }

    /// Speculative verification: evaluates `candidates` after the history of `seq` in one pass
    /// and accepts the longest prefix that greedy decoding would have produced. The sequence ends
    /// up holding its history, the accepted candidates and the model's next token.
    ///
    /// # Errors
    ///
    /// Unknown sequence, empty or out-of-range candidates, or [`BackendError::Unsupported`].
    fn verify(&mut self, seq: SeqId, candidates: &[TokenId]) -> Result<Verified> {
        let _ = (seq, candidates);
        Err(self.unsupported("verify"))
    }

    /// Empties sequence `seq`.
    ///
    /// # Errors
    ///
    /// Unknown sequence, or [`BackendError::Unsupported`].
    fn seq_rm(&mut self, seq: SeqId) -> Result<()> {
        let _ = seq;
        Err(self.unsupported("seq_rm"))
    }

    /// Removes the last `n` tokens of sequence `seq` (all of them when `n` is larger).
    ///
    /// # Errors
    ///
    /// Unknown sequence, or [`BackendError::Unsupported`].
    fn seq_rm_last(&mut self, seq: SeqId, n: usize) -> Result<()> {
        let _ = (seq, n);
        Err(self.unsupported("seq_rm_last"))
    }

    /// Makes `dst` hold the first `n` tokens of `src` (and their KV cells), without recomputing.
    ///
    /// # Errors
    ///
    /// Unknown sequences, `n` longer than `src`, or [`BackendError::Unsupported`].
    fn seq_copy(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        let _ = (src, dst, n);
        Err(self.unsupported("seq_copy"))
    }

    /// Empties every sequence.
    ///
    /// # Errors
    ///
    /// [`BackendError::Unsupported`].
    fn seq_clear(&mut self) -> Result<()> {
        Err(self.unsupported("seq_clear"))
    }

    /// A stable signature of the latest reasoning block of `seq` (hex SHA-256 over the model's
    /// name and the block's token ids), so a client can hand reasoning back and have it checked.
    ///
    /// # Errors
    ///
    /// Unknown sequence, or [`BackendError::Unsupported`] when the model has no thinking tokens.
    fn thinking_signature(&self, seq: SeqId) -> Result<String> {
        let thinking = self
            .info()
            .special
            .thinking
            .ok_or_else(|| self.unsupported("thinking_signature"))?;
        let tokens = self.seq_tokens(seq)?;
        Ok(crate::thinking::signature(
            &self.info().name,
            thinking,
            &tokens,
        ))
    }

    /// The [`BackendError::Unsupported`] error for `op` on this backend.
    fn unsupported(&self, op: &'static str) -> BackendError {
        BackendError::Unsupported {
            backend: self.name(),
            op,
        }
    }
}
