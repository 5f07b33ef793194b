//! `wick parse`: raw model output on stdin → the parsed message, or its OpenAI deltas.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use wick_parse::{DeltaBuilder, EndedBy, Format, ParseOptions, ParsedMessage, Parser, ToolSchemas};

/// Arguments of `wick parse`.
#[derive(Debug, Args)]
pub(crate) struct ParseArgs {
    /// The output format (see `--list-formats`).
    #[arg(long, value_name = "NAME", required_unless_present = "list_formats")]
    format: Option<String>,

    /// The request's tools, a JSON file in the OpenAI shape (an array, or an object with a
    /// `tools` array); used to type XML- and python-style argument values.
    #[arg(long, value_name = "FILE.json")]
    tools: Option<PathBuf>,

    /// The prompt ended inside a reasoning block (the output starts in reasoning).
    #[arg(long)]
    thinking_forced_open: bool,

    /// How generation ended: `stop` or `length`.
    #[arg(long, default_value = "stop", value_name = "stop|length")]
    ended_by: String,

    /// Print the OpenAI chunk choices (`{"index", "delta", "finish_reason"}`) as JSON lines.
    #[arg(long)]
    deltas: bool,

    /// Feed the parser chunks of N bytes [default: the whole input at once].
    #[arg(long, value_name = "N", conflicts_with = "chunk_seed")]
    chunk_size: Option<usize>,

    /// Feed the parser chunks cut at random byte positions drawn from seed S.
    #[arg(long, value_name = "S")]
    chunk_seed: Option<u64>,

    /// List the format names and exit.
    #[arg(long)]
    list_formats: bool,
}

pub(crate) fn run(args: &ParseArgs) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    if args.list_formats {
        for f in Format::ALL {
            writeln!(stdout, "{f}")?;
        }
        return Ok(());
    }
    let format: Format = args
        .format
        .as_deref()
        .context("--format is required")?
        .parse()?;
    let ended_by: EndedBy = args.ended_by.parse()?;
    let mut options = ParseOptions::new().thinking_forced_open(args.thinking_forced_open);
    if let Some(path) = &args.tools {
        options = options.tools(read_tools(path)?);
    }
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("reading stdin")?;
    if let Err(e) = std::str::from_utf8(&input) {
        bail!("stdin is not valid UTF-8 (at byte {})", e.valid_up_to());
    }
    let mut parser = Parser::new(format, options);
    let mut events = Vec::new();
    for chunk in chunks(&input, args.chunk_size, args.chunk_seed) {
        events.extend(parser.feed_bytes(chunk));
    }
    events.extend(parser.finish(ended_by));
    if args.deltas {
        for choice in DeltaBuilder::new().push(&events) {
            writeln!(stdout, "{}", serde_json::to_string(&choice)?)?;
        }
    } else {
        let mut message = ParsedMessage::default();
        message.extend(&events);
        writeln!(stdout, "{}", serde_json::to_string(&message)?)?;
    }
    Ok(())
}

fn read_tools(path: &PathBuf) -> Result<ToolSchemas> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let tools = value.get("tools").unwrap_or(&value);
    if !tools.is_array() {
        bail!("{}: expected a JSON array of tools", path.display());
    }
    Ok(ToolSchemas::from_openai(tools))
}

/// Splits the input into fixed-size or seeded-random byte chunks (cuts may fall inside
/// UTF-8 characters; the parser holds incomplete sequences).
fn chunks(input: &[u8], size: Option<usize>, seed: Option<u64>) -> Vec<&[u8]> {
    if let Some(seed) = seed {
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut out = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let n = usize::try_from((state >> 33) % 16).unwrap_or(0) + 1;
            let (a, b) = rest.split_at(n.min(rest.len()));
            out.push(a);
            rest = b;
        }
        return out;
    }
    match size {
        Some(n) if n > 0 => input.chunks(n).collect(),
        _ => vec![input],
    }
}
