//! `wick run`: one prompt in, the streamed answer out.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use wick_backend::{Backend, BackendConfig, Decoded};
use wick_llama::LlamaBackend;
use wick_models::{ModelRef, ModelStore, Settings};
use wick_types::{ChatRequest, Message, Role, SeqId};

use wick_engine::Utf8Stream;

use crate::flags::{LoadArgs, SamplingArgs};

/// Arguments of `wick run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The prompt. Read from standard input when omitted or `-`.
    prompt: Option<String>,

    /// The model: a GGUF file, an http(s):// URL, hf:owner/repo/file.gguf, owner/repo[:QUANT]
    /// or a name from `wick ls`; remote models are downloaded into the store first
    /// [default: the default model in wick's cache directory].
    #[arg(short, long, value_name = "REF")]
    model: Option<String>,

    /// A system message placed before the prompt.
    #[arg(short, long, value_name = "TEXT")]
    system: Option<String>,

    /// Send the prompt as it is, without the model's chat template.
    #[arg(long)]
    raw: bool,

    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256, value_name = "N")]
    max_tokens: u32,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    load: LoadArgs,

    /// Print load and speed timings (and llama.cpp's log) to standard error.
    #[arg(short, long)]
    verbose: bool,
}

impl RunArgs {
    fn prompt_text(&self) -> Result<String> {
        match self.prompt.as_deref() {
            Some(p) if p != "-" => Ok(p.to_owned()),
            _ => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .context("reading the prompt from standard input")?;
                Ok(text)
            }
        }
    }
}

/// Resolves `-m` (any model reference; downloads when needed), or the default model.
pub(crate) fn resolve_model(model: Option<&str>) -> Result<PathBuf> {
    let reference = ModelRef::parse_opt(model)?;
    let store = ModelStore::new(Settings::from_env())?;
    Ok(store.resolve(&reference)?)
}

fn init_logging(verbose: bool) {
    let filter = if verbose { "info" } else { "off" };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WICK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

pub(crate) fn run(args: &RunArgs) -> Result<()> {
    init_logging(args.verbose);
    let prompt = args.prompt_text()?;
    if prompt.trim().is_empty() {
        bail!("the prompt is empty: pass it as an argument or on standard input");
    }
    let model = resolve_model(args.model.as_deref())?;
    let config = BackendConfig::new(&model)
        .with_n_ctx(args.load.ctx_size)
        .with_n_seq_max(1)
        .with_n_threads(args.load.threads)
        .with_n_gpu_layers(args.load.gpu_layers);

    let started = Instant::now();
    let mut backend = LlamaBackend::load(&config)?;
    let load_time = started.elapsed();

    let tokens = if args.raw {
        backend.tokenize_prompt(&prompt, false)?
    } else {
        let mut request = ChatRequest::new(vec![Message::new(Role::User, prompt)]);
        request.system.clone_from(&args.system);
        backend
            .apply_chat_template(&request)
            .with_context(|| format!("formatting the prompt for {} (try --raw)", model.display()))?
    };
    let n_ctx = backend.info().n_ctx as usize;
    if tokens.len() >= n_ctx {
        bail!(
            "the prompt is {} tokens but the context window is {n_ctx}: shorten it or raise --ctx-size",
            tokens.len()
        );
    }
    let sampler = backend.sampler_new(&args.sampling.sampler())?;
    let seq = SeqId(0);

    let prefill_start = Instant::now();
    backend.prefill(seq, &tokens)?;
    let mut out = std::io::stdout().lock();
    let mut text = Utf8Stream::default();
    let mut generated = 0usize;
    let mut first_token: Option<Duration> = None;
    let budget = (args.max_tokens as usize).min(n_ctx - tokens.len());
    let decode_start = Instant::now();
    while generated < budget {
        let decoded = backend.decode_one(seq, Some(sampler))?;
        first_token.get_or_insert_with(|| prefill_start.elapsed());
        generated += 1;
        let Decoded::Token(token) = decoded else {
            break;
        };
        let piece = text.push(&backend.detokenize(&[token])?);
        out.write_all(piece.as_bytes())?;
        out.flush()?;
    }
    out.write_all(text.finish().as_bytes())?;
    writeln!(out)?;
    out.flush()?;

    if args.verbose {
        let decode = decode_start.elapsed().as_secs_f64();
        let first = first_token.unwrap_or_default().as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let rate = generated as f64 / decode.max(1e-9);
        eprintln!(
            "model {} loaded in {:.2}s; prompt {} tokens, first token after {:.3}s; \
             {generated} tokens generated in {decode:.2}s ({rate:.1} tokens/s)",
            model.display(),
            load_time.as_secs_f64(),
            tokens.len(),
            first,
        );
    }
    Ok(())
}
