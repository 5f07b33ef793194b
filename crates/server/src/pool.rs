//! The models a server answers for, each in one of four states: loaded, loading, unloaded or
//! failed. A model given at start as an [`Llm`] stays loaded; one given as a [`ModelSpec`] is
//! loaded when a request first names it (once, however many requests arrive together: the
//! others wait for that load and get its error if it fails), and unloaded when it has been
//! idle past its keep-alive, or when another model needs its room under the pool's limits
//! (`max_loaded` models, `memory` bytes): the least recently used model that is idle (no
//! request holds it or runs on its engine) and not pinned goes first. Loads that wait for room
//! are served in arrival order. A model's prompt cache on disk outlives its unload, so the
//! first request after a reload restores its prefix.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{watch, Notify};
use wick::Llm;

use crate::ApiError;

/// Loads a model; blocking (the pool runs it off the async threads). The error says why, for
/// every request waiting on the load.
pub type Loader = Arc<dyn Fn() -> Result<Llm, String> + Send + Sync>;

/// A model the server loads when a request names it (a model of the store, a file of a models
/// directory, a preset's entry).
#[derive(Clone)]
pub struct ModelSpec {
    /// The id clients put in `model`.
    pub id: String,
    /// Other names that select it.
    pub aliases: Vec<String>,
    /// Free-form labels, listed with the model (llama-server's `--tags`).
    pub tags: Vec<String>,
    /// Its GGUF file, when known (listings show it).
    pub path: Option<PathBuf>,
    /// Bytes it is expected to take once loaded (weights and KV cache), for the memory
    /// budget; 0 when unknown.
    pub bytes: u64,
    /// Whether it stays loaded once loaded (never unloaded for idleness or for room).
    pub pinned: bool,
    /// Its keep-alive when requests set none [default: the pool's].
    pub keep_alive: Option<KeepAlive>,
    /// How to load it.
    pub load: Loader,
}

impl std::fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSpec")
            .field("id", &self.id)
            .field("aliases", &self.aliases)
            .field("tags", &self.tags)
            .field("path", &self.path)
            .field("bytes", &self.bytes)
            .field("pinned", &self.pinned)
            .field("keep_alive", &self.keep_alive)
            .finish_non_exhaustive()
    }
}

/// How long a model stays loaded once idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// This long after its last request ends (zero: as soon as it is idle).
    For(Duration),
    /// Until the server stops.
    Forever,
}

impl KeepAlive {
    /// Ollama's `keep_alive` value: a number of seconds or a duration text (`"5m"`, `"1h30m"`,
    /// `"10s"`, `"500ms"`; a bare number is seconds); any negative value is forever.
    ///
    /// # Errors
    ///
    /// A message naming what was expected, for a value that is neither.
    pub fn parse_ollama(value: &serde_json::Value) -> Result<KeepAlive, String> {
        let bad = || {
            format!(
                "keep_alive must be a number of seconds or a duration such as \"5m\", \"1h\" \
                 or \"-1\" (forever); got {value}"
            )
        };
        match value {
            serde_json::Value::Number(n) => {
                let seconds = n.as_f64().ok_or_else(bad)?;
                Ok(KeepAlive::of_seconds(seconds))
            }
            serde_json::Value::String(text) => {
                let text = text.trim();
                if let Ok(seconds) = text.parse::<f64>() {
                    return Ok(KeepAlive::of_seconds(seconds));
                }
                if let Some(magnitude) = text.strip_prefix('-') {
                    return parse_duration(magnitude)
                        .map(|_| KeepAlive::Forever)
                        .ok_or_else(bad);
                }
                parse_duration(text).map(KeepAlive::For).ok_or_else(bad)
            }
            _ => Err(bad()),
        }
    }

    fn of_seconds(seconds: f64) -> KeepAlive {
        if seconds < 0.0 || !seconds.is_finite() {
            KeepAlive::Forever
        } else {
            KeepAlive::For(Duration::from_secs_f64(seconds.min(1e12)))
        }
    }
}

impl std::str::FromStr for KeepAlive {
    type Err = String;

    /// `5m`, `300` (seconds), `1h30m`, `0` (unload as soon as idle), `-1` (never).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        KeepAlive::parse_ollama(&serde_json::Value::String(text.to_owned()))
    }
}

/// A Go-style duration: numbers each followed by `h`, `m`, `s` or `ms` (`1h30m`, `2.5s`).
fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0.0_f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1e-3, 2)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else {
            return None;
        };
        total += number * unit;
        rest = &rest[len..];
    }
    (total.is_finite() && total < 1e12).then(|| Duration::from_secs_f64(total))
}

/// The pool's limits and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// How long an idle model loaded on demand stays loaded [default: 5 minutes].
    pub keep_alive: KeepAlive,
    /// The most models loaded at once [default: no limit].
    pub max_loaded: Option<usize>,
    /// The most bytes the loaded models may take, by their estimates [default: no limit].
    pub memory: Option<u64>,
    /// Whether a request naming an unloaded model loads it; when off, only `POST
    /// /models/load` does, and the request gets a 400 [default: on].
    pub autoload: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            keep_alive: KeepAlive::For(Duration::from_secs(300)),
            max_loaded: None,
            memory: None,
            autoload: true,
        }
    }
}

/// Where a model stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelStatus {
    /// In memory, answering.
    Loaded,
    /// Being loaded (or waiting for room to load).
    Loading,
    /// Not in memory; a request loads it.
    Unloaded,
    /// Its last load failed, for this reason; a request tries again.
    Failed(String),
}

impl ModelStatus {
    /// `loaded`, `loading`, `unloaded` or `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            ModelStatus::Loaded => "loaded",
            ModelStatus::Loading => "loading",
            ModelStatus::Unloaded => "unloaded",
            ModelStatus::Failed(_) => "failed",
        }
    }
}

/// One model as the listings show it.
#[derive(Debug, Clone)]
pub struct Listing {
    /// Its id.
    pub id: String,
    /// Its other names.
    pub aliases: Vec<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its file, when known.
    pub path: Option<PathBuf>,
    /// Where it stands.
    pub status: ModelStatus,
    /// The loaded model, when loaded.
    pub llm: Option<Llm>,
    /// When it will be unloaded if no request comes; `None`: never (pinned, kept forever,
    /// loaded at start, or not loaded).
    pub expires_at: Option<SystemTime>,
    /// Whether it is pinned.
    pub pinned: bool,
    /// Its memory estimate in bytes (0: unknown).
    pub bytes: u64,
    /// Requests holding it right now.
    pub in_flight: usize,
    /// Times it was loaded since the server started (1 for a model given loaded).
    pub loads: u64,
}

/// One model the server answers for, as a handler holds it: while any clone of it lives (and
/// while requests run on its engine), the model is not unloaded.
#[derive(Debug, Clone)]
pub struct ServedModel {
    /// The id clients put in `model` (listed by `/v1/models`).
    pub id: String,
    /// Other names that select it (the reference it was loaded from, …).
    pub aliases: Vec<String>,
    /// The loaded model.
    pub llm: Llm,
    /// Free-form labels (llama-server's `--tags`).
    pub tags: Vec<String>,
    /// Bytes it takes loaded, by estimate (0: unknown), counted against the pool's memory
    /// budget.
    pub bytes: u64,
    /// Held for its drop: the model stays loaded while any clone lives.
    _lease: Option<Arc<Lease>>,
}

impl ServedModel {
    /// A loaded model served as `id`, also answering to `aliases`.
    pub fn new(id: impl Into<String>, aliases: Vec<String>, llm: Llm) -> Self {
        ServedModel {
            id: id.into(),
            aliases,
            llm,
            tags: Vec::new(),
            bytes: 0,
            _lease: None,
        }
    }

    /// With these tags.
    #[must_use]
    pub fn with_tags(mut self, tags: Vec<String>) -> Self {
        self.tags = tags;
        self
    }

    /// With this memory estimate, in bytes.
    #[must_use]
    pub fn with_bytes(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }
}

/// A request's hold on a loaded model; its drop marks the model used now.
#[derive(Debug)]
struct Lease {
    shared: Weak<Shared>,
    index: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            {
                let mut entries = shared.lock();
                let entry = &mut entries.list[self.index];
                entry.leases = entry.leases.saturating_sub(1);
                entry.last_used = Instant::now();
            }
            shared.changed.notify_waiters();
        }
    }
}

/// The served models; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: PoolConfig,
    entries: Mutex<Entries>,
    /// Told when a model is released, loaded or unloaded.
    changed: Notify,
}

#[derive(Debug, Default)]
struct Entries {
    list: Vec<Entry>,
    /// The next ticket of a load waiting for room.
    next_ticket: u64,
    /// The tickets of loads waiting for room; the lowest goes first.
    waiting: BTreeSet<u64>,
}

struct Entry {
    id: String,
    aliases: Vec<String>,
    tags: Vec<String>,
    path: Option<PathBuf>,
    bytes: u64,
    pinned: bool,
    /// How to load it again; `None` for a model given loaded (never unloaded).
    load: Option<Loader>,
    /// Its keep-alive when a request sets none.
    default_keep_alive: KeepAlive,
    /// The keep-alive the last request set.
    keep_alive: KeepAlive,
    state: State,
    last_used: Instant,
    /// Not unloaded for idleness before this (the requests that waited for its load take it
    /// first).
    grace_until: Instant,
    leases: usize,
    /// Loads that succeeded.
    loads: u64,
    /// Taken out of the served models (deleted from the store): never listed or found again
    /// (its slot stays, so held leases keep their index).
    removed: bool,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("id", &self.id)
            .field("state", &self.state)
            .field("leases", &self.leases)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum State {
    Unloaded,
    Loading {
        /// Whether the load has room (counts against the limits).
        admitted: bool,
        /// Becomes `Some` when the load ends.
        done: watch::Receiver<Option<Result<(), String>>>,
    },
    Loaded(Llm),
    Failed(String),
}

/// How long requests that waited for a load have to take the model before idleness counts.
const LOAD_GRACE: Duration = Duration::from_secs(2);
/// How often the pool looks for idle models, and for room while a load waits.
const TICK: Duration = Duration::from_millis(100);
/// How long an unload waits for the model's engine to stop.
const UNLOAD_GRACE: Duration = Duration::from_secs(30);

impl Entries {
    /// The entry `name` selects: its id or an alias; no name selects the first; with one
    /// model, any name when `lenient`.
    fn find(&self, name: Option<&str>, lenient: bool) -> Option<usize> {
        let mut served = self.list.iter().enumerate().filter(|(_, e)| !e.removed);
        match name {
            None | Some("") => served.next().map(|(i, _)| i),
            Some(name) => {
                let named = served
                    .clone()
                    .find(|(_, e)| e.id == name || e.aliases.iter().any(|a| a == name));
                match named {
                    Some((i, _)) => Some(i),
                    None if lenient => match (served.next(), served.next()) {
                        (Some((i, _)), None) => Some(i),
                        _ => None,
                    },
                    None => None,
                }
            }
        }
    }

    fn not_found(&self, name: Option<&str>) -> ApiError {
        ApiError::ModelNotFound {
            model: name.unwrap_or_default().to_owned(),
            served: self
                .list
                .iter()
                .filter(|e| !e.removed)
                .map(|e| e.id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Whether entry `i` may load now, must wait, needs another model unloaded, or never fits.
    fn room_for(&self, i: usize, config: &PoolConfig) -> Room {
        let occupying = |e: &&Entry| {
            matches!(
                e.state,
                State::Loaded(_) | State::Loading { admitted: true, .. }
            )
        };
        let others: Vec<&Entry> = self
            .list
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, e)| e)
            .filter(occupying)
            .collect();
        let bytes = self.list[i].bytes;
        let used: u64 = others.iter().map(|e| e.bytes).sum();
        let over_count = config.max_loaded.is_some_and(|max| others.len() + 1 > max);
        let over_memory = config.memory.is_some_and(|budget| used + bytes > budget);
        if !over_count && !over_memory {
            return Room::Fits;
        }
        if let Some(budget) = config.memory.filter(|&b| bytes > b) {
            return Room::Never(format!(
                "the model `{}` needs about {} (weights and KV cache) but the memory budget is \
                 {}; start the server with a larger --memory or a smaller --ctx-size",
                self.list[i].id,
                human_bytes(bytes),
                human_bytes(budget)
            ));
        }
        let now = Instant::now();
        let victim = self
            .list
            .iter()
            .enumerate()
            .filter(|&(j, e)| j != i && e.unloadable() && e.idle())
            .min_by_key(|(_, e)| e.last_used.min(now));
        if let Some((j, _)) = victim {
            return Room::Evict(j);
        }
        if others.iter().all(|e| e.permanent()) {
            let what = if over_count {
                format!(
                    "{} models are loaded (--max-loaded {})",
                    others.len(),
                    config.max_loaded.unwrap_or_default()
                )
            } else {
                format!(
                    "the loaded models take about {} of the {} budget (--memory)",
                    human_bytes(used),
                    human_bytes(config.memory.unwrap_or_default())
                )
            };
            return Room::Never(format!(
                "no room to load `{}`: {what}, and none of them can be unloaded (pinned, or \
                 loaded at start)",
                self.list[i].id
            ));
        }
        Room::Wait
    }
}

enum Room {
    Fits,
    Evict(usize),
    Wait,
    Never(String),
}

impl Entry {
    /// Whether it may be unloaded at all (loaded, loadable again, not pinned).
    fn unloadable(&self) -> bool {
        matches!(self.state, State::Loaded(_)) && (self.removed || !self.permanent())
    }

    /// Whether, once loaded, it stays (pinned, or given loaded).
    fn permanent(&self) -> bool {
        self.pinned || self.load.is_none()
    }

    /// Whether no request holds it or runs on its engine.
    fn idle(&self) -> bool {
        match &self.state {
            State::Loaded(llm) => self.leases == 0 && llm.inflight() == 0,
            _ => false,
        }
    }

    /// Takes the model out, leaving it unloaded.
    fn take(&mut self) -> Option<Llm> {
        match std::mem::replace(&mut self.state, State::Unloaded) {
            State::Loaded(llm) => Some(llm),
            other => {
                self.state = other;
                None
            }
        }
    }

    fn status(&self) -> ModelStatus {
        match &self.state {
            State::Unloaded => ModelStatus::Unloaded,
            State::Loading { .. } => ModelStatus::Loading,
            State::Loaded(_) => ModelStatus::Loaded,
            State::Failed(reason) => ModelStatus::Failed(reason.clone()),
        }
    }

    /// When it will be unloaded if nothing else comes.
    fn expires_at(&self, now: Instant) -> Option<SystemTime> {
        let State::Loaded(llm) = &self.state else {
            return None;
        };
        if self.permanent() && !self.removed {
            return None;
        }
        let KeepAlive::For(keep) = self.keep_alive else {
            return None;
        };
        let busy = self.leases > 0 || llm.inflight() > 0;
        let since = if busy {
            Duration::ZERO
        } else {
            now.saturating_duration_since(self.last_used)
        };
        let left = keep.saturating_sub(since);
        Some(SystemTime::now() + left)
    }
}

impl Pool {
    pub(crate) fn new(config: PoolConfig) -> Pool {
        let pool = Pool {
            shared: Arc::new(Shared {
                config,
                entries: Mutex::new(Entries::default()),
                changed: Notify::new(),
            }),
        };
        // Idle models are looked for while the pool lives (a pool made outside a runtime
        // never unloads for idleness: nothing loads on demand there either).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reaper(Arc::downgrade(&pool.shared)));
        }
        pool
    }

    pub(crate) fn config(&self) -> &PoolConfig {
        &self.shared.config
    }

    /// Serves `model`, loaded already; it stays loaded.
    pub(crate) fn add_loaded(&self, model: ServedModel) {
        let now = Instant::now();
        let keep_alive = self.shared.config.keep_alive;
        self.shared.lock().list.push(Entry {
            id: model.id,
            aliases: model.aliases,
            tags: model.tags,
            path: model.llm.model_path().map(std::path::Path::to_path_buf),
            bytes: model.bytes,
            pinned: false,
            load: None,
            default_keep_alive: keep_alive,
            keep_alive,
            state: State::Loaded(model.llm),
            last_used: now,
            grace_until: now,
            leases: 0,
            loads: 1,
            removed: false,
        });
        self.shared.changed.notify_waiters();
    }

    /// Serves the model `spec` describes, unloaded until a request names it.
    pub(crate) fn add(&self, spec: ModelSpec) {
        let now = Instant::now();
        let keep_alive = spec.keep_alive.unwrap_or(self.shared.config.keep_alive);
        self.shared.lock().list.push(Entry {
            id: spec.id,
            aliases: spec.aliases,
            tags: spec.tags,
            path: spec.path,
            bytes: spec.bytes,
            pinned: spec.pinned,
            load: Some(spec.load),
            default_keep_alive: keep_alive,
            keep_alive,
            state: State::Unloaded,
            last_used: now,
            grace_until: now,
            leases: 0,
            loads: 0,
            removed: false,
        });
    }

    /// Whether `name` selects a model (without loading it).
    pub(crate) fn listing(&self, name: Option<&str>, lenient: bool) -> Result<Listing, ApiError> {
        let entries = self.shared.lock();
        let i = entries
            .find(name, lenient)
            .ok_or_else(|| entries.not_found(name))?;
        Ok(listing(&entries.list[i], Instant::now()))
    }

    /// Whether `name` selects a model that is not loaded; `None` when it selects none. A
    /// lookup without copying the listing (asked on every streamed chat).
    pub(crate) fn unloaded(&self, name: Option<&str>, lenient: bool) -> Option<bool> {
        let entries = self.shared.lock();
        let i = entries.find(name, lenient)?;
        Some(!matches!(entries.list[i].state, State::Loaded(_)))
    }

    /// Every model, in the order added.
    pub(crate) fn listings(&self) -> Vec<Listing> {
        let now = Instant::now();
        self.shared
            .lock()
            .list
            .iter()
            .filter(|e| !e.removed)
            .map(|e| listing(e, now))
            .collect()
    }

    /// Stops serving the model `id` names exactly (its file was deleted): unloaded as soon as
    /// it is idle, no longer listed or found. Returns whether a model had that id.
    pub(crate) fn remove(&self, id: &str) -> bool {
        let mut entries = self.shared.lock();
        let Some(i) = entries.find(Some(id), false) else {
            return false;
        };
        let entry = &mut entries.list[i];
        entry.removed = true;
        entry.pinned = false;
        self.unload_soon(entries, i);
        true
    }

    /// Unloads entry `i` at once when it is idle, else once its requests end (its keep-alive
    /// becomes zero); the caller does not wait for the engine to stop.
    fn unload_soon(&self, mut entries: MutexGuard<'_, Entries>, i: usize) {
        let entry = &mut entries.list[i];
        entry.keep_alive = KeepAlive::For(Duration::ZERO);
        entry.grace_until = Instant::now();
        let victim = if entry.idle() { entry.take() } else { None };
        drop(entries);
        if let Some(llm) = victim {
            let shared = self.shared.clone();
            tokio::spawn(async move {
                unload(llm).await;
                shared.changed.notify_waiters();
            });
        }
    }

    /// The loaded models (not held: for metrics and descriptions).
    pub(crate) fn loaded(&self) -> Vec<ServedModel> {
        self.shared
            .lock()
            .list
            .iter()
            .filter(|e| !e.removed)
            .filter_map(|e| match &e.state {
                State::Loaded(llm) => Some(ServedModel {
                    id: e.id.clone(),
                    aliases: e.aliases.clone(),
                    llm: llm.clone(),
                    tags: e.tags.clone(),
                    bytes: e.bytes,
                    _lease: None,
                }),
                _ => None,
            })
            .collect()
    }

    /// The model `name` selects, loaded (waiting for its load) and held until the returned
    /// value and its clones drop. `keep_alive`: what this request sets (default: the
    /// model's); `explicit`: a load asked for by name (`POST /models/load`), which happens
    /// even when the pool does not load on requests.
    pub(crate) async fn acquire(
        &self,
        name: Option<&str>,
        lenient: bool,
        keep_alive: Option<KeepAlive>,
        explicit: bool,
    ) -> Result<ServedModel, ApiError> {
        loop {
            let mut done = {
                let mut entries = self.shared.lock();
                let i = entries
                    .find(name, lenient)
                    .ok_or_else(|| entries.not_found(name))?;
                let autoload = self.shared.config.autoload;
                let entry = &mut entries.list[i];
                entry.keep_alive = keep_alive.unwrap_or(entry.default_keep_alive);
                match &entry.state {
                    State::Loaded(llm) => {
                        entry.leases += 1;
                        entry.last_used = Instant::now();
                        return Ok(ServedModel {
                            id: entry.id.clone(),
                            aliases: entry.aliases.clone(),
                            llm: llm.clone(),
                            tags: entry.tags.clone(),
                            bytes: entry.bytes,
                            _lease: Some(Arc::new(Lease {
                                shared: Arc::downgrade(&self.shared),
                                index: i,
                            })),
                        });
                    }
                    State::Loading { done, .. } => done.clone(),
                    State::Unloaded | State::Failed(_) => {
                        if !autoload && !explicit {
                            return Err(ApiError::ModelNotLoaded {
                                model: entry.id.clone(),
                            });
                        }
                        let (tx, rx) = watch::channel(None);
                        entry.state = State::Loading {
                            admitted: false,
                            done: rx.clone(),
                        };
                        tokio::spawn(self.clone().load(i, tx));
                        rx
                    }
                }
            };
            let ended = done.wait_for(Option::is_some).await.map(|v| v.clone());
            let failure = match ended {
                Ok(Some(Err(reason))) => Some(reason),
                Ok(_) => None,
                Err(_) => Some("the load stopped before it ended".to_owned()),
            };
            if let Some(reason) = failure {
                let entries = self.shared.lock();
                let model = entries.find(name, lenient).map_or_else(
                    || name.unwrap_or_default().to_owned(),
                    |i| entries.list[i].id.clone(),
                );
                return Err(ApiError::ModelLoad { model, reason });
            }
        }
    }

    /// Unloads `name` as soon as it is idle (at once when it is: listed as unloaded before
    /// this returns, its memory freed once its engine stops). Returns whether it was loaded
    /// (or loading).
    pub(crate) fn unload(&self, name: Option<&str>, lenient: bool) -> Result<bool, ApiError> {
        let entries = self.shared.lock();
        let i = entries
            .find(name, lenient)
            .ok_or_else(|| entries.not_found(name))?;
        let entry = &entries.list[i];
        if entry.load.is_none() {
            return Err(ApiError::bad(
                "model",
                format!(
                    "the model `{}` was loaded at start (-m) and cannot be unloaded",
                    entry.id
                ),
            ));
        }
        let was = matches!(entry.state, State::Loaded(_) | State::Loading { .. });
        self.unload_soon(entries, i);
        Ok(was)
    }

    /// Loads entry `i` once it has room, and tells its waiters how it went.
    async fn load(self, i: usize, done: watch::Sender<Option<Result<(), String>>>) {
        let result = async {
            self.make_room(i).await?;
            let load = self.shared.lock().list[i]
                .load
                .clone()
                .ok_or_else(|| "this model cannot be loaded again".to_owned())?;
            tokio::task::spawn_blocking(move || load())
                .await
                .map_err(|_| "the load panicked; see the server log".to_owned())?
        }
        .await;
        let outcome = {
            let mut entries = self.shared.lock();
            let entry = &mut entries.list[i];
            let now = Instant::now();
            match result {
                Ok(llm) => {
                    entry.state = State::Loaded(llm);
                    entry.loads += 1;
                    entry.last_used = now;
                    entry.grace_until = now + LOAD_GRACE;
                    Ok(())
                }
                Err(reason) => {
                    entry.state = State::Failed(reason.clone());
                    Err(reason)
                }
            }
        };
        self.shared.changed.notify_waiters();
        let _ = done.send(Some(outcome));
    }

    /// Waits until entry `i` fits the limits, unloading idle models as needed; loads waiting
    /// for room go in arrival order.
    async fn make_room(&self, i: usize) -> Result<(), String> {
        let ticket = {
            let mut entries = self.shared.lock();
            let ticket = entries.next_ticket;
            entries.next_ticket += 1;
            entries.waiting.insert(ticket);
            ticket
        };
        let _turn = Ticket {
            shared: &self.shared,
            ticket,
        };
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let victim = {
                let mut entries = self.shared.lock();
                if entries.waiting.first() == Some(&ticket) {
                    match entries.room_for(i, &self.shared.config) {
                        Room::Fits => {
                            if let State::Loading { admitted, .. } = &mut entries.list[i].state {
                                *admitted = true;
                            }
                            return Ok(());
                        }
                        Room::Never(reason) => return Err(reason),
                        Room::Evict(j) => entries.list[j].take(),
                        Room::Wait => None,
                    }
                } else {
                    None
                }
            };
            if let Some(llm) = victim {
                unload(llm).await;
                continue;
            }
            // Releases notify; a request ending on an engine does not, so look again soon.
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// Unloads every model idle past its keep-alive.
    async fn reap(&self) {
        let now = Instant::now();
        let victims: Vec<Llm> = {
            let mut entries = self.shared.lock();
            entries
                .list
                .iter_mut()
                .filter_map(|entry| {
                    if let State::Loaded(llm) = &entry.state {
                        if entry.leases > 0 || llm.inflight() > 0 {
                            entry.last_used = now;
                            return None;
                        }
                    }
                    let expired = match entry.keep_alive {
                        KeepAlive::For(keep) => {
                            now.saturating_duration_since(entry.last_used) >= keep
                        }
                        KeepAlive::Forever => false,
                    };
                    (entry.unloadable() && expired && now >= entry.grace_until)
                        .then(|| entry.take())
                        .flatten()
                })
                .collect()
        };
        if victims.is_empty() {
            return;
        }
        for llm in victims {
            unload(llm).await;
        }
        self.shared.changed.notify_waiters();
    }
}

/// A load's place in the queue for room; leaving it (loaded, failed or dropped) lets the next
/// one go.
struct Ticket<'a> {
    shared: &'a Shared,
    ticket: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.shared.lock().waiting.remove(&self.ticket);
        self.shared.changed.notify_waiters();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn listing(entry: &Entry, now: Instant) -> Listing {
    Listing {
        id: entry.id.clone(),
        aliases: entry.aliases.clone(),
        tags: entry.tags.clone(),
        path: entry.path.clone(),
        status: entry.status(),
        llm: match &entry.state {
            State::Loaded(llm) => Some(llm.clone()),
            _ => None,
        },
        expires_at: entry.expires_at(now),
        pinned: entry.pinned,
        bytes: entry.bytes,
        in_flight: entry.leases,
        loads: entry.loads,
    }
}

/// Drops the pool's handle to `llm` and waits (off the async threads) for its engine to stop
/// once the last handle is gone, so its memory is free before another model loads.
async fn unload(llm: Llm) {
    let _ = tokio::task::spawn_blocking(move || llm.close(UNLOAD_GRACE)).await;
}

/// Unloads idle models every [`TICK`] while the pool lives.
async fn reaper(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(TICK).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        Pool { shared }.reap().await;
    }
}

/// `1.5 GiB`, `300 MiB`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let x = bytes as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", x / f64::from(1u32 << 30))
    } else {
        format!("{:.0} MiB", (x / f64::from(1u32 << 20)).max(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_reads_ollamas_values() {
        let five = KeepAlive::For(Duration::from_secs(300));
        assert_eq!(KeepAlive::parse_ollama(&json!("5m")), Ok(five));
        assert_eq!(KeepAlive::parse_ollama(&json!(300)), Ok(five));
        assert_eq!(KeepAlive::parse_ollama(&json!("300")), Ok(five));
        assert_eq!(
            KeepAlive::parse_ollama(&json!("1h30m")),
            Ok(KeepAlive::For(Duration::from_secs(5400)))
        );
        assert_eq!(
            KeepAlive::parse_ollama(&json!("250ms")),
            Ok(KeepAlive::For(Duration::from_millis(250)))
        );
        assert_eq!(
            KeepAlive::parse_ollama(&json!(0)),
            Ok(KeepAlive::For(Duration::ZERO))
        );
        for forever in [json!(-1), json!("-1"), json!("-1m"), json!(-0.5)] {
            assert_eq!(KeepAlive::parse_ollama(&forever), Ok(KeepAlive::Forever));
        }
        for bad in [
            json!("soon"),
            json!("5x"),
            json!(""),
            json!(true),
            json!("m"),
        ] {
            assert!(KeepAlive::parse_ollama(&bad).is_err(), "{bad}");
        }
        assert_eq!(
            "10s".parse::<KeepAlive>(),
            Ok(KeepAlive::For(Duration::from_secs(10)))
        );
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(300 << 20), "300 MiB");
        assert_eq!(human_bytes(5), "1 MiB");
    }
}
