//! Server-sent events exactly as clients read them: `data: <json>\n\n` per event and
//! `data: [DONE]\n\n` at the end.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_core::Stream;

/// One `data:` event carrying `value` on one line.
pub(crate) fn event(value: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The closing event.
pub(crate) fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// A `200 text/event-stream` response streaming `frames`.
pub(crate) fn response(frames: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    let body = Body::from_stream(futures_util::StreamExt::map(frames, Ok::<_, Infallible>));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
