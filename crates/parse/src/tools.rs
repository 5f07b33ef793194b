//! The request's tools, reduced to what parsing needs: each parameter's declared types
//! (README L12 schema typing).

use std::collections::HashMap;

use serde_json::Value;

/// The declared tools of a request: name → parameter → JSON-schema types.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolSchemas {
    tools: HashMap<String, HashMap<String, Vec<String>>>,
}

/// How an untyped (XML, python-style, Gemma) argument value is to be typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamKind {
    /// Declared `string` only: the raw text.
    String,
    /// Declared, without `string`: JSON if valid, else the raw text.
    Json,
    /// A union with `string`: JSON when valid for another member, else the raw text.
    Union,
    /// Not declared: JSON if valid, else the raw text.
    Undeclared,
}

impl ToolSchemas {
    /// Reads tools in the OpenAI request shape: `[{"type": "function", "function": {"name",
    /// "parameters"}}]` (the bare `{"name", "parameters"}` shape is accepted too). Entries
    /// that are not objects with a name are skipped.
    pub fn from_openai(tools: &Value) -> Self {
        let mut out = HashMap::new();
        for t in tools.as_array().into_iter().flatten() {
            let f = t.get("function").unwrap_or(t);
            let Some(name) = f.get("name").and_then(Value::as_str) else {
                continue;
            };
            let params = f.get("parameters").cloned().unwrap_or(Value::Null);
            out.insert(name.to_owned(), properties(&params));
        }
        ToolSchemas { tools: out }
    }

    /// Reads [`wick_types::Tool`]s.
    pub fn from_tools(tools: &[wick_types::Tool]) -> Self {
        let mut out = HashMap::new();
        for t in tools {
            let params = t.parameters.as_ref().unwrap_or(&Value::Null);
            out.insert(t.name.clone(), properties(params));
        }
        ToolSchemas { tools: out }
    }

    /// The declared types of parameter `key` of tool `tool` (empty when undeclared).
    pub(crate) fn types(&self, tool: &str, key: &str) -> &[String] {
        self.tools
            .get(tool)
            .and_then(|p| p.get(key))
            .map_or(&[], Vec::as_slice)
    }

    pub(crate) fn kind(&self, tool: &str, key: &str) -> ParamKind {
        let types = self.types(tool, key);
        let has_string = types.iter().any(|t| t == "string");
        match (types.is_empty(), has_string, types.len()) {
            (true, _, _) => ParamKind::Undeclared,
            (false, true, 1) => ParamKind::String,
            (false, true, _) => ParamKind::Union,
            (false, false, _) => ParamKind::Json,
        }
    }
}

fn properties(schema: &Value) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            out.insert(k.clone(), schema_types(v));
        }
    }
    out
}

fn schema_types(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match v.get("type") {
        Some(Value::String(s)) => out.push(s.clone()),
        Some(Value::Array(a)) => out.extend(a.iter().filter_map(Value::as_str).map(String::from)),
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        for alt in v.get(key).and_then(Value::as_array).into_iter().flatten() {
            out.extend(schema_types(alt));
        }
    }
    out
}

/// Whether JSON value `v` is valid for one of the non-string `types`.
pub(crate) fn fits_other_type(v: &Value, types: &[String]) -> bool {
    types.iter().any(|t| match t.as_str() {
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    })
}
