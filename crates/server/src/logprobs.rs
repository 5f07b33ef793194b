//! Token log-probabilities in OpenAI's two shapes: chat's `logprobs.content[]` entries and the
//! legacy completions' parallel arrays.

use serde_json::{json, Map, Value};
use wick::ScoredToken;

/// What OpenAI reports for a token the model gives no chance at all (`-inf` is not JSON).
const NO_CHANCE: f32 = -9999.0;

fn logprob(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        NO_CHANCE
    }
}

/// A token's text: its bytes as UTF-8 (a token holding part of a character shows U+FFFD; its
/// `bytes` are exact).
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Chat's `choices[].logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}`.
pub(crate) fn chat(tokens: &[ScoredToken]) -> Value {
    let content: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let top: Vec<Value> = t
                .top
                .iter()
                .map(|a| {
                    json!({"token": text(&a.bytes), "logprob": logprob(a.logprob),
                           "bytes": a.bytes})
                })
                .collect();
            json!({"token": text(&t.bytes), "logprob": logprob(t.logprob), "bytes": t.bytes,
                   "top_logprobs": top})
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// Legacy completions' `choices[].logprobs` for `tokens`, which start `offset` characters into
/// the generated text; `offset` moves past them (a character counts where its first byte is).
pub(crate) fn legacy(tokens: &[ScoredToken], offset: &mut usize) -> Value {
    let mut strings = Vec::with_capacity(tokens.len());
    let mut values = Vec::with_capacity(tokens.len());
    let mut tops = Vec::with_capacity(tokens.len());
    let mut offsets = Vec::with_capacity(tokens.len());
    for t in tokens {
        strings.push(text(&t.bytes));
        values.push(logprob(t.logprob));
        let mut top = Map::new();
        // Two tokens may show the same text: the likelier one (listed first) keeps its key.
        for a in &t.top {
            top.entry(text(&a.bytes))
                .or_insert_with(|| json!(logprob(a.logprob)));
        }
        tops.push(Value::Object(top));
        offsets.push(*offset);
        *offset += t.bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count();
    }
    json!({"tokens": strings, "token_logprobs": values, "top_logprobs": tops,
           "text_offset": offsets})
}

#[cfg(test)]
mod tests {
    use super::*;
    use wick::{Alternative, TokenId};

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
        let v = chat(&[token(
            b"Hi",
            -0.25,
            &[(b"Hi", -0.25), (b"Ho", f32::NEG_INFINITY)],
        )]);
        assert_eq!(v["refusal"], Value::Null);
        let e = &v["content"][0];
        assert_eq!(e["token"], "Hi");
        assert_eq!(e["logprob"], -0.25);
        assert_eq!(e["bytes"], json!([72, 105]));
        assert_eq!(e["top_logprobs"][1]["logprob"], -9999.0);
        assert_eq!(e["top_logprobs"][1]["bytes"], json!([72, 111]));
    }

    #[test]
    fn legacy_offsets_count_characters() {
        let mut offset = 0;
        let e = "é".as_bytes();
        let v = legacy(
            &[
                token(b"a", -1.0, &[(b"a", -1.0), (b"b", -2.0), (b"a", -3.0)]),
                token(&e[..1], -0.5, &[]),
                token(&e[1..], -0.5, &[]),
                token(b"z", -0.5, &[]),
            ],
            &mut offset,
        );
        assert_eq!(v["text_offset"], json!([0, 1, 2, 2]));
        assert_eq!(offset, 3);
        assert_eq!(v["top_logprobs"][0], json!({"a": -1.0, "b": -2.0}));
        assert_eq!(v["token_logprobs"][0], -1.0);
        assert_eq!(v["tokens"][3], "z");
    }
}
