//! `wick`: a local LLM runtime over llama.cpp.

/// `println!` that returns the write's error instead of panicking, so a closed pipe
/// (`wick tokenize … | head`) ends the command quietly (see [`closed_pipe`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod bench;
mod cache;
mod chat;
mod devices;
mod flags;
mod models;
mod parse;
mod perplexity;
mod ps;
mod quantize;
mod rpc_worker;
mod run;
mod serve;
mod template;
mod tokenize;

use std::ffi::OsString;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// wick runs GGUF language models locally through llama.cpp.
///
/// Without `-m`, commands use the default model (SmolLM2-135M-Instruct Q4_1) from wick's cache
/// directory (`$WICK_HOME`, default: the user cache dir + `/wick`); `scripts/quickstart` fetches
/// and verifies it. A model is named the same way everywhere: a GGUF path, an http(s):// URL,
/// hf:owner/repo/file.gguf, owner/repo[:QUANT] (Hugging Face, `Q4_K_M` by default; `HF_TOKEN`,
/// `HF_ENDPOINT` and the Hugging Face cache are honoured) or a name from `wick ls`.
#[derive(Debug, Parser)]
#[command(name = "wick", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Cap the instruction set wick's CPU kernels use: `scalar`, `avx2`, `avx2-vnni` or
    /// `avx512` (at most what this build has; the default is its best). Every level gives the
    /// same bits, so this only changes speed: it is for testing and measuring each level on
    /// one machine.
    #[arg(long, global = true, env = "WICK_CPU_LEVEL", value_name = "LEVEL")]
    cpu_level: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one prompt: format it with the model's chat template and stream the answer.
    Run(run::RunArgs),
    /// Serve the OpenAI-compatible HTTP API (chat, completions, embeddings, models, metrics).
    Serve(Box<serve::ServeArgs>),
    /// Chat in the terminal with a model, or with a running server (`--url`).
    Chat(chat::ChatArgs),
    /// Measure wick against llama.cpp's llama-bench and llama-server in one run (built on
    /// demand): speed, concurrency, restart, multi-turn and tool-call streaming.
    Bench(bench::BenchArgs),
    /// Convert a model to another weight type with llama.cpp's llama-quantize (built on
    /// demand), to try wick's kernels on it.
    Quantize(quantize::QuantizeArgs),
    /// Score a text (perplexity), and with --kl-divergence compare every distribution with
    /// llama.cpp's fast kernels or another model (KL divergence, top-1 agreement).
    Perplexity(perplexity::PerplexityArgs),
    /// Inspect or empty the prompt cache's KV snapshots on disk (`$WICK_HOME/kv`).
    Cache(cache::CacheArgs),
    /// List the models a running `wick serve` has loaded (`--all`: every model it serves,
    /// with its state), their memory and when each unloads if idle.
    Ps(ps::PsArgs),
    /// Unload a model from a running `wick serve` (it loads again when a request names it).
    Stop(ps::StopArgs),
    /// List the devices llama.cpp can run layers on (the CPU, GPUs): name, kind, memory, free.
    Devices(devices::DevicesArgs),
    /// Fetch a model into the store (resuming, verifying its SHA-256) and name it.
    Pull(models::PullArgs),
    /// List the models in the store: name, size, quantization, architecture, source.
    Ls,
    /// Remove a model from the store (its file too, unless another name or tool uses it).
    Rm(models::RmArgs),
    /// Render chat templates (Jinja, llama.cpp's named ones, role templates) and detect them.
    Template(template::TemplateArgs),
    /// Print a request's prompt as tokens (JSON): id, piece, kind (control/content), control.
    Tokenize(tokenize::TokenizeArgs),
    /// Parse raw model output (stdin) into content, reasoning and tool calls, or OpenAI deltas.
    Parse(parse::ParseArgs),
    /// Lend this machine's devices to `wick serve --rpc` on another (llama.cpp's RPC server;
    /// unauthenticated: trusted networks only).
    RpcWorker(rpc_worker::RpcWorkerArgs),
}

/// llama-server's multi-letter flags with one dash (`-ngl 99`, `-ctk q8_0`) as the long
/// aliases wick's commands know them by (`--ngl`): clap would read `-ctk` as `-c tk`.
/// Arguments after `--` stay as they are.
fn llama_server_flags(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    const FLAGS: [&str; 5] = ["-ngl", "-ctk", "-ctv", "-dev", "-md"];
    let mut rest = false;
    args.into_iter()
        .map(|arg| {
            rest |= arg == "--";
            if !rest && FLAGS.iter().any(|flag| arg == *flag) {
                let mut long = OsString::from("-");
                long.push(&arg);
                long
            } else {
                arg
            }
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(llama_server_flags(std::env::args_os()));
    if let Some(level) = cli.cpu_level.as_deref().filter(|l| !l.trim().is_empty()) {
        if let Err(e) = cap_cpu_level(level) {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::from(2);
        }
    }
    let result: Result<()> = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Serve(args) => serve::run(*args),
        Command::Chat(args) => chat::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Cache(args) => cache::run(&args),
        Command::Quantize(args) => quantize::run(&args),
        Command::Perplexity(args) => perplexity::run(&args),
        Command::Ps(args) => ps::ps(&args),
        Command::Stop(args) => ps::stop(&args),
        Command::Devices(args) => devices::run(&args),
        Command::Pull(args) => models::pull(&args),
        Command::Ls => models::ls(),
        Command::Rm(args) => models::rm(&args),
        Command::Template(args) => template::run(&args),
        Command::Tokenize(args) => tokenize::run(&args),
        Command::Parse(args) => parse::run(&args),
        Command::RpcWorker(args) => rpc_worker::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader went away (`| head`): what it wanted was written; end quietly.
        Err(e) if closed_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Caps wick's CPU kernels at `level` (`--cpu-level`, `WICK_CPU_LEVEL`).
fn cap_cpu_level(level: &str) -> Result<()> {
    let level: wick_kernels::cpu::Level = level.parse()?;
    wick_kernels::cpu::set_cap(level)?;
    Ok(())
}

/// Whether `e` is a write to a closed pipe.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_server_s_one_dash_flags_become_the_long_aliases() {
        let args = [
            "wick", "run", "-ctk", "q8_0", "-ngl", "2", "-c", "64", "--", "-ctk",
        ];
        let got = llama_server_flags(args.map(OsString::from));
        let want = [
            "wick", "run", "--ctk", "q8_0", "--ngl", "2", "-c", "64", "--", "-ctk",
        ];
        assert_eq!(got, want.map(OsString::from));
    }
}
