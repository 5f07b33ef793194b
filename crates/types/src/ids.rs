use serde::{Deserialize, Serialize};
use std::fmt;

/// A token id in a model's vocabulary.
///
/// Ids are validated against the vocabulary size by the backend before they reach the model:
/// an id out of range is an error, never undefined behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TokenId(pub u32);

/// A sequence slot in a backend context (`0 .. n_seq_max`).
///
/// Each sequence owns its own token history and KV cells; sequences decode side by side in one
/// batched `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqId(pub u32);

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u32> for TokenId {
    fn from(id: u32) -> Self {
        TokenId(id)
    }
}

impl From<u32> for SeqId {
    fn from(id: u32) -> Self {
        SeqId(id)
    }
}
