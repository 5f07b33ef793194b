//! [`Llm`]: complete, chat and stream, sync and async, over a shared engine.

use crate::chat::OutputPlan;
use std::sync::Arc;

use serde_json::Value;
use wick_backend::Tokenizer;
use wick_engine::{ChatFormat, GenerateRequest, RenderedPrompt};
use wick_parse::{Format, ToolSchemas};
use wick_template::RenderRequest;
use wick_types::{ChatRequest, Grammar, Message, Role, SamplerOpts, TokenId};

use crate::registry::{self, Loaded, ModelKey};
use crate::{
    AsyncChatStream, AsyncCompletionStream, ChatResponse, ChatStream, CompletionResponse,
    CompletionStream, GenerateOptions, LlmBuilder, LlmMetadata, PromptInput, Reasoning, Result,
};
use crate::{Error, ToolChoice};

/// A loaded model with its generation settings. Cheap to clone; clones share the model.
#[derive(Debug, Clone)]
pub struct Llm {
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) settings: Arc<LlmBuilder>,
    /// The LoRA adapters' default scales (shared by this `Llm`'s clones).
    pub(crate) lora_scales: crate::lora::Scales,
}

/// What to turn into prompt tokens.
enum Prompt {
    /// Text that already is a formatted prompt: special-token text becomes control tokens.
    Formatted(String),
    /// A conversation, formatted with the model's chat template.
    Chat(Box<ChatRequest>),
    /// Prompt tokens as they are.
    Tokens(Vec<TokenId>),
    /// A formatted prompt with media at `<__media__>` markers.
    FormattedMedia(String, Vec<wick_types::Media>),
}

impl Llm {
    /// Starts building an `Llm`; see [`LlmBuilder`] for every setting and default.
    pub fn builder() -> LlmBuilder {
        LlmBuilder::default()
    }

    pub(crate) fn load(settings: LlmBuilder) -> Result<Llm> {
        let path = crate::source::resolve(&settings.source)?;
        let draft = settings
            .draft
            .as_ref()
            .map(|d| crate::source::resolve(d).map(|p| registry::canonical(&p)))
            .transpose()?;
        let key = ModelKey {
            path: registry::canonical(&path),
            context_window: settings.context_window,
            kwargs: settings.model,
            kv_cache: settings.kv_cache.clone(),
            chat_template: settings.chat_template.clone(),
            rpc_servers: settings.rpc_servers.clone(),
            devices: settings.devices.clone(),
            mmproj: settings.mmproj.as_deref().map(registry::canonical),
            loras: settings
                .loras
                .iter()
                .map(|(path, _)| registry::canonical(path))
                .collect(),
            draft,
        };
        let loaded = registry::get_or_load(key, load_model)?;
        Ok(Llm {
            loaded,
            lora_scales: crate::lora::Scales::new(settings.loras.iter().map(|l| l.1).collect()),
            settings: Arc::new(settings),
        })
    }

    /// The LoRA adapters loaded with the model ([`LlmBuilder::lora`]), with their current
    /// default scales.
    pub fn lora_adapters(&self) -> Vec<crate::LoraAdapter> {
        let adapters = &self.loaded.adapters;
        self.lora_scales
            .get()
            .into_iter()
            .enumerate()
            .map(|(id, scale)| crate::LoraAdapter {
                id,
                path: adapters.path(id).to_path_buf(),
                scale,
            })
            .collect()
    }

    /// Sets the default scales requests run the adapters at, for this `Llm` and its clones;
    /// an adapter not listed is off (llama-server's `POST /lora-adapters`).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] (`lora`) for an unknown id, a scale that is not finite, or more
    /// adapters on than the backend runs at once; nothing changes then.
    pub fn set_lora_scales(&self, scales: &[(usize, f32)]) -> Result<()> {
        let scales = crate::lora::scales(self.loaded.adapters.len(), scales)?;
        let on = scales.iter().filter(|&&s| s != 0.0).count();
        let max = self.model_info().max_active_adapters as usize;
        if on > max {
            return Err(Error::Invalid {
                field: "lora",
                value: format!("{on} adapters on"),
                allowed: "no more adapters on at once than the backend runs (llama.cpp: one)",
            });
        }
        self.lora_scales.set(scales);
        Ok(())
    }

    /// The engine's thread: a process should wait for it once every handle to this model is
    /// dropped, before it exits (llama.cpp must not be torn down under a step in flight).
    /// [`Llm::close`] drops a handle and waits, in one call.
    pub fn engine_thread(&self) -> wick_engine::EngineThread {
        self.loaded.engine.thread()
    }

    /// Drops this handle and waits up to `grace` for the model's engine to stop, so that its
    /// memory is free (and llama.cpp torn down) when this returns `true`. The engine stops once
    /// every handle to the model is gone (clones, and other `Llm`s the registry gave the same
    /// model) and the requests in flight have finished; `false`: it still ran after `grace`.
    /// Blocking: from async code, call it on a blocking thread.
    pub fn close(self, grace: std::time::Duration) -> bool {
        let engine = self.engine_thread();
        drop(self);
        engine.join(grace)
    }

    /// The prompt cache's counters for this model (hits by tier, misses, restored tokens and
    /// bytes, saves, evictions, rejects).
    pub fn cache_stats(&self) -> &wick_engine::CacheStats {
        self.loaded.engine.cache_stats()
    }

    /// Requests generating or queued on this `Llm`'s model right now (all `Llm`s sharing it).
    pub fn inflight(&self) -> usize {
        self.loaded.engine.inflight()
    }

    /// The sampler a request gets when it sets none: the builder's temperature and sampling.
    pub fn default_sampler(&self) -> SamplerOpts {
        SamplerOpts {
            temperature: self.settings.temperature,
            ..self.settings.sampling.clone()
        }
    }

    /// The model file this `Llm` runs (canonical: absolute, without symlinks); `None` for a
    /// backend given to [`Llm::from_backend`].
    pub fn model_path(&self) -> Option<&std::path::Path> {
        self.loaded.path.as_deref()
    }

    /// What the backend reports about the model and its context: architecture, parameter
    /// count, sizes, the trained and the served context length, special tokens, the chat
    /// template from its metadata.
    pub fn model_info(&self) -> &wick_backend::ModelInfo {
        self.loaded.engine.info()
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
            deterministic: info.deterministic,
            build: info.build.clone(),
            placement: info.placement.clone(),
            cpu_kernels: info.cpu_kernels.clone(),
            recurrent: info.recurrent,
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
        let input = PromptInput::Text {
            text: prompt.to_owned(),
            formatted,
        };
        self.stream_complete_with(input, &GenerateOptions::default())
    }

    /// [`Llm::stream_complete`] with a text or token prompt and per-request options.
    ///
    /// # Errors
    ///
    /// As [`Llm::complete`].
    pub fn stream_complete_with(
        &self,
        input: PromptInput,
        options: &GenerateOptions,
    ) -> Result<CompletionStream> {
        let prompt = self.completion_prompt(input);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self.render(&prompt)?;
        self.start(rendered, templated, options)
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
        let input = PromptInput::Text {
            text: prompt.to_owned(),
            formatted,
        };
        self.astream_complete_with(input, &GenerateOptions::default())
            .await
    }

    /// [`Llm::stream_complete_with`] as a `Stream`.
    ///
    /// # Errors
    ///
    /// As [`Llm::complete`].
    #[allow(clippy::unused_async)] // async in the API; rendering runs here, without waiting
    pub async fn astream_complete_with(
        &self,
        input: PromptInput,
        options: &GenerateOptions,
    ) -> Result<AsyncCompletionStream> {
        let prompt = self.completion_prompt(input);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self.render(&prompt)?;
        Ok(AsyncCompletionStream(
            self.start(rendered, templated, options)?,
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
        self.stream_chat_with(request, &GenerateOptions::default())?
            .last_response()
    }

    /// [`Llm::chat`], token by token as they are generated.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub fn stream_chat(&self, messages: &[Message]) -> Result<ChatStream> {
        self.stream_chat_with(
            &ChatRequest::new(messages.to_vec()),
            &GenerateOptions::default(),
        )
    }

    /// [`Llm::chat_request`], token by token, with per-request options.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub fn stream_chat_with(
        &self,
        request: &ChatRequest,
        options: &GenerateOptions,
    ) -> Result<ChatStream> {
        let plan = self.tool_plan(request, options)?;
        let prompt = self.chat_prompt(&plan.request);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self.render(&prompt)?;
        let output = self.output_format(&plan, templated);
        let options = plan.options(options);
        let forced_open = rendered.thinking_forced_open;
        let inner = self.start(rendered, templated, &options)?;
        Ok(ChatStream::new(inner, output, forced_open))
    }

    /// [`Llm::chat`] as a future.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub async fn achat(&self, messages: &[Message]) -> Result<ChatResponse> {
        self.astream_chat(messages).await?.last_response().await
    }

    /// [`Llm::stream_chat`] as a `Stream` that yields each token as it is produced.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    pub async fn astream_chat(&self, messages: &[Message]) -> Result<AsyncChatStream> {
        let request = ChatRequest::new(messages.to_vec());
        self.astream_chat_with(&request, &GenerateOptions::default())
            .await
    }

    /// [`Llm::stream_chat_with`] as a `Stream` that yields each token as it is produced.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    #[allow(clippy::unused_async)] // async in the API; rendering runs here, without waiting
    pub async fn astream_chat_with(
        &self,
        request: &ChatRequest,
        options: &GenerateOptions,
    ) -> Result<AsyncChatStream> {
        let plan = self.tool_plan(request, options)?;
        let prompt = self.chat_prompt(&plan.request);
        let templated = matches!(prompt, Prompt::Chat(_));
        let rendered = self.render(&prompt)?;
        let output = self.output_format(&plan, templated);
        let options = plan.options(options);
        let forced_open = rendered.thinking_forced_open;
        let inner = AsyncCompletionStream(self.start(rendered, templated, &options)?);
        Ok(AsyncChatStream::new(inner, output, forced_open))
    }

    /// The prompt tokens `request` renders to, exactly as [`Llm::stream_chat_with`] computes
    /// them (template, tools, `tool_choice`), without generating: for counting a prompt's
    /// tokens.
    ///
    /// # Errors
    ///
    /// The template cannot render the chat, or a forced tool is unknown.
    pub fn chat_tokens(
        &self,
        request: &ChatRequest,
        options: &GenerateOptions,
    ) -> Result<Vec<TokenId>> {
        let plan = self.tool_plan(request, options)?;
        Ok(self.render(&self.chat_prompt(&plan.request))?.tokens)
    }

    /// The prompt text `request` renders to, as [`Llm::stream_chat_with`] renders it before
    /// tokenizing (llama-server's `/apply-template`).
    ///
    /// # Errors
    ///
    /// The template cannot render the chat, or a forced tool is unknown.
    pub fn chat_text(&self, request: &ChatRequest, options: &GenerateOptions) -> Result<String> {
        let plan = self.tool_plan(request, options)?;
        Ok(match self.chat_prompt(&plan.request) {
            Prompt::Chat(request) => self
                .loaded
                .chat
                .render_text(RenderRequest::from(request.as_ref()))?,
            Prompt::Formatted(text) | Prompt::FormattedMedia(text, _) => text,
            Prompt::Tokens(tokens) => {
                let bytes = self.loaded.engine.tokenizer().detokenize(&tokens)?;
                String::from_utf8_lossy(&bytes).into_owned()
            }
        })
    }

    /// Tokenizes `text`; with `special`, special-token text becomes control tokens.
    ///
    /// # Errors
    ///
    /// A tokenizer failure.
    #[allow(clippy::unused_async)] // async in the API; the work is quick and thread-safe now
    pub async fn atokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        Ok(self.loaded.engine.tokenizer().tokenize(text, special)?)
    }

    /// The text of `tokens` (invalid UTF-8 becomes U+FFFD).
    ///
    /// # Errors
    ///
    /// An out-of-range token.
    #[allow(clippy::unused_async)] // async in the API; the work is quick and thread-safe now
    pub async fn adetokenize(&self, tokens: &[TokenId]) -> Result<String> {
        let bytes = self.loaded.engine.tokenizer().detokenize(tokens)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes one token stands for (part of a character, for some tokens).
    ///
    /// # Errors
    ///
    /// An out-of-range token.
    pub fn token_bytes(&self, token: TokenId) -> Result<Vec<u8>> {
        Ok(self
            .loaded
            .engine
            .tokenizer()
            .detokenize(std::slice::from_ref(&token))?)
    }

    /// The embedding of `text` (mean-pooled, as the backend computes it).
    ///
    /// # Errors
    ///
    /// The backend cannot embed, or the text does not fit the context.
    pub async fn aembed(&self, text: &str) -> Result<Vec<f32>> {
        let text = text.to_owned();
        Ok(self
            .loaded
            .engine
            .with_backend_async(move |b| {
                let tokens = b.tokenize_prompt(&text, false)?;
                b.embed(&tokens)
            })
            .await??)
    }

    /// The output format and tool schemas for a chat: a forced call's format, else the
    /// builder's override, else the template's when the template formatted the prompt, plain
    /// content otherwise.
    pub(crate) fn output_format(&self, plan: &ToolPlan, templated: bool) -> OutputPlan {
        let format = match (plan.forced_format, self.settings.output_format, templated) {
            (Some(format), _, _) | (None, Some(format), _) => format,
            (None, None, true) => self.loaded.chat.format(),
            (None, None, false) => Format::ContentOnly,
        };
        OutputPlan {
            format,
            tools: ToolSchemas::from_tools(&plan.request.tools),
            forced_call: plan.forced_format.is_some(),
        }
    }

    /// What `tool_choice` does to a chat: `none` hides the tools; `required` and a named
    /// function constrain the output with a grammar to one call in the output format
    /// (`content_only` templates get llama.cpp's generic JSON call syntax).
    pub(crate) fn tool_plan(
        &self,
        request: &ChatRequest,
        options: &GenerateOptions,
    ) -> Result<ToolPlan> {
        if let Some(tool) = request
            .tools
            .iter()
            .find(|t| t.parameters.as_ref().is_some_and(|p| !p.is_object()))
        {
            return Err(Error::Invalid {
                field: "tools",
                value: format!("the parameters of `{}`", tool.name),
                allowed: "a JSON schema object",
            });
        }
        let tools: Vec<wick_types::Tool> = match &options.tool_choice {
            ToolChoice::Auto => return Ok(ToolPlan::unchanged(request)),
            ToolChoice::None => {
                let mut request = request.clone();
                request.tools.clear();
                return Ok(ToolPlan::unchanged(&request));
            }
            ToolChoice::Required => request.tools.clone(),
            ToolChoice::Function(name) => {
                let named: Vec<_> = request
                    .tools
                    .iter()
                    .filter(|t| &t.name == name)
                    .cloned()
                    .collect();
                if named.is_empty() {
                    return Err(Error::Invalid {
                        field: "tool_choice",
                        value: name.clone(),
                        allowed: "the name of one of the request's tools",
                    });
                }
                named
            }
        };
        if tools.is_empty() {
            return Err(Error::Invalid {
                field: "tool_choice",
                value: "required".into(),
                allowed: "auto or none when the request has no tools",
            });
        }
        let format = match self
            .settings
            .output_format
            .unwrap_or(self.loaded.chat.format())
        {
            Format::ContentOnly => Format::Generic,
            format => format,
        };
        let grammar =
            wick_parse::tool_call_grammar_for(format, &tools).map_err(|e| Error::Invalid {
                field: "tool_choice",
                value: e.to_string(),
                allowed: "auto or none for this model's tool-call format",
            })?;
        Ok(ToolPlan {
            request: request.clone(),
            forced_format: Some(format),
            grammar: Some(Grammar::Gbnf(grammar)),
        })
    }

    /// Renders and tokenizes `prompt` on the caller's thread (never the model's).
    fn render(&self, prompt: &Prompt) -> Result<RenderedPrompt> {
        let engine = &self.loaded.engine;
        tokenize(
            &**engine.tokenizer(),
            engine.media_encoder().map(|m| &**m),
            &self.loaded.chat,
            prompt,
        )
    }

    fn completion_prompt(&self, input: PromptInput) -> Prompt {
        match (input, &self.settings.completion_to_prompt) {
            (PromptInput::Tokens(tokens), _) => Prompt::Tokens(tokens),
            (PromptInput::Media { text, media }, _) => Prompt::FormattedMedia(text, media),
            (
                PromptInput::Text {
                    text,
                    formatted: true,
                },
                _,
            ) => Prompt::Formatted(text),
            (PromptInput::Text { text, .. }, Some(format)) => Prompt::Formatted(format(&text)),
            (PromptInput::Text { text, .. }, None) => {
                Prompt::Chat(Box::new(self.with_template_defaults(&ChatRequest::new(
                    vec![Message::new(Role::User, text)],
                ))))
            }
        }
    }

    fn chat_prompt(&self, request: &ChatRequest) -> Prompt {
        match &self.settings.messages_to_prompt {
            Some(format) => Prompt::Formatted(format(&request.effective_messages())),
            None => Prompt::Chat(Box::new(self.with_template_defaults(request))),
        }
    }

    /// `request` with the template variables it leaves out taken from the settings: the
    /// template kwargs, `enable_thinking` by [`Reasoning`], and today's date.
    fn with_template_defaults(&self, request: &ChatRequest) -> ChatRequest {
        let settings = &self.settings;
        let mut request = request.clone();
        let context = &mut request.extra_context;
        for (name, value) in &settings.template_kwargs {
            context.entry(name.clone()).or_insert_with(|| value.clone());
        }
        if !context.contains_key("enable_thinking") {
            let think = match settings.reasoning {
                Reasoning::On => Some(true),
                Reasoning::Off => Some(false),
                Reasoning::Auto => self
                    .loaded
                    .chat
                    .template()
                    .reads("enable_thinking")
                    .then_some(true),
            };
            if let Some(think) = think {
                context.insert("enable_thinking".into(), Value::Bool(think));
            }
        }
        if settings.template_date {
            let today = wick_template::DateTime::now_utc();
            context
                .entry("date_string")
                .or_insert_with(|| Value::String(today.strftime("%d %b %Y")));
            context
                .entry("datetime")
                .or_insert_with(|| Value::String(today.strftime("%b %d %Y")));
        }
        request
    }

    /// Submits `prompt`; a `templated` prompt also stops at the template's end-of-turn texts,
    /// unless `ignore_eos` (which runs the answer to `max_tokens`, as llama-server does: a
    /// model without a template of its own writes the fallback's end-of-turn as text).
    pub(crate) fn start(
        &self,
        prompt: RenderedPrompt,
        templated: bool,
        options: &GenerateOptions,
    ) -> Result<CompletionStream> {
        let settings = &self.settings;
        let mut stop = settings.stop.clone();
        stop.extend(options.stop.iter().cloned());
        if templated && !options.ignore_eos {
            stop.extend(self.loaded.chat.stops().iter().cloned());
        }
        let mut sampler = options
            .sampling
            .clone()
            .unwrap_or_else(|| self.default_sampler());
        if options.ignore_eos {
            let eog = &self.model_info().special.eog;
            sampler
                .logit_bias
                .extend(eog.iter().map(|&t| (t, f32::NEG_INFINITY)));
        }
        let scales = match &options.lora {
            Some(listed) => crate::lora::scales(self.loaded.adapters.len(), listed)?,
            None => self.lora_scales.get(),
        };
        let request = GenerateRequest {
            prompt: prompt.tokens,
            media: prompt.media,
            max_tokens: Some(options.max_tokens.unwrap_or(settings.max_new_tokens)),
            sampler,
            stop,
            logprobs: options.logprobs,
            logprobs_after_sampling: options.logprobs_after_sampling,
            progress: options.progress,
            spec_max: options.spec_max,
            adapters: self.loaded.adapters.set(&scales),
            checkpoint: prompt.checkpoint,
        };
        let prompt_tokens = u32::try_from(request.prompt.len()).unwrap_or(u32::MAX);
        let generation = self.loaded.engine.submit(request)?;
        Ok(CompletionStream::new(generation, prompt_tokens))
    }
}

fn tokenize(
    tokenizer: &(dyn Tokenizer + Send + Sync),
    media: Option<&dyn wick_backend::MediaEncoder>,
    chat: &ChatFormat,
    prompt: &Prompt,
) -> Result<RenderedPrompt> {
    Ok(match prompt {
        Prompt::Formatted(text) => {
            if let Some(n_ctx) = chat.context_window() {
                wick_engine::check_size(tokenizer, text.len(), n_ctx)?;
            }
            RenderedPrompt {
                tokens: tokenizer.tokenize_prompt(text, true)?,
                thinking_forced_open: false,
                media: Vec::new(),
                checkpoint: None,
            }
        }
        Prompt::Chat(request) => {
            let held: Vec<wick_types::Media> = request
                .messages
                .iter()
                .flat_map(|m| m.media.iter().cloned())
                .collect();
            chat.render_with_media(
                tokenizer,
                RenderRequest::from(request.as_ref()),
                &held,
                media,
            )?
        }
        Prompt::Tokens(tokens) => RenderedPrompt {
            tokens: tokens.clone(),
            thinking_forced_open: false,
            media: Vec::new(),
            checkpoint: None,
        },
        Prompt::FormattedMedia(text, held) => formatted_media(tokenizer, media, text, held)?,
    })
}

/// The marker llama-server's `multimodal_data` prompts place media with.
const MEDIA_MARKER_TEXT: &str = "<__media__>";

/// A formatted prompt (special-token text becomes control tokens) whose `<__media__>` markers
/// become the positions `encoder` gives each of `media`, in order.
fn formatted_media(
    tokenizer: &(dyn Tokenizer + Send + Sync),
    encoder: Option<&dyn wick_backend::MediaEncoder>,
    text: &str,
    media: &[wick_types::Media],
) -> Result<RenderedPrompt> {
    let pieces: Vec<&str> = text.split(MEDIA_MARKER_TEXT).collect();
    if pieces.len() - 1 != media.len() {
        return Err(wick_backend::BackendError::Media {
            reason: format!(
                "the prompt has {} {MEDIA_MARKER_TEXT} markers for {} media: one marker each",
                pieces.len() - 1,
                media.len()
            ),
        }
        .into());
    }
    let Some(encoder) = encoder else {
        return Err(wick_backend::BackendError::Media {
            reason: "the model reads text only: it has no projector for the prompt's media \
                     (give one with --mmproj)"
                .into(),
        }
        .into());
    };
    let mut tokens = Vec::new();
    let mut runs = Vec::with_capacity(media.len());
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            let run = encoder.encode(&media[i - 1])?;
            tokens.extend_from_slice(&run.tokens);
            runs.push(run);
        }
        if i == 0 {
            tokens.extend(tokenizer.tokenize_prompt(piece, true)?);
        } else if !piece.is_empty() {
            tokens.extend(tokenizer.tokenize(piece, true)?);
        }
    }
    Ok(RenderedPrompt {
        tokens,
        thinking_forced_open: false,
        media: runs,
        checkpoint: None,
    })
}

#[cfg(feature = "llama")]
fn load_model(key: &ModelKey) -> Result<Loaded> {
    let config = wick_backend::BackendConfig::new(&key.path)
        .with_n_ctx(key.context_window)
        .with_n_seq_max(key.kwargs.n_seq_max)
        .with_n_batch(key.kwargs.n_batch)
        .with_n_threads(key.kwargs.n_threads)
        .with_n_gpu_layers(key.kwargs.n_gpu_layers)
        .with_kernels(key.kwargs.kernels)
        .with_cache_types(key.kwargs.cache_types)
        .with_rpc_servers(key.rpc_servers.clone())
        .with_devices(key.devices.clone())
        .with_mmproj(key.mmproj.clone());
    let mut backend = wick_llama::LlamaBackend::load(&config)?;
    let adapters = crate::lora::Loaded::load(&mut backend, &key.loras)?;
    let engine_config = wick_engine::EngineConfig {
        queue_capacity: key.kwargs.queue_capacity,
        ram_cache_bytes: key.kwargs.ram_cache_bytes,
        spec_max: key.kwargs.spec_max,
        disk_cache: key
            .kv_cache
            .as_ref()
            .map(|cache| disk_cache(&key.path, cache))
            .transpose()?,
        ..wick_engine::EngineConfig::default()
    };
    let draft = key
        .draft
        .as_ref()
        .map(|path| -> Result<Box<dyn wick_backend::Backend>> {
            // The draft runs beside the model on this machine, with its context layout.
            let mut draft_config = config.clone();
            draft_config.model_path.clone_from(path);
            draft_config.rpc_servers = Vec::new();
            draft_config.devices = Vec::new();
            draft_config.mmproj = None;
            Ok(Box::new(wick_llama::LlamaBackend::load(&draft_config)?))
        })
        .transpose()?;
    let engine = wick_engine::Engine::start_with_draft(Box::new(backend), draft, engine_config)?;
    let template = chat_template_setting(key.chat_template.as_deref())?;
    let chat = engine.with_backend(move |b| chat_format(b, template))??;
    Ok(Loaded {
        engine,
        chat: Arc::new(chat),
        path: Some(key.path.clone()),
        adapters,
    })
}

/// The disk tier of the prompt cache for the model at `path`: `$WICK_HOME/kv`, keyed by the
/// model file's SHA-256.
#[cfg(feature = "llama")]
fn disk_cache(
    path: &std::path::Path,
    cache: &crate::KvCache,
) -> Result<wick_engine::DiskCacheConfig> {
    let settings = wick_models::Settings::from_env();
    let model_id = wick_models::model_sha256(&settings, path).map_err(|e| Error::Model {
        reference: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(wick_engine::DiskCacheConfig {
        dir: cache
            .dir
            .clone()
            .unwrap_or_else(|| settings.home.join("kv")),
        budget_bytes: cache.bytes,
        min_tokens: 64,
        model_id,
    })
}

#[cfg(not(feature = "llama"))]
fn load_model(key: &ModelKey) -> Result<Loaded> {
    Err(Error::Model {
        reference: key.path.display().to_string(),
        reason: "wick was built without a backend (enable the `llama` feature)".into(),
    })
}

/// A chat request after `tool_choice`: the request to render, and for a forced call its
/// format and grammar.
#[derive(Debug)]
pub(crate) struct ToolPlan {
    pub(crate) request: ChatRequest,
    forced_format: Option<Format>,
    grammar: Option<Grammar>,
}

impl ToolPlan {
    fn unchanged(request: &ChatRequest) -> Self {
        ToolPlan {
            request: request.clone(),
            forced_format: None,
            grammar: None,
        }
    }

    /// `options` with the forced call's grammar in the sampler.
    pub(crate) fn options(&self, options: &GenerateOptions) -> GenerateOptions {
        let mut options = options.clone();
        if let Some(grammar) = &self.grammar {
            options.sampling = Some(SamplerOpts {
                grammar: Some(grammar.clone()),
                ..options.sampling.take().unwrap_or_default()
            });
        }
        options
    }
}

/// The `chat_template` setting: one of llama.cpp's template names, else a Jinja source.
pub(crate) fn chat_template_setting(
    setting: Option<&str>,
) -> Result<Option<wick_template::ChatTemplate>> {
    setting
        .map(|t| {
            wick_template::ChatTemplate::named(t.trim()).or_else(|_| {
                wick_template::JinjaTemplate::new(t).map(wick_template::ChatTemplate::Jinja)
            })
        })
        .transpose()
        .map_err(|e| Error::Invalid {
            field: "chat_template",
            value: e.to_string(),
            allowed: "a llama.cpp template name or a Jinja template",
        })
}

/// The chat format of the model `b` holds: `template` when given, else the model's own,
/// bounded by its context window.
pub(crate) fn chat_format(
    b: &dyn wick_backend::Backend,
    template: Option<wick_template::ChatTemplate>,
) -> Result<ChatFormat> {
    let n_ctx = usize::try_from(b.info().n_ctx).unwrap_or(usize::MAX);
    let format = match template {
        Some(template) => ChatFormat::new(template, b)?,
        None => model_chat_format(b)?,
    };
    Ok(format.with_context_window(n_ctx))
}

/// The model's own chat template, or llama.cpp's default (ChatML) when it has none.
pub(crate) fn model_chat_format(b: &dyn wick_backend::Backend) -> Result<ChatFormat> {
    Ok(match ChatFormat::from_model(b)? {
        Some(format) => format,
        None => ChatFormat::new(
            wick_template::ChatTemplate::Named(wick_template::NamedTemplate::Chatml),
            b,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use wick_backend::{BackendConfig, StubBackend};

    #[test]
    fn close_waits_for_the_engine_once_the_last_handle_is_gone() {
        let backend = StubBackend::new(&BackendConfig::new("stub")).expect("stub");
        let llm = Llm::from_backend(Box::new(backend), Llm::builder()).expect("llm");
        let answer = llm.complete("Once upon a time", true).expect("an answer");
        assert!(answer.usage.expect("usage").completion_tokens > 0);
        let clone = llm.clone();
        let engine = clone.engine_thread();
        assert!(
            !llm.close(Duration::from_millis(50)),
            "a clone keeps the engine running"
        );
        assert!(!engine.join(Duration::ZERO), "the engine still runs");
        assert!(
            clone.close(Duration::from_secs(30)),
            "closing the last handle stops the engine"
        );
        assert!(engine.join(Duration::ZERO), "and it stays stopped");
    }
}
