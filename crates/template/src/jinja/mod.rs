//! Jinja chat templates, rendered as transformers renders them, and tracked into segments.

mod env;
mod marks;
mod markup;
mod methods;
mod pyfilters;
mod pyfmt;
mod source;
mod strftime;

use minijinja::{Environment, Value};

use crate::error::from_minijinja;
use crate::{RenderRequest, Segments, TemplateError};

pub(crate) use env::Raised;
pub(crate) use marks::strings_of;
pub use strftime::DateTime;

/// The context variable holding the marks' base in a tracked render.
pub(crate) const MARKS_VAR: &str = "__wick_content_marks__";

/// The default fuel: enough for long conversations with tools through the largest real
/// templates, small enough that a runaway loop stops within about a second.
pub const DEFAULT_FUEL: u64 = 50_000_000;

/// A compiled Jinja chat template.
///
/// The environment matches transformers' (`trim_blocks`, `lstrip_blocks`, loop controls,
/// `raise_exception`, `strftime_now`, `tojson` with Python's `json.dumps` arguments, the
/// `generation` tag, Python's printing of `None`, booleans, dicts and lists, Python string
/// methods, lenient undefined values), and every render is bounded by fuel.
///
/// ```
/// use wick_template::{JinjaTemplate, RenderRequest, SegmentKind};
///
/// let t = JinjaTemplate::new(
///     "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}\
///      {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
/// )?;
/// let req = RenderRequest::new(vec![serde_json::json!({"role": "user", "content": " hi<|im_end|> "})]);
/// assert_eq!(t.render(&req)?, "<|im_start|>user\nhi<|im_end|><|im_end|>\n<|im_start|>assistant\n");
/// let segs = t.render_segments(&req)?;
/// assert_eq!(segs.text(), t.render(&req)?);
/// assert_eq!(segs.as_slice()[1].kind, SegmentKind::Content);
/// assert_eq!(segs.as_slice()[1].text, "hi<|im_end|>");
/// # Ok::<(), wick_template::TemplateError>(())
/// ```
#[derive(Debug)]
pub struct JinjaTemplate {
    env: Environment<'static>,
    source: String,
    fuel: u64,
}

impl JinjaTemplate {
    /// Compiles `source` with [`DEFAULT_FUEL`] and the current time for `strftime_now`.
    ///
    /// # Errors
    /// [`TemplateError::Syntax`] when the source does not parse.
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        Self::with_options(source, DEFAULT_FUEL, None)
    }

    /// Compiles `source` with a fuel budget per render and, when given, a fixed instant for
    /// `strftime_now` (tests pin it; by default it is the current UTC time).
    ///
    /// # Errors
    /// [`TemplateError::Syntax`] when the source does not parse.
    pub fn with_options(
        source: &str,
        fuel: u64,
        now: Option<DateTime>,
    ) -> Result<Self, TemplateError> {
        let env = env::build(source, fuel, now).map_err(|e| from_minijinja(&e, fuel))?;
        Ok(JinjaTemplate {
            env,
            source: source.to_owned(),
            fuel,
        })
    }

    /// The template's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the prompt as one string, exactly as transformers' `apply_chat_template(...,
    /// tokenize=False)` does.
    ///
    /// # Errors
    /// The template's own error ([`TemplateError::Raised`] for `raise_exception`, else
    /// [`TemplateError::Render`]), or [`TemplateError::OutOfFuel`].
    pub fn render(&self, request: &RenderRequest) -> Result<String, TemplateError> {
        self.render_with(request, &request.messages, None)
    }

    /// Renders the prompt as segments: template text is [`crate::SegmentKind::Control`],
    /// everything that came from message content, reasoning, tool-call names, ids and
    /// arguments, or tool results is [`crate::SegmentKind::Content`]. The texts concatenate to
    /// [`JinjaTemplate::render`]'s string.
    ///
    /// Where the template transforms content so that it cannot be tracked, the affected span
    /// is content (fail closed).
    ///
    /// # Errors
    /// As [`JinjaTemplate::render`].
    pub fn render_segments(&self, request: &RenderRequest) -> Result<Segments, TemplateError> {
        let prompt = self.render(request)?;
        let mut texts = request.strings();
        texts.push(self.source.clone());
        let Some(m) = marks::Marks::choose(texts.iter().map(String::as_str)) else {
            let mut all = Segments::default();
            all.push_content(&prompt);
            return Ok(all);
        };
        let marked_messages = marks::mark_messages(m, &request.messages, &self.source);
        let Ok(marked) = self.render_with(request, &marked_messages, Some(m)) else {
            let mut all = Segments::default();
            all.push_content(&prompt);
            return Ok(all);
        };
        Ok(m.segment(&prompt, &marked))
    }

    fn render_with(
        &self,
        request: &RenderRequest,
        messages: &[serde_json::Value],
        marks: Option<marks::Marks>,
    ) -> Result<String, TemplateError> {
        let mut ctx: Vec<(String, Value)> = vec![
            ("messages".into(), Value::from_serialize(messages)),
            (
                "tools".into(),
                request
                    .tools
                    .as_ref()
                    .map_or(Value::from(()), Value::from_serialize),
            ),
            ("documents".into(), Value::from(())),
            (
                "add_generation_prompt".into(),
                Value::from(request.add_generation_prompt),
            ),
        ];
        if let Some(bos) = &request.bos_token {
            ctx.push(("bos_token".into(), Value::from(bos.as_str())));
        }
        if let Some(eos) = &request.eos_token {
            ctx.push(("eos_token".into(), Value::from(eos.as_str())));
        }
        for (k, v) in &request.extra_context {
            ctx.push((k.clone(), Value::from_serialize(v)));
        }
        if let Some(m) = marks {
            ctx.push((MARKS_VAR.into(), Value::from(m.base())));
        }
        let ctx: Value = ctx.into_iter().collect();
        let template = self
            .env
            .get_template(env::NAME)
            .map_err(|e| from_minijinja(&e, self.fuel))?;
        template
            .render(ctx)
            .map_err(|e| from_minijinja(&e, self.fuel))
    }
}
