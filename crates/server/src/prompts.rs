//! Prompts as llama-server reads them: a text, token ids, token ids with text pieces between
//! them, a JSON prompt object, or a batch of any of these (a list whose items are not all
//! numbers and strings).

use serde_json::{Map, Value};
use wick::{PromptInput, TokenId};

use crate::wire::Prompt;
use crate::ApiError;

/// Most prompts one request may carry.
pub(crate) const MAX_PROMPTS: usize = 256;

/// One prompt of a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// A text.
    Text(String),
    /// Token ids.
    Tokens(Vec<TokenId>),
    /// Token ids and texts in order (`[1, 2, "text", 3]`): each text is tokenized in place.
    Mixed(Vec<Piece>),
    /// A text with images (llama-server's `multimodal_data`), each where a `<__media__>`
    /// marker stands.
    Media(String, Vec<wick::Media>),
}

/// A piece of a mixed prompt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Token(TokenId),
    Text(String),
}

/// The prompts `field` holds, in order: one unless it is a batch. An empty text, list or batch
/// is refused, as are images and other media (the models served read text).
pub(crate) fn items(prompt: Option<Prompt>, field: &'static str) -> Result<Vec<Item>, ApiError> {
    let Some(Prompt(value)) = prompt else {
        return Err(ApiError::bad(field, format!("`{field}` is required")));
    };
    Ok(match value {
        Value::Array(list) if list.is_empty() => {
            return Err(ApiError::bad(field, format!("`{field}` is an empty list")))
        }
        // Ids, with texts (or anything else) beside them: one prompt.
        Value::Array(list) if list.iter().any(Value::is_number) => vec![sequence(&list, field)?],
        // Texts, id lists, prompt objects: a batch.
        Value::Array(list) => {
            if list.len() > MAX_PROMPTS {
                return Err(ApiError::bad(
                    field,
                    format!("{} prompts given (allowed: 1 to {MAX_PROMPTS})", list.len()),
                ));
            }
            list.into_iter()
                .map(|v| item(v, field))
                .collect::<Result<_, _>>()?
        }
        other => vec![item(other, field)?],
    })
}

/// One prompt: a text, a list of ids (and texts), or a JSON prompt object.
fn item(value: Value, field: &'static str) -> Result<Item, ApiError> {
    match value {
        Value::String(text) => Ok(Item::Text(text)),
        Value::Array(list) => sequence(&list, field),
        Value::Object(object) => object_item(&object, field),
        other => Err(ApiError::bad(
            field,
            format!("a prompt is a text, a list of token ids or an object, not `{other}`"),
        )),
    }
}

/// `[ids and texts]`: token ids when all are ids, else a mixed prompt.
fn sequence(list: &[Value], field: &'static str) -> Result<Item, ApiError> {
    if list.is_empty() {
        return Err(ApiError::bad(field, "the token list is empty"));
    }
    let pieces = list
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(Piece::Text(s.clone())),
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| Piece::Token(TokenId(n)))
                .ok_or_else(|| ApiError::bad(field, format!("token id {n} is out of range"))),
            other => Err(ApiError::bad(
                field,
                format!("a prompt list holds token ids and texts, not `{other}`"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if pieces.iter().all(|p| matches!(p, Piece::Token(_))) {
        let ids = pieces
            .into_iter()
            .filter_map(|p| match p {
                Piece::Token(t) => Some(t),
                Piece::Text(_) => None,
            })
            .collect();
        return Ok(Item::Tokens(ids));
    }
    Ok(Item::Mixed(pieces))
}

/// llama-server's JSON prompt objects: `{"prompt_string", "multimodal_data"?}` and the
/// embeddings' `{"content": [parts]}`; text parts join into one text.
fn object_item(object: &Map<String, Value>, field: &'static str) -> Result<Item, ApiError> {
    let no_media =
        |what: &str| ApiError::bad(field, format!("{what} must be a list of base64 images"));
    if let Some(prompt) = object.get("prompt_string") {
        let Value::String(text) = prompt else {
            return Err(ApiError::bad(field, "`prompt_string` must be a text"));
        };
        return match object.get("multimodal_data") {
            None | Some(Value::Null) => Ok(Item::Text(text.clone())),
            Some(Value::Array(data)) if data.is_empty() => Ok(Item::Text(text.clone())),
            Some(Value::Array(data)) => {
                let media = data
                    .iter()
                    .enumerate()
                    .map(|(k, d)| {
                        let at = format!("{field}.multimodal_data[{k}]");
                        let d = d.as_str().ok_or_else(|| {
                            ApiError::bad(&at, format!("{at} must be a base64 string"))
                        })?;
                        crate::media::from_base64(wick::MediaKind::Image, d, &at)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Item::Media(text.clone(), media))
            }
            Some(_) => Err(no_media("multimodal_data")),
        };
    }
    let Some(content) = object.get("content") else {
        return Err(ApiError::bad(
            field,
            "a prompt object has `prompt_string` or `content` (a list of text parts)",
        ));
    };
    let Some(parts) = content.as_array() else {
        return Err(ApiError::bad(
            field,
            "a prompt object's `content` is a list of parts ({\"type\": \"text\", \"text\": …})",
        ));
    };
    let mut text = String::new();
    for part in parts {
        match part["type"].as_str() {
            Some("text") => match part["text"].as_str() {
                Some(t) => text.push_str(t),
                None => return Err(ApiError::bad(field, "a text part needs `text`")),
            },
            Some(
                kind @ ("image_url" | "input_image" | "image" | "input_audio" | "input_video"),
            ) => {
                return Err(ApiError::bad(
                    field,
                    format!("`{kind}` parts are not read here: this prompt takes text"),
                ))
            }
            other => {
                return Err(ApiError::bad(
                    field,
                    format!(
                        "unknown content part type {} (allowed: text)",
                        other.map_or_else(|| "(none)".to_owned(), |t| format!("`{t}`"))
                    ),
                ))
            }
        }
    }
    Ok(Item::Text(text))
}

/// `item` as a completion prompt: texts are formatted prompts (their special-token text is
/// kept); a mixed prompt's texts are tokenized in place, special-token text included.
pub(crate) async fn completion_input(llm: &wick::Llm, item: Item) -> Result<PromptInput, ApiError> {
    Ok(match item {
        Item::Text(text) => PromptInput::Text {
            text,
            formatted: true,
        },
        Item::Tokens(ids) => PromptInput::Tokens(ids),
        Item::Mixed(pieces) => PromptInput::Tokens(mixed_tokens(llm, pieces).await?),
        Item::Media(text, media) => PromptInput::Media { text, media },
    })
}

/// `item` as a text (token ids are detokenized).
pub(crate) async fn text(llm: &wick::Llm, item: Item) -> Result<String, ApiError> {
    Ok(match item {
        Item::Text(text) => text,
        Item::Tokens(ids) => llm.adetokenize(&ids).await?,
        Item::Mixed(pieces) => llm.adetokenize(&mixed_tokens(llm, pieces).await?).await?,
        Item::Media(..) => {
            return Err(ApiError::bad(
                "content",
                "multimodal_data is read by completions only, not here",
            ))
        }
    })
}

async fn mixed_tokens(llm: &wick::Llm, pieces: Vec<Piece>) -> Result<Vec<TokenId>, ApiError> {
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Token(t) => out.push(t),
            Piece::Text(text) => out.extend(llm.atokenize(&text, true).await?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<Vec<Item>, ApiError> {
        items(Some(Prompt(value)), "prompt")
    }

    fn ids(ids: &[u32]) -> Item {
        Item::Tokens(ids.iter().map(|&t| TokenId(t)).collect())
    }

    #[test]
    fn one_prompt_or_a_batch_as_llama_server_reads_them() {
        let text = |t: &str| Item::Text(t.into());
        assert_eq!(parse(json!("hi")).unwrap(), vec![text("hi")]);
        assert_eq!(
            parse(json!(["a", "b"])).unwrap(),
            vec![text("a"), text("b")]
        );
        assert_eq!(parse(json!([1, 2])).unwrap(), vec![ids(&[1, 2])]);
        assert_eq!(
            parse(json!([[1], [2, 3]])).unwrap(),
            vec![ids(&[1]), ids(&[2, 3])]
        );
        // Ids and texts in one list are one prompt; in a batch, each list is one.
        let mixed = Item::Mixed(vec![
            Piece::Token(TokenId(1)),
            Piece::Text("x".into()),
            Piece::Token(TokenId(2)),
        ]);
        assert_eq!(parse(json!([1, "x", 2])).unwrap(), vec![mixed.clone()]);
        assert_eq!(
            parse(json!([[1, "x", 2], "y", {"prompt_string": "z"}])).unwrap(),
            vec![mixed, text("y"), text("z")]
        );
        assert_eq!(
            parse(json!({"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}))
                .unwrap(),
            vec![text("hello world")]
        );
        assert_eq!(
            parse(json!({"prompt_string": "p", "multimodal_data": []})).unwrap(),
            vec![text("p")]
        );
        let with_image =
            parse(json!({"prompt_string": "a <__media__> b", "multimodal_data": ["iVBORw0KGgo="]}))
                .unwrap();
        assert!(
            matches!(&with_image[0], Item::Media(t, m) if t == "a <__media__> b" && m.len() == 1)
        );
    }

    #[test]
    fn what_is_not_a_prompt_is_refused_saying_why() {
        for (bad, says) in [
            (json!([]), "empty list"),
            (json!([[]]), "token list is empty"),
            (json!([-1]), "out of range"),
            (json!([1, null]), "token ids and texts"),
            (json!(true), "a text, a list"),
            (json!({"content": "string"}), "list of parts"),
            (
                json!({"content": [{"type": "unknown"}]}),
                "unknown content part type `unknown`",
            ),
            (
                json!({"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}),
                "takes text",
            ),
            (
                json!({"prompt_string": "p", "multimodal_data": [7]}),
                "multimodal_data[0] must be a base64 string",
            ),
            (
                json!({"prompt_string": "p", "multimodal_data": "AAAA"}),
                "list of base64 images",
            ),
            (json!({"other": 1}), "prompt_string"),
            (
                Value::Array(vec![json!([1]); MAX_PROMPTS + 1]),
                "prompts given",
            ),
        ] {
            let err = parse(bad.clone()).unwrap_err();
            assert!(format!("{err:?}").contains(says), "{bad}: {err:?}");
        }
        assert!(items(None, "input").is_err());
    }
}
