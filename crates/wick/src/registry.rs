//! The process-wide model cache: `Llm`s with the same model file and model settings share one
//! loaded model and one engine; the model is freed when the last of them is dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use wick_engine::{ChatFormat, Engine};

use crate::{KvCache, ModelKwargs, Result};

/// What identifies a loaded model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ModelKey {
    pub(crate) path: PathBuf,
    pub(crate) context_window: u32,
    pub(crate) kwargs: ModelKwargs,
    pub(crate) kv_cache: Option<KvCache>,
    /// A template replacing the model's (a llama.cpp name or Jinja source).
    pub(crate) chat_template: Option<String>,
    /// RPC workers taking the offloaded layers.
    pub(crate) rpc_servers: Vec<String>,
    /// The devices the offloaded layers go to, by llama.cpp's names (empty: every GPU).
    pub(crate) devices: Vec<String>,
    /// The multimodal projector (canonical path), when the model has one.
    pub(crate) mmproj: Option<PathBuf>,
    /// LoRA adapter files loaded with the model (canonical paths; scales are per `Llm`).
    pub(crate) loras: Vec<PathBuf>,
    /// The draft model proposing speculative tokens.
    pub(crate) draft: Option<PathBuf>,
}

/// A loaded model and the engine that serves it.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) engine: Engine,
    /// The model's chat template bound to its tokenizer (`ChatML` when it has none).
    pub(crate) chat: Arc<ChatFormat>,
    /// The model file it was loaded from (`None` for a backend given directly).
    pub(crate) path: Option<PathBuf>,
    /// Its LoRA adapters.
    pub(crate) adapters: crate::lora::Loaded,
}

type Cache = Mutex<HashMap<ModelKey, Weak<Loaded>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Cache::default)
}

/// The loaded model for `key`, loading it with `load` when no live `Llm` holds it.
///
/// Loading happens under the cache's lock so that two builders of the same model never load
/// it twice.
pub(crate) fn get_or_load(
    key: ModelKey,
    load: impl FnOnce(&ModelKey) -> Result<Loaded>,
) -> Result<Arc<Loaded>> {
    let mut models = cache()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    models.retain(|_, weak| weak.strong_count() > 0);
    if let Some(loaded) = models.get(&key).and_then(Weak::upgrade) {
        return Ok(loaded);
    }
    let loaded = Arc::new(load(&key)?);
    models.insert(key, Arc::downgrade(&loaded));
    Ok(loaded)
}

/// How many models the cache holds right now.
pub(crate) fn live_models() -> usize {
    cache()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .values()
        .filter(|w| w.strong_count() > 0)
        .count()
}

/// `path` made absolute and free of symlinks, so two spellings of one file share a model.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}
