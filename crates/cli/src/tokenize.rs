//! `wick tokenize`: a request's prompt as tokens, each with the kind of text it came from.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use wick_backend::Backend;
use wick_template::{ChatTemplate, RenderRequest, SegmentKind};
use wick_types::TokenId;

use crate::template::{
    gguf_role_template, load_model, model_template, read_request, TemplateChoice,
};

/// Arguments of `wick tokenize`.
#[derive(Debug, Args)]
pub(crate) struct TokenizeArgs {
    /// The model whose vocabulary tokenizes (and whose chat template is the default: its role
    /// template from the `chat_template.*` keys when it has one, else its Jinja template): a
    /// GGUF file, an http(s):// URL, hf:owner/repo/file.gguf, owner/repo[:QUANT] or a name
    /// from `wick ls`.
    #[arg(long, short, value_name = "REF")]
    model: String,
    /// The request (JSON): messages, tools, BOS and EOS token texts, whether to add the
    /// generation prompt (`add_generation_prompt`) or to end inside the last message so an
    /// answer continues it (`continue_final_message`), and extra template variables
    /// (`extra_context`).
    #[arg(long, value_name = "FILE.json")]
    request: PathBuf,
    #[command(flatten)]
    choice: TemplateChoice,
}

/// The prompt's tokens: template text tokenized with special-token parsing on, content with it
/// off, and BOS first when the model adds one and the prompt does not start with it.
pub(crate) fn prompt_tokens(
    backend: &dyn Backend,
    template: &ChatTemplate,
    request: &RenderRequest,
) -> Result<Vec<(TokenId, SegmentKind)>> {
    let segments = template.render_segments(request)?;
    Ok(wick_engine::segment_tokens(backend, &segments)?)
}

pub(crate) fn run(args: &TokenizeArgs) -> Result<()> {
    let mut request = read_request(&args.request)?;
    let model = crate::run::resolve_model(Some(&args.model))?;
    let backend = load_model(&model)?;
    let template = if let Some(t) = args.choice.load()? {
        t
    } else {
        let header = wick_models::GgufHeader::read(&model)
            .with_context(|| format!("reading the header of {}", model.display()))?;
        match gguf_role_template(&header)? {
            Some(t) => t,
            None => model_template(&backend, &mut request)?,
        }
    };
    let tokens = prompt_tokens(&backend, &template, &request)?;
    let special = &backend.info().special;
    let mut rows = Vec::with_capacity(tokens.len());
    for (id, kind) in tokens {
        let piece = backend
            .detokenize(&[id])
            .with_context(|| format!("detokenizing {}", id.0))?;
        rows.push(json!({
            "id": id.0,
            "piece": String::from_utf8_lossy(&piece),
            "kind": kind,
            "control": special.is_control(id),
        }));
    }
    outln!("{}", serde_json::Value::Array(rows))?;
    Ok(())
}
