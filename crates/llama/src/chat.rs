//! The model's own chat template through llama.cpp's built-in template engine, rendered so that
//! message content can never become control tokens.
//!
//! Each message's content is replaced by a unique sentinel, the template is applied, and the
//! result is split at the sentinels: template text is tokenized with special-token parsing on,
//! content with it off.

use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use wick_backend::{BackendError, SpecialTokens};
use wick_types::{ChatRequest, TokenId};

fn sentinel(i: usize) -> String {
    format!("\u{1}wick-content-{i}\u{2}")
}

fn template_err(reason: impl Into<String>) -> BackendError {
    BackendError::Template {
        reason: reason.into(),
    }
}

pub(crate) fn apply(
    model: &LlamaModel,
    special: &SpecialTokens,
    request: &ChatRequest,
) -> Result<Vec<TokenId>, BackendError> {
    let template = model
        .chat_template(None)
        .map_err(|_| template_err("the model has no chat template"))?;
    let messages = request.effective_messages();
    let probes = messages
        .iter()
        .enumerate()
        .map(|(i, m)| LlamaChatMessage::new(m.role.as_str().to_owned(), sentinel(i)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| template_err(format!("a role name holds a NUL byte: {e}")))?;
    let rendered = model
        .apply_chat_template(&template, &probes, request.add_generation_prompt)
        .map_err(|e| {
            template_err(format!(
                "llama.cpp's built-in templates do not support this model's template ({e})"
            ))
        })?;

    let mut tokens = Vec::new();
    let mut rest = rendered.as_str();
    if special.add_bos {
        if let Some(bos) = special.bos {
            let bos_text = crate::vocab::detokenize(model, &[bos]);
            if !rest.as_bytes().starts_with(&bos_text) || bos_text.is_empty() {
                tokens.push(bos);
            }
        }
    }
    for (i, message) in messages.iter().enumerate() {
        let mark = sentinel(i);
        let at = rest.find(&mark).ok_or_else(|| {
            template_err(
                "the template drops or reorders message content; it cannot be rendered safely",
            )
        })?;
        tokens.extend(crate::vocab::tokenize(model, &rest[..at], true));
        tokens.extend(crate::vocab::tokenize(model, &message.content, false));
        rest = &rest[at + mark.len()..];
    }
    if rest.contains('\u{1}') {
        return Err(template_err("the template repeats message content"));
    }
    tokens.extend(crate::vocab::tokenize(model, rest, true));
    Ok(tokens)
}
