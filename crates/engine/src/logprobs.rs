//! Per-token log-probabilities, lined up with the text the engine emits.
//!
//! Text reaches a caller through a UTF-8 decoder and a stop-string matcher, so one text event
//! may cover several tokens or part of one. [`TokenLog`] keeps each generated token's byte span
//! in the raw output and hands a token out with the text event that completes it; tokens that a
//! matched stop string swallows whole are never handed out.

use std::collections::VecDeque;

use wick_backend::Logprobs;
use wick_types::TokenId;

/// One generated token with its log-probability and the most likely alternatives at its
/// position (OpenAI's `logprobs.content[]` entry).
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredToken {
    /// The token.
    pub token: TokenId,
    /// Its bytes (a token may hold part of a UTF-8 character).
    pub bytes: Vec<u8>,
    /// Its log-probability under the model's raw distribution.
    pub logprob: f32,
    /// The most likely tokens at its position, most likely first.
    pub top: Vec<Alternative>,
}

/// One alternative at a generated token's position.
#[derive(Debug, Clone, PartialEq)]
pub struct Alternative {
    /// The token.
    pub token: TokenId,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its log-probability.
    pub logprob: f32,
}

impl ScoredToken {
    /// The entry for `logprobs` of a token whose bytes are `bytes`; `pieces` are the bytes of
    /// `logprobs.top`, in order.
    pub(crate) fn new(logprobs: &Logprobs, bytes: Vec<u8>, pieces: Vec<Vec<u8>>) -> Self {
        ScoredToken {
            token: logprobs.sampled.token,
            bytes,
            logprob: logprobs.sampled.logprob,
            top: logprobs
                .top
                .iter()
                .zip(pieces)
                .map(|(t, bytes)| Alternative {
                    token: t.token,
                    bytes,
                    logprob: t.logprob,
                })
                .collect(),
        }
    }
}

/// Generated tokens not yet handed out, with their byte spans in the raw output.
#[derive(Debug, Default)]
pub(crate) struct TokenLog {
    /// `(start, end, token)`: the token's bytes are `start..end` of the raw output.
    pending: VecDeque<(usize, usize, ScoredToken)>,
    /// Raw output bytes so far.
    raw: usize,
    /// Bytes of text handed out so far.
    emitted: usize,
}

impl TokenLog {
    /// Records the next generated token.
    pub(crate) fn push(&mut self, token: ScoredToken) {
        let start = self.raw;
        self.raw += token.bytes.len();
        self.pending.push_back((start, self.raw, token));
    }

    /// `text` was handed out: the tokens it completes.
    pub(crate) fn release(&mut self, text: &str) -> Vec<ScoredToken> {
        self.emitted += text.len();
        self.take_while(|_, end, emitted| end <= emitted)
    }

    /// The stream ended after `text`: every token left when nothing was cut, else (a stop
    /// string matched) the tokens that begin inside the answer.
    pub(crate) fn finish(&mut self, text: &str, stopped: bool) -> Vec<ScoredToken> {
        self.emitted += text.len();
        if stopped {
            let out = self.take_while(|start, end, emitted| start < emitted || end <= emitted);
            self.pending.clear();
            out
        } else {
            self.pending.drain(..).map(|(_, _, t)| t).collect()
        }
    }

    fn take_while(&mut self, keep: impl Fn(usize, usize, usize) -> bool) -> Vec<ScoredToken> {
        let mut out = Vec::new();
        while let Some((start, end, _)) = self.pending.front() {
            if !keep(*start, *end, self.emitted) {
                break;
            }
            if let Some((_, _, token)) = self.pending.pop_front() {
                out.push(token);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: u32, text: &[u8]) -> ScoredToken {
        ScoredToken {
            token: TokenId(id),
            bytes: text.to_vec(),
            logprob: -0.5,
            top: Vec::new(),
        }
    }

    fn ids(tokens: &[ScoredToken]) -> Vec<u32> {
        tokens.iter().map(|t| t.token.0).collect()
    }

    #[test]
    fn a_token_goes_out_with_the_text_that_completes_it() {
        let mut log = TokenLog::default();
        log.push(token(1, b"He"));
        log.push(token(2, b"llo"));
        // The text so far is held back (a stop string may start here).
        assert_eq!(ids(&log.release("")), [] as [u32; 0]);
        assert_eq!(ids(&log.release("Hel")), [1]);
        assert_eq!(ids(&log.release("lo")), [2]);
        // A token split inside a UTF-8 character waits for the rest.
        log.push(token(3, &"é".as_bytes()[..1]));
        assert!(log.release("").is_empty());
        log.push(token(4, &"é".as_bytes()[1..]));
        assert_eq!(ids(&log.release("é")), [3, 4]);
        assert!(log.finish("", false).is_empty());
    }

    #[test]
    fn tokens_swallowed_by_a_stop_string_are_dropped() {
        let mut log = TokenLog::default();
        log.push(token(1, b"ok"));
        log.push(token(2, b" <"));
        log.push(token(3, b"/s>"));
        log.push(token(4, b"x"));
        // The answer is "ok " (stop "</s>"): token 2 begins in it, 3 and 4 do not.
        assert_eq!(ids(&log.release("ok")), [1]);
        assert_eq!(ids(&log.finish(" ", true)), [2]);
        assert!(log.finish("", false).is_empty());
    }

    #[test]
    fn at_the_end_everything_left_goes_out() {
        let mut log = TokenLog::default();
        log.push(token(1, b"a"));
        log.push(token(2, b""));
        log.push(token(3, &[0xE6]));
        assert_eq!(ids(&log.release("a")), [1, 2]);
        assert_eq!(ids(&log.finish("\u{fffd}", false)), [3]);
    }
}
