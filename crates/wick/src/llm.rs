//! [`Llm`]: complete, chat and stream, sync and async, over a shared engine.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use wick_backend::{Backend, BackendConfig};
use wick_engine::{
    ChatFormat, EngineConfig, GenEvent, GenerateRequest, Generation, RenderedPrompt,
};
use wick_parse::{Format, ToolSchemas};
use wick_template::{ChatTemplate, NamedTemplate, RenderRequest};
use wick_types::{ChatRequest, Message, Role, SamplerOpts, TokenId};

use crate::registry::{self, Loaded, ModelKey};
use crate::{
    AsyncChatStream, ChatResponse, ChatStream, CompletionResponse, Error, LlmBuilder, LlmMetadata,
    Result,
};

/// A loaded model with its generation settings. Cheap to clone; clones share the model.
#[derive(Debug, Clone)]
pub struct Llm {
    loaded: Arc<Loaded>,
    settings: Arc<LlmBuilder>,
}

/// What to turn into prompt tokens.
enum Prompt {
    /// Text that already is a formatted prompt: special-token text becomes control tokens.
    Formatted(String),
    /// A conversation, formatted with the model's chat template.
    Chat(Box<ChatRequest>),
}

impl Llm {
    /// Starts building an `Llm`; see [`LlmBuilder`] for every setting and default.
    pub fn builder() -> LlmBuilder {
        LlmBuilder::default()
    }

    pub(crate) fn load(settings: LlmBuilder) -> Result<Llm> {
        let path = crate::source::resolve(&settings.source)?;
        let key = ModelKey {
            path: registry::canonical(&path),
            context_window: settings.context_window,
            kwargs: settings.model,
        };
        let loaded = registry::get_or_load(key, load_model)?;
        Ok(Llm {
            loaded,
            settings: Arc::new(settings),
        })
    }

    /// Requests generating or queued on this `Llm`'s model right now (all `Llm`s sharing it).
    pub fn inflight(&self) -> usize {
        self.loaded.engine.inflight()
    }

    /// Facts about the model: context window, output budget, chat and tool support, name.
    pub fn metadata(&self) -> LlmMetadata {
        let info = self.loaded.engine.info();
        LlmMetadata {
            context_window: info.n_ctx,
            num_output: self.settings.max_new_tokens,
            is_chat_model: info.chat_template.is_some()
                || self.settings.messages_to_prompt.is_some(),
            is_function_calling_model: self
                .settings
                .output_format
                .unwrap_or(self.loaded.chat.format())
                != Format::ContentOnly,
            model_name: info.name.clone(),
        }
    }

    /// Completes `prompt`. With `formatted`, the prompt is sent as it is (its special-token
    /// text becomes control tokens); otherwise it goes through `completion_to_prompt`, or
    /// the model's chat template as one user message.
    ///
    /// # Errors
    ///
    /// A prompt longer than the context window, a busy engine, a backend failure.
    pub fn complete(&self, prompt: &str, formatted: bool) -> Result<CompletionResponse> {
        self.stream_complete(prompt, formatted)?.last_response()
    }

    /// [`Llm::complete`], token by token as they are generated.
    ///
    /// # Errors
    ///
    /// As [`Llm::complete`].
    pub fn stream_complete(&self, prompt: &str, formatted: bool) -> Result<CompletionStream> {
        let prompt = self.completion_prompt(prompt, formatted);
        let chat = Arc::clone(&self.loaded.chat);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self
            .loaded
            .engine
            .with_backend(move |b| tokenize(b, &chat, &prompt))??;
        self.start(rendered.tokens, templated)
    }

    /// [`Llm::complete`] as a future.
    ///
    /// # Errors
    ///
    /// As [`Llm::complete`].
    pub async fn acomplete(&self, prompt: &str, formatted: bool) -> Result<CompletionResponse> {
        self.astream_complete(prompt, formatted)
            .await?
            .last_response()
            .await
    }

    /// [`Llm::stream_complete`] as a `Stream` that yields each token as it is produced.
    ///
    /// # Errors
    ///
    /// As [`Llm::complete`].
    pub async fn astream_complete(
        &self,
        prompt: &str,
        formatted: bool,
    ) -> Result<AsyncCompletionStream> {
        let prompt = self.completion_prompt(prompt, formatted);
        let chat = Arc::clone(&self.loaded.chat);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self
            .loaded
            .engine
            .with_backend_async(move |b| tokenize(b, &chat, &prompt))
            .await??;
        Ok(AsyncCompletionStream(
            self.start(rendered.tokens, templated)?,
        ))
    }

    /// Answers a conversation with the model's chat template; the output parser of the
    /// template's format splits reasoning, content and tool calls.
    ///
    /// # Errors
    ///
    /// As [`Llm::complete`], and the template's own error.
    pub fn chat(&self, messages: &[Message]) -> Result<ChatResponse> {
        self.chat_request(&ChatRequest::new(messages.to_vec()))
    }

    /// [`Llm::chat`] with a whole request: system prompt, tools, generation prompt.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub fn chat_request(&self, request: &ChatRequest) -> Result<ChatResponse> {
        self.stream_chat_request(request)?.last_response()
    }

    /// [`Llm::chat`], token by token as they are generated.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub fn stream_chat(&self, messages: &[Message]) -> Result<ChatStream> {
        self.stream_chat_request(&ChatRequest::new(messages.to_vec()))
    }

    /// [`Llm::chat_request`], token by token as they are generated.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub fn stream_chat_request(&self, request: &ChatRequest) -> Result<ChatStream> {
        let prompt = self.chat_prompt(request);
        let chat = Arc::clone(&self.loaded.chat);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self
            .loaded
            .engine
            .with_backend(move |b| tokenize(b, &chat, &prompt))??;
        let (format, tools) = self.output_format(request, templated);
        let inner = self.start(rendered.tokens, templated)?;
        Ok(ChatStream::new(
            inner,
            format,
            tools,
            rendered.thinking_forced_open,
        ))
    }

    /// [`Llm::chat`] as a future.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub async fn achat(&self, messages: &[Message]) -> Result<ChatResponse> {
        self.astream_chat_request(&ChatRequest::new(messages.to_vec()))
            .await?
            .last_response()
            .await
    }

    /// [`Llm::stream_chat`] as a `Stream` that yields each token as it is produced.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub async fn astream_chat(&self, messages: &[Message]) -> Result<AsyncChatStream> {
        self.astream_chat_request(&ChatRequest::new(messages.to_vec()))
            .await
    }

    /// [`Llm::stream_chat_request`] as a `Stream` that yields each token as it is produced.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub async fn astream_chat_request(&self, request: &ChatRequest) -> Result<AsyncChatStream> {
        let prompt = self.chat_prompt(request);
        let chat = Arc::clone(&self.loaded.chat);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self
            .loaded
            .engine
            .with_backend_async(move |b| tokenize(b, &chat, &prompt))
            .await??;
        let (format, tools) = self.output_format(request, templated);
        let inner = AsyncCompletionStream(self.start(rendered.tokens, templated)?);
        Ok(AsyncChatStream::new(
            inner,
            format,
            tools,
            rendered.thinking_forced_open,
        ))
    }

    /// The output format and tool schemas for a chat: the template's format when the
    /// template formatted the prompt, plain content otherwise.
    fn output_format(&self, request: &ChatRequest, templated: bool) -> (Format, ToolSchemas) {
        let format = match (self.settings.output_format, templated) {
            (Some(format), _) => format,
            (None, true) => self.loaded.chat.format(),
            (None, false) => Format::ContentOnly,
        };
        (format, ToolSchemas::from_tools(&request.tools))
    }

    fn completion_prompt(&self, prompt: &str, formatted: bool) -> Prompt {
        match (&self.settings.completion_to_prompt, formatted) {
            (_, true) => Prompt::Formatted(prompt.to_owned()),
            (Some(format), false) => Prompt::Formatted(format(prompt)),
            (None, false) => Prompt::Chat(Box::new(ChatRequest::new(vec![Message::new(
                Role::User,
                prompt,
            )]))),
        }
    }

    fn chat_prompt(&self, request: &ChatRequest) -> Prompt {
        match &self.settings.messages_to_prompt {
            Some(format) => Prompt::Formatted(format(&request.effective_messages())),
            None => Prompt::Chat(Box::new(request.clone())),
        }
    }

    /// Submits `prompt`; a `templated` prompt also stops at the template's end-of-turn texts.
    fn start(&self, prompt: Vec<TokenId>, templated: bool) -> Result<CompletionStream> {
        let settings = &self.settings;
        let mut stop = settings.stop.clone();
        if templated {
            stop.extend(self.loaded.chat.stops().iter().cloned());
        }
        let request = GenerateRequest {
            prompt,
            max_tokens: Some(settings.max_new_tokens),
            sampler: SamplerOpts {
                temperature: settings.temperature,
                ..settings.sampling.clone()
            },
            stop,
        };
        let generation = self.loaded.engine.submit(request)?;
        Ok(CompletionStream {
            generation,
            text: String::new(),
            done: false,
        })
    }
}

fn tokenize(
    backend: &mut dyn Backend,
    chat: &ChatFormat,
    prompt: &Prompt,
) -> Result<RenderedPrompt> {
    Ok(match prompt {
        Prompt::Formatted(text) => RenderedPrompt {
            tokens: backend.tokenize_prompt(text, true)?,
            thinking_forced_open: false,
        },
        Prompt::Chat(request) => chat.render(backend, RenderRequest::from(request.as_ref()))?,
    })
}

#[cfg(feature = "llama")]
fn load_model(key: &ModelKey) -> Result<Loaded> {
    let config = BackendConfig::new(&key.path)
        .with_n_ctx(key.context_window)
        .with_n_seq_max(key.kwargs.n_seq_max)
        .with_n_batch(key.kwargs.n_batch)
        .with_n_threads(key.kwargs.n_threads)
        .with_n_gpu_layers(key.kwargs.n_gpu_layers);
    let backend = wick_llama::LlamaBackend::load(&config)?;
    let engine = wick_engine::Engine::start(Box::new(backend), EngineConfig::default())?;
    let chat = engine.with_backend(|b| -> Result<ChatFormat> {
        match ChatFormat::from_model(b)? {
            Some(format) => Ok(format),
            // llama.cpp's default when a model has no template.
            None => Ok(ChatFormat::new(
                ChatTemplate::Named(NamedTemplate::Chatml),
                b,
            )?),
        }
    })??;
    Ok(Loaded {
        engine,
        chat: Arc::new(chat),
    })
}

#[cfg(not(feature = "llama"))]
fn load_model(key: &ModelKey) -> Result<Loaded> {
    Err(Error::Model {
        reference: key.path.display().to_string(),
        reason: "wick was built without a backend (enable the `llama` feature)".into(),
    })
}

/// A completion streamed token by token; each item carries the new text and all text so far.
/// Dropping it cancels the generation.
#[derive(Debug)]
pub struct CompletionStream {
    generation: Generation,
    text: String,
    done: bool,
}

impl CompletionStream {
    fn on(&mut self, event: Option<GenEvent>) -> Option<Result<CompletionResponse>> {
        if self.done {
            return None;
        }
        let response = match event {
            Some(GenEvent::Text(delta)) => {
                self.text.push_str(&delta);
                CompletionResponse {
                    text: self.text.clone(),
                    delta,
                    ..CompletionResponse::default()
                }
            }
            Some(GenEvent::Done(done)) => {
                self.done = true;
                CompletionResponse {
                    text: self.text.clone(),
                    delta: String::new(),
                    finish_reason: Some(done.finish_reason),
                    usage: Some(done.usage),
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

    fn last_response(self) -> Result<CompletionResponse> {
        let mut last = None;
        for item in self {
            last = Some(item?);
        }
        last.ok_or(Error::Engine(wick_engine::EngineError::Stopped))
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

/// A completion as an async `Stream` of responses; dropping it cancels the generation.
#[derive(Debug)]
pub struct AsyncCompletionStream(CompletionStream);

impl AsyncCompletionStream {
    /// The next response, or `None` after the last.
    pub async fn next(&mut self) -> Option<Result<CompletionResponse>> {
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *self), cx)).await
    }

    async fn last_response(mut self) -> Result<CompletionResponse> {
        let mut last = None;
        while let Some(item) = self.next().await {
            last = Some(item?);
        }
        last.ok_or(Error::Engine(wick_engine::EngineError::Stopped))
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
