//! What every handler shares: the served models, the settings, the metrics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::pool::{KeepAlive, Listing, ModelSpec, Pool, PoolConfig, ServedModel};
use crate::responses::ResponseStore;
use crate::{ApiError, Metrics};

/// Settings of the HTTP layer.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// When set, every route but `/health` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// When set, CORS is on, answered as llama-server answers it, for these origins: `*` any
    /// origin, `localhost` pages on a loopback host, else origins separated by commas; the
    /// allowed origin is reflected, with credentials. Off by default.
    pub cors_origin: Option<String>,
    /// The largest request body accepted, in bytes. Default 8 MiB.
    pub max_body_bytes: usize,
    /// Live sequences per model (for the queue-depth metric). Default 4.
    pub parallel: usize,
    /// When set, only requests whose `Host` names one of these hosts (any port; `*.localhost`
    /// always counts as `localhost`) are served, others get a 403: a server on loopback
    /// without a key is otherwise open to any web page through DNS rebinding. `None`: any
    /// host. Default: the loopback names ([`ServerConfig::LOOPBACK_HOSTS`]).
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a client may take to send a request's body. Default 30 s.
    pub body_timeout: Duration,
    /// Whether a request naming a model the server does not serve is a 404 even when the
    /// server serves one model. Off by default: like llama-server, a server of one model
    /// answers any name with it (OpenAI clients send names such as `gpt-4o-mini`).
    pub strict_model_names: bool,
    /// Whether the chat page is served at `/` (to browsers) and `/ui/`. On by default.
    pub ui: bool,
    /// What a request gets for each sampling field it leaves out, on every API.
    pub sampling: SamplingDefaults,
    /// How models given by [`AppState::add_model_spec`] load and unload.
    pub models: PoolConfig,
    /// Whether `/props` says `role: router` (llama-server's router mode: the server lists
    /// models that load on demand).
    pub router: bool,
    /// When set, images given by `http(s)` URL (OpenAI `image_url`, Responses `input_image`,
    /// Anthropic `url` sources) are fetched by the server; off by default (a request with one
    /// is a 400 asking for the image itself).
    pub media_urls: Option<MediaUrls>,
}

/// How the server fetches images given by URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaUrls {
    /// The most bytes one image may have.
    pub max_bytes: usize,
    /// How long one fetch may take, from connecting to the last byte.
    pub timeout: Duration,
}

/// The sampling a request starts from: every field it leaves out is taken from here
/// (`wick serve --temp`, `--top-k`, … as llama-server's flags of those names).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingDefaults {
    /// Temperature, top-k, top-p, min-p and the repetition penalty (the other fields are
    /// not used).
    pub sampling: wick::SamplerOpts,
    /// The seed of a request without one; `None`: a fresh seed each time.
    pub seed: Option<i64>,
}

impl Default for SamplingDefaults {
    /// wick's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no repetition
    /// penalty, a fresh seed per request.
    fn default() -> Self {
        SamplingDefaults {
            sampling: crate::validate::request_defaults(),
            seed: None,
        }
    }
}

impl ServerConfig {
    /// The names a loopback address answers to.
    pub const LOOPBACK_HOSTS: [&'static str; 3] = ["localhost", "127.0.0.1", "::1"];

    /// Whether a request with this `Host` header value is served.
    pub fn host_allowed(&self, host: &str) -> bool {
        let Some(allowed) = &self.allowed_hosts else {
            return true;
        };
        let name = host_name(host).to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        let name = if name.ends_with(".localhost") {
            "localhost"
        } else {
            name
        };
        allowed
            .iter()
            .any(|a| a == "*" || a.eq_ignore_ascii_case(name))
    }
}

/// The name part of a `Host` header value: without its port, IPv6 without brackets.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(name, _)| name);
    }
    match host.split_once(':') {
        Some((name, port)) if !port.contains(':') => name,
        _ => host,
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_key: None,
            cors_origin: None,
            max_body_bytes: 8 << 20,
            parallel: 4,
            allowed_hosts: Some(Self::LOOPBACK_HOSTS.map(str::to_owned).to_vec()),
            body_timeout: Duration::from_secs(30),
            strict_model_names: false,
            ui: true,
            sampling: SamplingDefaults::default(),
            models: PoolConfig::default(),
            router: false,
            media_urls: None,
        }
    }
}

/// The server's shared state; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ServerConfig,
    models: Pool,
    ready: AtomicBool,
    metrics: Metrics,
    created: u64,
    /// Cancelled when the server gives up on the answers still in flight.
    shutdown: CancellationToken,
    /// Stored Responses API responses.
    responses: ResponseStore,
    /// The model store `/api/pull` and `/api/delete` work on; `$WICK_HOME`'s when unset.
    store: OnceLock<wick::models::ModelStore>,
    /// How a model of the store is served, when the server serves the store.
    store_models: OnceLock<StoreServing>,
}

/// [`StoreModels`], shown by name only.
struct StoreServing(StoreModels);

impl std::fmt::Debug for StoreServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreModels")
    }
}

/// How a model of the store (its name and file) is served on demand: set with
/// [`AppState::serve_store_models`], so models pulled while the server runs are served.
pub type StoreModels = Arc<dyn Fn(&str, &std::path::Path) -> ModelSpec + Send + Sync>;

impl AppState {
    /// A server with no models yet; `/health` says 503 until [`AppState::set_ready`]. Made
    /// inside a Tokio runtime, it unloads models idle past their keep-alive.
    pub fn new(config: ServerConfig) -> Self {
        AppState {
            inner: Arc::new(Inner {
                models: Pool::new(config.models.clone()),
                config,
                ready: AtomicBool::new(false),
                metrics: Metrics::default(),
                created: unix_now(),
                shutdown: CancellationToken::new(),
                responses: ResponseStore::default(),
                store: OnceLock::new(),
                store_models: OnceLock::new(),
            }),
        }
    }

    /// Serves `model` too, loaded for as long as the server runs (the first model added
    /// answers requests that name no model).
    pub fn add_model(&self, model: ServedModel) {
        self.inner.models.add_loaded(model);
    }

    /// Serves the model `spec` describes, loaded when a request first names it and unloaded
    /// as [`ServerConfig::models`] says.
    pub fn add_model_spec(&self, spec: ModelSpec) {
        self.inner.models.add(spec);
    }

    /// Makes `store` the model store that Ollama's `/api/pull` and `/api/delete` work on
    /// (default: the one in `$WICK_HOME`); only the first call counts.
    pub fn set_model_store(&self, store: wick::models::ModelStore) {
        let _ = self.inner.store.set(store);
    }

    /// Serves the store: a model pulled while the server runs (`/api/pull`) is served on
    /// demand through `models`, and one deleted (`/api/delete`) is no longer served. Only the
    /// first call counts.
    pub fn serve_store_models(&self, models: StoreModels) {
        let _ = self.inner.store_models.set(StoreServing(models));
    }

    /// A model was pulled into the store as `name`: served from now on, when the server serves
    /// the store and serves no model of that name or file yet.
    pub(crate) fn store_model_added(&self, name: &str, path: &std::path::Path) {
        let Some(StoreServing(models)) = self.inner.store_models.get() else {
            return;
        };
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let served = self.listings().into_iter().any(|m| {
            m.id == name
                || m.aliases.iter().any(|a| a == name)
                || m.path.as_deref().and_then(|p| p.canonicalize().ok()) == Some(path.clone())
        });
        if !served {
            self.add_model_spec(models(name, &path));
        }
    }

    /// The store's model `name` was deleted: no longer served, when the server serves the store.
    pub(crate) fn store_model_removed(&self, name: &str) {
        if self.inner.store_models.get().is_some() {
            self.inner.models.remove(name);
        }
    }

    /// The model store: the one given to [`AppState::set_model_store`], else `$WICK_HOME`'s.
    pub(crate) fn model_store(&self) -> Result<wick::models::ModelStore, ApiError> {
        if let Some(store) = self.inner.store.get() {
            return Ok(store.clone());
        }
        let mut settings = wick::models::Settings::from_env();
        // A server has no terminal to draw a progress bar on.
        settings.progress = false;
        wick::models::ModelStore::new(settings).map_err(|e| ApiError::ModelFetch {
            message: e.to_string(),
        })
    }

    /// Marks the server ready: `/health` answers 200.
    pub fn set_ready(&self) {
        self.inner.ready.store(true, Ordering::SeqCst);
    }

    /// Whether every model is loaded.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::SeqCst)
    }

    /// The HTTP settings.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Ends every answer in flight: streams end with an error event and `[DONE]`, requests
    /// not answered yet (waiting in a queue, or for their first token) get a 503, and new
    /// requests too. For a shutdown whose grace period ran out.
    pub fn cancel_all(&self) {
        self.inner.shutdown.cancel();
    }

    /// Resolves once [`AppState::cancel_all`] was called.
    pub(crate) fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.inner.shutdown.cancelled()
    }

    /// The token [`AppState::cancel_all`] cancels, for streams that outlive their handler.
    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// The Responses API's stored responses.
    pub(crate) fn responses(&self) -> &ResponseStore {
        &self.inner.responses
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// When the server started (Unix seconds; the models' `created`).
    pub(crate) fn created(&self) -> u64 {
        self.inner.created
    }

    /// The loaded models.
    pub fn models(&self) -> Vec<ServedModel> {
        self.inner.models.loaded()
    }

    /// Every served model, loaded or not, with where it stands.
    pub fn listings(&self) -> Vec<Listing> {
        self.inner.models.listings()
    }

    /// The model `name` selects, loaded (a request waits for the load) and held (not
    /// unloaded) while the returned value or a clone lives: its id or an alias; no name
    /// selects the first model; with one model served, any name selects it unless
    /// [`ServerConfig::strict_model_names`].
    ///
    /// # Errors
    ///
    /// [`ApiError::Loading`] before the server is ready, [`ApiError::ModelNotFound`] for a
    /// name no model has (among several, or with strict names), [`ApiError::ModelLoad`] when
    /// its load fails, [`ApiError::ModelNotLoaded`] for an unloaded model when models load
    /// only when asked.
    pub async fn model(&self, name: Option<&str>) -> Result<ServedModel, ApiError> {
        self.model_kept(name, None).await
    }

    /// [`AppState::model`], keeping the model loaded for `keep_alive` once idle (Ollama's
    /// `keep_alive`; `None`: the model's default).
    ///
    /// # Errors
    ///
    /// As [`AppState::model`].
    pub async fn model_kept(
        &self,
        name: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<ServedModel, ApiError> {
        self.ready()?;
        let lenient = !self.config().strict_model_names;
        self.inner
            .models
            .acquire(name, lenient, keep_alive, false)
            .await
    }

    /// Loads the model `name` names exactly (`POST /models/load`), whether or not requests
    /// load models.
    ///
    /// # Errors
    ///
    /// As [`AppState::model`].
    pub async fn load_model(&self, name: &str) -> Result<ServedModel, ApiError> {
        self.ready()?;
        self.inner
            .models
            .acquire(Some(name), false, None, true)
            .await
    }

    /// Unloads the model `name` names exactly, at once when idle, else when its requests
    /// end. Returns whether it was loaded or loading.
    ///
    /// # Errors
    ///
    /// [`ApiError::ModelNotFound`]; a 400 for a model loaded at start.
    pub fn unload_model(&self, name: &str) -> Result<bool, ApiError> {
        self.ready()?;
        self.inner.models.unload(Some(name), false)
    }

    /// The model whose id or alias is exactly `name` (no name: the first), loaded or not,
    /// whatever the server's naming rule: for describing a model by its name (`GET
    /// /v1/models/{id}`).
    ///
    /// # Errors
    ///
    /// As [`AppState::model`], without the one-model leniency and without loading.
    pub fn model_named(&self, name: Option<&str>) -> Result<Listing, ApiError> {
        self.ready()?;
        self.inner.models.listing(name, false)
    }

    /// Whether `name` selects a served model that is not loaded (a request for it waits for
    /// its load).
    pub fn needs_load(&self, name: Option<&str>) -> bool {
        let lenient = !self.config().strict_model_names;
        self.is_ready() && self.inner.models.unloaded(name, lenient) == Some(true)
    }

    /// How models load and unload.
    pub fn pool_config(&self) -> &PoolConfig {
        self.inner.models.config()
    }

    fn ready(&self) -> Result<(), ApiError> {
        if self.is_ready() {
            Ok(())
        } else {
            Err(ApiError::Loading)
        }
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_pass_by_default_whatever_the_port() {
        let config = ServerConfig::default();
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "127.0.0.1:8080",
            "[::1]:8080",
            "[::1]",
            "app.localhost:3000",
            "localhost.",
        ] {
            assert!(config.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.2",
            "",
            "[::2]:80",
        ] {
            assert!(!config.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn more_hosts_or_any_can_be_allowed() {
        let mut config = ServerConfig {
            allowed_hosts: Some(vec!["wick.lan".into()]),
            ..ServerConfig::default()
        };
        assert!(config.host_allowed("wick.lan:8080"));
        assert!(!config.host_allowed("localhost"));
        config.allowed_hosts = Some(vec!["*".into()]);
        assert!(config.host_allowed("anything:1"));
        config.allowed_hosts = None;
        assert!(config.host_allowed("anything"));
    }
}
