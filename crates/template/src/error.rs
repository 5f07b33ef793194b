//! Errors of rendering a chat template.

/// What kind of failure a template's own error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RenderErrorKind {
    /// Use of an undefined value where Python raises (`UndefinedError`).
    Undefined,
    /// A filter the environment does not have.
    UnknownFilter,
    /// A method or function that does not exist, or that the sandbox forbids (`list.append`).
    UnknownMethod,
    /// An operation on values of the wrong type (Python's `TypeError`).
    InvalidOperation,
    /// Anything else.
    Other,
}

/// Errors of loading or rendering a chat template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The Jinja source does not parse.
    #[error("chat template syntax error: {message}")]
    Syntax {
        /// The parser's message, with the line.
        message: String,
    },
    /// The template called `raise_exception(message)`.
    #[error("{message}")]
    Raised {
        /// The template's message, verbatim.
        message: String,
    },
    /// The template failed while rendering (a Python/Jinja error in transformers).
    #[error("chat template error: {message}")]
    Render {
        /// What kind of failure.
        kind: RenderErrorKind,
        /// The engine's message.
        message: String,
    },
    /// The template used more than its fuel (instruction budget): it is probably looping.
    #[error("the chat template ran out of fuel after {fuel} steps (a runaway loop?)")]
    OutOfFuel {
        /// The budget it had.
        fuel: u64,
    },
    /// The request is not usable: a field has the wrong shape.
    #[error("invalid request: {reason}")]
    Request {
        /// What is wrong.
        reason: String,
    },
    /// A role template is malformed or cannot render the conversation.
    #[error("role template: {reason}")]
    RoleTemplate {
        /// What is wrong.
        reason: String,
    },
    /// No named template by that name.
    #[error("unknown named template {name:?}")]
    UnknownNamed {
        /// The name asked for.
        name: String,
    },
    /// A named template failed.
    #[error("named template {name}: {message}")]
    Named {
        /// The template's name.
        name: String,
        /// Its error.
        message: String,
    },
}

impl TemplateError {
    /// The message a template raised, if this is a `raise_exception` error.
    pub fn raised_message(&self) -> Option<&str> {
        match self {
            TemplateError::Raised { message } => Some(message),
            _ => None,
        }
    }
}

/// Converts minijinja's error, recovering `raise_exception` messages and fuel exhaustion.
pub(crate) fn from_minijinja(e: &minijinja::Error, fuel: u64) -> TemplateError {
    use minijinja::ErrorKind as K;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(raised) = err.downcast_ref::<crate::jinja::Raised>() {
            return TemplateError::Raised {
                message: raised.0.clone(),
            };
        }
        source = err.source();
    }
    let kind = match e.kind() {
        K::SyntaxError | K::BadEscape => {
            return TemplateError::Syntax {
                message: e.to_string(),
            }
        }
        K::OutOfFuel => return TemplateError::OutOfFuel { fuel },
        K::UndefinedError => RenderErrorKind::Undefined,
        K::UnknownFilter | K::UnknownTest => RenderErrorKind::UnknownFilter,
        K::UnknownMethod | K::UnknownFunction => RenderErrorKind::UnknownMethod,
        K::InvalidOperation | K::CannotUnpack | K::MissingArgument | K::TooManyArguments => {
            RenderErrorKind::InvalidOperation
        }
        _ => RenderErrorKind::Other,
    };
    let mut message = e.to_string();
    if let Some(detail) = e.detail() {
        if !message.contains(detail) {
            message = format!("{message}: {detail}");
        }
    }
    TemplateError::Render { kind, message }
}
