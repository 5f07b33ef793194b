//! Token log-probabilities in OpenAI's two shapes: chat's `logprobs.content[]` entries and the
//! legacy completions' parallel arrays; typed, borrowing the tokens they describe.

use std::borrow::Cow;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;
use wick::{Alternative, ScoredToken};

/// What OpenAI reports for a token the model gives no chance at all (`-inf` is not JSON).
const NO_CHANCE: f32 = -9999.0;

/// A log-probability as sent: an `f32` widened to `f64` (what earlier wire versions wrote, so
/// `-0.1` reads `-0.10000000149011612`, the exact value), `-inf` as [`NO_CHANCE`].
fn logprob(lp: f32) -> f64 {
    f64::from(if lp.is_finite() { lp } else { NO_CHANCE })
}

/// A token's text: its bytes as UTF-8 (a token holding part of a character shows U+FFFD; its
/// `bytes` are exact).
fn text(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// Chat's `choices[].logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatLogprobs<'a> {
    content: Entries<'a>,
    /// Always `null`.
    refusal: (),
}

/// Chat's `logprobs` for `tokens`.
pub(crate) fn chat(tokens: &[ScoredToken]) -> ChatLogprobs<'_> {
    ChatLogprobs {
        content: Entries(tokens),
        refusal: (),
    }
}

/// `content[]`: one entry per token.
#[derive(Debug)]
struct Entries<'a>(&'a [ScoredToken]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| Entry {
            token: text(&t.bytes),
            logprob: logprob(t.logprob),
            bytes: &t.bytes,
            top_logprobs: Alternatives(&t.top),
        }))
    }
}

/// One `content[]` entry.
#[derive(Serialize)]
struct Entry<'a> {
    token: Cow<'a, str>,
    logprob: f64,
    bytes: &'a [u8],
    top_logprobs: Alternatives<'a>,
}

/// `top_logprobs[]`: `{token, logprob, bytes}` per alternative, likeliest first.
struct Alternatives<'a>(&'a [Alternative]);

impl Serialize for Alternatives<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|a| Top {
            token: text(&a.bytes),
            logprob: logprob(a.logprob),
            bytes: &a.bytes,
        }))
    }
}

/// One `top_logprobs[]` entry.
#[derive(Serialize)]
struct Top<'a> {
    token: Cow<'a, str>,
    logprob: f64,
    bytes: &'a [u8],
}

/// Legacy completions' `choices[].logprobs`: parallel arrays over the tokens.
#[derive(Debug, Serialize)]
pub(crate) struct LegacyLogprobs<'a> {
    tokens: Vec<Cow<'a, str>>,
    token_logprobs: Vec<f64>,
    top_logprobs: Vec<TopMap<'a>>,
    text_offset: Vec<usize>,
}

/// Legacy completions' `logprobs` for `tokens`, which start `offset` characters into the
/// generated text; `offset` moves past them (a character counts where its first byte is).
pub(crate) fn legacy<'a>(tokens: &'a [ScoredToken], offset: &mut usize) -> LegacyLogprobs<'a> {
    let mut out = LegacyLogprobs {
        tokens: Vec::with_capacity(tokens.len()),
        token_logprobs: Vec::with_capacity(tokens.len()),
        top_logprobs: Vec::with_capacity(tokens.len()),
        text_offset: Vec::with_capacity(tokens.len()),
    };
    for t in tokens {
        out.tokens.push(text(&t.bytes));
        out.token_logprobs.push(logprob(t.logprob));
        out.top_logprobs.push(TopMap(&t.top));
        out.text_offset.push(*offset);
        *offset += t.bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count();
    }
    out
}

/// One token's `top_logprobs` object: text → log-probability. Two alternatives may show the
/// same text: the likelier one (listed first) keeps the key.
#[derive(Debug)]
struct TopMap<'a>(&'a [Alternative]);

impl Serialize for TopMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (i, a) in self.0.iter().enumerate() {
            let key = text(&a.bytes);
            if self.0[..i].iter().all(|b| text(&b.bytes) != key) {
                map.serialize_entry(&key, &logprob(a.logprob))?;
            }
        }
        map.end()
    }
}

/// llama-server's `completion_probabilities` for `tokens`: per token `{id, token, logprob,
/// bytes, top_logprobs: [{id, token, logprob, bytes}]}`; `after_sampling` (the tokens carry
/// the sampled distribution, `post_sampling_probs`): `prob` and `top_probs` with plain
/// probabilities instead.
pub(crate) fn native(tokens: &[ScoredToken], after_sampling: bool) -> Value {
    let (value_key, top_key) = if after_sampling {
        ("prob", "top_probs")
    } else {
        ("logprob", "top_logprobs")
    };
    let value = |lp: f32| {
        if after_sampling {
            f64::from(lp).exp()
        } else {
            logprob(lp)
        }
    };
    let entry = |id: u32, bytes: &[u8], lp: f32| {
        let mut e = serde_json::Map::new();
        e.insert("id".into(), id.into());
        e.insert("token".into(), text(bytes).into());
        e.insert(value_key.into(), value(lp).into());
        e.insert("bytes".into(), bytes.into());
        e
    };
    tokens
        .iter()
        .map(|t| {
            let mut e = entry(t.token.0, &t.bytes, t.logprob);
            let top = t
                .top
                .iter()
                .map(|a| Value::Object(entry(a.token.0, &a.bytes, a.logprob)))
                .collect();
            e.insert(top_key.into(), Value::Array(top));
            Value::Object(e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wick::TokenId;

    fn token(bytes: &[u8], logprob: f32, top: &[(&[u8], f32)]) -> ScoredToken {
        ScoredToken {
            token: TokenId(1),
            bytes: bytes.to_vec(),
            logprob,
            top: top
                .iter()
                .map(|(b, lp)| Alternative {
                    token: TokenId(2),
                    bytes: b.to_vec(),
                    logprob: *lp,
                })
                .collect(),
        }
    }

    #[test]
    fn chat_entries_have_openai_fields() {
        let tokens = [token(
            b"Hi",
            -0.25,
            &[(b"Hi", -0.25), (b"Ho", f32::NEG_INFINITY)],
        )];
        let v = serde_json::to_value(chat(&tokens)).unwrap();
        assert_eq!(v["refusal"], Value::Null);
        let e = &v["content"][0];
        assert_eq!(e["token"], "Hi");
        assert_eq!(e["logprob"], -0.25);
        assert_eq!(e["bytes"], json!([72, 105]));
        assert_eq!(e["top_logprobs"][1]["logprob"], -9999.0);
        assert_eq!(e["top_logprobs"][1]["bytes"], json!([72, 111]));
    }

    #[test]
    fn native_entries_name_probabilities_after_sampling() {
        let tokens = [token(b"Hi", -0.5, &[(b"Hi", -0.5), (b"Ho", -1.0)])];
        let raw = native(&tokens, false);
        assert_eq!(raw[0]["logprob"], -0.5);
        assert_eq!(raw[0]["top_logprobs"][1]["logprob"], -1.0);
        assert_eq!(raw[0]["top_logprobs"][1]["bytes"], json!([72, 111]));
        assert!(raw[0].get("prob").is_none());
        let after = native(&tokens, true);
        assert_eq!(after[0]["prob"], f64::from(-0.5f32).exp());
        assert_eq!(after[0]["top_probs"][1]["prob"], f64::from(-1.0f32).exp());
        assert_eq!(after[0]["top_probs"][0]["token"], "Hi");
        assert_eq!(after[0]["id"], 1);
        assert!(after[0].get("logprob").is_none() && after[0].get("top_logprobs").is_none());
    }

    #[test]
    fn legacy_offsets_count_characters() {
        let mut offset = 0;
        let e = "é".as_bytes();
        let tokens = [
            token(b"a", -1.0, &[(b"a", -1.0), (b"b", -2.0), (b"a", -3.0)]),
            token(&e[..1], -0.5, &[]),
            token(&e[1..], -0.5, &[]),
            token(b"z", -0.5, &[]),
        ];
        let v = serde_json::to_value(legacy(&tokens, &mut offset)).unwrap();
        assert_eq!(v["text_offset"], json!([0, 1, 2, 2]));
        assert_eq!(offset, 3);
        assert_eq!(v["top_logprobs"][0], json!({"a": -1.0, "b": -2.0}));
        assert_eq!(v["token_logprobs"][0], -1.0);
        assert_eq!(v["tokens"][3], "z");
    }
}
