//! What every handler shares: the served models, the settings, the metrics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wick::Llm;

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
        }
    }
}

/// One model the server answers for.
#[derive(Debug, Clone)]
pub struct ServedModel {
    /// The id clients put in `model` (listed by `/v1/models`).
    pub id: String,
    /// Other names that select it (the reference it was loaded from, …).
    pub aliases: Vec<String>,
    /// The loaded model.
    pub llm: Llm,
}

/// The server's shared state; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ServerConfig,
    models: RwLock<Vec<ServedModel>>,
    ready: AtomicBool,
    metrics: Metrics,
    created: u64,
    /// Cancelled when the server gives up on the answers still in flight.
    shutdown: CancellationToken,
    /// Stored Responses API responses.
    responses: ResponseStore,
    /// The model store `/api/pull` and `/api/delete` work on; `$WICK_HOME`'s when unset.
    store: OnceLock<wick::models::ModelStore>,
}

impl AppState {
    /// A server with no models yet; `/health` says 503 until [`AppState::set_ready`].
    pub fn new(config: ServerConfig) -> Self {
        AppState {
            inner: Arc::new(Inner {
                config,
                models: RwLock::new(Vec::new()),
                ready: AtomicBool::new(false),
                metrics: Metrics::default(),
                created: unix_now(),
                shutdown: CancellationToken::new(),
                responses: ResponseStore::default(),
                store: OnceLock::new(),
            }),
        }
    }

    /// Serves `model` too (the first one added answers requests that name no model).
    pub fn add_model(&self, model: ServedModel) {
        self.inner
            .models
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(model);
    }

    /// Makes `store` the model store that Ollama's `/api/pull` and `/api/delete` work on
    /// (default: the one in `$WICK_HOME`); only the first call counts.
    pub fn set_model_store(&self, store: wick::models::ModelStore) {
        let _ = self.inner.store.set(store);
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

    /// Every served model.
    pub fn models(&self) -> Vec<ServedModel> {
        self.inner
            .models
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The model `name` selects: its id or an alias; no name selects the first model; with one
    /// model served, any name selects it unless [`ServerConfig::strict_model_names`].
    ///
    /// # Errors
    ///
    /// [`ApiError::Loading`] before any model is loaded, [`ApiError::ModelNotFound`] for a
    /// name no model has (among several, or with strict names).
    pub fn model(&self, name: Option<&str>) -> Result<ServedModel, ApiError> {
        let lenient = !self.config().strict_model_names;
        self.lookup(name, lenient)
    }

    /// The model whose id or alias is exactly `name` (no name: the first), whatever the
    /// server's naming rule: for describing a model by its name (`GET /v1/models/{id}`).
    ///
    /// # Errors
    ///
    /// As [`AppState::model`], without the one-model leniency.
    pub fn model_named(&self, name: Option<&str>) -> Result<ServedModel, ApiError> {
        self.lookup(name, false)
    }

    fn lookup(&self, name: Option<&str>, lenient: bool) -> Result<ServedModel, ApiError> {
        if !self.is_ready() {
            return Err(ApiError::Loading);
        }
        let models = self.models();
        let found = match name {
            None | Some("") => models.first(),
            Some(name) => models
                .iter()
                .find(|m| m.id == name || m.aliases.iter().any(|a| a == name))
                // One model served: any name is it, unless names are strict.
                .or_else(|| {
                    (lenient && models.len() == 1)
                        .then(|| models.first())
                        .flatten()
                }),
        };
        match found {
            Some(model) => Ok(model.clone()),
            None => Err(ApiError::ModelNotFound {
                model: name.unwrap_or_default().to_owned(),
                served: models
                    .iter()
                    .map(|m| m.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
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
