//! `wick serve`: the OpenAI-compatible HTTP server, of the models named with `-m` (loaded at
//! start) and, without `-m` or with `--models-dir`, of every model of the store or the
//! directory, each loaded when a request first names it and unloaded when idle.

mod catalog;
mod preset;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use wick::{Llm, ModelKwargs};
use wick_parse::Format;
use wick_server::{
    router, AppState, KeepAlive, ListenConfig, ModelSpec, PoolConfig, ServedModel, ServerConfig,
};

use catalog::{Found, Memory};

/// Arguments of `wick serve`.
// Switches are flags on the command line, one bool each.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// A model to serve, loaded at start and for as long as the server runs: a GGUF file,
    /// an http(s):// URL, hf:owner/repo/file.gguf, owner/repo[:QUANT] or a name from `wick
    /// ls`. Repeat to serve several models; requests choose one with their `model` field (a
    /// file's name without `.gguf`, or the reference as given), and requests without one get
    /// the first. Without -m, every model of the store is served by its `wick ls` name, each
    /// loaded when a request first names it (the default model at start).
    #[arg(short, long = "model", value_name = "REF")]
    models: Vec<String>,

    /// Also serve every model of this directory, each loaded when a request first names it:
    /// a `.gguf` file by its name without `.gguf`, a subdirectory of GGUF files (a split
    /// model, a model beside its projector) by the subdirectory's name.
    #[arg(long, value_name = "DIR")]
    models_dir: Option<PathBuf>,

    /// How long a model loaded on demand stays loaded once idle: `5m`, `30s`, `1h30m`, `0`
    /// (unloaded when its last answer ends) or `-1` (never). A request sets its own with
    /// Ollama's `keep_alive`. Models named with -m stay loaded.
    #[arg(
        long,
        default_value = "5m",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    keep_alive: KeepAlive,

    /// The most models loaded at once: loading one more first unloads the least recently
    /// used idle model that is not pinned (a request for it waits until one is idle; never
    /// one with requests in flight) [default: no limit but --memory].
    #[arg(long, visible_alias = "models-max", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_loaded: Option<u64>,

    /// The memory the loaded models may take, by their estimates (each model's file, the
    /// weights, plus its F16 KV cache for --ctx-size × (--parallel + 1) tokens); loading one
    /// that would exceed it first unloads idle models as --max-loaded does. `auto`: 90 % of
    /// what the machine has available at start (Linux's `MemAvailable`); `none`: no budget; or
    /// a size (`8G`, `512M`, bytes).
    #[arg(long, default_value = "auto", value_name = "SIZE|auto|none")]
    memory: Memory,

    /// Keep this model loaded once it is loaded: never unloaded when idle or for room
    /// (repeatable; a name or alias of a served model).
    #[arg(long = "pin", value_name = "NAME")]
    pins: Vec<String>,

    /// Load models only when asked with `POST /models/load` (llama-server's flag); a request
    /// naming an unloaded model gets a 400 saying so.
    #[arg(long)]
    no_models_autoload: bool,

    /// Serve the models of this preset file, each loaded when a request first names it, with
    /// settings of its own: TOML (`[models.NAME]` tables: `model` (any reference), `aliases`,
    /// `tags`, `ctx-size`, `parallel`, `chat-template`, `model-draft`, `lora`, `kernels`,
    /// `cache-type-k`, `cache-type-v`, `gpu-layers`, `pin`, `keep-alive`, `load-on-startup`;
    /// `[defaults]` for all), or llama-server's INI preset (a `.ini` file) where its keys map.
    #[arg(long, value_name = "FILE")]
    models_preset: Option<PathBuf>,

    /// Download a preset's model that is not on this machine when a request first names it
    /// (verified as `wick pull` verifies) [default: such a request fails, saying to `wick
    /// pull` it].
    #[arg(long)]
    pull_missing: bool,

    /// Labels for the -m models, listed in /v1/models `tags` (comma-separated or repeated).
    #[arg(long = "tags", value_name = "TAG", value_delimiter = ',')]
    tags: Vec<String>,

    /// Another name for a model (repeatable): with one model, every alias names it; with
    /// several, the first alias names the first model, the second the second, and so on. A
    /// model's first alias is its id in /v1/models and in answers.
    #[arg(long = "alias", value_name = "NAME")]
    aliases: Vec<String>,
    /// Answer a request naming a model the server does not serve with a 404 even when one
    /// model is served [default: with -m alone, one model answers any name, as llama-server
    /// does: clients send names such as gpt-4o-mini; serving models on demand, names are
    /// always strict].
    #[arg(long)]
    strict_model_names: bool,
    /// Do not serve the chat page at `/` (a browser then gets `Ollama is running`, as any
    /// other client does).
    #[arg(long)]
    no_ui: bool,
    /// The addresses to listen on: repeat the flag or separate them with commas
    /// (`127.0.0.1,::1`), all on the one `--port`.
    #[arg(
        long = "host",
        default_value = "127.0.0.1",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    hosts: Vec<String>,

    /// The port to listen on (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8080, value_name = "PORT")]
    port: u16,

    /// Require `Authorization: Bearer <KEY>` on every route but /health.
    #[arg(long, env = "WICK_API_KEY", value_name = "KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// Also answer requests whose `Host` header names this host (repeatable; `*`: any). A
    /// server on a loopback address answers only to loopback names (`localhost`, `127.0.0.1`,
    /// `[::1]`), so web pages cannot reach it through DNS rebinding; one on another address
    /// answers to any name unless this is given.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,

    /// Connections open at once; more clients wait until one closes.
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,

    /// Seconds a client may take to send a request's headers, and a keep-alive connection
    /// may stay idle, before it is closed (slow clients cannot hold connections open).
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    header_timeout: u64,

    /// Seconds a client may take to send a request's body (408 after).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    body_timeout: u64,

    /// Fetch images requests give by `http(s)` URL (OpenAI `image_url`, Responses
    /// `input_image`, Anthropic `url` sources). Off by default: the server then reaches out to
    /// any address a client names, so turn it on for trusted clients only.
    #[arg(long)]
    media_urls: bool,

    /// With --media-urls: seconds one image may take to fetch.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    media_url_timeout: u64,

    /// With --media-urls: the most bytes one fetched image may have.
    #[arg(long, default_value_t = 20 << 20, value_name = "BYTES")]
    media_url_max_bytes: usize,

    /// Allow browsers on these origins to call the API (CORS, answered as llama-server
    /// answers it): origins separated by commas, `localhost` (pages on a loopback host, any
    /// port) or `*` (any origin) [default: off].
    #[arg(long, visible_alias = "cors-origins", value_name = "ORIGINS")]
    cors_origin: Option<String>,

    /// Requests that generate at once per model; more wait in a queue.
    #[arg(long, default_value_t = 4, value_name = "N")]
    parallel: u32,

    /// Requests that may wait per model while all `--parallel` ones generate; more get a
    /// 503 with `Retry-After`.
    #[arg(long, default_value_t = 64, value_name = "N")]
    queue_size: usize,

    /// Context window of each request, in tokens.
    #[arg(short = 'c', long, default_value_t = 4096, value_name = "N")]
    ctx_size: u32,

    /// Most tokens an answer may have when the request does not say.
    #[arg(
        short = 'n',
        long,
        visible_alias = "n-predict",
        default_value_t = 512,
        value_name = "N"
    )]
    max_tokens: u32,

    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 8 << 20, value_name = "BYTES")]
    max_body_size: usize,

    /// Parse answers in this tool-call/reasoning format instead of the one detected from the
    /// chat template (see `wick parse --list-formats`).
    #[arg(long, value_name = "FORMAT")]
    output_format: Option<Format>,

    /// Format chats with this llama.cpp template name (`chatml`, `llama3`, …) or inline Jinja
    /// instead of the model's own template [default: the model's].
    #[arg(long, value_name = "NAME|JINJA", conflicts_with = "chat_template_file")]
    chat_template: Option<String>,

    /// Format chats with the Jinja template in this file instead of the model's own.
    #[arg(long, value_name = "FILE")]
    chat_template_file: Option<std::path::PathBuf>,

    /// On SIGINT/SIGTERM, stop taking connections and wait this long for the answers in
    /// flight; then streams still running end with an error event and `[DONE]`, and
    /// requests still waiting get a 503.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    shutdown_timeout: u64,

    /// CPU threads [default: every core].
    #[arg(long, value_name = "N")]
    threads: Option<u32>,

    /// Layers to offload to a GPU (needs a GPU build), or with --rpc to the RPC workers: a
    /// number (the output layer counts as one), `all`, or `auto`: as many as fit the devices'
    /// free memory, leaving --fit-target free on each (llama.cpp's fit, llama-server's `--fit
    /// on`) [default: 0; with --rpc all].
    #[arg(long, visible_alias = "ngl", value_name = "N|all|auto")]
    gpu_layers: Option<wick::GpuLayers>,

    /// With `--gpu-layers auto`: MiB to leave free on each device (llama-server's flag).
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    fit_target: u64,

    /// The model's multimodal projector (an `mmproj` GGUF, llama-server's flag): requests may
    /// then hold images (OpenAI `image_url` data URLs, Anthropic `image` blocks, Ollama
    /// `images`). Without it a request with an image is a 400 that says so.
    #[arg(long, value_name = "FILE")]
    mmproj: Option<PathBuf>,

    /// Offload to these devices only (llama-server's flag): llama.cpp's names, separated by
    /// commas (`wick devices` lists them) [default: every GPU, or the --rpc workers].
    #[arg(
        long = "device",
        visible_alias = "dev",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    devices: Vec<String>,

    /// Compute the offloaded layers (--gpu-layers) on these llama.cpp RPC workers, each
    /// started with `wick rpc-worker` on its machine; layers are split by their free memory.
    /// Each is checked before loading: one that does not answer, or speaks another protocol
    /// version, stops the server with a message saying so. Unauthenticated: trusted networks
    /// only.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT…]", value_delimiter = ',')]
    rpc: Vec<String>,

    /// Bytes of KV snapshots kept on disk per model (`$WICK_HOME/kv`), so a returning
    /// conversation or a restarted server restores its prompt prefix instead of recomputing
    /// it; 0 keeps the prompt cache in RAM only.
    #[arg(long, default_value_t = 4 << 30, value_name = "BYTES")]
    kv_cache_size: u64,

    /// The directory of the disk prompt cache [default: `$WICK_HOME/kv`]. Several servers
    /// (replicas on one machine, or on many through a shared volume) can point at one
    /// directory: a prompt prefix one of them computed is restored by the others.
    #[arg(long, value_name = "DIR")]
    kv_cache_dir: Option<std::path::PathBuf>,

    /// Bytes of sequence states kept in RAM per model for prompt prefixes no sequence holds
    /// any more (a conversation that comes back after others took its sequence); in front of
    /// the disk cache. 0 turns it off.
    #[arg(long, default_value_t = 2 << 30, value_name = "BYTES")]
    cache_ram: u64,

    /// CPU kernels. `deterministic`: ggml's batch-invariant reference kernels (weights
    /// unrepacked) with wick's own batch-invariant flash attention, so a greedy answer is
    /// bit-identical whether its prompt was cached, chunked, batched with other requests or
    /// run on any thread count. `fast`: the
    /// fastest kernels, whose floats change with the batch shape. GPU layers are never
    /// bit-deterministic: with any, the layers left on the CPU still run these kernels, but
    /// the model is not (`/v1/models` says so in `meta.deterministic`, and span by span in
    /// `meta.placement[].deterministic`; `/props` and the start log too).
    #[arg(long, default_value = "deterministic", value_name = "MODE", value_parser = ["deterministic", "fast"])]
    kernels: String,

    #[command(flatten)]
    cache_types: crate::flags::CacheTypes,

    /// Speculative decoding. `ngram` (the default without --model-draft): a greedy answer
    /// (temperature 0, no grammar, penalties or log-probabilities) drafts the tokens that
    /// followed the earlier occurrence of its last tokens that matches longest (3 tokens at
    /// least) in the prompt or answer (prompt lookup), and the model checks the draft inside
    /// the batched step: the answer is the same token for token, faster where text repeats
    /// (code edits, quotes, JSON); the draft shrinks, then pauses, while drafts fail.
    /// Measured with `wick bench` (h) on a 2-core CPU: 1.3× on an edit task, 1.06× on free
    /// text. `draft` (the default with --model-draft): the draft model proposes instead.
    /// Sampled answers never speculate. `off`: never. A request may set its own `spec_max`
    /// (or llama-server's `speculative.n_max`; 0: off) either way; `/metrics` counts drafted
    /// and accepted tokens.
    #[arg(long, value_name = "MODE", value_parser = ["ngram", "draft", "off"])]
    spec: Option<String>,
    /// A draft model for `--spec draft` (any model reference): a smaller model with the same
    /// vocabulary as the first model (refused otherwise, naming the first token that
    /// differs), loaded with the same context, sequences and threads. It pays where a draft
    /// token costs far less than one of the model (a 1B draft for a 70B model on a GPU); with
    /// models of similar size it is slower than plain decoding.
    #[arg(long = "model-draft", visible_alias = "md", value_name = "REF")]
    model_draft: Option<String>,
    /// The most tokens drafted per step with `--spec ngram` or `draft` (1 to 64).
    #[arg(long, default_value_t = ModelKwargs::SPEC_MAX as u16, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    spec_max: u16,
    /// A LoRA adapter (a GGUF adapter file made for the model) loaded with the first model,
    /// at SCALE (default 1; 0: loaded but off). Repeatable; adapters are numbered from 0 in
    /// the order given. A request picks its own scales with `"lora": [{"id": 0, "scale":
    /// 0.5}]` (adapters it leaves out are off); `GET /lora-adapters` lists them and `POST
    /// /lora-adapters` sets the defaults. Requests under different adapters or scales are
    /// never batched together and never share a cached prefix. With llama.cpp one adapter
    /// runs at a time per request (a request with two non-zero scales gets a 400).
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = parse_lora)]
    loras: Vec<(PathBuf, f32)>,
    /// Load the `--lora` adapters at scale 0 (off until a request or `POST /lora-adapters`
    /// turns them on), as llama-server's flag of the same name.
    #[arg(long)]
    lora_init_without_apply: bool,
    #[command(flatten)]
    template: crate::flags::TemplateArgs,
    /// Defaults of requests that set none (last: its help heading holds for what follows).
    #[command(flatten)]
    sampling: SamplingFlags,
}

/// `FILE[:SCALE]`: a scale is the text after the last `:` when it parses as a number (so a
/// path with colons still works).
fn parse_lora(value: &str) -> Result<(PathBuf, f32), String> {
    if let Some((file, scale)) = value.rsplit_once(':') {
        if let Ok(scale) = scale.parse::<f32>() {
            if !scale.is_finite() {
                return Err(format!("the scale {scale} is not a finite number"));
            }
            return Ok((PathBuf::from(file), scale));
        }
    }
    Ok((PathBuf::from(value), 1.0))
}

/// What a request that sets none of these gets, on every API: llama-server's flags of the same
/// names over wick's request defaults.
#[derive(Debug, Args)]
#[command(next_help_heading = "Request defaults (llama-server's flags)")]
struct SamplingFlags {
    /// The temperature (0: greedy) [default: 0.8].
    #[arg(long, value_name = "T")]
    temp: Option<f32>,
    /// The top-k (0: off) [default: 40].
    #[arg(long, value_name = "N")]
    top_k: Option<u32>,
    /// The top-p (1: off) [default: 0.95].
    #[arg(long, value_name = "P")]
    top_p: Option<f32>,
    /// The min-p (0: off) [default: 0.05].
    #[arg(long, value_name = "P")]
    min_p: Option<f32>,
    /// The repetition penalty (1: off) [default: 1].
    #[arg(long, value_name = "X")]
    repeat_penalty: Option<f32>,
    /// The seed (-1: a fresh one each time) [default: -1].
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    seed: Option<i64>,
}

/// `--temp`, `--top-k`, `--top-p`, `--min-p`, `--repeat-penalty` and `--seed` over wick's
/// request defaults.
fn sampling_defaults(flags: &SamplingFlags) -> Result<wick_server::SamplingDefaults> {
    let mut d = wick_server::SamplingDefaults::default();
    let s = &mut d.sampling;
    s.temperature = flags.temp.unwrap_or(s.temperature);
    s.top_k = flags.top_k.unwrap_or(s.top_k);
    s.top_p = flags.top_p.unwrap_or(s.top_p);
    s.min_p = flags.min_p.unwrap_or(s.min_p);
    s.repetition_penalty = flags.repeat_penalty.unwrap_or(s.repetition_penalty);
    s.validate().map_err(|e| {
        anyhow::anyhow!(
            "--{} {} is out of range (allowed: {})",
            match e.field {
                "temperature" => "temp",
                "repetition_penalty" => "repeat-penalty",
                other => other,
            }
            .replace('_', "-"),
            e.value,
            e.allowed
        )
    })?;
    d.seed = flags.seed.filter(|&seed| seed >= 0);
    Ok(d)
}

/// `--spec`, or its default: `draft` with a draft model, else `ngram`.
fn spec_mode(args: &ServeArgs) -> &str {
    match (&args.spec, &args.model_draft) {
        (Some(mode), _) => mode,
        (None, Some(_)) => "draft",
        (None, None) => "ngram",
    }
}

pub(crate) fn run(args: ServeArgs) -> Result<()> {
    if args.parallel == 0 {
        bail!("--parallel must be 1 or more");
    }
    sampling_defaults(&args.sampling)?;
    match (spec_mode(&args), &args.model_draft) {
        ("draft", None) => bail!("--spec draft needs a draft model: give --model-draft REF"),
        (mode @ ("ngram" | "off"), Some(_)) => {
            bail!("--model-draft drafts only with --spec draft, not --spec {mode}")
        }
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (served, engines) = runtime.block_on(serve(args));
    // Dropping the runtime drops every task still holding a model; then each engine's thread
    // finishes its step and ends. Exiting before that would tear llama.cpp down under it.
    drop(runtime);
    for engine in engines {
        if !engine.join(crate::flags::ENGINE_EXIT_GRACE) {
            eprintln!("wick serve: an engine did not stop in time; exiting anyway");
        }
    }
    served
}

/// Serves until a signal; returns how it went and the engines' threads to wait for.
async fn serve(args: ServeArgs) -> (Result<()>, Vec<wick::EngineThread>) {
    let mut state = None;
    let served = serve_on(&args, &mut state).await;
    let engines = state
        .map(|state| {
            state
                .models()
                .iter()
                .map(|m| m.llm.engine_thread())
                .collect()
        })
        .unwrap_or_default();
    (served, engines)
}

/// [`serve`], leaving the server's state in `state` once it exists.
async fn serve_on(args: &ServeArgs, state_out: &mut Option<AppState>) -> Result<()> {
    let listeners = bind_all(&args.hosts, args.port).await?;
    let locals: Vec<SocketAddr> = listeners
        .iter()
        .map(tokio::net::TcpListener::local_addr)
        .collect::<std::io::Result<_>>()?;
    let api_key = args.api_key.clone().filter(|k| !k.is_empty());
    for local in locals.iter().filter(|l| !l.ip().is_loopback()) {
        if api_key.is_none() {
            eprintln!(
                "wick serve: warning: listening on {local} without --api-key: anyone who can \
                 reach this address can use the models; set --api-key (or WICK_API_KEY)"
            );
        }
    }
    let router_mode =
        args.models.is_empty() || args.models_dir.is_some() || args.models_preset.is_some();
    let memory = match args.memory {
        Memory::Auto => catalog::available_memory().map(|m| m / 10 * 9),
        Memory::Unlimited => None,
        Memory::Bytes(bytes) => Some(bytes),
    };
    let config = ServerConfig {
        api_key,
        cors_origin: args.cors_origin.clone(),
        max_body_bytes: args.max_body_size,
        parallel: args.parallel as usize,
        allowed_hosts: allowed_hosts(&locals, &args.hosts, &args.allow_hosts),
        body_timeout: Duration::from_secs(args.body_timeout),
        media_urls: args.media_urls.then(|| wick_server::MediaUrls {
            max_bytes: args.media_url_max_bytes,
            timeout: Duration::from_secs(args.media_url_timeout),
        }),
        // Serving models on demand, a name no model has is a 404 (as Ollama and llama-server's
        // router answer it): another model answering would hide the mistake.
        strict_model_names: args.strict_model_names || router_mode,
        ui: !args.no_ui,
        sampling: sampling_defaults(&args.sampling)?,
        models: PoolConfig {
            keep_alive: args.keep_alive,
            max_loaded: args
                .max_loaded
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            memory,
            autoload: !args.no_models_autoload,
        },
        router: router_mode,
    };
    let state = AppState::new(config);
    *state_out = Some(state.clone());
    for local in &locals {
        println!("wick serve: listening on http://{local} (loading models…)");
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let listen = ListenConfig {
        max_connections: args.max_connections,
        header_timeout: Duration::from_secs(args.header_timeout.max(1)),
    };
    let app = router(state.clone());
    // One server per address; aborting `server` drops the set, which aborts them all.
    let mut servers = tokio::task::JoinSet::new();
    for listener in listeners {
        servers.spawn(wick_server::serve(
            listener,
            app.clone(),
            listen.clone(),
            wait_for(stop_rx.clone()),
        ));
    }
    let mut server = tokio::spawn(async move { while servers.join_next().await.is_some() {} });
    tokio::spawn(signals(stop_tx));

    let loading = load_all(args, &state);
    tokio::select! {
        loaded = loading => loaded?,
        () = wait_for(stop_rx.clone()) => return Ok(()),
    }
    print_ready(locals[0], &state, args.api_key.is_some());

    wait_for(stop_rx).await;
    eprintln!(
        "wick serve: shutting down (waiting up to {}s for answers in flight)",
        args.shutdown_timeout
    );
    let grace = Duration::from_secs(args.shutdown_timeout);
    if tokio::time::timeout(grace, &mut server).await.is_err() {
        eprintln!("wick serve: cancelling the answers still in flight");
        state.cancel_all();
        // The cancelled streams send their closing events, then their connections close.
        if tokio::time::timeout(CLOSE_GRACE, &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
    }
    Ok(())
}

/// How long cancelled answers get to send their closing events.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Binds every address of `hosts` on `port`; with port 0, the others take the port the first
/// got.
async fn bind_all(hosts: &[String], port: u16) -> Result<Vec<tokio::net::TcpListener>> {
    let mut listeners = Vec::new();
    let mut port = port;
    for host in hosts.iter().map(|h| h.trim()).filter(|h| !h.is_empty()) {
        let addr = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        port = listener.local_addr()?.port();
        listeners.push(listener);
    }
    if listeners.is_empty() {
        bail!("--host names no address");
    }
    Ok(listeners)
}

/// The `Host` names served: when every address is a loopback one, the loopback names, the
/// names they were bound by and `extra`; else any name, unless `extra` names some.
fn allowed_hosts(locals: &[SocketAddr], bound: &[String], extra: &[String]) -> Option<Vec<String>> {
    if extra.iter().any(|h| h == "*") {
        return None;
    }
    let loopback = locals.iter().all(|l| l.ip().is_loopback());
    if !loopback && extra.is_empty() {
        return None;
    }
    let mut hosts: Vec<String> = extra.to_vec();
    if loopback {
        hosts.extend(ServerConfig::LOOPBACK_HOSTS.map(str::to_owned));
        hosts.extend(locals.iter().map(|l| l.ip().to_string()));
        hosts.extend(
            bound
                .iter()
                .map(|b| b.trim().trim_matches(['[', ']']).to_owned()),
        );
    }
    Some(hosts)
}

/// Loads the -m models (off the async threads) and adds them to `state`, adds the models
/// served on demand (the store's without -m, `--models-dir`'s), and marks the server ready;
/// without -m, the default model is loaded at start.
async fn load_all(args: &ServeArgs, state: &AppState) -> Result<()> {
    let template = match (&args.chat_template, &args.chat_template_file) {
        (Some(template), _) => Some(template.clone()),
        (None, Some(file)) => Some(
            std::fs::read_to_string(file)
                .with_context(|| format!("reading the chat template {}", file.display()))?,
        ),
        (None, None) => None,
    };
    let mut found = {
        let (from_store, dir) = (args.models.is_empty(), args.models_dir.clone());
        tokio::task::spawn_blocking(move || discover(from_store, dir.as_deref())).await??
    };
    for (position, reference) in args.models.iter().enumerate() {
        load_named(
            args,
            state,
            position,
            reference,
            template.as_deref(),
            &mut found,
        )
        .await?;
    }
    let default_id = put_default_first(args, &mut found)?;
    // Every model found is built as the flags say; the store's models pulled later too.
    let mut base = builder(args, None);
    if let Some(template) = &template {
        base = base.chat_template(template.clone());
    }
    let tokens = context_tokens(args);
    for f in &found {
        let pinned = args
            .pins
            .iter()
            .any(|p| *p == f.id || f.aliases.contains(p));
        state.add_model_spec(found_spec(&base, f, pinned, tokens));
    }
    if args.models.is_empty() {
        let pins = args.pins.clone();
        state.serve_store_models(std::sync::Arc::new(move |name: &str, path: &Path| {
            let found = Found {
                id: name.to_owned(),
                aliases: Vec::new(),
                path: path.to_path_buf(),
            };
            found_spec(&base, &found, pins.contains(&found.id), tokens)
        }));
    }
    let mut on_startup = Vec::new();
    if let Some(file) = &args.models_preset {
        on_startup = add_presets(args, state, file, template.as_deref()).await?;
    }
    for pin in &args.pins {
        if !state
            .listings()
            .iter()
            .any(|m| m.id == *pin || m.aliases.contains(pin))
        {
            let served: Vec<String> = state.listings().into_iter().map(|m| m.id).collect();
            bail!(
                "--pin {pin}: no served model has this name (served: {})",
                served.join(", ")
            );
        }
    }
    state.set_ready();
    for id in default_id.into_iter().chain(on_startup) {
        state
            .load_model(&id)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// Adds the models of the preset `file`, served on demand; the ids of those to load at start.
async fn add_presets(
    args: &ServeArgs,
    state: &AppState,
    file: &Path,
    template: Option<&str>,
) -> Result<Vec<String>> {
    let presets = {
        let file = file.to_path_buf();
        tokio::task::spawn_blocking(move || preset::read(&file)).await??
    };
    if !presets.ignored.is_empty() {
        eprintln!(
            "wick serve: warning: --models-preset {}: keys with no counterpart, ignored: {}",
            file.display(),
            presets.ignored.join(", ")
        );
    }
    let store = quiet_store()?;
    let taken: Vec<String> = state
        .listings()
        .into_iter()
        .flat_map(|m| std::iter::once(m.id).chain(m.aliases))
        .collect();
    let mut on_startup = Vec::new();
    for (name, preset) in presets.models {
        if taken.contains(&name) {
            bail!(
                "--models-preset {}: the model `{name}` has the name of a model served already",
                file.display()
            );
        }
        let reference = preset.model.clone().unwrap_or_default();
        let parsed: wick::models::ModelRef = reference
            .parse()
            .with_context(|| format!("--models-preset: the model `{name}`"))?;
        let local = store.local(&parsed)?;
        let mut builder = builder_with(args, Some(&reference), &preset);
        if preset.chat_template.is_none() {
            if let Some(template) = template {
                builder = builder.chat_template(template.to_owned());
            }
        }
        let tokens = u64::from(preset.ctx_size.unwrap_or(args.ctx_size))
            * (u64::from(preset.parallel.unwrap_or(args.parallel)) + 1);
        let pull = args.pull_missing;
        let store = store.clone();
        let label = name.clone();
        let pinned = preset.pin == Some(true) || args.pins.contains(&name);
        if preset.load_on_startup == Some(true) {
            on_startup.push(name.clone());
        }
        state.add_model_spec(ModelSpec {
            id: name,
            aliases: preset.aliases.clone(),
            tags: preset.tags.clone(),
            bytes: local.as_deref().map_or(0, |p| catalog::estimate(p, tokens)),
            path: local,
            pinned,
            keep_alive: preset.keep_alive().map_err(|e| anyhow::anyhow!(e))?,
            load: std::sync::Arc::new(move || {
                let remote = !matches!(
                    parsed,
                    wick::models::ModelRef::Path(_) | wick::models::ModelRef::Name(_)
                );
                // Looked up at load time: it may have been pulled since the server started.
                let here = store.local(&parsed).is_ok_and(|p| p.is_some());
                if remote && !pull && !here {
                    return Err(format!(
                        "`{reference}` is not on this machine: fetch it with `wick pull \
                         {reference}`, or start the server with --pull-missing"
                    ));
                }
                load_logged(&label, &builder)
            }),
        });
    }
    Ok(on_startup)
}

/// The model store of `$WICK_HOME`, without progress bars (a server has no terminal to draw
/// them on).
fn quiet_store() -> Result<wick::models::ModelStore> {
    let mut settings = wick::models::Settings::from_env();
    settings.progress = false;
    Ok(wick::models::ModelStore::new(settings)?)
}

/// Loads a model served on demand (`label`), logging the load and where its layers run.
fn load_logged(label: &str, builder: &wick::LlmBuilder) -> Result<Llm, String> {
    eprintln!("wick serve: loading {label}");
    let llm = builder.clone().build().map_err(|e| format!("{e}"))?;
    eprintln!("wick serve: loaded {label} ({})", placement_line(&llm));
    Ok(llm)
}

/// Loads the -m model `reference` (the `position`-th) and serves it; a model of `found` in the
/// same file is this one, under its names too.
async fn load_named(
    args: &ServeArgs,
    state: &AppState,
    position: usize,
    reference: &str,
    template: Option<&str>,
    found: &mut Vec<Found>,
) -> Result<()> {
    let n_models = args.models.len();
    let mut builder = builder(args, Some(reference));
    if position == 0 {
        if let Some(draft) = &args.model_draft {
            builder = builder.draft_model(wick::ModelSource::Reference(draft.clone()));
        }
        for (file, scale) in &args.loras {
            let scale = if args.lora_init_without_apply {
                0.0
            } else {
                *scale
            };
            builder = builder.lora(file.clone(), scale);
        }
    }
    if let Some(template) = template {
        builder = builder.chat_template(template.to_owned());
    }
    let reference = reference.to_owned();
    let llm = tokio::task::spawn_blocking(move || builder.build())
        .await?
        .with_context(|| format!("cannot load {reference}"))?;
    let (mut id, mut aliases) = ids(Some(&reference));
    let name = llm.metadata().model_name;
    if !name.is_empty() && name != id {
        aliases.push(name);
    }
    // `--alias`: every one names the only model, or the i-th names the i-th; the first
    // becomes the id.
    let given: Vec<&String> = if n_models == 1 {
        args.aliases.iter().collect()
    } else {
        args.aliases.get(position).into_iter().collect()
    };
    if let Some((first, rest)) = given.split_first() {
        aliases.push(std::mem::replace(&mut id, (*first).clone()));
        aliases.extend(rest.iter().map(|a| (*a).clone()));
    }
    // A model of --models-dir in the same file is this one, under its names too.
    let mut bytes = 0;
    if let Some(path) = llm.model_path() {
        let path = canonical(path);
        found.retain(|f| {
            let same = canonical(&f.path) == path;
            if same {
                aliases.push(f.id.clone());
                aliases.extend(f.aliases.iter().cloned());
            }
            !same
        });
        bytes = catalog::estimate(&path, context_tokens(args));
    }
    eprintln!("wick serve: loaded {id} ({})", placement_line(&llm));
    let tags = if position == 0 {
        args.tags.clone()
    } else {
        Vec::new()
    };
    state.add_model(
        ServedModel::new(id, aliases, llm)
            .with_tags(tags)
            .with_bytes(bytes),
    );
    Ok(())
}

/// Without -m, puts the default model first among `found` (it answers requests that name no
/// model; it also answers to `default` and to `--alias`); its id, to load at start.
fn put_default_first(args: &ServeArgs, found: &mut Vec<Found>) -> Result<Option<String>> {
    let default_id = if args.models.is_empty() {
        let default = wick::models::Settings::from_env().default_model_path();
        let default = canonical(&default);
        match found.iter().position(|f| canonical(&f.path) == default) {
            Some(i) => {
                let mut first = found.remove(i);
                first.aliases.push("default".to_owned());
                if let Some((alias, rest)) = args.aliases.split_first() {
                    first
                        .aliases
                        .push(std::mem::replace(&mut first.id, alias.clone()));
                    first.aliases.extend(rest.iter().cloned());
                }
                found.insert(0, first);
                Some(found[0].id.clone())
            }
            None if found.is_empty() => bail!(
                "no model to serve: the default model is not at {} and the store is empty; \
                 fetch it with scripts/fetch-model, pull one with `wick pull REF`, or name one \
                 with -m",
                default.display()
            ),
            None => None,
        }
    } else {
        None
    };
    Ok(default_id)
}

/// Where a loaded model's layers run, for the log: `CPU: layers 0-29 + output, KV 90 MiB`,
/// or per device.
fn placement_line(llm: &Llm) -> String {
    let meta = llm.metadata();
    let runs: Vec<String> = meta
        .placement
        .iter()
        .map(|p| {
            let last = (p.first_layer + p.n_layers).saturating_sub(1);
            let output = if p.output { " + output" } else { "" };
            if p.n_layers == 0 {
                format!("{}: output", p.device)
            } else if p.kv_bytes == 0 {
                format!("{}: layers {}-{last}{output}", p.device, p.first_layer)
            } else {
                format!(
                    "{}: layers {}-{last}{output}, KV cache {}",
                    p.device,
                    p.first_layer,
                    crate::models::human_size(p.kv_bytes)
                )
            }
        })
        .collect();
    let determinism = if meta.deterministic {
        "bit-deterministic"
    } else if meta.placement.iter().any(|p| p.deterministic) {
        "not bit-deterministic: the CPU's layers are, the GPU's are not"
    } else {
        "not bit-deterministic"
    };
    format!("{}; {determinism}", runs.join(", "))
}

/// How the model `found` is served on demand: `base`'s settings on its file.
fn found_spec(base: &wick::LlmBuilder, found: &Found, pinned: bool, tokens: u64) -> ModelSpec {
    let builder = base.clone().model_ref(found.path.display().to_string());
    let label = found.id.clone();
    ModelSpec {
        id: found.id.clone(),
        aliases: found.aliases.clone(),
        tags: Vec::new(),
        path: Some(found.path.clone()),
        bytes: catalog::estimate(&found.path, tokens),
        pinned,
        keep_alive: None,
        load: std::sync::Arc::new(move || load_logged(&label, &builder)),
    }
}

/// The models served on demand: the store's (`from_store`) and `dir`'s, each file once.
fn discover(from_store: bool, dir: Option<&Path>) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    if from_store {
        let store = quiet_store()?;
        found.extend(catalog::store_models(&store)?);
    }
    if let Some(dir) = dir {
        for model in catalog::dir_models(dir)? {
            let path = canonical(&model.path);
            if let Some(known) = found.iter_mut().find(|f| canonical(&f.path) == path) {
                known.aliases.push(model.id);
                known.aliases.extend(model.aliases);
            } else if found.iter().any(|f| f.id == model.id) {
                eprintln!(
                    "wick serve: warning: {} is not served: the name {} is taken",
                    model.path.display(),
                    model.id
                );
            } else {
                found.push(model);
            }
        }
    }
    Ok(found)
}

/// `path` made absolute and free of symlinks, so two spellings of one file compare equal.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// KV cache tokens a model takes: a context per sequence, and one for embeddings.
fn context_tokens(args: &ServeArgs) -> u64 {
    u64::from(args.ctx_size) * (u64::from(args.parallel) + 1)
}

fn builder(args: &ServeArgs, reference: Option<&str>) -> wick::LlmBuilder {
    builder_with(args, reference, &preset::Preset::default())
}

/// [`builder`], with a preset's settings over the flags'.
fn builder_with(
    args: &ServeArgs,
    reference: Option<&str>,
    preset: &preset::Preset,
) -> wick::LlmBuilder {
    let kernels = preset.kernels.as_deref().unwrap_or(&args.kernels);
    let mut builder = args
        .template
        .apply(Llm::builder())
        .context_window(preset.ctx_size.unwrap_or(args.ctx_size))
        .max_new_tokens(args.max_tokens)
        .model_kwargs(ModelKwargs {
            n_threads: args.threads,
            n_gpu_layers: crate::flags::with_fit_target(
                preset
                    .gpu_layers
                    .or(args.gpu_layers)
                    .unwrap_or(if args.rpc.is_empty() {
                        wick::GpuLayers::Count(0)
                    } else {
                        wick::GpuLayers::ALL
                    }),
                args.fit_target,
            ),
            n_seq_max: preset.parallel.unwrap_or(args.parallel),
            queue_capacity: args.queue_size,
            kernels: kernels.parse().unwrap_or_default(),
            ram_cache_bytes: args.cache_ram,
            cache_types: {
                let [k, v] = args.cache_types.pair();
                [
                    preset.cache_type_k.unwrap_or(k),
                    preset.cache_type_v.unwrap_or(v),
                ]
            },
            spec_max: if spec_mode(args) == "off" {
                0
            } else {
                usize::from(args.spec_max)
            },
            ..ModelKwargs::default()
        });
    if let Some(reference) = reference {
        builder = builder.model_ref(reference);
    }
    if !args.rpc.is_empty() {
        builder = builder.rpc_servers(args.rpc.iter().cloned());
    }
    if !args.devices.is_empty() {
        builder = builder.devices(args.devices.iter().cloned());
    }
    if let Some(mmproj) = &args.mmproj {
        builder = builder.mmproj(mmproj);
    }
    if let Some(format) = args.output_format {
        builder = builder.output_format(format);
    }
    if let Some(template) = &preset.chat_template {
        builder = builder.chat_template(template.clone());
    }
    if let Some(draft) = &preset.model_draft {
        builder = builder.draft_model(wick::ModelSource::Reference(draft.clone()));
    }
    for (file, scale) in preset.loras().unwrap_or_default() {
        builder = builder.lora(file, scale);
    }
    if args.kv_cache_size > 0 {
        builder = builder.kv_cache(wick::KvCache {
            dir: args.kv_cache_dir.clone(),
            bytes: args.kv_cache_size,
        });
    }
    builder
}

/// The id a model is served under, and its other names.
fn ids(reference: Option<&str>) -> (String, Vec<String>) {
    let Some(reference) = reference else {
        return ("default".to_owned(), Vec::new());
    };
    let path = Path::new(reference);
    let is_file = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    match (is_file, path.file_stem().and_then(|s| s.to_str())) {
        (true, Some(stem)) if !reference.contains("://") => {
            (stem.to_owned(), vec![reference.to_owned()])
        }
        _ => (reference.to_owned(), Vec::new()),
    }
}

fn print_ready(local: SocketAddr, state: &AppState, auth: bool) {
    let listed = state.listings();
    let models: Vec<String> = listed.iter().map(|m| m.id.clone()).collect();
    let auth = if auth {
        " -H \"Authorization: Bearer $WICK_API_KEY\""
    } else {
        ""
    };
    if state.config().router {
        let loaded = listed.iter().filter(|m| m.llm.is_some()).count();
        println!(
            "wick serve: ready, serving {} models ({loaded} loaded; the others load when a \
             request names them): {}",
            models.len(),
            models.join(", ")
        );
    } else {
        println!("wick serve: ready, serving {}", models.join(", "));
    }
    println!("try:");
    println!(
        "  curl http://{local}/v1/chat/completions -H 'Content-Type: application/json'{auth} \\\n    -d '{{\"model\": \"{}\", \"messages\": [{{\"role\": \"user\", \"content\": \"What is the capital of France?\"}}]}}'",
        models.first().map_or("default", String::as_str)
    );
}

/// Resolves when `stop` turns true.
async fn wait_for(mut stop: tokio::sync::watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Turns SIGINT or SIGTERM into `stop`.
async fn signals(stop: tokio::sync::watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        } else {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    let _ = stop.send(true);
}
