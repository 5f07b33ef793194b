//! Role templates (seed 002): a chat format as data — per-role prefix and suffix around each
//! message's content — rendered without Jinja.
//!
//! The JSON format is the `role_template` object of `shared/chat-templates/role-templates.json`
//! plus stop strings:
//!
//! ```json
//! {
//!   "begin": "<s>",
//!   "prefix": {"system": "<|im_start|>system\n", "user": "<|im_start|>user\n", "tool": "…"},
//!   "suffix": {"system": "<|im_end|>\n", "user": "<|im_end|>\n"},
//!   "generation_prompt": "<|im_start|>assistant\n",
//!   "end": "",
//!   "implicit_system": null,
//!   "no_system_preamble": "",
//!   "final_assistant_prefix": null,
//!   "final_assistant_suffix": null,
//!   "content_transform": {"assistant": "strip"},
//!   "stop": ["<|im_end|>"]
//! }
//! ```
//!
//! A conversation renders as `begin`, then — when the first message is not a system message —
//! the `implicit_system` message (as if the user had sent it) or the `no_system_preamble`, then
//! `prefix[role] + content + suffix[role]` for each message (a final assistant message with no
//! generation prompt uses the `final_assistant_*` wrapping when given), then
//! `generation_prompt` or `end`. Any role name may have a prefix/suffix; a message whose role
//! has neither is an error.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{RenderRequest, Segments, TemplateError};

/// How a role's content is trimmed (Python's `str.strip` family: Unicode whitespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Strip {
    /// Both ends.
    Strip,
    /// The start.
    Lstrip,
    /// The end.
    Rstrip,
}

impl Strip {
    fn apply(self, s: &str) -> &str {
        match self {
            Strip::Strip => s.trim(),
            Strip::Lstrip => s.trim_start(),
            Strip::Rstrip => s.trim_end(),
        }
    }
}

/// A chat format as per-role prefixes and suffixes. See the module docs for the format.
///
/// ```
/// use wick_template::{RenderRequest, RoleTemplate, SegmentKind};
///
/// let t: RoleTemplate = serde_json::from_str(r#"{
///     "prefix": {"user": "<|im_start|>user\n", "assistant": "<|im_start|>assistant\n"},
///     "suffix": {"user": "<|im_end|>\n", "assistant": "<|im_end|>\n"},
///     "generation_prompt": "<|im_start|>assistant\n",
///     "stop": ["<|im_end|>"]
/// }"#).unwrap();
/// let req = RenderRequest::new(vec![serde_json::json!({"role": "user", "content": "Hi"})]);
/// let segs = t.render(&req)?;
/// assert_eq!(segs.text(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
/// assert_eq!(segs.as_slice()[1].kind, SegmentKind::Content);
/// # Ok::<(), wick_template::TemplateError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RoleTemplate {
    /// Text at the very start (often the BOS token text).
    pub begin: String,
    /// Text before each message's content, by role.
    pub prefix: BTreeMap<String, String>,
    /// Text after each message's content, by role.
    pub suffix: BTreeMap<String, String>,
    /// Text after the last message when a generation prompt is asked for.
    pub generation_prompt: String,
    /// Text after the last message when no generation prompt is asked for.
    pub end: String,
    /// A default system message used when the conversation has none.
    pub implicit_system: Option<String>,
    /// Fixed text emitted when the conversation has no system message (not a system turn).
    pub no_system_preamble: String,
    /// The prefix of a final assistant message when no generation prompt is asked for.
    pub final_assistant_prefix: Option<String>,
    /// The suffix of a final assistant message when no generation prompt is asked for.
    pub final_assistant_suffix: Option<String>,
    /// How each role's content is trimmed.
    pub content_transform: BTreeMap<String, Strip>,
    /// Strings that end the model's turn.
    pub stop: Vec<String>,
}

/// The text of a message's content: a string, the texts of content parts, or nothing.
pub(crate) fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
            .collect(),
        _ => String::new(),
    }
}

impl RoleTemplate {
    /// Reads the JSON format.
    ///
    /// # Errors
    /// [`TemplateError::RoleTemplate`] when the text is not a role template.
    pub fn from_json(text: &str) -> Result<Self, TemplateError> {
        serde_json::from_str(text).map_err(|e| TemplateError::RoleTemplate {
            reason: e.to_string(),
        })
    }

    /// Reads a role template from GGUF metadata key/value pairs: `chat_template.begin`,
    /// `chat_template.roles.<role>.prefix`, `chat_template.roles.<role>.suffix`,
    /// `chat_template.roles.<role>.strip` (`strip`/`lstrip`/`rstrip`),
    /// `chat_template.generation_prompt`, `chat_template.end`, `chat_template.implicit_system`,
    /// `chat_template.no_system_preamble`, `chat_template.final_assistant_prefix`,
    /// `chat_template.final_assistant_suffix`, and `chat_template.stop` (repeated, or
    /// `chat_template.stop.<n>`). Other keys are ignored. `None` when no role has a prefix or
    /// suffix.
    ///
    /// # Errors
    /// [`TemplateError::RoleTemplate`] for an unknown strip mode.
    pub fn from_metadata<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Option<Self>, TemplateError> {
        let mut t = RoleTemplate::default();
        for (key, value) in pairs {
            let Some(key) = key.strip_prefix("chat_template.") else {
                continue;
            };
            let v = value.to_owned();
            if let Some(role_key) = key.strip_prefix("roles.") {
                let Some((role, field)) = role_key.rsplit_once('.') else {
                    continue;
                };
                match field {
                    "prefix" => {
                        t.prefix.insert(role.to_owned(), v);
                    }
                    "suffix" => {
                        t.suffix.insert(role.to_owned(), v);
                    }
                    "strip" => {
                        let mode = serde_json::from_value(Value::String(v)).map_err(|_| {
                            TemplateError::RoleTemplate {
                                reason: format!("unknown strip mode {value:?} for role {role}"),
                            }
                        })?;
                        t.content_transform.insert(role.to_owned(), mode);
                    }
                    _ => {}
                }
                continue;
            }
            match key {
                "begin" => t.begin = v,
                "generation_prompt" => t.generation_prompt = v,
                "end" => t.end = v,
                "implicit_system" => t.implicit_system = Some(v),
                "no_system_preamble" => t.no_system_preamble = v,
                "final_assistant_prefix" => t.final_assistant_prefix = Some(v),
                "final_assistant_suffix" => t.final_assistant_suffix = Some(v),
                k if k == "stop" || k.starts_with("stop.") => t.stop.push(v),
                _ => {}
            }
        }
        Ok((!t.prefix.is_empty() || !t.suffix.is_empty()).then_some(t))
    }

    /// Renders the conversation: prefixes, suffixes and the other fixed texts are control
    /// segments, message contents are content segments.
    ///
    /// # Errors
    /// [`TemplateError::RoleTemplate`] for a message whose role has no prefix or suffix.
    pub fn render(&self, request: &RenderRequest) -> Result<Segments, TemplateError> {
        let mut out = Segments::default();
        out.push_control(&self.begin);
        let messages = &request.messages;
        let has_system = messages.first().is_some_and(|m| m["role"] == "system");
        if !has_system {
            match &self.implicit_system {
                Some(text) => {
                    out.push_control(self.part(&self.prefix, "system")?);
                    out.push_control(text);
                    out.push_control(self.part(&self.suffix, "system")?);
                }
                None => out.push_control(&self.no_system_preamble),
            }
        }
        for (i, m) in messages.iter().enumerate() {
            let role = m["role"].as_str().unwrap_or_default();
            let final_assistant =
                i + 1 == messages.len() && role == "assistant" && !request.add_generation_prompt;
            let prefix = match (&self.final_assistant_prefix, final_assistant) {
                (Some(p), true) => p.as_str(),
                _ => self.part(&self.prefix, role)?,
            };
            let suffix = match (&self.final_assistant_suffix, final_assistant) {
                (Some(s), true) => s.as_str(),
                _ => self.part(&self.suffix, role)?,
            };
            let content = content_text(m);
            let content = match self.content_transform.get(role) {
                Some(strip) => strip.apply(&content),
                None => &content,
            };
            out.push_control(prefix);
            out.push_content(content);
            out.push_control(suffix);
        }
        out.push_control(if request.add_generation_prompt {
            &self.generation_prompt
        } else {
            &self.end
        });
        Ok(out)
    }

    fn part<'a>(
        &self,
        map: &'a BTreeMap<String, String>,
        role: &str,
    ) -> Result<&'a str, TemplateError> {
        if !self.prefix.contains_key(role) && !self.suffix.contains_key(role) {
            return Err(TemplateError::RoleTemplate {
                reason: format!("the role template has no prefix or suffix for role {role:?}"),
            });
        }
        Ok(map.get(role).map_or("", String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chatml() -> RoleTemplate {
        let mut t = RoleTemplate::default();
        for r in ["system", "user", "assistant"] {
            t.prefix.insert(r.into(), format!("<|im_start|>{r}\n"));
            t.suffix.insert(r.into(), "<|im_end|>\n".into());
        }
        t.generation_prompt = "<|im_start|>assistant\n".into();
        t
    }

    #[test]
    fn metadata_keys_build_a_template() {
        let t = RoleTemplate::from_metadata([
            ("general.name", "x"),
            ("chat_template.begin", "<s>"),
            ("chat_template.roles.user.prefix", "[U]"),
            ("chat_template.roles.user.suffix", "[/U]"),
            ("chat_template.roles.user.strip", "strip"),
            ("chat_template.roles.retriever.prefix", "<rag>"),
            ("chat_template.generation_prompt", "[A]"),
            ("chat_template.stop", "[/A]"),
            ("chat_template.stop", "</s>"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(t.begin, "<s>");
        assert_eq!(t.prefix["retriever"], "<rag>");
        assert_eq!(t.stop, ["[/A]", "</s>"]);
        let req = RenderRequest::new(vec![json!({"role": "user", "content": " hi "})]);
        assert_eq!(t.render(&req).unwrap().text(), "<s>[U]hi[/U][A]");
        assert!(RoleTemplate::from_metadata([("general.name", "x")])
            .unwrap()
            .is_none());
        assert!(RoleTemplate::from_metadata([("chat_template.roles.u.strip", "no")]).is_err());
    }

    #[test]
    fn implicit_system_and_final_assistant() {
        let mut t = chatml();
        t.implicit_system = Some("Be nice.".into());
        t.final_assistant_suffix = Some(String::new());
        let mut req = RenderRequest::new(vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "content": "b"}),
        ]);
        req.add_generation_prompt = false;
        assert_eq!(
            t.render(&req).unwrap().text(),
            "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb"
        );
    }

    #[test]
    fn unknown_roles_are_errors() {
        let req = RenderRequest::new(vec![json!({"role": "oracle", "content": "a"})]);
        assert!(matches!(
            chatml().render(&req),
            Err(TemplateError::RoleTemplate { .. })
        ));
    }
}
