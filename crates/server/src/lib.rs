//! wick's OpenAI-, Anthropic- and Ollama-compatible HTTP API: [`router`] over an [`AppState`]
//! that holds the served models. Chat and text completions (whole or as server-sent events),
//! Anthropic Messages and their token count, OpenAI Responses (with stored responses),
//! llama-server's native `/completion`, Ollama's
//! `/api/*` routes (chat and generate as
//! NDJSON, embeddings, the model routes), embeddings, models, tokenize/detokenize, `/health`
//! and Prometheus `/metrics`; API-key auth, CORS, a body limit, and one mapping from every
//! error to a status and an OpenAI, Anthropic or Ollama error body ([`ApiError`]). [`serve`]
//! takes connections with the limits a server facing untrusted clients needs (header and
//! idle deadlines, a connection cap) and shuts down gracefully.
//!
//! ```no_run
//! use wick_server::{router, serve, AppState, ListenConfig, ServedModel, ServerConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let llm = wick::Llm::builder().build()?;
//! let state = AppState::new(ServerConfig::default());
//! state.add_model(ServedModel::new("smollm2", vec![], llm));
//! state.set_ready();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // Resolves when the server should stop taking connections (a signal, a channel…).
//! let shutdown = std::future::pending::<()>();
//! serve(listener, router(state), ListenConfig::default(), shutdown).await;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod anthropic;
mod chat;
mod completions;
mod cors;
mod embeddings;
mod error;
mod extract;
mod listen;
mod logprobs;
mod lora;
mod media;
mod metrics;
mod models;
mod native;
mod objects;
mod ollama;
mod pool;
mod prompts;
mod responses;
mod routes;
mod sse;
mod state;
mod telemetry;
mod tokens;
mod ui;
mod validate;
mod wire;

pub use error::ApiError;
pub use extract::check_request;
pub use listen::{serve, ListenConfig};
pub use metrics::Metrics;
pub use pool::{KeepAlive, Listing, Loader, ModelSpec, ModelStatus, PoolConfig, ServedModel};
pub use routes::router;
pub use state::{AppState, MediaUrls, SamplingDefaults, ServerConfig, StoreModels};
