//! The engine's thread and the handle callers hold.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use wick_backend::{Backend, ModelInfo, SharedTokenizer};

use crate::scheduler::{Pending, State};
use crate::ticket::Ticket;
use crate::{CacheStats, EngineConfig, EngineError, GenEvent, GenerateRequest};

type Job = Box<dyn FnOnce(&mut dyn Backend) + Send>;

enum Command {
    Generate(Box<Pending>),
    Run(Job),
}

/// A running engine: one thread owns the backend and batches every live request into each
/// step. Cloning the handle is cheap; the thread ends when the last handle is dropped and the
/// requests in flight have finished.
#[derive(Debug, Clone)]
pub struct Engine {
    commands: SyncSender<Command>,
    inflight: Arc<AtomicUsize>,
    stats: Arc<CacheStats>,
    info: Arc<ModelInfo>,
    tokenizer: SharedTokenizer,
    media: Option<wick_backend::SharedMediaEncoder>,
    live: usize,
    queued: usize,
    thread: EngineThread,
}

/// The engine's thread, to wait for once every [`Engine`] handle is gone (a process that exits
/// while the thread is inside the backend tears llama.cpp down under it).
#[derive(Debug, Clone)]
pub struct EngineThread(Arc<Mutex<Option<JoinHandle<()>>>>);

impl EngineThread {
    /// Waits up to `timeout` for the engine's thread to end (it ends when the last [`Engine`]
    /// handle is dropped and the requests in flight have finished). Returns whether it ended.
    pub fn join(&self, timeout: Duration) -> bool {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(handle) = slot.take() else {
            return true;
        };
        let deadline = Instant::now() + timeout;
        while !handle.is_finished() {
            if Instant::now() >= deadline {
                *slot = Some(handle);
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        // A panic on the engine's thread was already reported to every request in flight.
        let _ = handle.join();
        true
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Generate(_) => "Generate",
            Command::Run(_) => "Run",
        })
    }
}

impl Engine {
    /// Starts the engine's thread, which takes ownership of `backend`.
    ///
    /// # Errors
    ///
    /// An invalid `config`.
    pub fn start(backend: Box<dyn Backend>, config: EngineConfig) -> Result<Engine, EngineError> {
        Engine::start_with_draft(backend, None, config)
    }

    /// [`Engine::start`] with a draft model: a second (smaller) model of the same vocabulary
    /// that proposes the speculative tokens of greedy requests instead of prompt lookup
    /// ([`EngineConfig::spec_max`] and [`crate::GenerateRequest::spec_max`] bound them alike).
    /// The engine's thread takes both; the draft holds one sequence per live request.
    ///
    /// # Errors
    ///
    /// An invalid `config`; a draft whose vocabulary differs from the model's (the first
    /// differing token is named) or whose context is smaller.
    pub fn start_with_draft(
        backend: Box<dyn Backend>,
        draft: Option<Box<dyn Backend>>,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        config.validate()?;
        let inflight = Arc::new(AtomicUsize::new(0));
        let cache_stats = Arc::new(CacheStats::default());
        let pieces = crate::scheduler::token_pieces(backend.as_ref())?;
        let state = State::new(
            backend.as_ref(),
            config,
            Arc::clone(&inflight),
            Arc::clone(&cache_stats),
            pieces,
        );
        let state = match draft {
            Some(draft) => state.with_draft(draft)?,
            None => state,
        };
        let (live, queued) = state.capacity();
        let info = Arc::new(backend.info().clone());
        let tokenizer = backend.tokenizer();
        let media = backend.media_encoder();
        let (commands, rx) = mpsc::sync_channel(256);
        let handle = thread::Builder::new()
            .name(format!("wick-engine-{}", info.name))
            .spawn(move || run(backend, state, &rx))
            .map_err(|_| EngineError::Stopped)?;
        Ok(Engine {
            commands,
            inflight,
            stats: cache_stats,
            info,
            tokenizer,
            media,
            live,
            queued,
            thread: EngineThread(Arc::new(Mutex::new(Some(handle)))),
        })
    }

    /// The engine's thread, to wait for after the last handle is dropped.
    pub fn thread(&self) -> EngineThread {
        self.thread.clone()
    }

    /// The model and context the engine serves.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The model's vocabulary, for the caller's own thread: prompts are rendered and tokenized
    /// there, never on the engine's thread.
    pub fn tokenizer(&self) -> &SharedTokenizer {
        &self.tokenizer
    }

    /// The model's projector (images or sounds into prompt positions), for rendering prompts
    /// on the callers' threads; `None` for a model without one.
    pub fn media_encoder(&self) -> Option<&wick_backend::SharedMediaEncoder> {
        self.media.as_ref()
    }

    /// Queues a generation and returns its stream of events.
    ///
    /// # Errors
    ///
    /// [`EngineError::PromptTooLong`] when the prompt leaves no room in the context window,
    /// [`EngineError::InvalidRequest`] for an empty prompt or `max_tokens` 0,
    /// [`EngineError::Busy`] when every sequence is live and the queue is full,
    /// [`EngineError::Stopped`] when the engine's thread is gone.
    pub fn submit(&self, request: GenerateRequest) -> Result<Generation, EngineError> {
        self.check(&request)?;
        let bound = self.live + self.queued;
        let admitted = self
            .inflight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < bound).then_some(n + 1)
            });
        if admitted.is_err() {
            return Err(EngineError::Busy {
                live: self.live,
                queued: self.queued,
            });
        }
        let (events, rx) = unbounded_channel();
        let ticket = Ticket::new(Arc::clone(&self.inflight));
        let pending = Pending {
            request,
            events,
            ticket: Arc::clone(&ticket),
        };
        if self
            .commands
            .send(Command::Generate(Box::new(pending)))
            .is_err()
        {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(EngineError::Stopped);
        }
        Ok(Generation { events: rx, ticket })
    }

    /// Runs `job` on the engine's thread between two steps and returns its result
    /// (tokenizing, detokenizing, embeddings: anything that needs the backend itself).
    ///
    /// # Errors
    ///
    /// [`EngineError::Stopped`] when the engine's thread is gone.
    pub fn with_backend<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut dyn Backend) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |backend| {
            let _ = reply.send(job(backend));
        });
        self.commands
            .send(Command::Run(job))
            .map_err(|_| EngineError::Stopped)?;
        answer.recv().map_err(|_| EngineError::Stopped)
    }

    /// [`Engine::with_backend`] for async callers: waits without blocking a thread.
    ///
    /// # Errors
    ///
    /// [`EngineError::Stopped`] when the engine's thread is gone.
    pub async fn with_backend_async<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut dyn Backend) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |backend| {
            let _ = reply.send(job(backend));
        });
        self.commands
            .send(Command::Run(job))
            .map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)
    }

    /// The prompt cache's counters (RAM and disk hits, misses, restored tokens and bytes,
    /// saves, evictions, rejects).
    pub fn cache_stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Requests generating or queued right now.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    fn check(&self, request: &GenerateRequest) -> Result<(), EngineError> {
        if request.prompt.is_empty() {
            return Err(EngineError::InvalidRequest {
                field: "prompt",
                value: "[] (no tokens)".into(),
                allowed: "at least one token",
            });
        }
        if request.max_tokens == Some(0) {
            return Err(EngineError::InvalidRequest {
                field: "max_tokens",
                value: "0".into(),
                allowed: "1 or more",
            });
        }
        if request.adapters.len() > self.info.max_active_adapters as usize {
            let ids: Vec<String> = request
                .adapters
                .as_slice()
                .iter()
                .map(|(id, scale)| format!("{}:{scale}", id.0))
                .collect();
            return Err(EngineError::InvalidRequest {
                field: "lora",
                value: format!("[{}] ({} adapters)", ids.join(", "), request.adapters.len()),
                allowed: if self.info.max_active_adapters == 0 {
                    "none (this backend has no LoRA adapters)"
                } else if self.info.max_active_adapters == 1 {
                    "one adapter with a non-zero scale at a time (llama-cpp-2 0.1.160 sets one)"
                } else {
                    "no more adapters than the backend makes active at once"
                },
            });
        }
        let n_ctx = usize::try_from(self.info.n_ctx).unwrap_or(usize::MAX);
        if request.prompt.len() >= n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt_tokens: request.prompt.len(),
                n_ctx,
            });
        }
        Ok(())
    }
}

/// The stream of one generation. Dropping it cancels the generation: a queued request frees
/// its queue slot at once, a live one its sequence at the engine's next step.
#[derive(Debug)]
pub struct Generation {
    events: UnboundedReceiver<GenEvent>,
    ticket: Arc<Ticket>,
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.ticket.cancel();
    }
}

impl Generation {
    /// The next event, waiting for it without blocking a thread.
    pub async fn recv(&mut self) -> Option<GenEvent> {
        self.events.recv().await
    }

    /// Polls for the next event (for implementing `Stream`).
    pub fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<GenEvent>> {
        self.events.poll_recv(cx)
    }
}

impl Iterator for Generation {
    type Item = GenEvent;

    /// The next event, blocking the calling thread (do not call it inside an async runtime;
    /// use [`Generation::recv`] there).
    fn next(&mut self) -> Option<GenEvent> {
        self.events.blocking_recv()
    }
}

/// The engine's loop: wait for work when idle, else take what arrived and step.
fn run(mut backend: Box<dyn Backend>, mut state: State, commands: &Receiver<Command>) {
    let mut open = true;
    loop {
        if state.is_idle() {
            if !open {
                break;
            }
            match commands.recv() {
                Ok(cmd) => handle(&mut state, backend.as_mut(), cmd),
                Err(_) => break,
            }
        }
        while open {
            match commands.try_recv() {
                Ok(cmd) => handle(&mut state, backend.as_mut(), cmd),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        if !state.tick(backend.as_mut()) && !state.is_idle() {
            // Every live request waits for a prompt prefix the disk reader is fetching: wait
            // a moment (or for a command) instead of spinning.
            match commands.recv_timeout(std::time::Duration::from_millis(1)) {
                Ok(cmd) => handle(&mut state, backend.as_mut(), cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => open = false,
            }
        }
        let (live, queued) = state.load();
        tracing::trace!(live, queued, "engine step");
    }
    state.abort_all(backend.as_mut());
}

fn handle(state: &mut State, backend: &mut dyn Backend, cmd: Command) {
    match cmd {
        Command::Generate(pending) => state.enqueue(*pending),
        Command::Run(job) => job(backend),
    }
}
