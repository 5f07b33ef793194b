//! Fill-in-the-middle for `/api/generate`'s `suffix`: the model's FIM tokens (GGUF
//! `tokenizer.ggml.fim_{pre,suf,mid}_token_id`) around the two texts, prefix-suffix-middle
//! (the order llama.cpp's infill uses), the texts tokenized without special tokens. A model
//! without these tokens gets a 400 that says so.

use wick::models::{GgufHeader, GgufValue};
use wick::{PromptInput, TokenId};

use crate::{ApiError, ServedModel};

const KEYS: [&str; 3] = [
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
];

/// The prefix, suffix and middle token ids, when the header has all three.
fn fim_tokens(header: &GgufHeader) -> Option<[TokenId; 3]> {
    let id = |key| {
        header
            .get(key)
            .and_then(GgufValue::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .map(TokenId)
    };
    Some([id(KEYS[0])?, id(KEYS[1])?, id(KEYS[2])?])
}

/// The fill-in-the-middle prompt for `prefix` and `suffix` on `served`'s model.
pub(crate) async fn prompt(
    served: &ServedModel,
    prefix: &str,
    suffix: &str,
) -> Result<PromptInput, ApiError> {
    let path = served.llm.model_path().map(std::path::Path::to_path_buf);
    let ids = tokio::task::spawn_blocking(move || {
        path.and_then(|p| GgufHeader::read(&p).ok())
            .as_ref()
            .and_then(fim_tokens)
    })
    .await
    .map_err(|_| ApiError::Internal)?;
    let Some([pre, suf, mid]) = ids else {
        return Err(ApiError::bad(
            "suffix",
            format!(
                "`suffix` is not supported: the model `{}` has no fill-in-the-middle tokens",
                served.id
            ),
        ));
    };
    let special = &served.llm.model_info().special;
    let mut tokens = Vec::new();
    if special.add_bos {
        tokens.extend(special.bos);
    }
    tokens.push(pre);
    tokens.extend(served.llm.atokenize(prefix, false).await?);
    tokens.push(suf);
    tokens.extend(served.llm.atokenize(suffix, false).await?);
    tokens.push(mid);
    Ok(PromptInput::Tokens(tokens))
}
