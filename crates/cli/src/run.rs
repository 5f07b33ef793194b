//! `wick run`: one prompt in, the streamed answer out — a thin client of the library (`Llm`),
//! so the prompt, the template's stops and the answer are the server's and `wick chat`'s.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use wick::{ChatRequest, Event, GenerateOptions, Message, PromptInput, Role};
use wick_models::{ModelRef, ModelStore, Settings};

use crate::flags::{LoadArgs, SamplingArgs, TemplateArgs};

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
    #[arg(long, conflicts_with_all = ["system", "chat_template"])]
    raw: bool,

    /// Format the prompt with this llama.cpp template name (`chatml`, `llama3`, …) or inline
    /// Jinja instead of the model's own template [default: the model's].
    #[arg(long, value_name = "NAME|JINJA")]
    chat_template: Option<String>,

    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256, value_name = "N")]
    max_tokens: u32,

    /// An image (PNG, JPEG, GIF, BMP, …) the prompt asks about, placed after its text;
    /// repeatable. Needs the model's projector (--mmproj).
    #[arg(long, value_name = "FILE", conflicts_with = "raw")]
    image: Vec<std::path::PathBuf>,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    load: LoadArgs,

    #[command(flatten)]
    template: TemplateArgs,

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

/// Logs to standard error (`--verbose`, or `WICK_LOG` as a filter), in colour only on a
/// terminal and without `NO_COLOR`.
pub(crate) fn init_logging(verbose: bool) {
    let filter = if verbose { "info" } else { "off" };
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WICK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .try_init();
}

pub(crate) fn run(args: &RunArgs) -> Result<()> {
    init_logging(args.verbose);
    let prompt = args.prompt_text()?;
    if prompt.trim().is_empty() {
        bail!("the prompt is empty: pass it as an argument or on standard input");
    }
    let started = Instant::now();
    let llm = crate::flags::load_llm(
        args.model.as_deref(),
        args.chat_template.as_deref(),
        &args.sampling,
        &args.load,
        &args.template,
        args.max_tokens,
    )?;
    let load_time = started.elapsed();
    let options = GenerateOptions {
        max_tokens: Some(args.max_tokens),
        ..GenerateOptions::default()
    };
    let mut out = std::io::stdout().lock();
    let asked = Instant::now();
    let mut first_token = None;
    let mut usage = None;
    if args.raw {
        let input = PromptInput::Text {
            text: prompt,
            formatted: true,
        };
        for item in llm.stream_complete_with(input, &options)? {
            let item = item?;
            if !item.delta.is_empty() {
                first_token.get_or_insert_with(|| asked.elapsed());
                out.write_all(item.delta.as_bytes())?;
                out.flush()?;
            }
            usage = usage.or(item.usage);
        }
    } else {
        let mut message = Message::new(Role::User, prompt);
        for path in &args.image {
            message.push_media(crate::flags::read_image(path)?);
        }
        let mut request = ChatRequest::new(vec![message]);
        request.system.clone_from(&args.system);
        for item in llm.stream_chat_with(&request, &options)? {
            let item = item?;
            for event in &item.events {
                first_token.get_or_insert_with(|| asked.elapsed());
                show(event, &mut out)?;
            }
            usage = usage.or(item.usage);
        }
    }
    writeln!(out)?;
    out.flush()?;

    if args.verbose {
        let usage = usage.unwrap_or_default();
        let total = asked.elapsed().as_secs_f64();
        let first = first_token.unwrap_or_default().as_secs_f64();
        let decode = (total - first).max(1e-9);
        let generated = usage.completion_tokens;
        let rate = f64::from(generated.saturating_sub(1)) / decode;
        eprintln!(
            "model {} loaded in {:.2}s; prompt {} tokens ({} cached), first token after \
             {first:.3}s; {generated} tokens generated in {total:.2}s ({rate:.1} tokens/s)",
            args.model.as_deref().unwrap_or("(default)"),
            load_time.as_secs_f64(),
            usage.prompt_tokens,
            usage.cached_tokens,
        );
    }
    Ok(())
}

/// The answer on standard output; reasoning and tool calls on standard error, so a pipe gets
/// the answer alone.
fn show(event: &Event, out: &mut impl Write) -> std::io::Result<()> {
    match event {
        Event::Content(text) => {
            out.write_all(text.as_bytes())?;
            out.flush()
        }
        Event::Reasoning(text) | Event::ToolCallArgs { text, .. } => {
            eprint!("{text}");
            Ok(())
        }
        Event::ToolCallStart { name, .. } => {
            eprint!("\n[tool call] {name} ");
            Ok(())
        }
        _ => Ok(()),
    }
}
