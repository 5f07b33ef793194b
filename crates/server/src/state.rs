//! What every handler shares: the served models, the settings, the metrics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use wick::Llm;

use crate::{ApiError, Metrics};

/// Settings of the HTTP layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// When set, every route but `/health` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// When set, CORS is on for this origin (`*`: any origin); off by default.
    pub cors_origin: Option<String>,
    /// The largest request body accepted, in bytes. Default 8 MiB.
    pub max_body_bytes: usize,
    /// Live sequences per model (for the queue-depth metric). Default 4.
    pub parallel: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_key: None,
            cors_origin: None,
            max_body_bytes: 8 << 20,
            parallel: 4,
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

    /// The model `name` selects: its id or an alias; no name selects the first model.
    ///
    /// # Errors
    ///
    /// [`ApiError::Loading`] before any model is loaded, [`ApiError::ModelNotFound`] for a
    /// name no model has.
    pub fn model(&self, name: Option<&str>) -> Result<ServedModel, ApiError> {
        if !self.is_ready() {
            return Err(ApiError::Loading);
        }
        let models = self.models();
        let found = match name {
            None | Some("") => models.first(),
            Some(name) => models
                .iter()
                .find(|m| m.id == name || m.aliases.iter().any(|a| a == name)),
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
