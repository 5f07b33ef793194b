//! Grammars that force a tool call in a format's own syntax (OpenAI `tool_choice: required`
//! or a named function), so the output parser reads it back as a call.

use std::fmt::Write as _;

use serde_json::Value;
use wick_types::Tool;

use crate::schema_grammar::schema_rules;
use crate::{Format, ParseError};

/// A GBNF grammar (llama.cpp syntax) whose every sentence is exactly one tool call of `format`
/// to one of `names` (a JSON object as arguments).
///
/// JSON-native formats are supported; `content_only` has no call syntax, so callers use
/// [`Format::Generic`] for it (as llama.cpp does for templates without one).
///
/// # Errors
///
/// [`ParseError::NoToolGrammar`] for formats without a grammar here (the XML, python-style and
/// Gemma formats) and for an empty `names`.
///
/// ```
/// use wick_parse::{tool_call_grammar, Format};
///
/// let g = tool_call_grammar(Format::Hermes, &["get_weather".to_owned()])?;
/// assert!(g.starts_with("root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\""));
/// # Ok::<(), wick_parse::ParseError>(())
/// ```
pub fn tool_call_grammar(format: Format, names: &[String]) -> Result<String, ParseError> {
    let calls: Vec<(String, Option<Value>)> = names.iter().map(|n| (n.clone(), None)).collect();
    build(format, &calls)
}

/// Like [`tool_call_grammar`], with each tool's arguments held to its JSON schema
/// (`parameters`): only its own properties, required ones always, values of their types. A
/// tool without a schema, or with parts the grammar does not cover, takes any JSON there.
///
/// # Errors
///
/// As [`tool_call_grammar`].
///
/// ```
/// use wick_parse::{tool_call_grammar_for, Format};
/// use wick_types::Tool;
///
/// let tool = Tool {
///     name: "get_weather".into(),
///     description: None,
///     parameters: Some(serde_json::json!(
///         {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
///     )),
/// };
/// let g = tool_call_grammar_for(Format::Hermes, &[tool])?;
/// assert!(g.contains(r#""\"city\"" ws ":" ws str"#));
/// # Ok::<(), wick_parse::ParseError>(())
/// ```
pub fn tool_call_grammar_for(format: Format, tools: &[Tool]) -> Result<String, ParseError> {
    let calls: Vec<(String, Option<Value>)> = tools
        .iter()
        .map(|t| (t.name.clone(), t.parameters.clone()))
        .collect();
    build(format, &calls)
}

/// The grammar: `root` wraps `call`, one alternative per tool, each with its name and its
/// arguments' rules.
fn build(format: Format, calls: &[(String, Option<Value>)]) -> Result<String, ParseError> {
    let unsupported = || ParseError::NoToolGrammar {
        format: format.as_str().to_owned(),
    };
    if calls.is_empty() {
        return Err(unsupported());
    }
    let (root, call) = shape(format).ok_or_else(unsupported)?;
    let alternatives: Vec<String> = (0..calls.len()).map(|i| format!("call-{i}")).collect();
    let mut g = format!("root ::= {root}\ncall ::= {}\n", alternatives.join(" | "));
    for (i, (name, schema)) in calls.iter().enumerate() {
        let json_name = literal(&Value::String(name.clone()).to_string());
        let args = match schema {
            Some(schema) => {
                let rule = format!("args-{i}");
                g.push_str(&schema_rules(schema, &rule));
                rule
            }
            None => "obj".to_owned(),
        };
        let body = call
            .replace("name-json", &json_name)
            .replace("name-raw", &literal(name))
            .replace(" obj", &format!(" {args}"));
        let _ = writeln!(g, "call-{i} ::= {body}");
    }
    g.push_str(JSON_RULES);
    Ok(g)
}

/// The root rule and the call rule of `format`, in GBNF.
fn shape(format: Format) -> Option<(String, String)> {
    let name_args = r#""{\"name\": " name-json ", \"arguments\": " obj "}""#;
    let wrap = |before: &str, after: &str| {
        let mut root = String::new();
        if !before.is_empty() {
            root.push_str(&literal(before));
            root.push(' ');
        }
        root.push_str("call");
        if !after.is_empty() {
            root.push(' ');
            root.push_str(&literal(after));
        }
        root
    };
    Some(match format {
        Format::Generic | Format::ContentOnly => (
            "call".into(),
            r#""{\"tool_call\": {\"name\": " name-json ", \"arguments\": " obj "}}""#.into(),
        ),
        Format::Hermes => (wrap("<tool_call>\n", "\n</tool_call>"), name_args.into()),
        Format::NemotronV2 => (wrap("<TOOLCALL>[", "]</TOOLCALL>"), name_args.into()),
        Format::Granite => (wrap("<|tool_call|>[", "]"), name_args.into()),
        Format::MistralNemo | Format::Magistral => (wrap("[TOOL_CALLS][", "]"), name_args.into()),
        Format::FirefunctionV2 => (wrap(" functools[", "]"), name_args.into()),
        Format::Apriel15 => (wrap("<tool_calls>[", "]</tool_calls>"), name_args.into()),
        Format::GigachatV3 => (
            wrap("<|message_sep|>\n\nfunction call<|role_sep|>\n", ""),
            name_args.into(),
        ),
        Format::Llama3x | Format::Llama3xBuiltin => (
            "call".into(),
            r#""{\"name\": " name-json ", \"parameters\": " obj "}""#.into(),
        ),
        Format::CommandR7b => (
            wrap("<|START_ACTION|>[", "]<|END_ACTION|>"),
            r#""{\"tool_call_id\": \"0\", \"tool_name\": " name-json ", \"parameters\": " obj "}""#
                .into(),
        ),
        Format::MistralArgs => (wrap("[TOOL_CALLS]", ""), r#"name-raw "[ARGS]" obj"#.into()),
        Format::FunctionaryV31 => (
            wrap("<function=", "</function>"),
            r#"name-raw ">" obj"#.into(),
        ),
        Format::DeepseekV31 => (
            wrap(
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            r#"name-raw "<｜tool▁sep｜>" obj"#.into(),
        ),
        Format::DeepseekR1 => (
            wrap(
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            r#"name-raw "\n```json\n" obj"#.into(),
        ),
        Format::KimiK2 => (
            wrap(
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
                "<|tool_call_end|><|tool_calls_section_end|>",
            ),
            r#"name-raw ":0<|tool_call_argument_begin|>" obj"#.into(),
        ),
        _ => return None,
    })
}

/// `text` as a GBNF string literal.
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Any JSON object as arguments (whitespace bounded so the model cannot pad forever).
const JSON_RULES: &str = r#"obj ::= "{" ws ( str ws ":" ws value ( ws "," ws str ws ":" ws value )* )? ws "}"
value ::= obj | arr | str | num | "true" | "false" | "null"
arr ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
str ::= "\"" strchar* "\""
strchar ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] )
num ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]?
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EndedBy, ParseOptions, ParsedMessage};

    /// A sentence of the grammar, written by hand for each format: the parser must read it
    /// back as the call.
    fn sample(format: Format) -> Option<&'static str> {
        Some(match format {
            Format::Generic | Format::ContentOnly => {
                r#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}"#
            }
            Format::Hermes => {
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
            }
            Format::Llama3x | Format::Llama3xBuiltin => {
                r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#
            }
            Format::MistralNemo | Format::Magistral => {
                r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]"#
            }
            Format::MistralArgs => r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}"#,
            Format::NemotronV2 => {
                r#"<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>"#
            }
            Format::Granite => {
                r#"<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]"#
            }
            Format::FunctionaryV31 => r#"<function=get_weather>{"city": "Paris"}</function>"#,
            Format::KimiK2 => {
                r#"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>"#
            }
            _ => return None,
        })
    }

    #[test]
    fn every_supported_format_reads_its_own_forced_call_back() {
        let names = ["get_weather".to_owned(), "other".to_owned()];
        for format in Format::ALL {
            let Ok(g) = tool_call_grammar(format, &names) else {
                continue;
            };
            // One call alternative per tool, each naming it (JSON-quoted or raw).
            assert!(g.contains("call ::= call-0 | call-1\n"), "{format:?}: {g}");
            assert!(
                g.contains("get_weather") && g.contains("other"),
                "{format:?}: {g}"
            );
            let Some(text) = sample(format) else { continue };
            let parsed = ParsedMessage::parse(
                if format == Format::ContentOnly {
                    Format::Generic
                } else {
                    format
                },
                ParseOptions::new(),
                text,
                EndedBy::Stop,
            );
            assert_eq!(parsed.tool_calls.len(), 1, "{format:?}: {parsed:?}");
            assert_eq!(parsed.tool_calls[0].name, "get_weather", "{format:?}");
        }
    }

    #[test]
    fn formats_without_a_grammar_and_empty_tool_lists_are_errors() {
        let err = tool_call_grammar(Format::Qwen3CoderXml, &["f".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("qwen3_coder_xml"), "{err}");
        assert!(tool_call_grammar(Format::Hermes, &[]).is_err());
    }

    #[test]
    fn literals_escape_quotes_backslashes_and_newlines() {
        assert_eq!(literal("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
    }
}
