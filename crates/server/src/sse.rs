//! Server-sent events exactly as clients read them. OpenAI's: `data: <json>\n\n` per event and
//! `data: [DONE]\n\n` at the end, with a `: keep-alive` comment (which every SSE client skips)
//! whenever nothing else was sent for a while, so a client with a read timeout does not give
//! up on a request that waits in the queue or behind a long prefill. Anthropic's: `event:
//! <name>\ndata: <json>\n\n` pairs, with a `ping` event in the silences. When the server gives
//! up on answers in flight (a shutdown whose grace period ran out), a stream ends with an
//! error event (and OpenAI's `[DONE]`), never cut mid-body.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_core::Stream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::error::Dialect;
use crate::ApiError;

/// One `data:` event carrying `value` as compact JSON, on one line (JSON escapes newlines).
pub(crate) fn event(value: &impl serde::Serialize) -> Bytes {
    let mut frame = b"data: ".to_vec();
    serde_json::to_writer(&mut frame, value)
        .expect("invariant: wire objects have string keys and serialize infallibly");
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// One named event (`event: <name>`) carrying `value` as compact JSON: Anthropic's framing.
pub(crate) fn named(name: &str, value: &impl serde::Serialize) -> Bytes {
    let mut frame = format!("event: {name}\ndata: ").into_bytes();
    serde_json::to_writer(&mut frame, value)
        .expect("invariant: wire objects have string keys and serialize infallibly");
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// Anthropic's `ping` event.
pub(crate) fn ping() -> Bytes {
    Bytes::from_static(b"event: ping\ndata: {\"type\":\"ping\"}\n\n")
}

/// One NDJSON line carrying `value` as compact JSON: Ollama's framing.
pub(crate) fn line(value: &impl serde::Serialize) -> Bytes {
    let mut frame = Vec::new();
    serde_json::to_writer(&mut frame, value)
        .expect("invariant: wire objects have string keys and serialize infallibly");
    frame.push(b'\n');
    Bytes::from(frame)
}

/// The frames that end a stream on `error`, in `dialect`'s framing; `sent` is the number of
/// events sent before (the Responses API numbers its events; the other dialects do not).
pub(crate) fn error_tail(error: &ApiError, dialect: Dialect, sent: u64) -> Vec<Bytes> {
    match dialect {
        Dialect::OpenAi => vec![event(&error.body()), done()],
        Dialect::Anthropic => vec![named("error", &error.anthropic_body())],
        Dialect::Responses => vec![named("error", &error.responses_event(sent))],
        Dialect::Ollama => vec![line(&error.ollama_body())],
    }
}

/// The closing event.
pub(crate) fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// How long a stream may stay silent before a keep-alive comment goes out.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A `200 text/event-stream` response streaming `frames`, with keep-alives in the silences
/// (comments, or Anthropic's `ping`), ended early with `dialect`'s error frames when `shutdown`
/// is cancelled. Ollama's streams are `application/x-ndjson`, without keep-alives (NDJSON
/// has no comment line, and Ollama's clients parse every line).
pub(crate) fn response(
    frames: impl Stream<Item = Bytes> + Send + 'static,
    shutdown: CancellationToken,
    dialect: Dialect,
) -> Response {
    let frames = KeepAlive::new(frames, KEEP_ALIVE, shutdown).dialect(dialect);
    let body = Body::from_stream(futures_util::StreamExt::map(frames, Ok::<_, Infallible>));
    let content_type = match dialect {
        Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses => "text/event-stream",
        Dialect::Ollama => "application/x-ndjson",
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
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

/// An answer's stream with its first item put back in front. Handlers take the first item
/// before they answer (a failure before it is still an HTTP error, not a broken stream); the
/// streamed answer then starts from it.
pub(crate) type Resumed<S> = futures_util::stream::Chain<
    futures_util::stream::Iter<std::option::IntoIter<<S as Stream>::Item>>,
    S,
>;

/// `rest` with `first` in front of it.
pub(crate) fn resume<S: Stream>(first: S::Item, rest: S) -> Resumed<S> {
    futures_util::StreamExt::chain(futures_util::stream::iter(Some(first)), rest)
}

/// Every frame of `run`, step after step.
pub(crate) fn frames(run: impl Run) -> impl Stream<Item = Bytes> + Send + 'static {
    let steps = futures_util::stream::unfold(run, |mut run| async move {
        let frames = run.next_frames().await?;
        Some((futures_util::stream::iter(frames), run))
    });
    futures_util::StreamExt::flatten(steps)
}

/// `frames`, with a `: keep-alive` comment after every `period` without a frame; when
/// `shutdown` is cancelled, `frames` is dropped (which cancels its generation) and the stream
/// ends with an error event and `[DONE]`.
struct KeepAlive<S> {
    /// `None` once cut by the shutdown.
    frames: Option<Pin<Box<S>>>,
    timer: Pin<Box<tokio::time::Sleep>>,
    period: Duration,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The closing frames of a cut stream, still to send.
    tail: std::vec::IntoIter<Bytes>,
    dialect: Dialect,
    /// Frames sent, keep-alives not counted (a Responses stream's next `sequence_number`:
    /// its frames are one event each).
    sent: u64,
}

impl<S: Stream<Item = Bytes>> KeepAlive<S> {
    fn new(frames: S, period: Duration, shutdown: CancellationToken) -> Self {
        KeepAlive {
            frames: Some(Box::pin(frames)),
            timer: Box::pin(tokio::time::sleep(period)),
            period,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            tail: Vec::new().into_iter(),
            dialect: Dialect::OpenAi,
            sent: 0,
        }
    }

    /// The same, with `dialect`'s keep-alive and closing frames.
    fn dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    fn keep_alive(&self) -> Option<Bytes> {
        match self.dialect {
            Dialect::OpenAi | Dialect::Responses => Some(Bytes::from_static(b": keep-alive\n\n")),
            Dialect::Anthropic => Some(ping()),
            Dialect::Ollama => None,
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
        if self.frames.is_some() && self.shutdown.as_mut().poll(cx).is_ready() {
            self.frames = None;
            self.tail = error_tail(&ApiError::ShuttingDown, self.dialect, self.sent).into_iter();
        }
        let Some(frames) = self.frames.as_mut() else {
            return Poll::Ready(self.tail.next());
        };
        match frames.as_mut().poll_next(cx) {
            Poll::Ready(Some(frame)) => {
                self.sent += 1;
                self.rearm();
                Poll::Ready(Some(frame))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.rearm();
                    if let Some(frame) = self.keep_alive() {
                        Poll::Ready(Some(frame))
                    } else {
                        // Polled once more so the rearmed timer registers its waker.
                        let _ = self.timer.as_mut().poll(cx);
                        Poll::Pending
                    }
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
        let out: Vec<Bytes> =
            KeepAlive::new(frames, Duration::from_secs(10), CancellationToken::new())
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

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_stream_ends_with_an_error_event_and_done() {
        let shutdown = CancellationToken::new();
        let frames = futures_util::stream::iter([Bytes::from_static(b"data: 1\n\n")])
            .chain(futures_util::stream::pending());
        let mut stream = KeepAlive::new(frames, Duration::from_secs(10), shutdown.clone());
        assert_eq!(stream.next().await.unwrap(), &b"data: 1\n\n"[..]);
        shutdown.cancel();
        let rest: Vec<Bytes> = stream.collect().await;
        assert_eq!(rest.len(), 2, "{rest:?}");
        let error = std::str::from_utf8(&rest[0]).unwrap();
        assert!(
            error.starts_with("data: {\"error\"") && error.contains("server_shutting_down"),
            "{error}"
        );
        assert_eq!(rest[1], done());
    }

    #[tokio::test(start_paused = true)]
    async fn anthropic_streams_ping_in_silences_and_end_with_an_error_event() {
        let shutdown = CancellationToken::new();
        let frames = futures_util::stream::iter([named("message_start", &1)])
            .chain(futures_util::stream::pending());
        let mut stream = KeepAlive::new(frames, Duration::from_secs(10), shutdown.clone())
            .dialect(Dialect::Anthropic);
        assert_eq!(
            stream.next().await.unwrap(),
            &b"event: message_start\ndata: 1\n\n"[..]
        );
        assert_eq!(stream.next().await.unwrap(), ping());
        shutdown.cancel();
        let rest: Vec<Bytes> = stream.collect().await;
        assert_eq!(rest.len(), 1, "{rest:?}");
        let error = std::str::from_utf8(&rest[0]).unwrap();
        assert!(
            error.starts_with("event: error\ndata: {\"type\":\"error\",\"error\":{")
                && error.contains("overloaded_error"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ollama_streams_stay_silent_in_silences_and_end_with_an_error_line() {
        let shutdown = CancellationToken::new();
        let frames = futures_util::stream::iter([line(&1)])
            .chain(futures_util::stream::once(async {
                tokio::time::sleep(Duration::from_secs(25)).await;
                line(&2)
            }))
            .chain(futures_util::stream::pending());
        let mut stream = KeepAlive::new(frames, Duration::from_secs(10), shutdown.clone())
            .dialect(Dialect::Ollama);
        assert_eq!(stream.next().await.unwrap(), &b"1\n"[..]);
        // 25 s of silence: no keep-alive line (NDJSON has none), then the next line.
        assert_eq!(stream.next().await.unwrap(), &b"2\n"[..]);
        shutdown.cancel();
        let rest: Vec<Bytes> = stream.collect().await;
        assert_eq!(rest.len(), 1, "{rest:?}");
        let error: serde_json::Value = serde_json::from_slice(&rest[0]).unwrap();
        assert!(error["error"].as_str().unwrap().contains("shutting down"));
        assert!(rest[0].ends_with(b"\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_responses_stream_numbers_its_error_event_after_the_frames_sent() {
        let shutdown = CancellationToken::new();
        let frames = futures_util::stream::iter([named("a", &1), named("b", &2)])
            .chain(futures_util::stream::pending());
        let mut stream = KeepAlive::new(frames, Duration::from_secs(10), shutdown.clone())
            .dialect(Dialect::Responses);
        stream.next().await.unwrap();
        stream.next().await.unwrap();
        // A keep-alive is a comment, not an event: it is not numbered.
        assert_eq!(stream.next().await.unwrap(), &b": keep-alive\n\n"[..]);
        shutdown.cancel();
        let rest: Vec<Bytes> = stream.collect().await;
        assert_eq!(rest.len(), 1, "{rest:?}");
        let text = std::str::from_utf8(&rest[0]).unwrap();
        let data = text
            .strip_prefix("event: error\ndata: ")
            .expect("a named error event");
        let error: serde_json::Value = serde_json::from_str(data.trim_end()).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["sequence_number"], 2);
        assert_eq!(error["code"], "server_shutting_down");
    }
}
