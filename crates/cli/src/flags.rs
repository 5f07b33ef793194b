//! Flags shared by the commands that load a model and generate (`wick run`, `wick chat`).

use clap::Args;
use wick_types::SamplerOpts;

/// How the next token is drawn. The defaults are llama-cli's and Ollama's (temperature 0.8,
/// top-k 40, top-p 0.95, min-p 0.05): a small model answering greedily tends to loop.
#[derive(Debug, Clone, Args)]
pub(crate) struct SamplingArgs {
    /// Sampling temperature; 0 is greedy (always the most likely token).
    #[arg(short, long, default_value_t = 0.8, value_name = "T")]
    pub(crate) temperature: f32,

    /// Greedy decoding: always the most likely token (the same as `--temperature 0`).
    #[arg(long, conflicts_with = "temperature")]
    pub(crate) greedy: bool,

    /// Keep only the K most likely tokens (0: off).
    #[arg(long, default_value_t = 40, value_name = "K")]
    pub(crate) top_k: u32,

    /// Nucleus sampling: keep the most likely tokens up to this total probability (1: off).
    #[arg(long, default_value_t = 0.95, value_name = "P")]
    pub(crate) top_p: f32,

    /// Drop tokens less likely than this fraction of the most likely one (0: off).
    #[arg(long, default_value_t = 0.05, value_name = "P")]
    pub(crate) min_p: f32,

    /// Penalise tokens seen in the last 64 (1: off, as the server's default).
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    pub(crate) repeat_penalty: f32,

    /// Seed of the random draw: the same seed gives the same answer, on any CPU [default: a
    /// fresh one each run, as llama-cli and Ollama do].
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u32>,
}

impl SamplingArgs {
    /// The sampler these flags describe.
    pub(crate) fn sampler(&self) -> SamplerOpts {
        SamplerOpts {
            temperature: if self.greedy { 0.0 } else { self.temperature },
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            seed: self.seed.unwrap_or_else(fresh_seed),
            ..SamplerOpts::default()
        }
    }
}

/// A seed drawn from the process's random hasher keys (no extra crate for one number).
fn fresh_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let hash = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    #[allow(clippy::cast_possible_truncation)] // any 32 bits of it
    let seed = hash as u32;
    seed
}

/// The image file `path` (`--image`, the chat's `/image`), read whole.
pub(crate) fn read_image(path: &std::path::Path) -> anyhow::Result<wick::Media> {
    use anyhow::Context as _;
    let bytes =
        std::fs::read(path).with_context(|| format!("reading the image {}", path.display()))?;
    Ok(wick::Media::image(bytes))
}

/// `layers`, with `--fit-target`'s margin (MiB) when they are `auto`.
pub(crate) fn with_fit_target(layers: wick::GpuLayers, fit_target_mib: u64) -> wick::GpuLayers {
    match layers {
        wick::GpuLayers::Auto { .. } => wick::GpuLayers::Auto {
            margin: fit_target_mib.saturating_mul(1 << 20),
        },
        count @ wick::GpuLayers::Count(_) => count,
    }
}

/// How the model is loaded.
#[derive(Debug, Clone, Args)]
pub(crate) struct LoadArgs {
    /// Context window in tokens.
    #[arg(short = 'c', long, default_value_t = 4096, value_name = "N")]
    pub(crate) ctx_size: u32,

    /// CPU threads [default: every core].
    #[arg(long, value_name = "N")]
    pub(crate) threads: Option<u32>,

    /// Layers to offload to a GPU (needs a GPU build): a number (the output layer counts as
    /// one), `all`, or `auto`: as many as fit the devices' free memory, leaving
    /// --fit-target free on each (llama.cpp's fit, as llama-server's `--fit on`).
    #[arg(
        long,
        visible_alias = "ngl",
        default_value = "0",
        value_name = "N|all|auto"
    )]
    pub(crate) gpu_layers: wick::GpuLayers,

    /// With `--gpu-layers auto`: MiB to leave free on each device.
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pub(crate) fit_target: u64,

    /// The model's multimodal projector (an `mmproj` GGUF, shipped beside vision models'
    /// weights): prompts may then hold images (--image).
    #[arg(long, value_name = "FILE")]
    pub(crate) mmproj: Option<std::path::PathBuf>,

    /// Offload to these devices only (llama-server's flag): llama.cpp's names, separated by
    /// commas (`wick devices` lists them) [default: every GPU].
    #[arg(
        long = "device",
        visible_alias = "dev",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub(crate) devices: Vec<String>,

    #[command(flatten)]
    pub(crate) cache: CacheTypes,
}

/// The KV cache's types (llama-server's flags).
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct CacheTypes {
    /// The KV cache's type for keys: `f32`, `f16`, `bf16`, `q8_0`, `q4_0`, `q4_1`, `iq4_nl`,
    /// `q5_0` or `q5_1`. A quantized cache holds more tokens in the same memory (`q8_0`: about
    /// half of `f16`'s), at some accuracy. Every type runs wick's deterministic attention:
    /// answers stay bit-identical warm, cold, concurrent and at every CPU level.
    #[arg(
        long,
        visible_alias = "ctk",
        default_value = "f16",
        value_name = "TYPE"
    )]
    pub(crate) cache_type_k: wick::CacheType,

    /// The KV cache's type for values (as --cache-type-k).
    #[arg(
        long,
        visible_alias = "ctv",
        default_value = "f16",
        value_name = "TYPE"
    )]
    pub(crate) cache_type_v: wick::CacheType,
}

impl CacheTypes {
    /// Keys', values'.
    pub(crate) fn pair(self) -> [wick::CacheType; 2] {
        [self.cache_type_k, self.cache_type_v]
    }
}

/// What chat templates are given besides the conversation.
#[derive(Debug, Clone, Args)]
pub(crate) struct TemplateArgs {
    /// Whether a chat template that can think is asked to: the default of its
    /// `enable_thinking` variable (a request's own wins). `auto`: templates that read it get
    /// true; `on`: true; `off`: false (the template opens and closes an empty reasoning
    /// block, or leaves it out).
    #[arg(long, default_value = "auto", value_name = "on|off|auto")]
    pub(crate) reasoning: wick::Reasoning,

    /// Variables every chat template render gets unless the request sets its own, as a JSON
    /// object (llama-server's flag), e.g. `{"reasoning_effort": "low"}`.
    #[arg(long, value_name = "JSON", value_parser = parse_kwargs)]
    pub(crate) chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,

    /// Do not pass today's date to chat templates. By default they get it (UTC) as
    /// `date_string` ("26 Jul 2024") and `datetime` ("Jul 26 2024"), as llama-server passes
    /// them: Llama 3.x templates print it as "Today Date" (without it, their fixed date).
    #[arg(long)]
    pub(crate) no_template_date: bool,
}

impl TemplateArgs {
    /// `builder` with these settings.
    pub(crate) fn apply(&self, builder: wick::LlmBuilder) -> wick::LlmBuilder {
        builder
            .reasoning(self.reasoning)
            .template_kwargs(self.chat_template_kwargs.clone().unwrap_or_default())
            .template_date(!self.no_template_date)
    }
}

/// `--chat-template-kwargs`: a JSON object.
fn parse_kwargs(value: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(value) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("expected a JSON object, e.g. '{\"enable_thinking\": false}'".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// Loads the model `model` names (downloading it when needed), or the default model, for one
/// conversation at a time: `wick run` and `wick chat` load it the same way.
pub(crate) fn load_llm(
    model: Option<&str>,
    chat_template: Option<&str>,
    sampling: &SamplingArgs,
    load: &LoadArgs,
    template: &TemplateArgs,
    max_tokens: u32,
) -> anyhow::Result<Loaded> {
    use anyhow::Context as _;
    let mut builder = match model {
        Some(reference) => wick::Llm::builder().model_ref(reference),
        None => wick::Llm::builder(),
    };
    if let Some(template) = chat_template {
        builder = builder.chat_template(template);
    }
    let builder = template
        .apply(builder)
        .temperature(sampling.sampler().temperature)
        .generate_kwargs(sampling.sampler())
        .max_new_tokens(max_tokens)
        .context_window(load.ctx_size)
        .model_kwargs(wick::ModelKwargs {
            n_threads: load.threads,
            n_gpu_layers: with_fit_target(load.gpu_layers, load.fit_target),
            n_seq_max: 1,
            cache_types: load.cache.pair(),
            ..wick::ModelKwargs::default()
        })
        .devices(load.devices.iter().cloned());
    let builder = match &load.mmproj {
        Some(path) => builder.mmproj(path),
        None => builder,
    };
    let llm = builder.build().context("loading the model")?;
    Ok(Loaded { llm: Some(llm) })
}

/// How long an engine gets to finish its last step once its model is dropped, before the
/// process exits anyway.
pub(crate) const ENGINE_EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A model a command loaded ([`load_llm`]). Dropping it drops the model and waits for its
/// engine's thread: an answer cut short (a closed pipe, an interrupt) is cancelled only at the
/// engine's next step, and a process that exits while the thread is inside llama.cpp tears
/// llama.cpp down under it (a segmentation fault).
#[derive(Debug)]
pub(crate) struct Loaded {
    llm: Option<wick::Llm>,
}

impl std::ops::Deref for Loaded {
    type Target = wick::Llm;

    fn deref(&self) -> &wick::Llm {
        self.llm.as_ref().expect("the model lives until dropped")
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Some(llm) = self.llm.take() {
            if !llm.close(ENGINE_EXIT_GRACE) {
                eprintln!("wick: the engine did not stop in time; exiting anyway");
            }
        }
    }
}
