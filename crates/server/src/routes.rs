//! The router: OpenAI (chat, completions, Responses), Anthropic and Ollama routes, `/health`,
//! `/metrics`, auth, CORS, the body limit and the 404/405 (Anthropic-shaped under
//! `/v1/messages`, Ollama-shaped under `/api/`, OpenAI-shaped elsewhere).

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::error::Dialect;
use crate::{
    anthropic, chat, completions, cors, embeddings, lora, models, native, ollama, responses,
    tokens, ui, ApiError, AppState,
};

/// The whole HTTP API over `state`.
pub fn router(state: AppState) -> Router {
    let limit = state.config().max_body_bytes;
    let cors = state.config().cors_origin.clone();
    let router = Router::new()
        .route("/v1/chat/completions", post(chat::handler))
        .route("/v1/completions", post(completions::handler))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route("/v1/embeddings", post(embeddings::handler))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*id}", get(models::get))
        // llama-server's own names, without the `/v1` prefix: tools written for llama-server
        // call these. As in llama-server, `/completion(s)` is its native completion API.
        .route("/chat/completions", post(chat::handler))
        .route("/completion", post(native::handler))
        .route("/completions", post(native::handler))
        .route("/embeddings", post(embeddings::native))
        .route("/embedding", post(embeddings::native))
        .route("/models", get(models::list))
        .route("/models/load", post(models::load))
        .route("/models/unload", post(models::unload))
        .route("/responses", post(responses::create))
        .route("/v1/health", get(health))
        .route("/props", get(native::props))
        .route("/slots", get(native::slots))
        .route("/apply-template", post(native::apply_template))
        .route("/v1/rerank", post(native::rerank))
        .route("/rerank", post(native::rerank))
        .route("/v1/reranking", post(native::rerank))
        .route("/reranking", post(native::rerank))
        .route("/chat/completions/input_tokens", post(native::input_tokens))
        .route(
            "/v1/chat/completions/input_tokens",
            post(native::input_tokens),
        )
        .route("/lora-adapters", get(lora::list).post(lora::set))
        .route("/tokenize", post(tokens::tokenize))
        .route("/detokenize", post(tokens::detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        // A browser gets the chat page; Ollama's clients probe `/` (`HEAD` or `GET`) before
        // they call `/api/*` and get `Ollama is running`.
        .route("/", get(ui::root))
        .route("/ui/{name}", get(ui::asset));
    let mut router = ollama::routes(router)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(limit));
    if let Some(origin) = cors {
        let cors = std::sync::Arc::new(cors::Cors::parse(&origin));
        router = router.layer(middleware::from_fn_with_state(cors, cors::layer));
    }
    router.with_state(state)
}

/// Counts requests and errors, checks the `Host` and the API key, and answers a 503 in place
/// of any response not begun when the server gives up on requests in flight.
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    state.metrics().request();
    let dialect = Dialect::of_path(req.uri().path());
    let response = if let Err(e) = admit(&state, &req) {
        e.response_in(dialect)
    } else {
        tokio::select! {
            biased;
            () = state.cancelled() => ApiError::ShuttingDown.response_in(dialect),
            response = next.run(req) => response,
        }
    };
    if response.status().is_client_error() || response.status().is_server_error() {
        state.metrics().error();
    }
    response
}

/// The `Host` check (every route) and the API key (every route but `/health`, the chat
/// page's files and CORS preflights).
fn admit(state: &AppState, req: &Request) -> Result<(), ApiError> {
    if let Some(host) = req.headers().get(header::HOST) {
        let host = String::from_utf8_lossy(host.as_bytes());
        if !state.config().host_allowed(&host) {
            return Err(ApiError::HostNotAllowed {
                host: host.into_owned(),
            });
        }
    }
    // The page's files carry no data: the page asks for the key and sends it.
    let path = req.uri().path();
    let exempt = path == "/health" || ui::is_page(path) || req.method() == Method::OPTIONS;
    match &state.config().api_key {
        Some(key) if !exempt => {
            let given = api_key(req.headers()).unwrap_or("");
            if bool::from(given.as_bytes().ct_eq(key.as_bytes())) {
                Ok(())
            } else {
                Err(ApiError::Unauthorized)
            }
        }
        _ => Ok(()),
    }
}

/// The key of `Authorization: Bearer <key>` (the scheme in any case) or `x-api-key`.
fn api_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim());
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
}

async fn not_found(req: Request) -> Response {
    let path = req.uri().path();
    ApiError::NotFound {
        method: req.method().to_string(),
        path: path.to_owned(),
    }
    .response_in(Dialect::of_path(path))
}

async fn method_not_allowed(req: Request) -> Response {
    let path = req.uri().path();
    ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: path.to_owned(),
    }
    .response_in(Dialect::of_path(path))
}

/// `200 {"status": "ok"}` when ready, `503` while loading.
async fn health(State(state): State<AppState>) -> Response {
    if state.is_ready() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        ApiError::Loading.into_response()
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let models = state.models();
    let inflight = models.iter().map(|m| m.llm.inflight()).sum();
    let mut text = state.metrics().render(inflight, state.config().parallel);
    let caches: Vec<(&str, &wick::CacheStats)> = models
        .iter()
        .map(|m| (m.id.as_str(), m.llm.cache_stats()))
        .collect();
    crate::metrics::render_cache(&mut text, &caches);
    crate::metrics::render_models(&mut text, &state.listings());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
