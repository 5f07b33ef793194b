//! Tokenizing and detokenizing with the model's vocabulary, and its special tokens.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use wick_backend::{BackendError, SpecialTokens, ThinkingTokens, THINKING_MARKERS};
use wick_types::TokenId;

/// The same 32 bits as llama.cpp's token type: vocabulary ids are below 2³¹, and media ids
/// ([`TokenId::media`], bit 31 set) become negative, never a vocabulary id.
pub(crate) fn to_llama(t: TokenId) -> LlamaToken {
    LlamaToken(i32::from_ne_bytes(t.0.to_ne_bytes()))
}

/// The inverse of [`to_llama`] (llama.cpp's -1, no token, is `u32::MAX`).
pub(crate) fn from_llama(t: LlamaToken) -> TokenId {
    TokenId(u32::from_ne_bytes(t.0.to_ne_bytes()))
}

/// Checks every text id against the vocabulary, and every media id against `projector`: a
/// whole run of a medium some request holds.
pub(crate) fn check_tokens(
    tokens: &[TokenId],
    n_vocab: u32,
    projector: Option<&crate::media::Projector>,
) -> Result<(), BackendError> {
    // Without a projector a media id is just an id outside the vocabulary.
    let media_allowed = projector.is_some();
    if let Some(&token) = tokens
        .iter()
        .find(|t| !(media_allowed && t.is_media()) && t.0 >= n_vocab)
    {
        return Err(BackendError::TokenOutOfRange { token, n_vocab });
    }
    match projector {
        Some(projector) if tokens.iter().any(|t| t.is_media()) => projector.check(tokens),
        _ => Ok(()),
    }
}

/// Checks every id against the vocabulary (media ids are not in it).
pub(crate) fn check_range(tokens: &[TokenId], n_vocab: u32) -> Result<(), BackendError> {
    match tokens.iter().find(|t| t.0 >= n_vocab) {
        Some(&token) => Err(BackendError::TokenOutOfRange { token, n_vocab }),
        None => Ok(()),
    }
}

/// Tokenizes without BOS. With `special == false` control-token text stays plain text: this is
/// the vocabulary's own `tokenize` with `parse_special` off (`LlamaModel::str_to_token` would
/// always parse specials).
pub(crate) fn tokenize(model: &LlamaModel, text: &str, special: bool) -> Vec<TokenId> {
    model
        .vocab()
        .tokenize(text.as_bytes(), false, special)
        .into_iter()
        .map(from_llama)
        .collect()
}

/// The bytes of `tokens`, control tokens rendered as their text.
pub(crate) fn detokenize(model: &LlamaModel, tokens: &[TokenId]) -> Vec<u8> {
    let vocab = model.vocab();
    let mut out = Vec::with_capacity(tokens.len() * 4);
    for &t in tokens {
        vocab.token_to_piece_into(to_llama(t), &mut out, true, None);
    }
    out
}

pub(crate) fn special_tokens(model: &LlamaModel) -> SpecialTokens {
    let vocab = model.vocab();
    let n_vocab = vocab.n_tokens();
    let mut control = Vec::new();
    let mut eog = Vec::new();
    for id in 0..n_vocab {
        let t = LlamaToken(id);
        if vocab.is_control(t) {
            control.push(from_llama(t));
        }
        if vocab.is_eog(t) {
            eog.push(from_llama(t));
        }
    }
    let valid = |t: LlamaToken| (0..n_vocab).contains(&t.0).then(|| from_llama(t));
    let single = |text: &str| match tokenize(model, text, true).as_slice() {
        [t] => Some(*t),
        _ => None,
    };
    let thinking = THINKING_MARKERS.iter().find_map(|(start, end)| {
        Some(ThinkingTokens {
            start: single(start)?,
            end: single(end)?,
        })
    });
    let mut special = SpecialTokens::default();
    special.bos = valid(vocab.bos());
    special.eos = valid(vocab.eos());
    special.add_bos = vocab.should_add_bos();
    special.eog = eog;
    special.control = control;
    special.thinking = thinking;
    special
}

/// The model's vocabulary on the callers' side: a vocabulary-only load of the same GGUF file
/// (no weights), so prompts are tokenized and tokens read back on any thread, never on the
/// thread that runs the model.
pub(crate) struct LlamaTokenizer {
    model: LlamaModel,
    special: SpecialTokens,
    n_vocab: u32,
    max_token_bytes: usize,
}

impl std::fmt::Debug for LlamaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaTokenizer")
            .field("n_vocab", &self.n_vocab)
            .finish_non_exhaustive()
    }
}

impl LlamaTokenizer {
    /// Loads the vocabulary of the model at `path` (already checked and loaded once).
    pub(crate) fn load(path: &std::path::Path, n_vocab: u32) -> Result<Self, BackendError> {
        let params = llama_cpp_2::model::params::LlamaModelParams::default().with_vocab_only(true);
        let model =
            LlamaModel::load_from_file(crate::load::runtime()?, path, &params).map_err(|e| {
                BackendError::Load {
                    path: path.to_path_buf(),
                    reason: format!("llama.cpp could not load its vocabulary ({e})"),
                }
            })?;
        let longest = (0..n_vocab)
            .map(|t| detokenize(&model, &[TokenId(t)]).len())
            .max()
            .unwrap_or(1);
        Ok(LlamaTokenizer {
            special: special_tokens(&model),
            model,
            n_vocab,
            // Twice the longest piece: a token never stands for more input than its piece
            // holds, and the margin covers normalizations of the input text.
            max_token_bytes: 2 * longest.max(1),
        })
    }
}

impl wick_backend::Tokenizer for LlamaTokenizer {
    fn special(&self) -> &SpecialTokens {
        &self.special
    }

    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>, BackendError> {
        Ok(tokenize(&self.model, text, special))
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>, BackendError> {
        check_range(tokens, self.n_vocab)?;
        Ok(detokenize(&self.model, tokens))
    }

    fn max_token_bytes(&self) -> Option<usize> {
        Some(self.max_token_bytes)
    }
}
