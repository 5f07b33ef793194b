//! What can go wrong selecting or rendering a named template.

use super::NamedTemplate;

/// An error from selecting or rendering one of llama.cpp's named templates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NamedError {
    /// The name is not one of llama.cpp's template names.
    #[error("unknown chat template name {name:?}; valid names: {}", valid_names())]
    UnknownName {
        /// The name that was asked for.
        name: String,
    },
    /// The template has no rendering for a message of this role (llama.cpp fails too).
    #[error("chat template {template} does not support the role {role:?}")]
    UnsupportedRole {
        /// The template.
        template: NamedTemplate,
        /// The role it could not render.
        role: String,
    },
    /// The template cannot render this conversation (llama.cpp fails too).
    #[error("chat template {template} cannot render this conversation: {reason}")]
    UnsupportedConversation {
        /// The template.
        template: NamedTemplate,
        /// Why not.
        reason: &'static str,
    },
}

/// The valid names, comma-separated, in llama.cpp's order.
fn valid_names() -> String {
    NamedTemplate::ALL
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
