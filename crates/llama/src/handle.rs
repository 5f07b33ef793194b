//! The `LlamaBackend`: the model and its context, owned by whichever thread owns the backend.
//!
//! There is no worker thread of its own: the engine's thread owns the backend, so each `step`
//! is a plain call into llama.cpp, with no channel round trip and no second actor.

use std::path::Path;
use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;
use wick_backend::{
    AdapterId, Backend, BackendConfig, BackendError, Decoded, ModelInfo, SamplerId, StepOp,
    StepResult, Verified,
};
use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

use crate::vocab::LlamaTokenizer;
use crate::worker::{State, Worker};

type Result<T> = std::result::Result<T, BackendError>;

self_cell::self_cell!(
    /// The model and the context that borrows it, in one value: `LlamaContext<'m>` borrows
    /// its `LlamaModel`, and the backend must own both to be moved onto the engine's thread.
    struct Loaded {
        owner: LlamaModel,
        #[covariant]
        dependent: Worker,
    }
);

/// The llama.cpp backend: the model, its context and every sequence.
///
/// It is `Send`: build it anywhere and move it onto the thread that steps it (the engine's).
/// Dropping it frees the context and then the model (seed 001's `terminate`).
pub struct LlamaBackend {
    info: ModelInfo,
    tokenizer: Arc<LlamaTokenizer>,
    /// `None` only after a failed context rebuild (an adapter load): every call then fails.
    loaded: Option<Loaded>,
    /// The model's projector (`--mmproj`), shared with the threads that render prompts.
    projector: Option<Arc<crate::media::Projector>>,
}

/// The projector's libmtmd context points into the model: it is freed first.
impl Drop for LlamaBackend {
    fn drop(&mut self) {
        if let Some(projector) = &self.projector {
            projector.close();
        }
    }
}

impl std::fmt::Debug for LlamaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaBackend")
            .field("model", &self.info.name)
            .field("loaded", &self.loaded.is_some())
            .finish_non_exhaustive()
    }
}

impl LlamaBackend {
    /// Loads the model of `config` and creates its context (seed 001's `init`).
    ///
    /// # Errors
    ///
    /// [`BackendError::Config`] for an out-of-range setting, [`BackendError::Load`] for a file
    /// that is missing, not GGUF, truncated or not loadable.
    pub fn load(config: &BackendConfig) -> Result<Self> {
        config.validate()?;
        let crate::load::LoadedModel {
            model,
            devices,
            config,
        } = crate::load::load_model(config)?;
        let config = &config;
        let info = crate::load::model_info(config, &model, &devices);
        crate::load::check_device_memory(&info)?;
        let state = State {
            config: config.clone(),
            fingerprint: crate::load::fingerprint(config, &info),
            seqs: vec![Vec::new(); config.n_seq_max as usize],
            samplers: crate::sampler::Samplers::new(),
            adapters: std::collections::HashMap::new(),
            active_adapter: None,
            next_adapter: 1,
            info: info.clone(),
            projector: None,
            checkpoints: (0..config.n_seq_max).map(|_| Vec::new()).collect(),
        };
        let mut projector = None;
        let loaded = Loaded::try_new(model, |model| {
            let mut state = state;
            if let Some(path) = &config.mmproj {
                let threads = crate::load::threads(config);
                let loaded = Arc::new(crate::media::Projector::load(path, model, threads)?);
                projector = Some(loaded.clone());
                state.projector = Some(loaded);
            }
            new_worker(model, state, Vec::new())
        })?;
        let tokenizer = LlamaTokenizer::load(&config.model_path, info.n_vocab)?;
        Ok(LlamaBackend {
            info,
            tokenizer: Arc::new(tokenizer),
            loaded: Some(loaded),
            projector,
        })
    }

    fn loaded(&self) -> Result<&Loaded> {
        self.loaded.as_ref().ok_or(BackendError::ContextGone)
    }

    /// Runs `job` on the worker (the model, the context and the sequences).
    fn with<R>(&mut self, job: impl FnOnce(&mut Worker<'_>) -> Result<R>) -> Result<R> {
        self.loaded
            .as_mut()
            .ok_or(BackendError::ContextGone)?
            .with_dependent_mut(|_, worker| job(worker))
    }

    /// Loading an adapter needs the model mutably: the context is given up (each sequence's
    /// KV state saved first), the adapter loaded, and a new context made with the states put
    /// back.
    fn load_adapter_rebuilding(&mut self, path: &Path) -> Result<AdapterId> {
        let mut loaded = self.loaded.take().ok_or(BackendError::ContextGone)?;
        let (mut state, saved) = loaded.with_dependent_mut(|_, worker| {
            // Saved before the state (and its sequence list) moves out.
            let saved = save_all(worker);
            (worker.take_state(), saved)
        });
        let mut model = loaded.into_owner();
        let result = load_adapter(&mut model, &mut state, path);
        self.loaded = Some(Loaded::try_new(model, |model| {
            new_worker(model, state, saved)
        })?);
        result
    }
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
    let ctx = crate::ffi::with_cpu_kernels(state.info.cpu_kernels.is_some(), || {
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
            worker.state.checkpoints[index].clear();
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

    fn media_encoder(&self) -> Option<wick_backend::SharedMediaEncoder> {
        self.projector
            .clone()
            .map(|p| p as wick_backend::SharedMediaEncoder)
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
        self.loaded()?.with_dependent(|_, w| w.seq_tokens(seq))
    }

    fn kv_pack(&mut self, seq: SeqId) -> Result<Vec<u8>> {
        self.with(|w| w.kv_pack(seq))
    }

    fn kv_unpack(&mut self, seq: SeqId, snapshot: &[u8]) -> Result<()> {
        self.with(|w| w.kv_unpack(seq, snapshot))
    }

    fn step(&mut self, ops: &[(SeqId, StepOp)]) -> Result<Vec<(SeqId, StepResult)>> {
        self.with(|w| w.step(ops))
    }

    fn sampler_new(&mut self, opts: &SamplerOpts) -> Result<SamplerId> {
        self.with(|w| w.state.samplers.create(w.model, opts))
    }

    fn sampler_configure(&mut self, sampler: SamplerId, opts: &SamplerOpts) -> Result<()> {
        self.with(|w| w.state.samplers.configure(w.model, sampler, opts))
    }

    fn sampler_clear(&mut self, sampler: SamplerId) -> Result<()> {
        self.with(|w| w.state.samplers.clear(sampler))
    }

    fn sampler_free(&mut self, sampler: SamplerId) -> Result<()> {
        self.with(|w| w.state.samplers.free(sampler))
    }

    fn set_grammar(&mut self, sampler: SamplerId, grammar: Option<&Grammar>) -> Result<()> {
        self.with(|w| w.state.samplers.set_grammar(w.model, sampler, grammar))
    }

    fn load_adapter(&mut self, path: &Path) -> Result<AdapterId> {
        self.load_adapter_rebuilding(path)
    }

    fn apply_adapters(&mut self, adapters: &[(AdapterId, f32)]) -> Result<()> {
        let adapters: Vec<(u64, f32)> = adapters.iter().map(|(a, s)| (a.0, *s)).collect();
        self.with(|w| w.apply_adapters(&adapters))
    }

    fn unload_adapter(&mut self, adapter: AdapterId) -> Result<()> {
        self.with(|w| w.unload_adapter(adapter.0))
    }

    fn embed(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.with(|w| w.embed(tokens))
    }

    fn verify(&mut self, seq: SeqId, candidates: &[TokenId]) -> Result<Verified> {
        self.with(|w| w.verify(seq, candidates))
    }

    fn logits(
        &mut self,
        seq: SeqId,
        tokens: &[TokenId],
        each: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        self.with(|w| w.logits(seq, tokens, each))
    }

    fn seq_rm(&mut self, seq: SeqId) -> Result<()> {
        self.with(|w| w.truncate(seq, 0))
    }

    fn seq_rm_last(&mut self, seq: SeqId, n: usize) -> Result<()> {
        self.with(|w| w.seq_rm_last(seq, n))
    }

    fn seq_copy(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        self.with(|w| w.seq_copy(src, dst, n))
    }

    fn seq_clear(&mut self) -> Result<()> {
        self.with(|w| {
            w.seq_clear();
            Ok(())
        })
    }
}
