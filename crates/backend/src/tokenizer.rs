//! A model's vocabulary on the caller's side: tokenizing prompts and reading tokens back
//! without a round trip to the thread that runs the model.

use std::sync::Arc;

use wick_types::TokenId;

use crate::{Backend, Result, SpecialTokens};

/// Tokenizes and detokenizes with a model's vocabulary. Every [`Backend`] is one (through the
/// backend itself), and [`Backend::tokenizer`] hands out one that any thread may use while the
/// backend runs elsewhere, so prompts are rendered and tokenized by the callers, never on the
/// model's thread.
pub trait Tokenizer {
    /// The vocabulary's special tokens (BOS, EOS, end-of-generation, control, thinking).
    fn special(&self) -> &SpecialTokens;

    /// As [`Backend::tokenize`]: without BOS; with `special`, control-token text becomes
    /// control tokens.
    ///
    /// # Errors
    ///
    /// [`crate::BackendError::Tokenize`] when the text cannot be tokenized.
    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>>;

    /// As [`Backend::detokenize`]: the bytes of `tokens`, control tokens as their text.
    ///
    /// # Errors
    ///
    /// [`crate::BackendError::TokenOutOfRange`] for an id not in the vocabulary.
    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>>;

    /// The most bytes of text one token can stand for (with a safety margin), when known: a
    /// text of `n` bytes has at least `n / max_token_bytes` tokens, so a prompt far over the
    /// context window is refused before it is tokenized.
    fn max_token_bytes(&self) -> Option<usize> {
        None
    }

    /// A lower bound on the tokens of a text of `bytes` bytes (0 when unknown).
    fn min_tokens(&self, bytes: usize) -> usize {
        self.max_token_bytes().map_or(0, |m| bytes / m.max(1))
    }

    /// As [`Backend::tokenize_prompt`]: BOS first when the model wants it, then `text`.
    ///
    /// # Errors
    ///
    /// As [`Tokenizer::tokenize`].
    fn tokenize_prompt(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        let special_tokens = self.special();
        let mut out = Vec::new();
        if special_tokens.add_bos {
            out.extend(special_tokens.bos);
        }
        out.extend(self.tokenize(text, special)?);
        Ok(out)
    }
}

impl<B: Backend + ?Sized> Tokenizer for B {
    fn special(&self) -> &SpecialTokens {
        &self.info().special
    }

    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        Backend::tokenize(self, text, special)
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<Vec<u8>> {
        Backend::detokenize(self, tokens)
    }
}

/// A tokenizer any thread may hold and use.
pub type SharedTokenizer = Arc<dyn Tokenizer + Send + Sync>;

impl std::fmt::Debug for dyn Tokenizer + Send + Sync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("special", self.special())
            .finish_non_exhaustive()
    }
}
