//! `Llm`s over a backend you built yourself.

use std::sync::Arc;

use wick_backend::Backend;
use wick_engine::{Engine, EngineConfig};

use crate::registry::Loaded;
use crate::{Llm, LlmBuilder, Result};

impl Llm {
    /// Builds an `Llm` over `backend` (outside the model cache: it is never shared), with the
    /// generation settings of `builder`, its chat template and its queue capacity (its model
    /// source and other model settings are ignored).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Invalid`] for an out-of-range setting; the engine or the model's chat
    /// template fails to start.
    pub fn from_backend(mut backend: Box<dyn Backend>, builder: LlmBuilder) -> Result<Llm> {
        builder.validate()?;
        let paths: Vec<_> = builder.loras.iter().map(|(p, _)| p.clone()).collect();
        let adapters = crate::lora::Loaded::load(backend.as_mut(), &paths)?;
        let config = EngineConfig {
            queue_capacity: builder.model.queue_capacity,
            ..EngineConfig::default()
        };
        let template = crate::llm::chat_template_setting(builder.chat_template.as_deref())?;
        let engine = Engine::start(backend, config)?;
        let chat = engine.with_backend(move |b| crate::llm::chat_format(b, template))??;
        Ok(Llm {
            loaded: Arc::new(Loaded {
                engine,
                chat: Arc::new(chat),
                path: None,
                adapters,
            }),
            lora_scales: crate::lora::Scales::new(builder.loras.iter().map(|l| l.1).collect()),
            settings: Arc::new(builder),
        })
    }
}
