//! llama.cpp's `llm_chat_detect_template`: which named template a Jinja source is.

use super::NamedTemplate;

/// See [`NamedTemplate::detect`].
pub(super) fn detect(source: &str) -> Option<NamedTemplate> {
    source.parse().ok()
}
