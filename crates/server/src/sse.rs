//! Server-sent events exactly as clients read them: `data: <json>\n\n` per event and
//! `data: [DONE]\n\n` at the end.

use std::convert::Infallible;
use std::future::Future;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_core::Stream;

/// One `data:` event carrying `value` as compact JSON, on one line (JSON escapes newlines).
pub(crate) fn event(value: &impl serde::Serialize) -> Bytes {
    let mut frame = b"data: ".to_vec();
    serde_json::to_writer(&mut frame, value)
        .expect("invariant: wire objects have string keys and serialize infallibly");
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
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

/// A streamed answer as a sequence of steps, each giving the frames of its next item.
pub(crate) trait Run: Send + 'static {
    /// The frames of the next item; `None` after the end.
    fn next_frames(&mut self) -> impl Future<Output = Option<Vec<Bytes>>> + Send;
}

/// Every frame of `run`, step after step.
pub(crate) fn frames(run: impl Run) -> impl Stream<Item = Bytes> + Send + 'static {
    let steps = futures_util::stream::unfold(run, |mut run| async move {
        let frames = run.next_frames().await?;
        Some((futures_util::stream::iter(frames), run))
    });
    futures_util::StreamExt::flatten(steps)
}
