//! Server-sent events exactly as clients read them: `data: <json>\n\n` per event and
//! `data: [DONE]\n\n` at the end; a `: keep-alive` comment (which every SSE client skips)
//! whenever nothing else was sent for a while, so a client with a read timeout does not give
//! up on a request that waits in the queue or behind a long prefill.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

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

/// How long a stream may stay silent before a keep-alive comment goes out.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A `200 text/event-stream` response streaming `frames`, with keep-alive comments in the
/// silences.
pub(crate) fn response(frames: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    let frames = KeepAlive::new(frames, KEEP_ALIVE);
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

/// `frames`, with a `: keep-alive` comment after every `period` without a frame.
struct KeepAlive<S> {
    frames: Pin<Box<S>>,
    timer: Pin<Box<tokio::time::Sleep>>,
    period: Duration,
}

impl<S: Stream<Item = Bytes>> KeepAlive<S> {
    fn new(frames: S, period: Duration) -> Self {
        KeepAlive {
            frames: Box::pin(frames),
            timer: Box::pin(tokio::time::sleep(period)),
            period,
        }
    }

    fn rearm(&mut self) {
        let next = tokio::time::Instant::now() + self.period;
        self.timer.as_mut().reset(next);
    }
}

impl<S: Stream<Item = Bytes>> Stream for KeepAlive<S> {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        match self.frames.as_mut().poll_next(cx) {
            Poll::Ready(Some(frame)) => {
                self.rearm();
                Poll::Ready(Some(frame))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.rearm();
                    Poll::Ready(Some(Bytes::from_static(b": keep-alive\n\n")))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_gets_keep_alive_comments_and_ends_with_its_frames() {
        // Two frames: one after 25 s of silence, one right after it.
        let frames = futures_util::stream::unfold(0, |n| async move {
            match n {
                0 => {
                    tokio::time::sleep(Duration::from_secs(25)).await;
                    Some((Bytes::from_static(b"data: 1\n\n"), 1))
                }
                1 => Some((done(), 2)),
                _ => None,
            }
        });
        let out: Vec<Bytes> = KeepAlive::new(frames, Duration::from_secs(10))
            .collect()
            .await;
        let text: Vec<&[u8]> = out.iter().map(|b| &b[..]).collect();
        assert_eq!(
            text,
            [
                &b": keep-alive\n\n"[..],
                b": keep-alive\n\n",
                b"data: 1\n\n",
                b"data: [DONE]\n\n"
            ]
        );
    }
}
