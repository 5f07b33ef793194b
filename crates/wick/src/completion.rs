//! Completion streams: token-by-token items with the new text; the last item has it all.

use std::pin::Pin;
use std::task::{Context, Poll};

use wick_engine::{GenEvent, Generation, ScoredToken};

use crate::{CompletionResponse, Error, Result};

/// A completion streamed token by token: each item carries the text it adds
/// ([`CompletionResponse::delta`]); the last one (with `finish_reason` and `usage`) carries
/// the whole text too. Dropping it cancels the generation.
#[derive(Debug)]
pub struct CompletionStream {
    generation: Generation,
    /// The text so far, moved into the last item (`None`: nobody reads it, keep nothing).
    text: Option<String>,
    done: bool,
    prompt_tokens: u32,
}

impl CompletionStream {
    pub(crate) fn new(generation: Generation, prompt_tokens: u32) -> Self {
        CompletionStream {
            generation,
            text: Some(String::new()),
            done: false,
            prompt_tokens,
        }
    }

    /// The prompt's length in tokens, known before the first item (the last item's usage
    /// also says how many of them came from the prompt cache).
    pub fn prompt_tokens(&self) -> u32 {
        self.prompt_tokens
    }

    /// Stops keeping the text so far: the last item's `text` stays empty (a chat stream
    /// assembles its message from parsed events instead).
    pub(crate) fn without_text(mut self) -> Self {
        self.text = None;
        self
    }

    fn on(&mut self, event: Option<GenEvent>) -> Option<Result<CompletionResponse>> {
        if self.done {
            return None;
        }
        let response = match event {
            Some(GenEvent::Text(delta)) => self.delta(delta, Vec::new()),
            Some(GenEvent::TextWithLogprobs { text, tokens }) => self.delta(text, tokens),
            Some(GenEvent::Progress(progress)) => CompletionResponse {
                progress: Some(progress),
                ..CompletionResponse::default()
            },
            Some(GenEvent::Done(done)) => {
                self.done = true;
                CompletionResponse {
                    text: self.text.take().unwrap_or_default(),
                    delta: String::new(),
                    finish_reason: Some(done.finish_reason),
                    usage: Some(done.usage),
                    logprobs: Vec::new(),
                    stop_sequence: done.stop,
                    progress: None,
                }
            }
            Some(GenEvent::Error(e)) => {
                self.done = true;
                return Some(Err(e.into()));
            }
            None => {
                self.done = true;
                return Some(Err(wick_engine::EngineError::Stopped.into()));
            }
        };
        Some(Ok(response))
    }

    fn delta(&mut self, delta: String, logprobs: Vec<ScoredToken>) -> CompletionResponse {
        if let Some(text) = &mut self.text {
            text.push_str(&delta);
        }
        CompletionResponse {
            delta,
            logprobs,
            ..CompletionResponse::default()
        }
    }

    pub(crate) fn last_response(self) -> Result<CompletionResponse> {
        let mut whole = Whole::default();
        for item in self {
            whole.push(item?);
        }
        whole.finish()
    }
}

impl Iterator for CompletionStream {
    type Item = Result<CompletionResponse>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let event = self.generation.next();
        self.on(event)
    }
}

/// A whole completion gathered from its stream: the last item, with every item's tokens.
#[derive(Debug, Default)]
struct Whole {
    last: Option<CompletionResponse>,
    logprobs: Vec<ScoredToken>,
}

impl Whole {
    fn push(&mut self, mut item: CompletionResponse) {
        self.logprobs.append(&mut item.logprobs);
        self.last = Some(item);
    }

    fn finish(self) -> Result<CompletionResponse> {
        let mut last = self
            .last
            .ok_or(Error::Engine(wick_engine::EngineError::Stopped))?;
        last.logprobs = self.logprobs;
        Ok(last)
    }
}

/// A completion as an async `Stream` of responses; dropping it cancels the generation.
#[derive(Debug)]
pub struct AsyncCompletionStream(pub(crate) CompletionStream);

impl AsyncCompletionStream {
    /// [`CompletionStream::prompt_tokens`].
    pub fn prompt_tokens(&self) -> u32 {
        self.0.prompt_tokens()
    }

    /// The next response, or `None` after the last.
    pub async fn next(&mut self) -> Option<Result<CompletionResponse>> {
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *self), cx)).await
    }

    pub(crate) async fn last_response(mut self) -> Result<CompletionResponse> {
        let mut whole = Whole::default();
        while let Some(item) = self.next().await {
            whole.push(item?);
        }
        whole.finish()
    }
}

impl futures_core::Stream for AsyncCompletionStream {
    type Item = Result<CompletionResponse>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let inner = &mut self.0;
        if inner.done {
            return Poll::Ready(None);
        }
        match inner.generation.poll_recv(cx) {
            Poll::Ready(event) => Poll::Ready(inner.on(event)),
            Poll::Pending => Poll::Pending,
        }
    }
}
