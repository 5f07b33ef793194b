//! The `LlamaBackend` handle: a cheap front that sends work to the thread owning the model.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use llama_cpp_2::model::LlamaModel;
use wick_backend::{
    AdapterId, Backend, BackendConfig, BackendError, Decoded, ModelInfo, SamplerId, StepOp,
    StepResult, Verified,
};
use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

use crate::worker::{State, Worker};

type Result<T> = std::result::Result<T, BackendError>;
type Job = Box<dyn FnOnce(&mut Worker<'_>) + Send>;

enum Command {
    Run(Job),
    /// Loading an adapter needs the model mutably, so the worker gives up its context for it.
    LoadAdapter(PathBuf, mpsc::SyncSender<Result<AdapterId>>),
}

/// The llama.cpp backend. Cheap to move between threads; the model lives on its own thread.
///
/// Dropping it stops that thread and frees the model (seed 001's `terminate`).
#[derive(Debug)]
pub struct LlamaBackend {
    info: ModelInfo,
    tokenizer: std::sync::Arc<crate::vocab::LlamaTokenizer>,
    tx: Option<mpsc::Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

impl LlamaBackend {
    /// Loads the model of `config` on a new worker thread (seed 001's `init`).
    ///
    /// # Errors
    ///
    /// [`BackendError::Config`] for an out-of-range setting, [`BackendError::Load`] for a file
    /// that is missing, not GGUF, truncated or not loadable.
    pub fn load(config: &BackendConfig) -> Result<Self> {
        config.validate()?;
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let config_path = config.model_path.clone();
        let config = config.clone();
        let thread = std::thread::Builder::new()
            .name("wick-llama".into())
            .spawn(move || run(&config, &rx, &ready_tx))
            .map_err(|e| BackendError::Load {
                path: PathBuf::from("worker thread"),
                reason: e.to_string(),
            })?;
        let info = ready_rx.recv().map_err(|_| BackendError::WorkerGone)??;
        let tokenizer = crate::vocab::LlamaTokenizer::load(&config_path, info.n_vocab)?;
        Ok(LlamaBackend {
            info,
            tokenizer: std::sync::Arc::new(tokenizer),
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Sends the command `make` builds around a reply channel, and waits for the reply.
    fn request<R>(&self, make: impl FnOnce(mpsc::SyncSender<Result<R>>) -> Command) -> Result<R> {
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        let tx = self.tx.as_ref().ok_or(BackendError::WorkerGone)?;
        tx.send(make(reply_tx))
            .map_err(|_| BackendError::WorkerGone)?;
        reply_rx.recv().map_err(|_| BackendError::WorkerGone)?
    }

    fn call<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Worker<'_>) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.request(|reply| {
            Command::Run(Box::new(move |worker| {
                let _ = reply.send(job(worker));
            }))
        })
    }
}

impl Drop for LlamaBackend {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The worker thread: load the model, then serve commands until the handle is dropped.
fn run(
    config: &BackendConfig,
    rx: &mpsc::Receiver<Command>,
    ready: &mpsc::SyncSender<Result<ModelInfo>>,
) {
    let mut model = match crate::load::load_model(config) {
        Ok(model) => model,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let info = crate::load::model_info(config, &model);
    let mut state = State {
        config: config.clone(),
        fingerprint: crate::load::fingerprint(config, &info),
        seqs: vec![Vec::new(); config.n_seq_max as usize],
        samplers: crate::sampler::Samplers::new(),
        adapters: std::collections::HashMap::new(),
        active_adapter: None,
        next_adapter: 1,
        info: info.clone(),
    };
    let mut ready = Some(ready);
    let mut saved = Vec::new();
    loop {
        let Some(handover) = serve(&model, state, saved, rx, &mut ready) else {
            return;
        };
        state = handover.state;
        saved = handover.saved;
        let loaded = load_adapter(&mut model, &mut state, &handover.path);
        let _ = handover.reply.send(loaded);
    }
}

type AdapterRequest = (PathBuf, mpsc::SyncSender<Result<AdapterId>>);

/// What a worker hands back when it gives up its context for an adapter load.
struct Handover {
    state: State,
    saved: Vec<(i32, Vec<u8>)>,
    path: PathBuf,
    reply: mpsc::SyncSender<Result<AdapterId>>,
}

/// Serves commands with one context until the handle is dropped (`None`) or an adapter must be
/// loaded: then the context is given up and the state and sequences come back.
fn serve(
    model: &LlamaModel,
    state: State,
    saved: Vec<(i32, Vec<u8>)>,
    rx: &mpsc::Receiver<Command>,
    ready: &mut Option<&mpsc::SyncSender<Result<ModelInfo>>>,
) -> Option<Handover> {
    let info = state.info.clone();
    let mut worker = match new_worker(model, state, saved) {
        Ok(worker) => worker,
        Err(e) => {
            if let Some(ready) = ready.take() {
                let _ = ready.send(Err(e));
            }
            return None;
        }
    };
    if let Some(ready) = ready.take() {
        let _ = ready.send(Ok(info));
    }
    let (path, reply): AdapterRequest = loop {
        match rx.recv() {
            Ok(Command::Run(job)) => job(&mut worker),
            Ok(Command::LoadAdapter(path, reply)) => break (path, reply),
            Err(_) => return None,
        }
    };
    let saved = save_all(&worker);
    Some(Handover {
        state: worker.state,
        saved,
        path,
        reply,
    })
}

fn load_adapter(model: &mut LlamaModel, state: &mut State, path: &Path) -> Result<AdapterId> {
    let adapter_err = |reason: String| BackendError::Adapter {
        path: path.to_path_buf(),
        reason,
    };
    crate::gguf::check_gguf(path).map_err(|e| match e {
        BackendError::Load { reason, .. } => adapter_err(reason),
        other => adapter_err(other.to_string()),
    })?;
    let adapter = model
        .lora_adapter_init(path)
        .map_err(|e| adapter_err(format!("llama.cpp rejected it ({e})")))?;
    let id = state.next_adapter;
    state.next_adapter += 1;
    state.adapters.insert(id, adapter);
    Ok(AdapterId(id))
}

/// Every non-empty sequence's KV state, to carry over into a new context.
fn save_all(worker: &Worker<'_>) -> Vec<(i32, Vec<u8>)> {
    worker
        .state
        .seqs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.len() > 1)
        .filter_map(|(i, _)| {
            let seq = i32::try_from(i).ok()?;
            Some((seq, crate::ffi::seq_state_bytes(&worker.ctx, seq)?))
        })
        .collect()
}

fn new_worker(model: &LlamaModel, state: State, saved: Vec<(i32, Vec<u8>)>) -> Result<Worker<'_>> {
    let params = crate::load::context_params(&state.config, state.info.n_ctx);
    let runtime = crate::load::runtime()?;
    let ctx = crate::ffi::with_cpu_kernels(state.info.deterministic, || {
        model.new_context(runtime, params)
    })
    .map_err(|e| BackendError::Load {
        path: state.config.model_path.clone(),
        reason: format!(
            "cannot create a context of {} tokens × {} sequences: {e}",
            state.info.n_ctx, state.info.n_seq_max
        ),
    })?;
    let active = state.active_adapter;
    let mut worker = Worker {
        model,
        ctx,
        embed_ctx: None,
        state,
    };
    for (seq, bytes) in saved {
        if !crate::ffi::set_seq_state_bytes(&mut worker.ctx, seq, &bytes) {
            // Cannot happen for state this very process just produced; recompute if it does.
            let index = usize::try_from(seq).unwrap_or(0);
            let tokens = std::mem::take(&mut worker.state.seqs[index]);
            let id = SeqId(u32::try_from(index).unwrap_or(0));
            let _ = worker.step(&[(id, StepOp::Prefill(tokens))]);
        }
    }
    if let Err(e) = worker.set_active(active) {
        tracing::warn!("could not re-apply the LoRA adapter: {e}");
    }
    Ok(worker)
}

impl Backend for LlamaBackend {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn tokenizer(&self) -> wick_backend::SharedTokenizer {
        self.tokenizer.clone()
    }

    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        wick_backend::Tokenizer::tokenize(&*self.tokenizer, text, special)
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>> {
        wick_backend::Tokenizer::detokenize(&*self.tokenizer, tokens)
    }

    fn prefill(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<()> {
        self.step(&[(seq, StepOp::Prefill(tokens.to_vec()))])
            .map(drop)
    }

    fn decode_one(&mut self, seq: SeqId, sampler: Option<SamplerId>) -> Result<Decoded> {
        let results = self.step(&[(seq, StepOp::Decode(sampler))])?;
        results
            .first()
            .and_then(|(_, r)| r.decoded())
            .ok_or_else(|| BackendError::Decode {
                reason: "a decode produced no token".into(),
            })
    }

    fn token_pieces(&self, tokens: &[TokenId]) -> Result<Vec<Vec<u8>>> {
        tokens
            .iter()
            .map(|t| wick_backend::Tokenizer::detokenize(&*self.tokenizer, std::slice::from_ref(t)))
            .collect()
    }

    fn seq_tokens(&self, seq: SeqId) -> Result<Vec<TokenId>> {
        self.call(move |w| w.seq_tokens(seq))
    }

    fn kv_pack(&mut self, seq: SeqId) -> Result<Vec<u8>> {
        self.call(move |w| w.kv_pack(seq))
    }

    fn kv_unpack(&mut self, seq: SeqId, snapshot: &[u8]) -> Result<()> {
        let snapshot = snapshot.to_vec();
        self.call(move |w| w.kv_unpack(seq, &snapshot))
    }

    fn step(&mut self, ops: &[(SeqId, StepOp)]) -> Result<Vec<(SeqId, StepResult)>> {
        let ops = ops.to_vec();
        self.call(move |w| w.step(&ops))
    }

    fn sampler_new(&mut self, opts: &SamplerOpts) -> Result<SamplerId> {
        let opts = opts.clone();
        self.call(move |w| w.state.samplers.create(w.model, &opts))
    }

    fn sampler_configure(&mut self, sampler: SamplerId, opts: &SamplerOpts) -> Result<()> {
        let opts = opts.clone();
        self.call(move |w| w.state.samplers.configure(w.model, sampler, &opts))
    }

    fn sampler_clear(&mut self, sampler: SamplerId) -> Result<()> {
        self.call(move |w| w.state.samplers.clear(sampler))
    }

    fn sampler_free(&mut self, sampler: SamplerId) -> Result<()> {
        self.call(move |w| w.state.samplers.free(sampler))
    }

    fn set_grammar(&mut self, sampler: SamplerId, grammar: Option<&Grammar>) -> Result<()> {
        let grammar = grammar.cloned();
        self.call(move |w| {
            w.state
                .samplers
                .set_grammar(w.model, sampler, grammar.as_ref())
        })
    }

    fn load_adapter(&mut self, path: &Path) -> Result<AdapterId> {
        self.request(|reply| Command::LoadAdapter(path.to_path_buf(), reply))
    }

    fn apply_adapters(&mut self, adapters: &[(AdapterId, f32)]) -> Result<()> {
        let adapters: Vec<(u64, f32)> = adapters.iter().map(|(a, s)| (a.0, *s)).collect();
        self.call(move |w| w.apply_adapters(&adapters))
    }

    fn unload_adapter(&mut self, adapter: AdapterId) -> Result<()> {
        self.call(move |w| w.unload_adapter(adapter.0))
    }

    fn embed(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        let tokens = tokens.to_vec();
        self.call(move |w| w.embed(&tokens))
    }

    fn verify(&mut self, seq: SeqId, candidates: &[TokenId]) -> Result<Verified> {
        let candidates = candidates.to_vec();
        self.call(move |w| w.verify(seq, &candidates))
    }

    fn seq_rm(&mut self, seq: SeqId) -> Result<()> {
        self.call(move |w| w.truncate(seq, 0))
    }

    fn seq_rm_last(&mut self, seq: SeqId, n: usize) -> Result<()> {
        self.call(move |w| w.seq_rm_last(seq, n))
    }

    fn seq_copy(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        self.call(move |w| w.seq_copy(src, dst, n))
    }

    fn seq_clear(&mut self) -> Result<()> {
        self.call(|w| {
            w.seq_clear();
            Ok(())
        })
    }
}
