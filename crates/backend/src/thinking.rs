//! Reasoning-block bookkeeping shared by every backend.

use sha2::{Digest, Sha256};
use wick_types::TokenId;

use crate::{Decoded, StepResult, ThinkingTokens};

/// Whether a history ends inside a reasoning block: its last opening token comes after its last
/// closing token. Scans back only to the nearest marker.
pub fn in_thinking(thinking: ThinkingTokens, tokens: &[TokenId]) -> bool {
    tokens
        .iter()
        .rev()
        .find(|&&t| t == thinking.start || t == thinking.end)
        .is_some_and(|&t| t == thinking.start)
}

/// Classifies a token just appended to `history` (which already ends with it). An
/// end-of-generation token is always a [`StepResult::Token`], even inside a reasoning block, so
/// the caller never misses the end.
pub fn classify(
    thinking: Option<ThinkingTokens>,
    history: &[TokenId],
    decoded: Decoded,
) -> StepResult {
    let Some(thinking) = thinking.filter(|_| !decoded.is_eog()) else {
        return StepResult::Token(decoded);
    };
    let token = decoded.token();
    if token == thinking.end {
        let before = &history[..history.len().saturating_sub(1)];
        if in_thinking(thinking, before) {
            return StepResult::ThinkingEnd(token);
        }
    }
    if in_thinking(thinking, history) {
        StepResult::ThinkingToken(token)
    } else {
        StepResult::Token(decoded)
    }
}

/// Hex SHA-256 over the model's name and the tokens of the latest reasoning block of `history`.
pub fn signature(model: &str, thinking: ThinkingTokens, history: &[TokenId]) -> String {
    let start = history
        .iter()
        .rposition(|&t| t == thinking.start)
        .map_or(history.len(), |i| i + 1);
    let end = history[start..]
        .iter()
        .position(|&t| t == thinking.end)
        .map_or(history.len(), |i| start + i);
    let mut hash = Sha256::new();
    hash.update((model.len() as u64).to_le_bytes());
    hash.update(model.as_bytes());
    for t in &history[start..end] {
        hash.update(t.0.to_le_bytes());
    }
    wick_types::hex(&hash.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: ThinkingTokens = ThinkingTokens {
        start: TokenId(1),
        end: TokenId(2),
    };

    fn ids(v: &[u32]) -> Vec<TokenId> {
        v.iter().copied().map(TokenId).collect()
    }

    #[test]
    fn classifies_tokens_by_block() {
        let h = ids(&[5, 1, 7]);
        assert_eq!(
            classify(Some(T), &h, Decoded::Token(TokenId(7))),
            StepResult::ThinkingToken(TokenId(7))
        );
        let h = ids(&[5, 1, 7, 2]);
        assert_eq!(
            classify(Some(T), &h, Decoded::Token(TokenId(2))),
            StepResult::ThinkingEnd(TokenId(2))
        );
        let h = ids(&[5, 1, 7, 2, 9]);
        assert_eq!(
            classify(Some(T), &h, Decoded::Token(TokenId(9))),
            StepResult::Token(Decoded::Token(TokenId(9)))
        );
        assert_eq!(
            classify(None, &h, Decoded::Eog(TokenId(9))),
            StepResult::Token(Decoded::Eog(TokenId(9)))
        );
    }

    #[test]
    fn end_of_generation_inside_a_block_still_ends() {
        let h = ids(&[5, 1, 7, 0]);
        assert_eq!(
            classify(Some(T), &h, Decoded::Eog(TokenId(0))),
            StepResult::Token(Decoded::Eog(TokenId(0)))
        );
    }

    #[test]
    fn signature_covers_only_the_latest_block() {
        let a = signature("m", T, &ids(&[1, 7, 8, 2, 9]));
        let b = signature("m", T, &ids(&[3, 3, 1, 7, 8, 2]));
        let c = signature("m", T, &ids(&[1, 7, 9, 2]));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
        assert_ne!(a, signature("other", T, &ids(&[1, 7, 8, 2])));
    }
}
