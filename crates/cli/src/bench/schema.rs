//! (f) JSON-schema output: wall time per token of an answer held to a JSON schema, beside the
//! same prompt unconstrained, on both servers.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::client::median;
use super::server::{Launch, Side};

/// (f) on one server: medians over the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct SchemaOutput {
    /// Wall ms per generated token after the first, with `response_format: json_schema`.
    pub(crate) constrained_ms_per_token: f64,
    /// The same for the same prompt without `response_format`.
    pub(crate) unconstrained_ms_per_token: f64,
    /// Generated tokens of one constrained answer (the last run's).
    pub(crate) constrained_tokens: u64,
    /// Generated tokens of one unconstrained answer (the last run's).
    pub(crate) unconstrained_tokens: u64,
    /// Whether every constrained answer parsed as JSON holding the schema's properties.
    pub(crate) follows_schema: bool,
    pub(crate) runs: usize,
}

impl SchemaOutput {
    /// Constrained over unconstrained time per token: the schema's cost on this server.
    pub(crate) fn overhead(&self) -> Option<f64> {
        (self.unconstrained_ms_per_token > 0.0)
            .then(|| self.constrained_ms_per_token / self.unconstrained_ms_per_token)
    }
}

const PROMPT: &str = "Invent a member of a small town library and describe them as JSON: \
their name, their age, their town, a few tags about their reading, and several sentences about \
their life.";

/// A person: typed properties and two lists of short strings, about 140 tokens with the test
/// model. Every string has a `maxLength` under 100: llama.cpp's converter turns long or
/// unbounded strings into grammars that wick's sampler now takes seconds per token over.
fn schema() -> Value {
    let strings = |max_length: u32, min_items: u32, max_items: u32| {
        json!({"type": "array", "items": {"type": "string", "maxLength": max_length},
               "minItems": min_items, "maxItems": max_items})
    };
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer"},
            "town": {"type": "string", "maxLength": 40},
            "tags": strings(24, 3, 6),
            "life": strings(80, 3, 5),
        },
        "required": ["name", "age", "town", "tags", "life"],
        "additionalProperties": false,
    })
}

fn request(constrained: bool, max_tokens: u32) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    });
    if constrained {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "member", "strict": true, "schema": schema()},
        });
    }
    body
}

/// Whether `text` is a JSON object with the schema's properties of the schema's types.
pub(crate) fn follows_schema(text: &str) -> bool {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text.trim()) else {
        return false;
    };
    let string = |key: &str| object.get(key).is_some_and(Value::is_string);
    let strings = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_array)
            .is_some_and(|all| all.iter().all(Value::is_string))
    };
    string("name")
        && string("town")
        && object.get("age").is_some_and(|a| a.is_i64() || a.is_u64())
        && strings("tags")
        && strings("life")
}

/// (f) on one server: `runs` times the unconstrained then the constrained request, streamed,
/// after one warm-up request. The constrained answer may have `max_tokens` (room to close its
/// JSON, about 140 tokens with the test model); the unconstrained one, which the test model
/// does not end by itself, half as many.
pub(crate) async fn schema_output(
    launch: &Launch,
    side: Side,
    runs: usize,
    max_tokens: u32,
) -> Result<SchemaOutput> {
    let server = launch.start(side).await?;
    let chat = "/v1/chat/completions";
    server.client.stream(chat, request(false, 8)).await?;
    let (mut constrained, mut unconstrained) = (Vec::new(), Vec::new());
    let mut out = SchemaOutput {
        constrained_ms_per_token: 0.0,
        unconstrained_ms_per_token: 0.0,
        constrained_tokens: 0,
        unconstrained_tokens: 0,
        follows_schema: true,
        runs,
    };
    for _ in 0..runs {
        let free = server
            .client
            .stream(chat, request(false, max_tokens))
            .await?;
        let held = server
            .client
            .stream(chat, request(true, max_tokens))
            .await?;
        let (Some(f), Some(h)) = (
            free.ms_per_token_after_first(),
            held.ms_per_token_after_first(),
        ) else {
            bail!(
                "an answer of under two tokens: unconstrained {:?}, constrained {:?}",
                free.text,
                held.text
            );
        };
        unconstrained.push(f);
        constrained.push(h);
        out.unconstrained_tokens = free.completion_tokens;
        out.constrained_tokens = held.completion_tokens;
        out.follows_schema &= follows_schema(&held.text);
    }
    server.stop().await;
    out.constrained_ms_per_token = median(&constrained);
    out.unconstrained_ms_per_token = median(&unconstrained);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_follows_the_schema_only_when_it_parses_with_the_types() {
        let good = r#" {"name": "Ada", "age": 41, "town": "Rye", "tags": ["maps", "poems"],
            "life": ["She reads."]} "#;
        assert!(follows_schema(good));
        let cut = r#"{"name": "Ada", "age": 41, "town": "Rye", "tags": ["maps"]"#;
        assert!(!follows_schema(cut));
        let text_age = r#"{"name": "Ada", "age": "41", "town": "Rye", "tags": [], "life": []}"#;
        assert!(!follows_schema(text_age));
        let number_tag = r#"{"name": "Ada", "age": 41, "town": "Rye", "tags": [1], "life": []}"#;
        assert!(!follows_schema(number_tag));
        let no_life = r#"{"name": "Ada", "age": 41, "town": "Rye", "tags": []}"#;
        assert!(!follows_schema(no_life));
        assert!(!follows_schema("Sure! Here is a member: Ada, 41."));
        assert!(!follows_schema("[1, 2]"));
    }

    #[test]
    fn only_the_constrained_request_carries_the_schema() {
        assert!(request(false, 9).get("response_format").is_none());
        let held = request(true, 9);
        assert_eq!(held["response_format"]["type"], "json_schema");
        assert_eq!(held["response_format"]["json_schema"]["schema"], schema());
        assert_eq!(held["messages"], request(false, 9)["messages"]);
    }

    #[test]
    fn overhead_is_constrained_over_unconstrained() {
        let out = SchemaOutput {
            constrained_ms_per_token: 15.0,
            unconstrained_ms_per_token: 10.0,
            constrained_tokens: 120,
            unconstrained_tokens: 200,
            follows_schema: true,
            runs: 1,
        };
        assert!((out.overhead().unwrap() - 1.5).abs() < 1e-12);
    }
}
