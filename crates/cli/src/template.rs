//! `wick template render` and `wick template detect`: chat templates without generating.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use wick_backend::{Backend, BackendConfig};
use wick_llama::LlamaBackend;
use wick_models::GgufHeader;
use wick_template::{
    ChatTemplate, DeriveOptions, JinjaTemplate, NamedTemplate, RenderRequest, RoleTemplate,
    Segments,
};

/// `wick template …`.
#[derive(Debug, Args)]
pub(crate) struct TemplateArgs {
    #[command(subcommand)]
    command: TemplateCommand,
}

#[derive(Debug, Subcommand)]
enum TemplateCommand {
    /// Render a request file's conversation to the prompt text (stdout, byte for byte).
    Render(RenderArgs),
    /// Print the llama.cpp named template a Jinja template matches.
    Detect {
        /// The Jinja template file.
        file: PathBuf,
    },
    /// Derive the role template (JSON) that renders plain chats exactly as a Jinja template
    /// does; fails with the reason when there is none.
    Derive(DeriveArgs),
}

#[derive(Debug, Args)]
struct DeriveArgs {
    /// The Jinja template file.
    file: PathBuf,
    /// The BOS token text the template sees as `bos_token`.
    #[arg(long, value_name = "T")]
    bos_token: Option<String>,
    /// The EOS token text the template sees as `eos_token`.
    #[arg(long, value_name = "T")]
    eos_token: Option<String>,
}

/// Which chat template to use (one of them).
#[derive(Debug, Args, Clone)]
pub(crate) struct TemplateChoice {
    /// A Jinja chat template file.
    #[arg(long, value_name = "FILE.jinja", group = "template_source")]
    pub(crate) template: Option<PathBuf>,
    /// One of llama.cpp's named templates (chatml, llama3, …).
    #[arg(long, value_name = "NAME", group = "template_source")]
    pub(crate) named: Option<String>,
    /// A role template (JSON).
    #[arg(long, value_name = "FILE", group = "template_source")]
    pub(crate) role_template: Option<PathBuf>,
}

impl TemplateChoice {
    /// The chosen template, if one was chosen.
    pub(crate) fn load(&self) -> Result<Option<ChatTemplate>> {
        let t = if let Some(path) = &self.template {
            ChatTemplate::jinja_file(path)?
        } else if let Some(name) = &self.named {
            ChatTemplate::named(name)?
        } else if let Some(path) = &self.role_template {
            ChatTemplate::role_file(path)?
        } else {
            return Ok(None);
        };
        Ok(Some(t))
    }
}

#[derive(Debug, Args)]
struct RenderArgs {
    #[command(flatten)]
    choice: TemplateChoice,
    /// Use the chat template of this GGUF model: its role template
    /// (`chat_template.roles.<role>.prefix|suffix|strip`, …) when it has one, else its Jinja
    /// template with its BOS/EOS texts. Any model reference: a GGUF file, an http(s):// URL,
    /// hf:owner/repo/file.gguf, owner/repo[:QUANT] or a name from `wick ls`.
    #[arg(long, value_name = "REF", group = "template_source")]
    model: Option<String>,
    /// The request (JSON): messages, tools, BOS and EOS token texts, whether to add the
    /// generation prompt (`add_generation_prompt`) or to end inside the last message so an
    /// answer continues it (`continue_final_message`), and extra template variables
    /// (`extra_context`).
    #[arg(long, value_name = "FILE.json")]
    request: PathBuf,
    /// Print the prompt as a JSON array of {"kind": "control"|"content", "text"}.
    #[arg(long)]
    segments: bool,
}

pub(crate) fn run(args: &TemplateArgs) -> Result<()> {
    match &args.command {
        TemplateCommand::Render(r) => render(r),
        TemplateCommand::Detect { file } => detect(file),
        TemplateCommand::Derive(d) => derive(d),
    }
}

pub(crate) fn read_request(path: &PathBuf) -> Result<RenderRequest> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the request {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing the request {}", path.display()))
}

/// The model's Jinja template, with BOS/EOS texts filled into the request where it has none.
pub(crate) fn model_template(
    backend: &LlamaBackend,
    request: &mut RenderRequest,
) -> Result<ChatTemplate> {
    let info = backend.info();
    let source = info
        .chat_template
        .clone()
        .context("the model has no chat template in its metadata; choose one with --template, --named or --role-template")?;
    let (bos, eos) = wick_engine::special_texts(backend)?;
    if request.bos_token.is_none() {
        request.bos_token = bos;
    }
    if request.eos_token.is_none() {
        request.eos_token = eos;
    }
    Ok(ChatTemplate::Jinja(JinjaTemplate::new(&source)?))
}

/// The role template in a GGUF file's metadata (`chat_template.*` keys), if it has one.
pub(crate) fn gguf_role_template(header: &GgufHeader) -> Result<Option<ChatTemplate>> {
    let pairs = header.strings_with_prefix("chat_template.");
    Ok(RoleTemplate::from_metadata(pairs)?.map(ChatTemplate::Role))
}

/// A GGUF file's chat template, read from its header without loading the weights: its role
/// template when it has one, else its Jinja template, with the BOS/EOS texts filled into the
/// request where it has none.
fn header_template(path: &Path, request: &mut RenderRequest) -> Result<ChatTemplate> {
    let header = GgufHeader::read(path)
        .with_context(|| format!("reading the header of {}", path.display()))?;
    if let Some(t) = gguf_role_template(&header)? {
        return Ok(t);
    }
    let source = header
        .chat_template()
        .context("the model has no chat template in its metadata; choose one with --template, --named or --role-template")?;
    for t in header.special_tokens() {
        let slot = match t.role {
            "bos" => &mut request.bos_token,
            "eos" => &mut request.eos_token,
            _ => continue,
        };
        if slot.is_none() {
            *slot = t.text;
        }
    }
    Ok(ChatTemplate::Jinja(JinjaTemplate::new(source)?))
}

pub(crate) fn load_model(path: &PathBuf) -> Result<LlamaBackend> {
    let config = BackendConfig::new(path).with_n_ctx(512).with_n_seq_max(1);
    LlamaBackend::load(&config).with_context(|| format!("loading {}", path.display()))
}

fn render(args: &RenderArgs) -> Result<()> {
    let mut request = read_request(&args.request)?;
    let template = match (&args.model, args.choice.load()?) {
        (_, Some(t)) => t,
        (Some(model), None) => {
            header_template(&crate::run::resolve_model(Some(model))?, &mut request)?
        }
        (None, None) => bail!("choose a template: --template, --named, --role-template or --model"),
    };
    let mut out = std::io::stdout().lock();
    if args.segments {
        let segs: Segments = template.render_segments(&request)?;
        serde_json::to_writer(&mut out, &segs)?;
    } else {
        out.write_all(template.render(&request)?.as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn detect(file: &PathBuf) -> Result<()> {
    let source =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    match NamedTemplate::detect(&source) {
        Some(t) => {
            outln!("{t}")?;
            Ok(())
        }
        None => bail!(
            "{} matches none of llama.cpp's named templates",
            file.display()
        ),
    }
}

fn derive(args: &DeriveArgs) -> Result<()> {
    let file = &args.file;
    let source =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let template = JinjaTemplate::new(&source)?;
    let options = DeriveOptions::with_tokens(args.bos_token.clone(), args.eos_token.clone());
    let role = RoleTemplate::derive(&template, &options)
        .with_context(|| format!("{} has no exact role template", file.display()))?;
    outln!("{}", serde_json::to_string_pretty(&role)?)?;
    Ok(())
}
