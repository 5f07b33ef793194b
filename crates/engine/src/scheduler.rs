//! The scheduler's state: slots (one per backend sequence), the queue, the RAM and disk tiers of
//! the prompt cache, and one `tick` that admits waiting requests and runs one batched `step` over
//! every live sequence.
//!
//! Prompt reuse is token-granular: a new request takes the free sequence sharing the longest
//! token prefix with its prompt (generated tokens included), or copies a longer one from any
//! other sequence, or restores one from the RAM tier or from disk — whichever holds the most,
//! within a small margin that pays for the copy. With batch-invariant kernels
//! ([`wick_backend::ModelInfo::deterministic`]) the reused cells are exactly what a cold prefill
//! computes, so a warm answer is the cold one bit for bit; with other kernels reuse is the same
//! and the answers are as close as the kernels make them.
//!
//! LoRA adapters are context-wide in llama.cpp, so a step runs one adapter set: each step takes
//! the live requests of one set, the set whose requests have waited longest for a step (the
//! set already active on a tie), so sets alternate fairly. A sequence remembers the set its
//! cells were computed under, and every tier of the cache matches prefixes within a set only
//! (the disk tier keeps base-model prefixes alone).
//!
//! Everything here is synchronous and owns no thread, so it is tested directly against the
//! stub backend; `worker.rs` drives it from the engine's thread.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use wick_backend::{AdapterSet, Backend, BackendError, Decoded, SamplerId, StepOp, StepResult};
use wick_types::{FinishReason, SeqId, TokenId, Usage};

use crate::diskcache::{CacheStats, DiskCache, Reuse, Then};
use crate::logprobs::TokenLog;
use crate::ramcache::RamCache;
use crate::spec::{ngram_draft, DraftModel, Drafter};
use crate::stop::{StopMatcher, StopScan};
use crate::ticket::Ticket;
use crate::utf8::Utf8Stream;
use crate::{
    EngineConfig, EngineError, Finished, GenEvent, GenerateRequest, PromptProgress, ScoredToken,
};

/// A request waiting for a free sequence.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) request: GenerateRequest,
    pub(crate) events: UnboundedSender<GenEvent>,
    pub(crate) ticket: Arc<Ticket>,
}

/// One backend sequence: the tokens it holds (kept after a request ends, for prefix reuse)
/// and the request generating on it, if any.
#[derive(Debug)]
struct Slot {
    seq: SeqId,
    tokens: Vec<TokenId>,
    /// The adapters `tokens`' cells were computed under.
    adapters: AdapterSet,
    /// On a recurrent model, the lengths at which `tokens`' last prefill ops ended (prompt
    /// chunks and prompt ends): the backend keeps a checkpoint of each, so a cut back to one
    /// evaluates nothing again ([`wick_backend::ModelInfo::recurrent`]). Empty otherwise.
    marks: Vec<usize>,
    job: Option<Job>,
    last_used: u64,
}

impl Slot {
    /// How many of `prompt`'s first tokens this sequence holds computed under `adapters`, as
    /// `reuse` allows.
    fn shared(&self, prompt: &[TokenId], adapters: &AdapterSet, reuse: Reuse) -> usize {
        if self.adapters == *adapters {
            reuse.shared(&self.tokens, &self.marks, prompt, prompt.len())
        } else {
            0
        }
    }

    /// Forgets what the sequence holds (its cells are gone or unknown).
    fn forget(&mut self) {
        self.tokens.clear();
        self.marks.clear();
    }
}

/// A live request.
#[derive(Debug)]
struct Job {
    events: UnboundedSender<GenEvent>,
    prompt: Vec<TokenId>,
    /// How many prompt tokens the sequence holds so far.
    fed: usize,
    /// When the request was admitted (the tie-break between prompts of equal length).
    admitted: u64,
    /// Waiting for its prompt prefix to be read from disk (off the engine thread).
    restoring: bool,
    sampler: Option<SamplerId>,
    max_tokens: Option<u32>,
    generated: u32,
    cached: u32,
    text: Utf8Stream,
    stop: StopMatcher,
    /// How many alternatives to report per token, when log-probabilities are on.
    logprobs: Option<u8>,
    /// Whether they are of the sampled distribution rather than the raw one.
    after_sampling: bool,
    /// Whether the prompt's progress is reported.
    progress: bool,
    /// On a recurrent model, where a prompt chunk ends so that the backend checkpoints it
    /// ([`GenerateRequest::checkpoint`]).
    checkpoint: Option<usize>,
    log: TokenLog,
    /// Speculative drafting (greedy requests without log-probabilities only).
    drafter: Drafter,
    /// The adapters it runs under.
    adapters: AdapterSet,
    /// The last tick it took part in a step (its admission before the first).
    stepped: u64,
    /// The media its prompt holds, kept alive while the job lives (the backend finds their
    /// encodings by the prompt's media ids).
    _media: Vec<std::sync::Arc<wick_backend::EncodedMedia>>,
}

impl Job {
    /// Hands out `text` (with the tokens it completes, when log-probabilities are on).
    fn emit(&mut self, text: String) {
        let tokens = match self.logprobs {
            Some(_) => self.log.release(&text),
            None => Vec::new(),
        };
        self.send(text, tokens);
    }

    /// Hands out the last `text`; `stopped`: a stop string cut the answer after it.
    fn emit_last(&mut self, text: String, stopped: bool) {
        let tokens = match self.logprobs {
            Some(_) => self.log.finish(&text, stopped),
            None => Vec::new(),
        };
        self.send(text, tokens);
    }

    fn send(&self, text: String, tokens: Vec<ScoredToken>) {
        if self.logprobs.is_none() {
            send_text(&self.events, text);
        } else if !text.is_empty() || !tokens.is_empty() {
            let _ = self
                .events
                .send(GenEvent::TextWithLogprobs { text, tokens });
        }
    }

    /// Reports how far the prompt is computed, when the request asked: `processed` tokens
    /// (the cached ones included). As llama-server counts, the cache holds at most all but
    /// the last prompt token: a prompt held whole still has its last position computed again
    /// with the first token (a decode feeds the sequence's last token).
    fn report_progress(&self, processed: usize) {
        if self.progress {
            let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            let total = count(self.prompt.len());
            let cached = self.cached.min(total.saturating_sub(1));
            let _ = self.events.send(GenEvent::Progress(PromptProgress {
                total,
                cached,
                processed: count(processed).max(cached),
            }));
        }
    }

    /// The decode op that samples this job's next token.
    fn decode_op(&self) -> StepOp {
        match self.logprobs {
            Some(top) => StepOp::DecodeLogprobs {
                sampler: self.sampler,
                top,
                after_sampling: self.after_sampling,
            },
            None => StepOp::Decode(self.sampler),
        }
    }

    fn prefilling(&self) -> bool {
        self.fed < self.prompt.len()
    }

    /// Whether the job takes part in the next step.
    fn ready(&self) -> bool {
        !self.restoring
    }
}

/// What happened to a job in a step.
enum Outcome {
    Running,
    Finished(FinishReason, Option<String>),
    Failed(EngineError),
}

/// Where a new request's cached prefix comes from.
#[derive(Debug)]
enum Source {
    /// The target sequence itself, cut to this length.
    Own(usize),
    /// Another sequence (by slot index), its first tokens copied.
    Copy(usize, usize),
    /// A RAM-tier entry (by index).
    Ram(usize, usize),
    /// A disk snapshot.
    Disk(PathBuf, usize),
}

impl Source {
    fn len(&self) -> usize {
        match self {
            Source::Own(len)
            | Source::Copy(_, len)
            | Source::Ram(_, len)
            | Source::Disk(_, len) => *len,
        }
    }
}

/// The scheduler's whole state.
#[derive(Debug)]
pub(crate) struct State {
    slots: Vec<Slot>,
    queue: VecDeque<Pending>,
    config: EngineConfig,
    n_ctx: usize,
    clock: u64,
    /// Requests admitted or queued, shared with the handle for the `Busy` check.
    inflight: Arc<AtomicUsize>,
    /// The RAM tier: sequence states no sequence holds any more.
    ram: RamCache,
    /// The disk tier of the prompt cache, when configured.
    disk: Option<DiskCache>,
    stats: Arc<CacheStats>,
    /// Every token's bytes, by id: read once at start, so no token costs a backend call.
    pieces: Arc<[Vec<u8>]>,
    /// The adapter set active in the backend.
    active: AdapterSet,
    /// The draft model proposing speculative tokens, if any (else prompt lookup does).
    draft: Option<DraftModel>,
    /// Which prefixes of what a sequence or tier holds a prompt can start from.
    reuse: Reuse,
}

/// Another sequence's prefix must beat the target's own by this many tokens to be copied
/// (llama.cpp copies a sequence's whole KV stream).
const COPY_MIN_GAIN: usize = 16;
/// A RAM-tier entry must beat the best sequence by this many tokens to be restored.
const RAM_MIN_GAIN: usize = 8;
/// A disk snapshot must beat the best RAM prefix by this many tokens to be worth restoring.
const DISK_MIN_GAIN: usize = 16;
/// A sequence about to be reused keeps at least this many tokens it would lose in the RAM tier.
const PARK_MIN: usize = 32;
/// ... and only when it would lose at least this fraction (1/n) of what it holds. Parking copies
/// the whole sequence's state, so a small tail of a long sequence is cheaper to compute again
/// than to keep: on the 2-core machine with SmolLM2-135M, parking a 4,096-token sequence took
/// about 100 ms (the second of two requests differing in their last token waited for it), while
/// computing a token again costs about 2.5 ms.
const PARK_SHARE: usize = 16;

impl State {
    pub(crate) fn new(
        backend: &dyn Backend,
        config: EngineConfig,
        inflight: Arc<AtomicUsize>,
        stats: Arc<CacheStats>,
        pieces: Arc<[Vec<u8>]>,
    ) -> Self {
        let info = backend.info();
        let layout = format!(
            "{} {} n_ctx={} n_seq_max={} n_layer={} n_embd={} build={}",
            backend.name(),
            info.name,
            info.n_ctx,
            info.n_seq_max,
            info.n_layer,
            info.n_embd,
            info.build,
        );
        let disk = config.disk_cache.as_ref().and_then(|c| {
            DiskCache::open(c, &layout, Arc::clone(&stats))
                .map_err(|e| tracing::warn!("prompt cache on disk disabled: {e}"))
                .ok()
        });
        let n_seq = usize::try_from(info.n_seq_max.max(1)).unwrap_or(1);
        let live = config.max_live.map_or(n_seq, |m| m.min(n_seq));
        let slots = (0..live)
            .map(|i| Slot {
                seq: SeqId(u32::try_from(i).expect("invariant: n_seq_max fits u32")),
                tokens: Vec::new(),
                adapters: AdapterSet::default(),
                marks: Vec::new(),
                job: None,
                last_used: 0,
            })
            .collect();
        State {
            slots,
            queue: VecDeque::new(),
            ram: RamCache::new(config.ram_cache_bytes),
            config,
            n_ctx: usize::try_from(info.n_ctx).unwrap_or(usize::MAX),
            clock: 0,
            inflight,
            disk,
            stats,
            pieces,
            active: AdapterSet::default(),
            draft: None,
            reuse: Reuse::of(info),
        }
    }

    /// Lets `draft` propose the speculative tokens (instead of prompt lookup).
    ///
    /// # Errors
    ///
    /// Its vocabulary differs from the model's, or its context is smaller; or the model keeps
    /// a recurrent state (it never speculates).
    pub(crate) fn with_draft(mut self, draft: Box<dyn Backend>) -> Result<Self, EngineError> {
        if self.reuse == Reuse::Whole {
            return Err(EngineError::Backend(BackendError::Config {
                field: "model_draft",
                value: draft.info().name.clone(),
                allowed: "a draft model for a model whose state can be cut back: this model \
                          keeps a recurrent state, where every rejected draft would be \
                          evaluated again, so it does not speculate",
            }));
        }
        let n_ctx = u32::try_from(self.n_ctx).unwrap_or(u32::MAX);
        self.draft = Some(DraftModel::new(
            draft,
            &self.pieces,
            self.slots.len(),
            n_ctx,
        )?);
        Ok(self)
    }

    /// The live-sequence and queue bounds.
    pub(crate) fn capacity(&self) -> (usize, usize) {
        (self.slots.len(), self.config.queue_capacity)
    }

    /// Whether nothing is live or waiting.
    pub(crate) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(|s| s.job.is_none())
    }

    /// Live sequences and queued requests.
    pub(crate) fn load(&self) -> (usize, usize) {
        let live = self.slots.iter().filter(|s| s.job.is_some()).count();
        (live, self.queue.len())
    }

    pub(crate) fn enqueue(&mut self, pending: Pending) {
        self.queue.push_back(pending);
    }

    /// Drops cancelled requests, takes in prefixes read from disk, admits waiting requests,
    /// and runs one batched step. Returns whether it ran one (nothing to run: every live
    /// request waits for the disk).
    pub(crate) fn tick(&mut self, backend: &mut dyn Backend) -> bool {
        self.clock += 1;
        self.reap_cancelled(backend);
        self.finish_restores(backend);
        self.admit(backend);
        let Some(group) = self.next_group() else {
            return false;
        };
        if group != self.active {
            if let Err(e) = backend.apply_adapters(group.as_slice()) {
                // The set cannot run: its requests fail, the others go on.
                let reason = e.to_string();
                for i in 0..self.slots.len() {
                    if self.slots[i]
                        .job
                        .as_ref()
                        .is_some_and(|j| j.adapters == group)
                    {
                        let e = BackendError::InvalidArgument {
                            op: "apply_adapters",
                            reason: reason.clone(),
                        };
                        self.fail(backend, i, e.into());
                    }
                }
                return true;
            }
            self.active = group;
        }
        let ops = self.plan();
        if ops.is_empty() {
            return false;
        }
        match backend.step(&ops) {
            Ok(results) => self.apply(backend, &ops, results),
            // One sequence's failure (a full context, a grammar dead end) must not fail the
            // others: run the operations one by one and fail only those that fail alone.
            Err(_) => self.step_one_by_one(backend, &ops),
        }
        true
    }

    fn step_one_by_one(&mut self, backend: &mut dyn Backend, ops: &[(SeqId, StepOp)]) {
        for op in ops {
            let single = std::slice::from_ref(op);
            match backend.step(single) {
                Ok(results) => self.apply(backend, single, results),
                Err(e) => {
                    let index = self.slot_index(op.0);
                    // The failed sequence's cells are unknown now: forget them.
                    let _ = backend.seq_rm(op.0);
                    self.slots[index].forget();
                    self.fail(backend, index, e.into());
                }
            }
        }
    }

    fn slot_index(&self, seq: SeqId) -> usize {
        self.slots
            .iter()
            .position(|s| s.seq == seq)
            .expect("invariant: steps only name the engine's own sequences")
    }

    fn reap_cancelled(&mut self, backend: &mut dyn Backend) {
        for i in 0..self.slots.len() {
            if self.slots[i]
                .job
                .as_ref()
                .is_some_and(|j| j.events.is_closed())
            {
                self.release(backend, i);
            }
        }
        // A cancelled request released its queue slot when its stream was dropped.
        self.queue.retain(|p| {
            if p.events.is_closed() {
                p.ticket.cancel();
            }
            !p.ticket.is_cancelled()
        });
    }

    fn admit(&mut self, backend: &mut dyn Backend) {
        while self.slots.iter().any(|s| s.job.is_none()) {
            let Some(pending) = self.queue.pop_front() else {
                return;
            };
            if !pending.ticket.take() {
                continue;
            }
            let target = self.pick_slot(&pending.request.prompt, &pending.request.adapters);
            if let Err(e) = self.start(backend, target, pending.request, &pending.events) {
                let _ = pending.events.send(GenEvent::Error(e));
                self.inflight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// The free sequence to give a request for `prompt` under `adapters`: the one sharing the
    /// longest prefix with it; among equals, the least recently used.
    fn pick_slot(&self, prompt: &[TokenId], adapters: &AdapterSet) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].job.is_none())
            .min_by_key(|&i| {
                let slot = &self.slots[i];
                (
                    Reverse(slot.shared(prompt, adapters, self.reuse)),
                    slot.last_used,
                )
            })
            .expect("invariant: admit only picks while a sequence is free")
    }

    /// Puts `request` on slot `target`, starting from the longest cached prefix of its prompt.
    fn start(
        &mut self,
        backend: &mut dyn Backend,
        target: usize,
        request: GenerateRequest,
        events: &UnboundedSender<GenEvent>,
    ) -> Result<(), EngineError> {
        // Park what the target would lose first, then choose again: parking may reorder or
        // evict the RAM tier's entries.
        let keep = self
            .best_source(target, &request.prompt, &request.adapters)
            .len();
        self.park(backend, target, keep);
        let source = self.best_source(target, &request.prompt, &request.adapters);
        // From here on the slot's cells are the request's: what it keeps matched its set.
        self.slots[target].adapters = request.adapters.clone();
        let (cached, restoring) = match source {
            Source::Disk(path, len) => {
                // The sequence is refilled from the snapshot once the reader has it.
                self.cut(backend, target, 0)
                    .map_err(|reason| cache_error(&reason))?;
                let disk = self
                    .disk
                    .as_ref()
                    .expect("invariant: a disk source has a disk");
                (0, disk.load_async(target, path, len))
            }
            source => (
                self.take_prefix(backend, target, &request.prompt, &source)?,
                false,
            ),
        };
        let sampler = if needs_sampler(&request) {
            Some(backend.sampler_new(&request.sampler)?)
        } else {
            None
        };
        // Verification is greedy: only plain greedy requests speculate; and only where the
        // drafts a verify rejects can be taken off for free (not a recurrent state).
        let spec_max =
            if sampler.is_none() && request.logprobs.is_none() && self.reuse == Reuse::AnyPrefix {
                request.spec_max.unwrap_or(self.config.spec_max)
            } else {
                0
            };
        let checkpoint = request
            .checkpoint
            .filter(|&at| self.reuse == Reuse::Whole && at < request.prompt.len());
        let slot = &mut self.slots[target];
        slot.last_used = self.clock;
        slot.job = Some(Job {
            events: events.clone(),
            fed: cached,
            admitted: self.clock,
            restoring,
            prompt: request.prompt,
            sampler,
            max_tokens: request.max_tokens,
            generated: 0,
            cached: u32::try_from(cached).unwrap_or(u32::MAX),
            text: Utf8Stream::default(),
            stop: StopMatcher::new(request.stop),
            logprobs: request.logprobs,
            after_sampling: request.logprobs_after_sampling,
            progress: request.progress,
            checkpoint,
            log: TokenLog::default(),
            drafter: Drafter::new(spec_max),
            adapters: request.adapters,
            stepped: self.clock,
            _media: request.media,
        });
        if let Some(job) = slot.job.as_ref().filter(|j| !j.restoring) {
            job.report_progress(0);
        }
        Ok(())
    }

    /// Where the longest usable prefix of `prompt` under `adapters` is, for a request going to
    /// slot `target`. Every tier is compared on its index alone; nothing is read or copied yet.
    fn best_source(&mut self, target: usize, prompt: &[TokenId], adapters: &AdapterSet) -> Source {
        let limit = prompt.len();
        let shared = |slot: &Slot| slot.shared(prompt, adapters, self.reuse).min(limit);
        let own = shared(&self.slots[target]);
        let mut best = Source::Own(own);
        if let Some((src, len)) = (0..self.slots.len())
            .filter(|&i| i != target)
            .map(|i| (i, shared(&self.slots[i])))
            .max_by_key(|&(_, len)| len)
        {
            if len >= own + COPY_MIN_GAIN {
                best = Source::Copy(src, len);
            }
        }
        if let Some((index, len)) = self.ram.best(
            prompt,
            adapters,
            self.reuse,
            limit,
            best.len() + RAM_MIN_GAIN - 1,
        ) {
            best = Source::Ram(index, len);
        }
        // The disk tier keeps base-model prefixes only (its files are named by tokens alone).
        if let Some(disk) = self.disk.as_mut().filter(|_| adapters.is_empty()) {
            if let Some((path, len)) =
                disk.best(prompt, self.reuse, limit, best.len() + DISK_MIN_GAIN - 1)
            {
                best = Source::Disk(path, len);
            }
        }
        best
    }

    /// Parks what slot `target` holds in the RAM tier before it is reused, when it would lose
    /// enough of it (at least [`PARK_MIN`] tokens and 1/[`PARK_SHARE`] of it) and nothing else
    /// holds it.
    fn park(&mut self, backend: &mut dyn Backend, target: usize, keep: usize) {
        let slot = &self.slots[target];
        let lost = slot.tokens.len().saturating_sub(keep);
        if !self.ram.enabled() || lost < PARK_MIN || lost * PARK_SHARE < slot.tokens.len() {
            return;
        }
        let held_elsewhere = self.slots.iter().enumerate().any(|(i, s)| {
            i != target && s.adapters == slot.adapters && s.tokens.starts_with(&slot.tokens)
        });
        if held_elsewhere || self.ram.covers(&slot.tokens, &slot.adapters) {
            return;
        }
        match backend.kv_pack(slot.seq) {
            Ok(snapshot) => {
                let evicted = self
                    .ram
                    .insert(slot.tokens.clone(), slot.adapters.clone(), snapshot);
                CacheStats::add(&self.stats.host_parked, 1);
                CacheStats::add(&self.stats.host_evictions, evicted);
                self.stats
                    .host_bytes
                    .store(self.ram.bytes(), Ordering::Relaxed);
            }
            Err(e) => tracing::warn!("prompt cache: cannot park a sequence in RAM: {e}"),
        }
    }

    /// Makes slot `target` hold the first `source.len()` tokens of `prompt` from `source` and
    /// returns how many it holds. A RAM or disk snapshot that fails its checks is dropped and
    /// the best sequence is taken instead.
    fn take_prefix(
        &mut self,
        backend: &mut dyn Backend,
        target: usize,
        prompt: &[TokenId],
        source: &Source,
    ) -> Result<usize, EngineError> {
        let seq = self.slots[target].seq;
        let len = source.len();
        let from_a_tier = matches!(source, Source::Ram(..) | Source::Disk(..));
        let taken = match *source {
            Source::Own(_) => self.cut(backend, target, len).map(|()| "sequence"),
            Source::Copy(src, _) => backend
                .seq_copy(self.slots[src].seq, seq, len)
                .map(|()| "sequence")
                .map_err(|e| e.to_string()),
            Source::Ram(index, _) => {
                let restored = restore(backend, seq, self.ram.get(index), len);
                if restored.is_err() {
                    self.ram.remove(index);
                    self.stats
                        .host_bytes
                        .store(self.ram.bytes(), Ordering::Relaxed);
                    CacheStats::add(&self.stats.rejects, 1);
                }
                restored.map(|()| "ram")
            }
            Source::Disk(..) => {
                unreachable!("invariant: disk sources are read off the engine thread")
            }
        };
        let tier = match taken {
            Ok(tier) => tier,
            Err(reason) if !from_a_tier => return Err(cache_error(&reason)),
            Err(_) => return self.fall_back(backend, target, prompt),
        };
        self.slots[target].tokens = prompt[..len].to_vec();
        // A cut keeps the marks up to its length, a copy its source's; a snapshot has none.
        self.slots[target].marks = match *source {
            Source::Own(_) => std::mem::take(&mut self.slots[target].marks),
            Source::Copy(src, _) => self.slots[src]
                .marks
                .iter()
                .copied()
                .filter(|&m| m <= len)
                .collect(),
            Source::Ram(..) | Source::Disk(..) => Vec::new(),
        };
        let counter = match (len, tier) {
            (0, _) => &self.stats.misses,
            (_, "ram") => &self.stats.hits_host,
            _ => &self.stats.hits_ram,
        };
        CacheStats::add(counter, 1);
        if tier != "sequence" {
            CacheStats::add(&self.stats.restored_tokens, len as u64);
        }
        Ok(len)
    }

    /// After a snapshot failed to restore into slot `target`: starts it empty (its cells are
    /// unknown now), then takes the best prefix a sequence still holds.
    fn fall_back(
        &mut self,
        backend: &mut dyn Backend,
        target: usize,
        prompt: &[TokenId],
    ) -> Result<usize, EngineError> {
        backend.seq_rm(self.slots[target].seq)?;
        self.slots[target].forget();
        let adapters = &self.slots[target].adapters;
        let fallback = match (0..self.slots.len())
            .map(|i| (i, self.slots[i].shared(prompt, adapters, self.reuse)))
            .max_by_key(|&(_, len)| len)
        {
            Some((src, len)) if len > 0 && src != target => Source::Copy(src, len),
            _ => Source::Own(0),
        };
        self.take_prefix(backend, target, prompt, &fallback)
    }

    /// Fills the sequences whose snapshots the disk reader has read, and lets their requests
    /// go on; a snapshot that fails its checks is removed and its request takes the best
    /// prefix a sequence holds.
    fn finish_restores(&mut self, backend: &mut dyn Backend) {
        let Some(disk) = self.disk.as_ref() else {
            return;
        };
        for loaded in disk.loaded() {
            let index = loaded.slot;
            let Some(job) = self.slots[index].job.as_ref().filter(|j| j.restoring) else {
                continue; // cancelled meanwhile
            };
            let prompt = job.prompt.clone();
            let seq = self.slots[index].seq;
            // Another process sharing the directory evicted it after this one chose it: a
            // miss, not a corrupt snapshot.
            let vanished = loaded
                .bytes
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
            let restored = match loaded.bytes {
                Ok(bytes) => {
                    let restored = restore(backend, seq, &bytes, loaded.len);
                    if let Some(disk) = &self.disk {
                        disk.recycle(bytes);
                    }
                    restored
                }
                Err(e) => Err(e.to_string()),
            };
            let cached = match restored {
                Ok(()) => {
                    self.slots[index].tokens = prompt[..loaded.len].to_vec();
                    self.slots[index].marks.clear();
                    CacheStats::add(&self.stats.hits_disk, 1);
                    CacheStats::add(&self.stats.restored_tokens, loaded.len as u64);
                    Ok(loaded.len)
                }
                Err(reason) => {
                    if let Some(disk) = self.disk.as_mut() {
                        if vanished {
                            tracing::debug!(path = %loaded.path.display(), "prompt cache snapshot evicted by another process");
                            disk.forget(&loaded.path);
                        } else {
                            tracing::warn!(path = %loaded.path.display(), %reason, "prompt cache snapshot rejected");
                            disk.reject(&loaded.path);
                        }
                    }
                    self.fall_back(backend, index, &prompt)
                }
            };
            match cached {
                Ok(cached) => {
                    let job = self.slots[index]
                        .job
                        .as_mut()
                        .expect("invariant: checked above");
                    job.restoring = false;
                    job.fed = cached;
                    job.cached = u32::try_from(cached).unwrap_or(u32::MAX);
                    job.report_progress(0);
                }
                Err(e) => self.fail(backend, index, e),
            }
        }
    }

    /// Cuts slot `index`'s sequence to its first `len` tokens.
    fn cut(&mut self, backend: &mut dyn Backend, index: usize, len: usize) -> Result<(), String> {
        let slot = &mut self.slots[index];
        let extra = slot.tokens.len() - len;
        if extra == 0 {
            return Ok(());
        }
        let cut = if len == 0 {
            backend.seq_rm(slot.seq)
        } else {
            backend.seq_rm_last(slot.seq, extra)
        };
        slot.tokens.truncate(len);
        slot.marks.retain(|&m| m <= len);
        cut.map_err(|e| e.to_string())
    }

    /// Saves the slot's sequence (prompt and answer) to the disk cache when it is long and new
    /// enough, then runs `then`: right away, or on the cache's writer thread once the file is
    /// written.
    fn save_to_disk(&mut self, backend: &mut dyn Backend, index: usize, then: Then) {
        let slot = &self.slots[index];
        let Some(disk) = self.disk.as_mut().filter(|_| slot.adapters.is_empty()) else {
            return then();
        };
        let Some(name) = disk.wants(&slot.tokens) else {
            return then();
        };
        match backend.kv_pack(slot.seq) {
            Ok(bytes) => disk.save(name, &slot.tokens, bytes, then),
            Err(e) => {
                tracing::warn!("prompt cache: cannot save a snapshot: {e}");
                then();
            }
        }
    }

    /// The adapter set of the next step: the set of the ready request that has waited longest
    /// for a step, the active set on a tie; `None` when no request is ready.
    fn next_group(&self) -> Option<AdapterSet> {
        self.slots
            .iter()
            .filter_map(|s| s.job.as_ref().filter(|j| j.ready()))
            .min_by_key(|j| (j.stepped, j.adapters != self.active))
            .map(|j| j.adapters.clone())
    }

    /// This step's operations, for the requests of the active adapter set: a decode for every
    /// sequence whose prompt is in, then prompt chunks for the others, shortest remaining
    /// prompt first (a short prompt is never held behind a long one), within the step's
    /// prefill budget. A prompt's last chunk samples the first token in the same step.
    fn plan(&mut self) -> Vec<(SeqId, StepOp)> {
        let n_ctx = self.n_ctx;
        let (clock, active) = (self.clock, self.active.clone());
        let runs = |j: &Job| j.ready() && j.adapters == active;
        // Each running request and the most tokens it drafts this step (0: a plain decode).
        let wants: Vec<(usize, usize)> = self
            .slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, slot)| {
                let job = slot.job.as_mut().filter(|j| runs(j) && !j.prefilling())?;
                job.stepped = clock;
                let budget = job
                    .max_tokens
                    .map_or(usize::MAX, |m| m.saturating_sub(job.generated) as usize);
                let room = budget.min(n_ctx.saturating_sub(slot.tokens.len()));
                // A verify appends the accepted candidates and one more token.
                Some((i, job.drafter.budget(room.saturating_sub(1))))
            })
            .collect();
        let drafts = self.drafts(&wants);
        let mut ops: Vec<(SeqId, StepOp)> = wants
            .iter()
            .zip(drafts)
            .map(|(&(i, _), draft)| {
                let slot = &self.slots[i];
                let job = slot.job.as_ref().expect("invariant: wanted jobs are live");
                let op = if draft.is_empty() {
                    job.decode_op()
                } else {
                    StepOp::Verify(draft)
                };
                (slot.seq, op)
            })
            .collect();
        let mut budget = if ops.is_empty() {
            self.config.prefill_budget
        } else {
            self.config.prefill_budget_decoding
        };
        let mut waiting: Vec<&mut Slot> = self
            .slots
            .iter_mut()
            .filter(|s| s.job.as_ref().is_some_and(|j| runs(j) && j.prefilling()))
            .collect();
        waiting.sort_by_key(|s| {
            let job = s.job.as_ref().expect("invariant: filtered on live jobs");
            (job.prompt.len() - job.fed, job.admitted)
        });
        for slot in waiting {
            if budget == 0 {
                break;
            }
            let job = slot.job.as_mut().expect("invariant: filtered on live jobs");
            job.stepped = clock;
            let rest = job.prompt.len() - job.fed;
            let mut n = rest.min(budget);
            if let Some(at) = job.checkpoint.filter(|&at| at > job.fed) {
                // A chunk ends where a checkpoint is worth keeping.
                n = n.min(at - job.fed);
            }
            // An image's positions are evaluated together, and a chunk's last token (which
            // the next step evaluates) is text: a chunk never ends inside or right after one.
            while n < rest {
                let next = job.prompt[job.fed + n];
                let last = job.prompt[job.fed + n - 1];
                if !last.is_media() && (!next.is_media() || next.starts_media()) {
                    break;
                }
                n += 1;
            }
            budget = budget.saturating_sub(n);
            let chunk = job.prompt[job.fed..job.fed + n].to_vec();
            let op = if n == rest {
                StepOp::PrefillDecode(chunk, Box::new(job.decode_op()))
            } else {
                StepOp::Prefill(chunk)
            };
            ops.push((slot.seq, op));
        }
        ops
    }

    /// The proposals for `wants` (slot, most tokens): the draft model's when there is one,
    /// else prompt lookup's.
    fn drafts(&mut self, wants: &[(usize, usize)]) -> Vec<Vec<TokenId>> {
        let slots = &self.slots;
        match self.draft.as_mut() {
            Some(draft) => {
                let wants: Vec<(usize, &[TokenId], usize)> = wants
                    .iter()
                    .map(|&(i, n)| (i, slots[i].tokens.as_slice(), n))
                    .collect();
                draft.propose(&wants)
            }
            None => wants
                .iter()
                .map(|&(i, n)| ngram_draft(&slots[i].tokens, n))
                .collect(),
        }
    }

    fn apply(
        &mut self,
        backend: &mut dyn Backend,
        ops: &[(SeqId, StepOp)],
        results: Vec<(SeqId, StepResult)>,
    ) {
        for ((seq, op), (_, result)) in ops.iter().zip(results) {
            let index = self.slot_index(*seq);
            let slot = &mut self.slots[index];
            let job = slot.job.as_mut().expect("invariant: planned jobs are live");
            let prefix = op.prefix();
            slot.tokens.extend_from_slice(prefix);
            job.fed += prefix.len();
            if self.reuse == Reuse::Whole
                && (!prefix.is_empty() || matches!(op, StepOp::PrefillDecode(..)))
            {
                // The backend checkpointed the end of the prefill (a prompt's end also when
                // the cache held all of it).
                slot.marks.push(slot.tokens.len());
                if slot.marks.len() > wick_backend::RECURRENT_CHECKPOINTS {
                    slot.marks.remove(0);
                }
            }
            // Each prompt chunk, and the step that samples the first token (which computes
            // the prompt's last position even when the cache held it all).
            if job.generated == 0 && (!prefix.is_empty() || op.decodes()) {
                let processed = if op.decodes() {
                    job.prompt.len()
                } else {
                    job.fed
                };
                job.report_progress(processed);
            }
            if let StepOp::Verify(draft) = op {
                let accepted = result.each().len().saturating_sub(1);
                job.drafter.record(draft.len(), accepted);
                CacheStats::add(&self.stats.spec_drafted, draft.len() as u64);
                CacheStats::add(&self.stats.spec_accepted, accepted as u64);
            }
            // Every appended token in order (a verify appends several), through the same
            // stop, UTF-8, log-probability and budget path; tokens after the answer's end are
            // taken off the sequence again.
            let each = result.each();
            let mut outcome = Outcome::Running;
            for (i, token_result) in each.iter().enumerate() {
                let Some(token) = token_result.token() else {
                    continue;
                };
                outcome = self.on_token(index, token, token_result);
                if !matches!(outcome, Outcome::Running) {
                    let unused = each.len() - i - 1;
                    if unused > 0 && backend.seq_rm_last(*seq, unused).is_err() {
                        // The cells are unknown now: forget the sequence's tokens.
                        let _ = backend.seq_rm(*seq);
                        self.slots[index].forget();
                    }
                    break;
                }
            }
            match outcome {
                Outcome::Running => {}
                Outcome::Finished(reason, stop) => self.finish(backend, index, reason, stop),
                Outcome::Failed(e) => self.fail(backend, index, e),
            }
        }
    }

    fn on_token(&mut self, index: usize, token: TokenId, result: &StepResult) -> Outcome {
        let n_ctx = self.n_ctx;
        let pieces = &self.pieces;
        let slot = &mut self.slots[index];
        slot.tokens.push(token);
        let job = slot.job.as_mut().expect("invariant: planned jobs are live");
        job.generated += 1;
        if matches!(result.plain(), StepResult::Token(Decoded::Eog(_))) {
            return Outcome::Finished(FinishReason::Stop, None);
        }
        let piece = |t: TokenId| {
            pieces
                .get(t.0 as usize)
                .ok_or(EngineError::Backend(BackendError::TokenOutOfRange {
                    token: t,
                    n_vocab: u32::try_from(pieces.len()).unwrap_or(u32::MAX),
                }))
        };
        let bytes = match piece(token) {
            Ok(bytes) => bytes,
            Err(e) => return Outcome::Failed(e),
        };
        if let (Some(_), Some(logprobs)) = (job.logprobs, result.logprobs()) {
            let top: Result<Vec<Vec<u8>>, EngineError> = logprobs
                .top
                .iter()
                .map(|t| piece(t.token).cloned())
                .collect();
            match top {
                Ok(top) => job.log.push(ScoredToken::new(logprobs, bytes.clone(), top)),
                Err(e) => return Outcome::Failed(e),
            }
        }
        let text = job.text.push(bytes);
        match job.stop.push(&text) {
            StopScan::Stopped { text, stop } => {
                job.emit_last(text, true);
                return Outcome::Finished(FinishReason::Stop, Some(stop));
            }
            StopScan::Continue(text) => job.emit(text),
        }
        let out_of_budget = job.max_tokens.is_some_and(|m| job.generated >= m);
        if out_of_budget || slot.tokens.len() >= n_ctx {
            return Outcome::Finished(FinishReason::Length, None);
        }
        Outcome::Running
    }

    fn finish(
        &mut self,
        backend: &mut dyn Backend,
        index: usize,
        mut reason: FinishReason,
        stop: Option<String>,
    ) {
        let Some(job) = self.slots[index].job.as_mut() else {
            return;
        };
        let mut stop = stop;
        if stop.is_none() {
            // Flush the decoder and the stop matcher; a stop string may still be decided here.
            let rest = job.text.finish();
            let (mut tail, mut found) = scan_parts(job.stop.push(&rest));
            if found.is_none() {
                let (more, last) = scan_parts(job.stop.finish());
                tail.push_str(&more);
                found = last;
            }
            job.emit_last(tail, found.is_some());
            if found.is_some() {
                reason = FinishReason::Stop;
                stop = found;
            }
        }
        let usage = Usage {
            prompt_tokens: u32::try_from(job.prompt.len()).unwrap_or(u32::MAX),
            completion_tokens: job.generated,
            cached_tokens: job.cached,
        };
        // The answer ends once its snapshot is written, so a client that got its answer can
        // count on the snapshot being there (a restart right after, a second process); the
        // writing happens off this thread, so the other streams go on meanwhile.
        let done = GenEvent::Done(Finished {
            finish_reason: reason,
            usage,
            stop,
        });
        let events = self.slots[index].job.as_ref().map(|job| job.events.clone());
        self.save_to_disk(
            backend,
            index,
            Box::new(move || {
                if let Some(events) = events {
                    let _ = events.send(done);
                }
            }),
        );
        self.release(backend, index);
    }

    fn fail(&mut self, backend: &mut dyn Backend, index: usize, error: EngineError) {
        if let Some(job) = &self.slots[index].job {
            let _ = job.events.send(GenEvent::Error(error));
        }
        self.release(backend, index);
    }

    /// Ends the slot's job; the sequence keeps its tokens for prefix reuse.
    fn release(&mut self, backend: &mut dyn Backend, index: usize) {
        let slot = &mut self.slots[index];
        if let Some(job) = slot.job.take() {
            if let Some(sampler) = job.sampler {
                let _ = backend.sampler_free(sampler);
            }
            slot.last_used = self.clock;
            self.inflight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Fails every live and queued request (the worker is going away).
    pub(crate) fn abort_all(&mut self, backend: &mut dyn Backend) {
        for i in 0..self.slots.len() {
            self.fail(backend, i, EngineError::Stopped);
        }
        for p in self.queue.drain(..) {
            if p.ticket.take() {
                let _ = p.events.send(GenEvent::Error(EngineError::Stopped));
                self.inflight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

fn cache_error(reason: &str) -> EngineError {
    EngineError::Backend(BackendError::InvalidArgument {
        op: "prompt cache",
        reason: reason.to_owned(),
    })
}

/// Replaces sequence `seq` with `snapshot` and cuts it to its first `len` tokens.
fn restore(
    backend: &mut dyn Backend,
    seq: SeqId,
    snapshot: &[u8],
    len: usize,
) -> Result<(), String> {
    // Clear the target first: restoring over old cells is what makes a restore slower than it
    // needs to be.
    let _ = backend.seq_rm(seq);
    backend
        .kv_unpack(seq, snapshot)
        .map_err(|e| e.to_string())?;
    let held = backend.seq_tokens(seq).map_err(|e| e.to_string())?;
    if held.len() < len {
        return Err(format!(
            "the snapshot holds {} tokens, not {len}",
            held.len()
        ));
    }
    backend
        .seq_rm_last(seq, held.len() - len)
        .map_err(|e| e.to_string())
}

fn send_text(events: &UnboundedSender<GenEvent>, text: String) {
    if !text.is_empty() {
        let _ = events.send(GenEvent::Text(text));
    }
}

fn scan_parts(scan: StopScan) -> (String, Option<String>) {
    match scan {
        StopScan::Continue(text) => (text, None),
        StopScan::Stopped { text, stop } => (text, Some(stop)),
    }
}

/// Every token's bytes, by id, read from the backend in one call.
///
/// # Errors
///
/// The backend cannot detokenize its own vocabulary.
pub(crate) fn token_pieces(backend: &dyn Backend) -> Result<Arc<[Vec<u8>]>, EngineError> {
    let all: Vec<TokenId> = (0..backend.info().n_vocab).map(TokenId).collect();
    Ok(backend.token_pieces(&all)?.into())
}

/// Greedy decoding without bias, penalties or grammar needs no sampler of its own.
fn needs_sampler(request: &GenerateRequest) -> bool {
    let s = &request.sampler;
    !s.is_greedy() || s.grammar.is_some() || !s.logit_bias.is_empty() || s.has_penalties()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;
    use wick_backend::{BackendConfig, StubBackend};
    use wick_types::SamplerOpts;

    fn no_eog() -> SamplerOpts {
        SamplerOpts {
            logit_bias: vec![(TokenId(0), -1e9), (TokenId(2), -1e9)],
            ..SamplerOpts::greedy()
        }
    }

    #[test]
    fn a_long_prompt_is_prefilled_in_chunks_between_the_decodes_of_running_streams() {
        let config = BackendConfig::new("stub")
            .with_n_seq_max(2)
            .with_n_ctx(1024);
        let mut backend = StubBackend::new(&config).expect("stub");
        let engine_config = EngineConfig {
            prefill_budget: 64,
            prefill_budget_decoding: 32,
            ..EngineConfig::default()
        };
        let inflight = Arc::new(AtomicUsize::new(2));
        let pieces = token_pieces(&backend).expect("pieces");
        let mut state = State::new(
            &backend,
            engine_config,
            Arc::clone(&inflight),
            Arc::default(),
            pieces,
        );
        let (a_events, _a_rx) = unbounded_channel();
        state.enqueue(Pending {
            request: GenerateRequest {
                prompt: vec![TokenId(100); 8],
                sampler: no_eog(),
                ..GenerateRequest::default()
            },
            events: a_events,
            ticket: Ticket::new(Arc::clone(&inflight)),
        });
        // A's whole prompt and its first token in one step.
        state.tick(&mut backend);
        let generated = |s: &State, i: usize| s.slots[i].job.as_ref().map_or(0, |j| j.generated);
        assert_eq!(generated(&state, 0), 1);

        let (b_events, _b_rx) = unbounded_channel();
        state.enqueue(Pending {
            request: GenerateRequest {
                prompt: (0..300).map(|i| TokenId(50 + i % 200)).collect(),
                sampler: no_eog(),
                ..GenerateRequest::default()
            },
            events: b_events,
            ticket: Ticket::new(Arc::clone(&inflight)),
        });
        // 300 prompt tokens, 32 a step while A decodes: ten steps, and A decodes in every one;
        // B's last chunk samples its first token.
        for step in 1..=10 {
            state.tick(&mut backend);
            assert_eq!(generated(&state, 0), 1 + step, "A decoded in step {step}");
            let fed = state.slots[1].job.as_ref().expect("B is live").fed;
            assert_eq!(fed, (32 * step as usize).min(300));
        }
        assert_eq!(
            generated(&state, 1),
            1,
            "B's first token came with its last chunk"
        );
    }

    #[test]
    fn a_short_prompt_is_not_held_behind_a_long_one() {
        let config = BackendConfig::new("stub")
            .with_n_seq_max(2)
            .with_n_ctx(1024);
        let mut backend = StubBackend::new(&config).expect("stub");
        let engine_config = EngineConfig {
            prefill_budget: 64,
            prefill_budget_decoding: 64,
            ..EngineConfig::default()
        };
        let inflight = Arc::new(AtomicUsize::new(2));
        let pieces = token_pieces(&backend).expect("pieces");
        let mut state = State::new(
            &backend,
            engine_config,
            Arc::clone(&inflight),
            Arc::default(),
            pieces,
        );
        let mut streams = Vec::new();
        for len in [500, 10] {
            let (events, rx) = unbounded_channel();
            streams.push(rx);
            state.enqueue(Pending {
                request: GenerateRequest {
                    prompt: (0..len).map(|i| TokenId(50 + i % 200)).collect(),
                    sampler: no_eog(),
                    ..GenerateRequest::default()
                },
                events,
                ticket: Ticket::new(Arc::clone(&inflight)),
            });
        }
        state.tick(&mut backend);
        let job = |len: usize| {
            state
                .slots
                .iter()
                .find_map(|s| s.job.as_ref().filter(|j| j.prompt.len() == len))
                .expect("live")
        };
        assert_eq!(
            job(10).generated,
            1,
            "the short prompt answered in the first step"
        );
        assert_eq!(job(500).fed, 54, "the long one got the rest of the budget");
    }
}
