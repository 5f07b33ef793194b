//! `Llm::builder()`: every setting with its default, validated before the model loads.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use wick_backend::{CacheType, GpuLayers, KernelMode};

use wick_types::{Message, SamplerOpts};

use crate::{Error, Llm, Result};

/// Formats a conversation into a prompt string (its text is tokenized with special tokens on).
pub type MessagesToPrompt = Arc<dyn Fn(&[Message]) -> String + Send + Sync>;
/// Formats a completion prompt into a prompt string (tokenized with special tokens on).
pub type CompletionToPrompt = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Where the model comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelSource {
    /// The default model (SmolLM2-135M-Instruct Q4_1) from wick's cache directory.
    Default,
    /// A GGUF file on disk.
    Path(PathBuf),
    /// Any model reference: a path, an `http(s)://` URL, `hf:owner/repo/file.gguf`,
    /// `owner/repo[:QUANT]`, or an alias from the store.
    Reference(String),
}

/// Settings of the loaded model and its engine (the seed's `model_kwargs`); part of the model
/// cache key. Defaults: llama.cpp's threads, no GPU layers, batches of 512, 4 sequences, a
/// queue of 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelKwargs {
    /// CPU threads; `None`: llama.cpp's choice.
    pub n_threads: Option<u32>,
    /// Layers offloaded to the GPU: a count (`GpuLayers::Count(0)`: CPU only; 999: all) or
    /// [`GpuLayers::Auto`], as many as fit the devices' free memory.
    pub n_gpu_layers: GpuLayers,
    /// Most tokens evaluated in one forward pass.
    pub n_batch: u32,
    /// Requests generating at once (each gets a full context window).
    pub n_seq_max: u32,
    /// Requests that may wait behind the generating ones; more get a busy error.
    pub queue_capacity: usize,
    /// CPU kernels: [`KernelMode::Deterministic`] (the default: warm, cold and concurrent
    /// greedy answers are bit-identical) or [`KernelMode::Fast`].
    pub kernels: KernelMode,
    /// Bytes of sequence states the prompt cache keeps in RAM for prefixes no sequence holds
    /// any more (0: none). Default 2 GiB.
    pub ram_cache_bytes: u64,
    /// The KV cache's types, keys' and values' (llama-server's `--cache-type-k`/`-v`):
    /// [`CacheType::F16`] both by default. A quantized cache holds more tokens in the same
    /// memory; in the deterministic mode its attention runs ggml's batch-invariant reference
    /// kernel instead of wick's (slower for long contexts, still bit-identical).
    pub cache_types: [CacheType; 2],
    /// The most tokens a greedy answer drafts per step by prompt lookup (draft-free
    /// speculative decoding: proposals are verified in the batched step, so the answer is the
    /// same); 0 (the default) turns it off. On the CPU with a small model a verify pass costs
    /// nearly as much per token as a decode, so it pays only when most drafts are accepted
    /// (see the README); [`ModelKwargs::SPEC_MAX`] is a good value to turn it on with.
    pub spec_max: usize,
}

impl ModelKwargs {
    /// The draft length `wick serve --spec ngram` uses unless `--spec-max` says otherwise.
    pub const SPEC_MAX: usize = 8;
}

/// Whether chat templates that can think are asked to (llama-server's `--reasoning`): the
/// default of the template variable `enable_thinking` for a request that does not set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Reasoning {
    /// A template that reads `enable_thinking` gets `true` (templates written for
    /// transformers treat it unset as on; llama.cpp's copies need it set). The default.
    #[default]
    Auto,
    /// Every template gets `enable_thinking: true`.
    On,
    /// Every template gets `enable_thinking: false`: a template that can think opens and
    /// closes an empty reasoning block, or leaves it out.
    Off,
}

impl std::str::FromStr for Reasoning {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Reasoning::Auto),
            "on" | "true" | "1" => Ok(Reasoning::On),
            "off" | "false" | "0" => Ok(Reasoning::Off),
            other => Err(format!("`{other}`: expected on, off or auto")),
        }
    }
}

/// The disk tier of the prompt cache: where, and how many bytes of KV snapshots per model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KvCache {
    /// The cache directory; `None`: `$WICK_HOME/kv`.
    pub dir: Option<PathBuf>,
    /// Most bytes of snapshots kept for one model and context layout.
    pub bytes: u64,
}

impl Default for ModelKwargs {
    fn default() -> Self {
        ModelKwargs {
            n_threads: None,
            n_gpu_layers: GpuLayers::Count(0),
            n_batch: 512,
            n_seq_max: 4,
            queue_capacity: 64,
            kernels: KernelMode::default(),
            ram_cache_bytes: 2 << 30,
            spec_max: 0,
            cache_types: [CacheType::F16; 2],
        }
    }
}

/// Builds an [`Llm`]. Defaults: the default model, temperature 0.1, 256 new tokens, a
/// 4,096-token context window, top-k 40, top-p 0.95, min-p 0.05, no penalties, seed 0,
/// [`ModelKwargs::default`], and the model's own chat template.
#[derive(Clone)]
pub struct LlmBuilder {
    pub(crate) source: ModelSource,
    pub(crate) temperature: f32,
    pub(crate) max_new_tokens: u32,
    pub(crate) context_window: u32,
    pub(crate) sampling: SamplerOpts,
    pub(crate) stop: Vec<String>,
    pub(crate) model: ModelKwargs,
    pub(crate) messages_to_prompt: Option<MessagesToPrompt>,
    pub(crate) completion_to_prompt: Option<CompletionToPrompt>,
    pub(crate) output_format: Option<wick_parse::Format>,
    pub(crate) kv_cache: Option<KvCache>,
    pub(crate) chat_template: Option<String>,
    pub(crate) rpc_servers: Vec<String>,
    pub(crate) devices: Vec<String>,
    pub(crate) mmproj: Option<PathBuf>,
    pub(crate) loras: Vec<(PathBuf, f32)>,
    pub(crate) draft: Option<ModelSource>,
    pub(crate) reasoning: Reasoning,
    pub(crate) template_kwargs: serde_json::Map<String, serde_json::Value>,
    pub(crate) template_date: bool,
}

impl fmt::Debug for LlmBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmBuilder")
            .field("source", &self.source)
            .field("temperature", &self.temperature)
            .field("max_new_tokens", &self.max_new_tokens)
            .field("context_window", &self.context_window)
            .field("sampling", &self.sampling)
            .field("stop", &self.stop)
            .field("model", &self.model)
            .field("messages_to_prompt", &self.messages_to_prompt.is_some())
            .field("completion_to_prompt", &self.completion_to_prompt.is_some())
            .field("output_format", &self.output_format)
            .field("kv_cache", &self.kv_cache)
            .field("chat_template", &self.chat_template.is_some())
            .field("rpc_servers", &self.rpc_servers)
            .field("devices", &self.devices)
            .field("mmproj", &self.mmproj)
            .field("loras", &self.loras)
            .field("draft", &self.draft)
            .field("reasoning", &self.reasoning)
            .field("template_kwargs", &self.template_kwargs)
            .field("template_date", &self.template_date)
            .finish()
    }
}

impl Default for LlmBuilder {
    fn default() -> Self {
        LlmBuilder {
            source: ModelSource::Default,
            temperature: 0.1,
            max_new_tokens: 256,
            context_window: 4096,
            sampling: SamplerOpts {
                top_k: 40,
                top_p: 0.95,
                min_p: 0.05,
                ..SamplerOpts::greedy()
            },
            stop: Vec::new(),
            model: ModelKwargs::default(),
            messages_to_prompt: None,
            completion_to_prompt: None,
            output_format: None,
            kv_cache: None,
            chat_template: None,
            rpc_servers: Vec::new(),
            devices: Vec::new(),
            mmproj: None,
            loras: Vec::new(),
            draft: None,
            reasoning: Reasoning::Auto,
            template_kwargs: serde_json::Map::new(),
            template_date: true,
        }
    }
}

impl LlmBuilder {
    /// Loads the model from `source`.
    #[must_use]
    pub fn model(mut self, source: ModelSource) -> Self {
        self.source = source;
        self
    }

    /// Loads the GGUF file at `path`.
    #[must_use]
    pub fn model_path(self, path: impl Into<PathBuf>) -> Self {
        self.model(ModelSource::Path(path.into()))
    }

    /// Loads the model named by `reference` (path, URL, Hugging Face, alias).
    #[must_use]
    pub fn model_ref(self, reference: impl Into<String>) -> Self {
        self.model(ModelSource::Reference(reference.into()))
    }

    /// Sampling temperature in [0, 2]; 0 is greedy.
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    /// Most tokens one answer may have (at least 1).
    #[must_use]
    pub fn max_new_tokens(mut self, n: u32) -> Self {
        self.max_new_tokens = n;
        self
    }

    /// The context window of each request, in tokens (at least 1).
    #[must_use]
    pub fn context_window(mut self, n: u32) -> Self {
        self.context_window = n;
        self
    }

    /// The rest of the sampling settings (the seed's `generate_kwargs`): top-k, top-p, min-p,
    /// penalties, seed, logit bias, grammar. Its temperature is replaced by
    /// [`LlmBuilder::temperature`].
    #[must_use]
    pub fn generate_kwargs(mut self, sampling: SamplerOpts) -> Self {
        self.sampling = sampling;
        self
    }

    /// Generation ends before any of these strings.
    #[must_use]
    pub fn stop(mut self, stop: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.stop = stop.into_iter().map(Into::into).collect();
        self
    }

    /// Settings of the loaded model (the seed's `model_kwargs`).
    #[must_use]
    pub fn model_kwargs(mut self, model: ModelKwargs) -> Self {
        self.model = model;
        self
    }

    /// Formats chats yourself instead of with the model's chat template. The result is
    /// tokenized with special tokens on, so message text can forge control tokens: prefer the
    /// default.
    #[must_use]
    pub fn messages_to_prompt(
        mut self,
        f: impl Fn(&[Message]) -> String + Send + Sync + 'static,
    ) -> Self {
        self.messages_to_prompt = Some(Arc::new(f));
        self
    }

    /// Formats completion prompts yourself (tokenized with special tokens on).
    #[must_use]
    pub fn completion_to_prompt(
        mut self,
        f: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.completion_to_prompt = Some(Arc::new(f));
        self
    }

    /// Parses chat answers in `format` (reasoning and tool-call syntax) instead of the format
    /// detected from the chat template.
    #[must_use]
    pub fn output_format(mut self, format: wick_parse::Format) -> Self {
        self.output_format = Some(format);
        self
    }

    /// Formats chats with this template instead of the model's own: one of llama.cpp's
    /// template names (`chatml`, `llama3`, … see `wick template render --help`) or a Jinja
    /// template's source. The output format follows it unless [`Self::output_format`] says.
    #[must_use]
    pub fn chat_template(mut self, template: impl Into<String>) -> Self {
        self.chat_template = Some(template.into());
        self
    }

    /// Keeps KV snapshots of finished requests on disk so that a later request — in this
    /// process or after a restart — restores its longest cached prompt prefix instead of
    /// computing it. Off by default.
    #[must_use]
    pub fn kv_cache(mut self, cache: KvCache) -> Self {
        self.kv_cache = Some(cache);
        self
    }

    /// Runs the offloaded layers ([`ModelKwargs::n_gpu_layers`]: set it, 999 for every layer;
    /// 0 offloads none) on these llama.cpp RPC workers (`HOST:PORT`, each started with
    /// `wick rpc-worker`), split by their free memory, before any local GPU. Each worker is greeted first: one that does not answer, or
    /// speaks another protocol version, fails the build with a message saying so. The
    /// protocol is unauthenticated: trusted networks only. None by default.
    #[must_use]
    pub fn rpc_servers<S: Into<String>>(mut self, servers: impl IntoIterator<Item = S>) -> Self {
        self.rpc_servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// The model's multimodal projector (an `mmproj` GGUF, as Hugging Face repositories ship
    /// beside vision models' weights): messages may then hold images
    /// ([`crate::Message::push_media`]), or sounds for an audio projector. None by
    /// default: the model reads text only, and a message with an image is refused.
    #[must_use]
    pub fn mmproj(mut self, path: impl Into<PathBuf>) -> Self {
        self.mmproj = Some(path.into());
        self
    }

    /// Offloads to these devices only, by llama.cpp's names (`Vulkan0`, `CUDA1`, `RPC0`, …:
    /// `wick devices` lists them), split by their free memory; a name llama.cpp does not know
    /// fails the build naming the ones it does. Every GPU (and RPC worker) by default.
    #[must_use]
    pub fn devices<S: Into<String>>(mut self, devices: impl IntoIterator<Item = S>) -> Self {
        self.devices = devices.into_iter().map(Into::into).collect();
        self
    }

    /// Loads a LoRA adapter (a GGUF adapter file made for this model) with the model; call it
    /// once per adapter. Adapters are numbered from 0 in the order given. `scale` is the
    /// default a request runs it at (1: as trained, 0: loaded but off); a request may give
    /// its own scales ([`crate::GenerateOptions::lora`]) and
    /// [`crate::Llm::set_lora_scales`] changes the defaults. Requests under different scales
    /// never share a batch or a cached prefix. None by default.
    #[must_use]
    pub fn lora(mut self, path: impl Into<PathBuf>, scale: f32) -> Self {
        self.loras.push((path.into(), scale));
        self
    }

    /// A draft model for speculative decoding: a second, smaller model with the same
    /// vocabulary (refused with the first differing token named otherwise), loaded with the
    /// same context and threads, that proposes the tokens a greedy answer then verifies
    /// instead of prompt lookup. Drafting needs [`ModelKwargs::spec_max`] (or a request's
    /// [`crate::GenerateOptions::spec_max`]) above 0. The answer is the same either way. None
    /// by default.
    #[must_use]
    pub fn draft_model(mut self, source: ModelSource) -> Self {
        self.draft = Some(source);
        self
    }

    /// Whether templates that can think are asked to: the default of `enable_thinking` for a
    /// chat that does not set it ([`Reasoning::Auto`] by default).
    #[must_use]
    pub fn reasoning(mut self, reasoning: Reasoning) -> Self {
        self.reasoning = reasoning;
        self
    }

    /// Variables every chat template render gets unless the request sets its own
    /// ([`ChatRequest::extra_context`](wick_types::ChatRequest::extra_context)), as
    /// llama-server's `--chat-template-kwargs`. None by default.
    #[must_use]
    pub fn template_kwargs(mut self, kwargs: serde_json::Map<String, serde_json::Value>) -> Self {
        self.template_kwargs = kwargs;
        self
    }

    /// Whether chat templates get today's date (UTC) as `date_string` (`26 Jul 2024`, what
    /// Llama 3.x templates print as "Today Date") and `datetime` (`Jul 26 2024`), as
    /// llama-server passes them; a template that does not read them is unchanged. On by
    /// default; `false` renders as transformers does (Llama 3.x then prints its own fixed
    /// date).
    #[must_use]
    pub fn template_date(mut self, on: bool) -> Self {
        self.template_date = on;
        self
    }

    /// Checks every setting, then finds (downloading if needed) and loads the model, or
    /// shares it with an [`Llm`] that already loaded it with the same settings.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the setting, its value and the allowed range; [`Error::Model`]
    /// when the model cannot be found or fetched; [`Error::Backend`] when it does not load.
    pub fn build(self) -> Result<Llm> {
        self.validate()?;
        Llm::load(self)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let sampling = SamplerOpts {
            temperature: self.temperature,
            ..self.sampling.clone()
        };
        sampling.validate().map_err(|e| Error::Invalid {
            field: e.field,
            value: e.value,
            allowed: e.allowed,
        })?;
        if self.max_new_tokens == 0 {
            return Err(invalid("max_new_tokens", 0, "1 or more"));
        }
        if self.context_window == 0 {
            return Err(invalid("context_window", 0, "1 or more"));
        }
        if self.model.n_seq_max == 0 || self.model.n_seq_max > 256 {
            return Err(invalid("n_seq_max", self.model.n_seq_max, "1 to 256"));
        }
        if self.model.n_batch == 0 {
            return Err(invalid("n_batch", 0, "1 or more"));
        }
        if self.model.n_threads == Some(0) {
            return Err(invalid("n_threads", 0, "1 or more, or unset"));
        }
        for (path, scale) in &self.loras {
            if !scale.is_finite() {
                return Err(invalid(
                    "lora",
                    scale,
                    "a finite scale (0: off, 1: as trained)",
                ));
            }
            if !path.is_file() {
                return Err(invalid(
                    "lora",
                    path.display(),
                    "an existing LoRA adapter file (GGUF)",
                ));
            }
        }
        if let ModelSource::Path(path) = &self.source {
            if !path.is_file() {
                return Err(Error::Model {
                    reference: path.display().to_string(),
                    reason: "no such file".into(),
                });
            }
        }
        Ok(())
    }
}

fn invalid(field: &'static str, value: impl std::fmt::Display, allowed: &'static str) -> Error {
    Error::Invalid {
        field,
        value: value.to_string(),
        allowed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(builder: &LlmBuilder) -> &'static str {
        match builder.validate() {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("expected an invalid setting, got {other:?}"),
        }
    }

    #[test]
    fn each_out_of_range_setting_is_named() {
        let b = LlmBuilder::default;
        assert_eq!(field_of(&b().temperature(2.5)), "temperature");
        assert_eq!(field_of(&b().temperature(-0.1)), "temperature");
        assert_eq!(field_of(&b().temperature(f32::NAN)), "temperature");
        assert_eq!(field_of(&b().max_new_tokens(0)), "max_new_tokens");
        assert_eq!(field_of(&b().context_window(0)), "context_window");
        let kwargs = |k: ModelKwargs| b().model_kwargs(k);
        let d = ModelKwargs::default();
        assert_eq!(
            field_of(&kwargs(ModelKwargs { n_seq_max: 0, ..d })),
            "n_seq_max"
        );
        assert_eq!(
            field_of(&kwargs(ModelKwargs { n_batch: 0, ..d })),
            "n_batch"
        );
        assert_eq!(
            field_of(&kwargs(ModelKwargs {
                n_threads: Some(0),
                ..d
            })),
            "n_threads"
        );
    }

    #[test]
    fn the_message_names_value_and_range() {
        let err = LlmBuilder::default()
            .temperature(3.0)
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid temperature: 3 (allowed: 0 to 2 (0: greedy))"
        );
    }

    #[test]
    fn a_missing_model_file_is_a_model_error() {
        let err = LlmBuilder::default()
            .model_path("/nonexistent/model.gguf")
            .validate()
            .unwrap_err();
        assert!(matches!(err, Error::Model { .. }), "{err}");
    }
}
