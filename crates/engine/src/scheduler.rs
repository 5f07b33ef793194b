//! The scheduler's state: slots (one per backend sequence), the queue, and one `tick` that
//! admits waiting requests and runs one batched `step` over every live sequence.
//!
//! Everything here is synchronous and owns no thread, so it is tested directly against the
//! stub backend; `worker.rs` drives it from the engine's thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use wick_backend::{Backend, Decoded, SamplerId, StepOp, StepResult};
use wick_types::{FinishReason, SeqId, TokenId, Usage};

use crate::diskcache::{common_prefix, CacheStats, DiskCache, Then};
use crate::logprobs::TokenLog;
use crate::stop::{StopMatcher, StopScan};
use crate::ticket::Ticket;
use crate::utf8::Utf8Stream;
use crate::{EngineConfig, EngineError, Finished, GenEvent, GenerateRequest, ScoredToken};

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
    /// How many leading tokens were prefilled in whole, grid-aligned blocks: only these are
    /// reused, because their KV cells are exactly what a cold prefill of them computes.
    exact: usize,
    job: Option<Job>,
    last_used: u64,
}

/// A live request.
#[derive(Debug)]
struct Job {
    events: UnboundedSender<GenEvent>,
    prompt: Vec<TokenId>,
    /// How many prompt tokens the sequence holds so far.
    fed: usize,
    sampler: Option<SamplerId>,
    max_tokens: Option<u32>,
    generated: u32,
    cached: u32,
    text: Utf8Stream,
    stop: StopMatcher,
    /// How many alternatives to report per token, when log-probabilities are on.
    logprobs: Option<u8>,
    log: TokenLog,
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
}

/// What happened to a job in a step.
enum Outcome {
    Running,
    Finished(FinishReason, Option<String>),
    Failed(EngineError),
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
    /// The disk tier of the prompt cache, when configured.
    disk: Option<DiskCache>,
    stats: Arc<CacheStats>,
}

/// A disk snapshot must beat the RAM prefix by this many tokens to be worth restoring.
const DISK_MIN_GAIN: usize = 16;

impl State {
    pub(crate) fn new(
        backend: &dyn Backend,
        config: EngineConfig,
        inflight: Arc<AtomicUsize>,
        stats: Arc<CacheStats>,
    ) -> Self {
        let info = backend.info();
        let layout = format!(
            "{} {} n_ctx={} n_seq_max={} n_layer={} n_embd={} block={}",
            backend.name(),
            info.name,
            info.n_ctx,
            info.n_seq_max,
            info.n_layer,
            info.n_embd,
            config.prefill_chunk
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
                exact: 0,
                job: None,
                last_used: 0,
            })
            .collect();
        State {
            slots,
            queue: VecDeque::new(),
            config,
            n_ctx: usize::try_from(info.n_ctx).unwrap_or(usize::MAX),
            clock: 0,
            inflight,
            disk,
            stats,
        }
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

    /// Drops cancelled requests, admits waiting ones, and runs one batched step.
    pub(crate) fn tick(&mut self, backend: &mut dyn Backend) {
        self.clock += 1;
        self.reap_cancelled(backend);
        self.admit(backend);
        let ops = self.plan();
        if ops.is_empty() {
            return;
        }
        match backend.step(&ops) {
            Ok(results) => self.apply(backend, &ops, results),
            // One sequence's failure (a full context, a grammar dead end) must not fail the
            // others: run the operations one by one and fail only those that fail alone.
            Err(_) => self.step_one_by_one(backend, &ops),
        }
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
                    self.slots[index].tokens.clear();
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
        while let Some(target) = self.free_slot() {
            let Some(pending) = self.queue.pop_front() else {
                return;
            };
            if !pending.ticket.take() {
                continue;
            }
            if let Err(e) = self.start(backend, target, pending.request, &pending.events) {
                let _ = pending.events.send(GenEvent::Error(e));
                self.inflight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// The idle slot to give a new request: the least recently used one.
    fn free_slot(&self) -> Option<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].job.is_none())
            .min_by_key(|&i| self.slots[i].last_used)
    }

    /// Puts `request` on slot `target`, reusing the longest prompt prefix any sequence holds.
    fn start(
        &mut self,
        backend: &mut dyn Backend,
        target: usize,
        request: GenerateRequest,
        events: &UnboundedSender<GenEvent>,
    ) -> Result<(), EngineError> {
        let mut cached = self.reuse_prefix(backend, target, &request.prompt)?;
        let restored = self.restore_from_disk(backend, target, &request.prompt, cached)?;
        match (cached, restored) {
            (_, Some(n)) => cached = n,
            (0, None) => CacheStats::add(&self.stats.misses, 1),
            (_, None) => CacheStats::add(&self.stats.hits_ram, 1),
        }
        let sampler = if needs_sampler(&request) {
            Some(backend.sampler_new(&request.sampler)?)
        } else {
            None
        };
        let slot = &mut self.slots[target];
        slot.last_used = self.clock;
        slot.job = Some(Job {
            events: events.clone(),
            fed: cached,
            prompt: request.prompt,
            sampler,
            max_tokens: request.max_tokens,
            generated: 0,
            cached: u32::try_from(cached).unwrap_or(u32::MAX),
            text: Utf8Stream::default(),
            stop: StopMatcher::new(request.stop),
            logprobs: request.logprobs,
            log: TokenLog::default(),
        });
        Ok(())
    }

    /// Makes slot `target` hold the longest prefix of `prompt` that any sequence holds
    /// exactly, and returns its length.
    ///
    /// Reuse is exact: prompts are prefilled in blocks of `prefill_chunk` tokens aligned to
    /// position 0, and only whole blocks are reused (never decoded tokens, never the prompt's
    /// last token, which the first decode evaluates). A warm request then evaluates the very
    /// batches a cold one would, so its greedy output is the cold output. Falls back to an
    /// empty sequence where the backend cannot copy or truncate.
    fn reuse_prefix(
        &mut self,
        backend: &mut dyn Backend,
        target: usize,
        prompt: &[TokenId],
    ) -> Result<usize, EngineError> {
        let (best, len) = (0..self.slots.len())
            .map(|i| {
                let slot = &self.slots[i];
                (
                    i,
                    self.reusable(common_prefix(&slot.tokens, prompt).min(slot.exact), prompt),
                )
            })
            // On a tie, the target itself: truncating is cheaper than copying.
            .max_by_key(|&(i, len)| (len, i == target))
            .expect("invariant: there is at least one slot");
        let seq = self.slots[target].seq;
        let reused = if len == 0 {
            Err(())
        } else if best == target {
            let extra = self.slots[target].tokens.len() - len;
            backend.seq_rm_last(seq, extra).map_err(|_| ())
        } else {
            backend
                .seq_copy(self.slots[best].seq, seq, len)
                .map_err(|_| ())
        };
        let slot = &mut self.slots[target];
        if reused.is_ok() {
            slot.tokens = prompt[..len].to_vec();
            slot.exact = len;
            return Ok(len);
        }
        if !slot.tokens.is_empty() {
            backend.seq_rm(seq)?;
            slot.tokens.clear();
        }
        slot.exact = 0;
        Ok(0)
    }

    /// `shared` tokens of `prompt` cut to what may be reused: whole blocks, leaving at least
    /// the prompt's last token to evaluate.
    fn reusable(&self, shared: usize, prompt: &[TokenId]) -> usize {
        let block = self.config.prefill_chunk;
        (shared.min(prompt.len().saturating_sub(1)) / block) * block
    }

    /// Restores the disk snapshot sharing the longest prefix with `prompt` into slot `target`
    /// when it beats the `cached` RAM prefix; returns the restored length. A snapshot that
    /// fails its checks is removed and the RAM prefix is taken again.
    fn restore_from_disk(
        &mut self,
        backend: &mut dyn Backend,
        target: usize,
        prompt: &[TokenId],
        cached: usize,
    ) -> Result<Option<usize>, EngineError> {
        let block = self.config.prefill_chunk;
        let limit = self.reusable(prompt.len(), prompt);
        let Some(disk) = self.disk.as_mut() else {
            return Ok(None);
        };
        let Some((path, shared)) = disk.best(prompt, limit, cached + DISK_MIN_GAIN) else {
            return Ok(None);
        };
        // Snapshots hold whole blocks only; cut the shared part to whole blocks too.
        let len = shared / block * block;
        if len <= cached {
            return Ok(None);
        }
        let seq = self.slots[target].seq;
        let restored = disk
            .load(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                // Clear the target first: restoring over old cells is what makes a restore
                // slower than it needs to be.
                let _ = backend.seq_rm(seq);
                backend.kv_unpack(seq, &bytes).map_err(|e| e.to_string())?;
                let held = backend.seq_tokens(seq).map_err(|e| e.to_string())?;
                backend
                    .seq_rm_last(seq, held.len() - len)
                    .map_err(|e| e.to_string())
            });
        match restored {
            Ok(()) => {
                self.slots[target].tokens = prompt[..len].to_vec();
                self.slots[target].exact = len;
                CacheStats::add(&self.stats.hits_disk, 1);
                CacheStats::add(&self.stats.restored_tokens, len as u64);
                Ok(Some(len))
            }
            Err(reason) => {
                tracing::warn!(path = %path.display(), %reason, "prompt cache snapshot rejected");
                disk.reject(&path);
                let _ = backend.seq_rm(seq);
                self.slots[target].tokens.clear();
                self.slots[target].exact = 0;
                self.reuse_prefix(backend, target, prompt).map(|_| None)
            }
        }
    }

    /// Saves the slot's exactly reusable prefix (its whole prompt blocks) to the disk cache
    /// when it is long and new enough, then runs `then`: right away, or on the cache's writer
    /// thread once the file is written. The sequence is cut to that prefix first: nothing
    /// after it could be reused exactly anyway.
    fn save_to_disk(&mut self, backend: &mut dyn Backend, index: usize, then: Then) {
        let Some(disk) = self.disk.as_mut() else {
            return then();
        };
        let slot = &mut self.slots[index];
        let Some(name) = disk.wants(&slot.tokens[..slot.exact]) else {
            return then();
        };
        let extra = slot.tokens.len() - slot.exact;
        if backend.seq_rm_last(slot.seq, extra).is_err() {
            return then();
        }
        slot.tokens.truncate(slot.exact);
        match backend.kv_pack(slot.seq) {
            Ok(bytes) => disk.save(name, &slot.tokens, bytes, then),
            Err(e) => {
                tracing::warn!("prompt cache: cannot save a snapshot: {e}");
                then();
            }
        }
    }

    /// This step's operations: a prompt chunk for sequences still prefilling (within the
    /// step's prefill budget), a decode for every other live sequence.
    fn plan(&self) -> Vec<(SeqId, StepOp)> {
        let block = self.config.prefill_chunk;
        let mut budget = self.config.prefill_budget;
        let mut prefilling = false;
        let mut ops = Vec::new();
        for slot in &self.slots {
            let Some(job) = &slot.job else { continue };
            if job.fed < job.prompt.len() {
                // One whole block up to the next block boundary: blocks are never cut, so a
                // prompt is evaluated in the same batches however its prefill is scheduled.
                let n = (job.prompt.len() - job.fed).min(block - job.fed % block);
                if n <= budget || !prefilling {
                    budget = budget.saturating_sub(n);
                    prefilling = true;
                    ops.push((
                        slot.seq,
                        StepOp::Prefill(job.prompt[job.fed..job.fed + n].to_vec()),
                    ));
                }
            } else {
                let op = match job.logprobs {
                    Some(top) => StepOp::DecodeLogprobs {
                        sampler: job.sampler,
                        top,
                    },
                    None => StepOp::Decode(job.sampler),
                };
                ops.push((slot.seq, op));
            }
        }
        ops
    }

    fn apply(
        &mut self,
        backend: &mut dyn Backend,
        ops: &[(SeqId, StepOp)],
        results: Vec<(SeqId, StepResult)>,
    ) {
        for ((seq, op), (_, result)) in ops.iter().zip(results) {
            let index = self.slot_index(*seq);
            let outcome = match (op, result) {
                (StepOp::Prefill(tokens), _) => {
                    let block = self.config.prefill_chunk;
                    let slot = &mut self.slots[index];
                    slot.tokens.extend_from_slice(tokens);
                    let job = slot.job.as_mut().expect("invariant: planned jobs are live");
                    job.fed += tokens.len();
                    if job.fed % block == 0 && slot.exact + tokens.len() == job.fed {
                        slot.exact = job.fed;
                    }
                    Outcome::Running
                }
                (_, result) => match result.token() {
                    Some(token) => self.on_token(backend, index, token, &result),
                    None => Outcome::Running,
                },
            };
            match outcome {
                Outcome::Running => {}
                Outcome::Finished(reason, stop) => self.finish(backend, index, reason, stop),
                Outcome::Failed(e) => self.fail(backend, index, e),
            }
        }
    }

    fn on_token(
        &mut self,
        backend: &mut dyn Backend,
        index: usize,
        token: TokenId,
        result: &StepResult,
    ) -> Outcome {
        let n_ctx = self.n_ctx;
        let slot = &mut self.slots[index];
        slot.tokens.push(token);
        let job = slot.job.as_mut().expect("invariant: planned jobs are live");
        job.generated += 1;
        if matches!(result.plain(), StepResult::Token(Decoded::Eog(_))) {
            return Outcome::Finished(FinishReason::Stop, None);
        }
        let bytes = match backend.detokenize(&[token]) {
            Ok(bytes) => bytes,
            Err(e) => return Outcome::Failed(e.into()),
        };
        if let (Some(_), Some(logprobs)) = (job.logprobs, result.logprobs()) {
            let top: Vec<TokenId> = logprobs.top.iter().map(|t| t.token).collect();
            match backend.token_pieces(&top) {
                Ok(pieces) => job
                    .log
                    .push(ScoredToken::new(logprobs, bytes.clone(), pieces)),
                Err(e) => return Outcome::Failed(e.into()),
            }
        }
        let piece = job.text.push(&bytes);
        match job.stop.push(&piece) {
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
            prefill_chunk: 32,
            prefill_budget: 32,
            ..EngineConfig::default()
        };
        let inflight = Arc::new(AtomicUsize::new(2));
        let mut state = State::new(
            &backend,
            engine_config,
            Arc::clone(&inflight),
            Arc::default(),
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
        // A prefills, then decodes.
        state.tick(&mut backend);
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
        // 300 prompt tokens in chunks of 32: ten steps, and A decodes in every one of them.
        for step in 1..=10 {
            state.tick(&mut backend);
            assert_eq!(generated(&state, 0), 1 + step, "A decoded in step {step}");
            let fed = state.slots[1].job.as_ref().expect("B is live").fed;
            assert_eq!(fed, (32 * step as usize).min(300));
        }
        state.tick(&mut backend);
        assert_eq!(generated(&state, 1), 1, "B decodes once its prompt is in");
    }
}
