//! One chat template of any kind: Jinja, a llama.cpp named template, or a role template.

use std::path::Path;

use wick_types::{Message, Role};

use crate::role::content_text;
use crate::{JinjaTemplate, NamedTemplate, RenderRequest, RoleTemplate, Segments, TemplateError};

/// A chat template of any kind, rendering requests to segments.
///
/// ```
/// use wick_template::{ChatTemplate, RenderRequest};
///
/// let t = ChatTemplate::named("chatml")?;
/// let req = RenderRequest::new(vec![serde_json::json!({"role": "user", "content": "Hi"})]);
/// assert_eq!(t.render(&req)?, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
/// assert!(t.stops().contains(&"<|im_end|>".to_owned()));
/// # Ok::<(), wick_template::TemplateError>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ChatTemplate {
    /// A Jinja template, rendered as transformers renders it.
    Jinja(JinjaTemplate),
    /// One of llama.cpp's named built-in templates.
    Named(NamedTemplate),
    /// A role template.
    Role(RoleTemplate),
}

impl ChatTemplate {
    /// The named template `name` (llama.cpp's names: `chatml`, `llama3`, …).
    ///
    /// # Errors
    /// [`TemplateError::UnknownNamed`].
    pub fn named(name: &str) -> Result<Self, TemplateError> {
        name.parse::<NamedTemplate>()
            .map(ChatTemplate::Named)
            .map_err(|_| TemplateError::UnknownNamed {
                name: name.to_owned(),
            })
    }

    /// A Jinja template from a file.
    ///
    /// # Errors
    /// [`TemplateError::Request`] when the file cannot be read, [`TemplateError::Syntax`].
    pub fn jinja_file(path: &Path) -> Result<Self, TemplateError> {
        let source = read(path)?;
        JinjaTemplate::new(&source).map(ChatTemplate::Jinja)
    }

    /// A role template from a JSON file.
    ///
    /// # Errors
    /// [`TemplateError::Request`] when the file cannot be read, [`TemplateError::RoleTemplate`].
    pub fn role_file(path: &Path) -> Result<Self, TemplateError> {
        RoleTemplate::from_json(&read(path)?).map(ChatTemplate::Role)
    }

    /// Whether the template may read the variable `name` (a Jinja template whose source
    /// names it; named and role templates read none of a request's variables).
    pub fn reads(&self, name: &str) -> bool {
        match self {
            ChatTemplate::Jinja(t) => t.source().contains(name),
            ChatTemplate::Named(_) | ChatTemplate::Role(_) => false,
        }
    }

    /// Renders the prompt as segments.
    ///
    /// # Errors
    /// The template's own error.
    pub fn render_segments(&self, request: &RenderRequest) -> Result<Segments, TemplateError> {
        if request.continue_final_message {
            return self.render_continued(request);
        }
        self.render_whole(request)
    }

    /// Renders a conversation whose last message is continued: the whole conversation
    /// without a generation prompt, cut right after the last message's text where it last
    /// appears (transformers' `continue_final_message`: where the template trimmed the text's
    /// trailing space, the cut is after the trimmed text). A last message without text is
    /// not continued: the prompt opens a fresh assistant turn instead.
    fn render_continued(&self, request: &RenderRequest) -> Result<Segments, TemplateError> {
        if request.add_generation_prompt {
            return Err(TemplateError::Request {
                reason: "continue_final_message and add_generation_prompt cannot both be set"
                    .into(),
            });
        }
        let Some(last) = request.messages.last() else {
            return Err(TemplateError::Request {
                reason: "continue_final_message needs a message to continue".into(),
            });
        };
        let text = final_text(last);
        let mut whole = request.clone();
        whole.continue_final_message = false;
        let trimmed = text.trim();
        if trimmed.is_empty() {
            whole.add_generation_prompt = true;
            return self.render_whole(&whole);
        }
        let mut segments = self.render_whole(&whole)?;
        let rendered = segments.text();
        let Some(at) = rendered.rfind(trimmed) else {
            return Err(TemplateError::Request {
                reason: "continue_final_message: the chat template does not show the last \
                         message's text, so it cannot be continued"
                    .into(),
            });
        };
        let spaced = text.trim_start();
        let end = if rendered[at..].starts_with(spaced) {
            at + spaced.len()
        } else {
            at + trimmed.len()
        };
        segments.truncate(end);
        Ok(segments)
    }

    fn render_whole(&self, request: &RenderRequest) -> Result<Segments, TemplateError> {
        match self {
            ChatTemplate::Jinja(t) => t.render_segments(request),
            ChatTemplate::Role(t) => t.render(request),
            ChatTemplate::Named(t) => t
                .render(&typed_messages(request), request.add_generation_prompt)
                .map_err(|e| TemplateError::Named {
                    name: t.as_str().to_owned(),
                    message: e.to_string(),
                }),
        }
    }

    /// Renders the prompt as one string.
    ///
    /// # Errors
    /// The template's own error.
    pub fn render(&self, request: &RenderRequest) -> Result<String, TemplateError> {
        match self {
            ChatTemplate::Jinja(t) if !request.continue_final_message => t.render(request),
            _ => self.render_segments(request).map(|s| s.text()),
        }
    }

    /// The template's end-of-turn strings: a named template's stop texts, a role template's
    /// `stop`, or, for Jinja, the end-of-turn markers its source writes (see [`jinja_stops`]).
    pub fn stops(&self) -> Vec<String> {
        match self {
            ChatTemplate::Named(t) => t.stops().iter().map(|s| (*s).to_owned()).collect(),
            ChatTemplate::Role(t) => t.stop.clone(),
            ChatTemplate::Jinja(t) => jinja_stops(t.source()),
        }
    }
}

fn read(path: &Path) -> Result<String, TemplateError> {
    std::fs::read_to_string(path).map_err(|e| TemplateError::Request {
        reason: format!("reading {}: {e}", path.display()),
    })
}

/// The messages as typed messages (role and text) for the named templates.
fn typed_messages(request: &RenderRequest) -> Vec<Message> {
    request
        .messages
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap_or_default().to_owned();
            Message::new(Role::from(role), content_text(m))
        })
        .collect()
}

/// The text a continued message ends with: its string content, or its last text part
/// (transformers' choice).
fn final_text(message: &serde_json::Value) -> String {
    match &message["content"] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .rev()
            .find_map(|p| p["text"].as_str())
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// End-of-turn markers of the known template families.
const END_OF_TURN: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<turn|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<｜end▁of▁sentence｜>",
    "<|end▁of▁sentence|>",
    "<|im_assistant_end|>",
    "<|message_sep|>",
    "<|assistant_end|>",
    "<seed:eos>",
    "[e~[",
    "</s>",
    "<|user|>",
    "<|observation|>",
];

/// The end-of-turn markers a Jinja template's source writes, from a list of the markers of
/// the known families. Pair these with the model's end-of-generation tokens.
pub fn jinja_stops(source: &str) -> Vec<String> {
    END_OF_TURN
        .iter()
        .filter(|m| source.contains(*m))
        .map(|m| (*m).to_owned())
        .collect()
}
