//! JSON schema → GBNF: the grammar of a tool's arguments, so a forced call can only name the
//! tool's own parameters with values of their types.
//!
//! Covered: `type` (one or a list), `enum`, `const`, `properties` + `required`, `items`,
//! `anyOf` / `oneOf`, nested to any depth. Anything else (`$ref`, `allOf`, `pattern`, …) falls
//! back to "any JSON value" for that part, so a schema is never refused, only less strict.
//! Object keys come in the order `serde_json` keeps the schema's map in, required ones first.

use std::fmt::Write as _;

use serde_json::Value;

/// Rules for `schema`, named `{prefix}`, `{prefix}-1`, …; the root rule is `{prefix}`. The
/// rules refer to `obj`, `value`, `str`, `num` and `ws` (the generic JSON rules).
pub(crate) fn schema_rules(schema: &Value, prefix: &str) -> String {
    let mut out = Rules {
        prefix: prefix.to_owned(),
        text: String::new(),
        next: 0,
    };
    let root = out.expr(schema, 0);
    out.text.insert_str(0, &format!("{prefix} ::= {root}\n"));
    out.text
}

struct Rules {
    prefix: String,
    text: String,
    next: usize,
}

/// Deeper schemas than this are not followed (a hostile schema cannot blow up the grammar).
const MAX_DEPTH: usize = 16;

impl Rules {
    /// A new rule holding `body`; returns its name.
    fn rule(&mut self, body: &str) -> String {
        self.next += 1;
        let name = format!("{}-{}", self.prefix, self.next);
        let _ = writeln!(self.text, "{name} ::= {body}");
        name
    }

    /// A GBNF expression matching the JSON values `schema` allows.
    fn expr(&mut self, schema: &Value, depth: usize) -> String {
        let Some(map) = schema.as_object().filter(|_| depth < MAX_DEPTH) else {
            return "value".into();
        };
        if let Some(Value::Array(values)) = map.get("enum") {
            if !values.is_empty() {
                return alternatives(values.iter().map(json_literal));
            }
        }
        if let Some(value) = map.get("const") {
            return json_literal(value);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = map.get(key) {
                if !options.is_empty() {
                    let parts: Vec<String> =
                        options.iter().map(|o| self.expr(o, depth + 1)).collect();
                    return alternatives(parts.into_iter());
                }
            }
        }
        match map.get("type") {
            Some(Value::String(t)) => self.typed(t, map, depth),
            Some(Value::Array(types)) if !types.is_empty() => {
                let parts: Vec<String> = types
                    .iter()
                    .map(|t| self.typed(t.as_str().unwrap_or(""), map, depth))
                    .collect();
                alternatives(parts.into_iter())
            }
            _ if map.contains_key("properties") => self.typed("object", map, depth),
            _ => "value".into(),
        }
    }

    fn typed(&mut self, t: &str, map: &serde_json::Map<String, Value>, depth: usize) -> String {
        match t {
            "string" => string(map),
            "number" => "num".into(),
            "integer" => r#"( "-"? ( "0" | [1-9] [0-9]{0,17} ) )"#.into(),
            "boolean" => r#"( "true" | "false" )"#.into(),
            "null" => r#""null""#.into(),
            "array" => {
                let item = match map.get("items") {
                    Some(items) => self.expr(items, depth + 1),
                    None => "value".into(),
                };
                let body = format!(r#""[" ws ( {item} ( ws "," ws {item} )* )? ws "]""#);
                self.rule(&body)
            }
            "object" => self.object(map, depth),
            _ => "value".into(),
        }
    }

    /// An object with the schema's properties: the required ones always, in order, then any
    /// of the optional ones, in order. Without `properties`, any object.
    fn object(&mut self, map: &serde_json::Map<String, Value>, depth: usize) -> String {
        let Some(Value::Object(properties)) = map.get("properties") else {
            return "obj".into();
        };
        if properties.is_empty() {
            return "obj".into();
        }
        let required: Vec<&str> = match map.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut must = Vec::new();
        let mut may = Vec::new();
        for (name, schema) in properties {
            let value = self.expr(schema, depth + 1);
            let pair = format!(
                r#"{} ws ":" ws {value}"#,
                json_literal(&Value::String(name.clone()))
            );
            if required.contains(&name.as_str()) {
                must.push(pair);
            } else {
                may.push(pair);
            }
        }
        // Optional pairs after a first pair: each may appear, in order, after a comma.
        let mut tail = String::new();
        for pair in may.iter().rev() {
            let rest = std::mem::take(&mut tail);
            tail = format!(r#"( ws "," ws {pair} )? {rest}"#);
        }
        let body = if must.is_empty() {
            // Any in-order subset of the optional pairs: choose the first one present.
            let mut firsts = Vec::new();
            for (i, pair) in may.iter().enumerate() {
                let mut rest = String::new();
                for later in may[i + 1..].iter().rev() {
                    let after = std::mem::take(&mut rest);
                    rest = format!(r#"( ws "," ws {later} )? {after}"#);
                }
                firsts.push(format!("{pair} {rest}"));
            }
            format!(r#""{{" ws ( {} )? ws "}}""#, firsts.join(" | "))
        } else {
            let joined = must.join(r#" ws "," ws "#);
            format!(r#""{{" ws {joined} {tail} ws "}}""#)
        };
        self.rule(&body)
    }
}

/// llama.cpp refuses a grammar repetition above this count.
const MAX_REPEAT: u64 = 2000;

/// A JSON string, held to `minLength` / `maxLength` when the schema gives them. A minimum
/// above llama.cpp's repetition cap is lowered to the cap, a maximum above it is dropped.
fn string(map: &serde_json::Map<String, Value>) -> String {
    let bound = |key| map.get(key).and_then(Value::as_u64);
    let min = bound("minLength").map(|n| n.min(MAX_REPEAT));
    let max = bound("maxLength").filter(|&n| n <= MAX_REPEAT);
    match (min, max) {
        (None | Some(0), None) => "str".into(),
        (min, max) => {
            let min = min.unwrap_or(0);
            let max = max.map_or(String::new(), |m| m.max(min).to_string());
            format!(r#"( "\"" strchar{{{min},{max}}} "\"" )"#)
        }
    }
}

/// `value` as a GBNF literal of its JSON text.
fn json_literal(value: &Value) -> String {
    super::grammar::literal(&value.to_string())
}

fn alternatives(parts: impl Iterator<Item = String>) -> String {
    let parts: Vec<String> = parts.collect();
    format!("( {} )", parts.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn required_string_property() {
        let g = schema_rules(
            &json!({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}),
            "args-0",
        );
        assert_eq!(
            g,
            "args-0 ::= args-0-1\nargs-0-1 ::= \"{\" ws \"\\\"city\\\"\" ws \":\" ws str  ws \"}\"\n"
        );
    }

    #[test]
    fn enums_arrays_optional_and_unions() {
        let g = schema_rules(
            &json!({"properties": {
                "unit": {"enum": ["c", "f"]},
                "days": {"type": "array", "items": {"type": "integer"}},
                "note": {"type": ["string", "null"]}}}),
            "a",
        );
        assert!(g.contains(r#"( "\"c\"" | "\"f\"" )"#), "{g}");
        assert!(g.contains(r#""[" ws ( ( "-"?"#), "{g}");
        assert!(g.contains(r#"( str | "null" )"#), "{g}");
        // No property is required: the object may be empty or start with any of them (in
        // whichever order serde_json keeps the map: sorted, or as written with
        // `preserve_order` unified in by another crate).
        for name in ["unit", "days", "note"] {
            let first = format!(r#"( "\"{name}\"""#);
            let other = format!(r#"| "\"{name}\"""#);
            assert!(g.contains(&first) || g.contains(&other), "{name}: {g}");
        }
        assert!(g.trim_end().ends_with(r#")? ws "}""#), "{g}");
    }

    #[test]
    fn string_lengths_become_bounded_repetitions() {
        let g = schema_rules(
            &json!({"type": "string", "minLength": 2, "maxLength": 5}),
            "a",
        );
        assert_eq!(g, "a ::= ( \"\\\"\" strchar{2,5} \"\\\"\" )\n");
        let g = schema_rules(&json!({"type": "string", "minLength": 3}), "a");
        assert!(g.contains("strchar{3,}"), "{g}");
        let g = schema_rules(&json!({"type": "string", "minLength": 1u64 << 40}), "a");
        assert!(g.contains("strchar{2000,}"), "{g}");
        let g = schema_rules(&json!({"type": "string", "maxLength": 1u64 << 40}), "a");
        assert_eq!(g, "a ::= str\n");
    }

    #[test]
    fn unknown_parts_and_deep_nesting_fall_back_to_any_value() {
        assert_eq!(schema_rules(&json!({"$ref": "#/x"}), "a"), "a ::= value\n");
        assert_eq!(schema_rules(&json!(true), "a"), "a ::= value\n");
        let mut deep = json!({"type": "string"});
        for _ in 0..100 {
            deep = json!({"type": "array", "items": deep});
        }
        let g = schema_rules(&deep, "a");
        assert_eq!(g.lines().count(), MAX_DEPTH + 1);
    }
}
