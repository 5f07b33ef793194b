//! `wick`: a local LLM runtime over llama.cpp.

mod parse;
mod paths;
mod run;
mod utf8;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// wick runs GGUF language models locally through llama.cpp.
///
/// Without `-m`, commands use the default model (SmolLM2-135M-Instruct Q4_1) from wick's cache
/// directory (`$WICK_HOME`, default: the user cache dir + `/wick`); `scripts/quickstart` fetches
/// and verifies it.
#[derive(Debug, Parser)]
#[command(name = "wick", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one prompt: format it with the model's chat template and stream the answer.
    Run(run::RunArgs),
    /// Parse raw model output (stdin) into content, reasoning and tool calls, or OpenAI deltas.
    Parse(parse::ParseArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Parse(args) => parse::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
