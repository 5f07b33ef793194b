//! Chat answers: the output parser of the template's format runs on the token stream, so
//! every item carries typed reasoning, content and tool-call events; the last one carries the
//! whole message.

use std::pin::Pin;
use std::task::{Context, Poll};

use wick_engine::{PromptProgress, ScoredToken};
use wick_parse::{EndedBy, Event, Format, ParseOptions, ParsedMessage, Parser, ToolSchemas};
use wick_types::{FinishReason, Usage};

use crate::{AsyncCompletionStream, CompletionResponse, CompletionStream, Result};

/// A whole answer to a chat, or one item of a streamed answer.
///
/// A stream item carries what it adds ([`events`](Self::events), [`logprobs`](Self::logprobs)),
/// never the message so far: a consumer that needs the message mid-stream accumulates the
/// events itself ([`ParsedMessage::extend`]). The last item of a stream (the one with
/// `finish_reason` and `usage`) is the whole answer: it carries [`message`](Self::message),
/// assembled once, at the end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    /// The whole assistant message (content, reasoning, tool calls): set on a whole response
    /// and on the last item of a stream; empty on the items before it.
    pub message: ParsedMessage,
    /// What this item added, as typed events (content and reasoning text, tool-call starts
    /// and argument fragments, the end); empty for a whole response.
    pub events: Vec<Event>,
    /// How generation ended (`tool_calls` when the message calls a tool): last item only.
    pub finish_reason: Option<FinishReason>,
    /// Token accounting: last item only.
    pub usage: Option<Usage>,
    /// With [`crate::GenerateOptions::logprobs`]: the generated tokens this item completes,
    /// in order (a whole response: all of them). They cover every generated token, reasoning
    /// and tool-call text included, not only the message's content. Empty otherwise.
    pub logprobs: Vec<ScoredToken>,
    /// The stop string that ended the answer, when one did: last item only.
    pub stop_sequence: Option<String>,
    /// With [`crate::GenerateOptions::progress`]: how far the prompt is computed, on a
    /// stream item that carries nothing else. `None` otherwise.
    pub progress: Option<PromptProgress>,
}

impl ChatResponse {
    /// The content text of the whole message (empty on a stream item before the last).
    pub fn text(&self) -> &str {
        &self.message.content
    }
}

/// How an answer's output is read: its format, the request's tools, and whether it is a
/// forced call (then nothing outside the call is content).
#[derive(Debug)]
pub(crate) struct OutputPlan {
    pub(crate) format: Format,
    pub(crate) tools: ToolSchemas,
    pub(crate) forced_call: bool,
}

/// Runs the output parser over completion items.
#[derive(Debug)]
struct ChatParser {
    parser: Parser,
    message: ParsedMessage,
}

impl ChatParser {
    fn new(output: OutputPlan, thinking_forced_open: bool) -> Self {
        let options = ParseOptions::new()
            .tools(output.tools)
            .thinking_forced_open(thinking_forced_open)
            .forced_call(output.forced_call);
        ChatParser {
            parser: Parser::new(output.format, options),
            message: ParsedMessage::default(),
        }
    }

    fn on(&mut self, item: Result<CompletionResponse>) -> Result<ChatResponse> {
        let item = item?;
        let mut events = self.parser.feed(&item.delta);
        let mut finish_reason = None;
        if let Some(reason) = item.finish_reason {
            let ended_by = if reason == FinishReason::Length {
                EndedBy::Length
            } else {
                EndedBy::Stop
            };
            events.extend(self.parser.finish(ended_by));
            finish_reason = events.iter().find_map(|e| match e {
                Event::End { finish_reason } => Some(*finish_reason),
                _ => None,
            });
            finish_reason.get_or_insert(reason);
        }
        self.message.extend(&events);
        // The whole message goes out once, with the last item; the others carry events only.
        let message = if finish_reason.is_some() {
            std::mem::take(&mut self.message)
        } else {
            ParsedMessage::default()
        };
        Ok(ChatResponse {
            message,
            events,
            finish_reason,
            usage: item.usage,
            logprobs: item.logprobs,
            stop_sequence: item.stop_sequence,
            progress: item.progress,
        })
    }
}

/// The whole answer from a stream's last item (its events are the stream's, not the answer's)
/// and every item's tokens.
fn whole(last: Option<ChatResponse>, logprobs: Vec<ScoredToken>) -> Result<ChatResponse> {
    let mut last = last.ok_or(crate::Error::Engine(wick_engine::EngineError::Stopped))?;
    last.events.clear();
    last.logprobs = logprobs;
    Ok(last)
}

/// A chat answer streamed token by token. Dropping it cancels the generation.
#[derive(Debug)]
pub struct ChatStream {
    inner: CompletionStream,
    parser: ChatParser,
}

impl ChatStream {
    pub(crate) fn new(
        inner: CompletionStream,
        output: OutputPlan,
        thinking_forced_open: bool,
    ) -> Self {
        ChatStream {
            inner: inner.without_text(),
            parser: ChatParser::new(output, thinking_forced_open),
        }
    }

    pub(crate) fn last_response(self) -> Result<ChatResponse> {
        let (mut last, mut logprobs) = (None, Vec::new());
        for item in self {
            let mut item = item?;
            logprobs.append(&mut item.logprobs);
            last = Some(item);
        }
        whole(last, logprobs)
    }
}

impl Iterator for ChatStream {
    type Item = Result<ChatResponse>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next()?;
        Some(self.parser.on(item))
    }
}

/// A chat answer as an async `Stream`; dropping it cancels the generation.
#[derive(Debug)]
pub struct AsyncChatStream {
    inner: AsyncCompletionStream,
    parser: ChatParser,
}

impl AsyncChatStream {
    pub(crate) fn new(
        inner: AsyncCompletionStream,
        output: OutputPlan,
        thinking_forced_open: bool,
    ) -> Self {
        AsyncChatStream {
            inner: AsyncCompletionStream(inner.0.without_text()),
            parser: ChatParser::new(output, thinking_forced_open),
        }
    }

    /// The prompt's length in tokens, known before the first item.
    pub fn prompt_tokens(&self) -> u32 {
        self.inner.prompt_tokens()
    }

    /// The next response, or `None` after the last.
    pub async fn next(&mut self) -> Option<Result<ChatResponse>> {
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *self), cx)).await
    }

    pub(crate) async fn last_response(mut self) -> Result<ChatResponse> {
        let (mut last, mut logprobs) = (None, Vec::new());
        while let Some(item) = self.next().await {
            let mut item = item?;
            logprobs.append(&mut item.logprobs);
            last = Some(item);
        }
        whole(last, logprobs)
    }
}

impl futures_core::Stream for AsyncChatStream {
    type Item = Result<ChatResponse>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match futures_core::Stream::poll_next(Pin::new(&mut this.inner), cx) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(this.parser.on(item))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
