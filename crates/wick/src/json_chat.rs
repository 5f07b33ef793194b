//! Chats given as OpenAI-style JSON messages (assistant `tool_calls`, `tool` messages with
//! `tool_call_id`, template variables), and `Llm`s over a backend you built yourself.

use std::sync::Arc;

use serde_json::{Map, Value};
use wick_backend::Backend;
use wick_engine::{ChatFormat, Engine, EngineConfig};
use wick_template::RenderRequest;
use wick_types::{ChatRequest, Tool};

use crate::registry::Loaded;
use crate::{AsyncChatStream, AsyncCompletionStream, GenerateOptions, Llm, LlmBuilder, Result};

/// A conversation as JSON messages, rendered by the chat template as they are.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JsonChat {
    /// The messages, oldest first: objects with `role`, `content` and any other fields the
    /// template reads (`tool_calls`, `tool_call_id`, `name`, `reasoning_content`).
    pub messages: Vec<Value>,
    /// Tools the model may call.
    pub tools: Vec<Tool>,
    /// Further template variables (`enable_thinking`, `reasoning_effort`, …).
    pub extra_context: Map<String, Value>,
}

impl Llm {
    /// Builds an `Llm` over `backend` (outside the model cache: it is never shared), with the
    /// generation settings of `builder` and its queue capacity (its model source and other
    /// model settings are ignored).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Invalid`] for an out-of-range setting; the engine or the model's chat
    /// template fails to start.
    pub fn from_backend(backend: Box<dyn Backend>, builder: LlmBuilder) -> Result<Llm> {
        builder.validate()?;
        let config = EngineConfig {
            queue_capacity: builder.model.queue_capacity,
            ..EngineConfig::default()
        };
        let engine = Engine::start(backend, config)?;
        let chat = engine.with_backend(|b| -> Result<ChatFormat> {
            let n_ctx = usize::try_from(b.info().n_ctx).unwrap_or(usize::MAX);
            Ok(crate::llm::model_chat_format(b)?.with_context_window(n_ctx))
        })??;
        Ok(Llm {
            loaded: Arc::new(Loaded {
                engine,
                chat: Arc::new(chat),
                path: None,
            }),
            settings: Arc::new(builder),
        })
    }

    /// Answers `chat` with the model's chat template, streamed; like
    /// [`Llm::astream_chat_with`] (`tool_choice` included), but the messages reach the
    /// template as they are.
    ///
    /// # Errors
    ///
    /// As [`Llm::chat`].
    #[allow(clippy::unused_async)] // async in the API, like the other `astream_*`
    pub async fn astream_chat_json(
        &self,
        chat: JsonChat,
        options: &GenerateOptions,
    ) -> Result<AsyncChatStream> {
        let request = ChatRequest {
            tools: chat.tools,
            ..ChatRequest::default()
        };
        // `tool_choice`: `none` hides the tools, a forced call gets its format and grammar.
        let plan = self.tool_plan(&request, options)?;
        let mut render = RenderRequest::from(&plan.request);
        render.messages = chat.messages;
        render.add_generation_prompt = true;
        render.extra_context = chat.extra_context;
        // Rendered and tokenized here, on the caller's thread, not the model's.
        let rendered = self
            .loaded
            .chat
            .render(&**self.loaded.engine.tokenizer(), render)?;
        let output = self.output_format(&plan, true);
        let options = plan.options(options);
        let inner = AsyncCompletionStream(self.start(rendered.tokens, true, &options)?);
        Ok(AsyncChatStream::new(
            inner,
            output,
            rendered.thinking_forced_open,
        ))
    }
}
