//! What the router tests share: a served stub model, and requests sent through the router
//! with `oneshot`.

#![allow(dead_code)]

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;
use wick::{BackendConfig, Llm, StubBackend};
use wick_server::{AppState, ServedModel, ServerConfig};

/// A ready server state serving the stub backend as `stub` (and `aliases`), with a context of
/// `n_ctx` tokens and answers of at most `max_new_tokens`.
pub(crate) fn stub_state(
    config: ServerConfig,
    n_ctx: u32,
    max_new_tokens: u32,
    aliases: &[&str],
) -> AppState {
    let backend = StubBackend::new(&BackendConfig::new("stub").with_n_ctx(n_ctx)).unwrap();
    let builder = Llm::builder().max_new_tokens(max_new_tokens);
    let llm = Llm::from_backend(Box::new(backend), builder).unwrap();
    let state = AppState::new(config);
    state.add_model(ServedModel::new(
        "stub",
        aliases.iter().map(|a| (*a).to_owned()).collect(),
        llm,
    ));
    state.set_ready();
    state
}

/// The response to `req`: status, headers and body text.
pub(crate) async fn send(app: Router, req: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let response = app.oneshot(req).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
}

/// A JSON `POST` to `path`.
pub(crate) fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap()
}

/// The body as JSON, or as a JSON string when it is not JSON.
pub(crate) fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()))
}

/// `POST`s `body` to `path`: the status and the answer as JSON.
pub(crate) async fn post_json(app: Router, path: &str, body: &Value) -> (StatusCode, Value) {
    let (status, _, text) = send(app, post(path, body.to_string())).await;
    (status, json_of(&text))
}
