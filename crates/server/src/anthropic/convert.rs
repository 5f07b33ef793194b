//! An Anthropic Messages request → the chat pipeline's request: the system prompt and the
//! content blocks become the OpenAI-style messages the chat template reads (tool uses as
//! `tool_calls`, tool results as `tool` messages, thinking as `reasoning_content`), and the
//! whole goes through [`validate::chat`], the checks every chat API shares.

use serde_json::{json, Map, Value};
use wick::ToolChoice;

use super::wire::{Block, Content, InputMessage, InputTool, MessagesRequest};
use crate::validate::{self, ValidChat};
use crate::wire::{
    ChatCompletionRequest, Content as ChatContent, ContentPart, Stop, WireFunction,
    WireFunctionCall, WireMessage, WireSampling, WireTool, WireToolCall,
};
use crate::ApiError;
use crate::SamplingDefaults;

/// What the request is for: an answer (`max_tokens` required) or a token count (the prompt
/// alone, rendered as an answer's would be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    Answer,
    Count,
}

/// Checks an Anthropic request and converts it.
pub(crate) fn valid(
    req: MessagesRequest,
    purpose: Purpose,
    d: &SamplingDefaults,
) -> Result<ValidChat, ApiError> {
    let max_tokens = match (req.max_tokens, purpose) {
        (Some(n), Purpose::Answer) => Some(n),
        (None, Purpose::Answer) => {
            return Err(ApiError::bad(
                "max_tokens",
                "`max_tokens` is required: the most tokens to generate",
            ))
        }
        // One token: the count comes with the answer's usage.
        (_, Purpose::Count) => Some(1),
    };
    let Some(input) = req.messages else {
        return Err(ApiError::bad("messages", "`messages` is required"));
    };
    if input.is_empty() {
        return Err(ApiError::bad("messages", "`messages` must not be empty"));
    }
    let tools: Vec<WireTool> = req
        .tools
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| tool(i, t))
        .collect::<Result<_, _>>()?;
    let (tool_choice, single_call) = tool_choice(req.tool_choice.as_ref(), &tools)?;
    let mut messages = Vec::new();
    if let Some(system) = req.system {
        let text = system_text(system)?;
        messages.push(wire_message("system", text, Map::new()));
    }
    for (i, m) in input.into_iter().enumerate() {
        push_message(&mut messages, i, m)?;
    }
    let chat = ChatCompletionRequest {
        model: req.model,
        messages: Some(messages),
        tools: Some(tools),
        tool_choice: Some(tool_choice),
        parallel_tool_calls: single_call.then_some(false),
        sampling: WireSampling {
            stop: req.stop_sequences.map(Stop::Many),
            max_tokens,
            temperature: req.temperature,
            top_p: req.top_p,
            top_k: req.top_k,
            ..WireSampling::default()
        },
        stream: req.stream,
        response_format: output_format(req.output_config.and_then(|c| c.format))?,
        chat_template_kwargs: thinking(req.thinking.as_ref())?,
        ..ChatCompletionRequest::default()
    };
    let mut valid = validate::chat(chat, d)?;
    if purpose == Purpose::Count {
        // The same prompt as the answer's, without the forced call's grammar (the tools are
        // rendered either way) and greedy: nothing of it is kept.
        valid.stream = false;
        if matches!(
            valid.options.tool_choice,
            ToolChoice::Required | ToolChoice::Function(_)
        ) {
            valid.options.tool_choice = ToolChoice::Auto;
        }
        if let Some(sampling) = valid.options.sampling.as_mut() {
            sampling.temperature = 0.0;
        }
    }
    Ok(valid)
}

fn wire_message(role: &str, text: String, rest: Map<String, Value>) -> WireMessage {
    WireMessage {
        role: role.to_owned(),
        content: Some(ChatContent::Text(text)),
        tool_calls: None,
        rest,
    }
}

/// `system`: a string, or text blocks (joined).
fn system_text(system: Content) -> Result<String, ApiError> {
    match system {
        Content::Text(text) => Ok(text),
        Content::Blocks(blocks) => blocks
            .into_iter()
            .enumerate()
            .map(|(j, b)| match (b.kind.as_str(), b.text) {
                ("text", Some(text)) => Ok(text),
                (kind, _) => Err(ApiError::bad(
                    "system",
                    format!("system[{j}]: block type `{kind}` is not supported (allowed: text)"),
                )),
            })
            .collect(),
    }
}

/// A client tool as the chat pipeline's function tool.
fn tool(i: usize, t: InputTool) -> Result<WireTool, ApiError> {
    if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
        return Err(ApiError::bad(
            "tools",
            format!(
                "tools[{i}]: tool type `{kind}` is not supported: wick runs client tools only \
                 (a `name`, `description` and `input_schema`, `type` absent or `custom`)"
            ),
        ));
    }
    Ok(WireTool {
        kind: Some("function".into()),
        function: WireFunction {
            name: t.name,
            description: t.description,
            parameters: t.input_schema,
        },
    })
}

/// `tool_choice` as the chat pipeline's, and whether parallel tool use is off.
fn tool_choice(choice: Option<&Value>, tools: &[WireTool]) -> Result<(Value, bool), ApiError> {
    let bad = |m: String| Err(ApiError::bad("tool_choice", m));
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok((json!("auto"), false));
    };
    let single = choice
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let kind = choice.get("type").and_then(Value::as_str);
    let mapped = match kind {
        Some("auto") => json!("auto"),
        Some("none") => json!("none"),
        Some("any") if tools.is_empty() => {
            return bad("tool_choice `any` needs at least one tool in `tools`".into())
        }
        Some("any") => json!("required"),
        Some("tool") => {
            let Some(name) = choice.get("name").and_then(Value::as_str) else {
                return bad("tool_choice of type `tool` needs the tool's `name`".into());
            };
            if !tools.iter().any(|t| t.function.name == name) {
                return bad(format!(
                    "tool_choice names the tool `{name}`, which is not in `tools`"
                ));
            }
            json!({"type": "function", "function": {"name": name}})
        }
        _ => {
            return bad(format!(
                "invalid tool_choice {choice} (allowed: {{\"type\": \"auto\"}}, {{\"type\": \"any\"}}, \
                 {{\"type\": \"tool\", \"name\": …}}, {{\"type\": \"none\"}})"
            ))
        }
    };
    Ok((mapped, single))
}

/// `output_config.format` as the chat pipeline's `response_format` (the answer held to the
/// schema by a grammar).
fn output_format(format: Option<Value>) -> Result<Option<Value>, ApiError> {
    let Some(format) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("json_schema"), Some(schema)) if schema.is_object() => Ok(Some(
            json!({"type": "json_schema", "json_schema": {"schema": schema}}),
        )),
        _ => Err(ApiError::bad(
            "output_config.format",
            "output_config.format must be {\"type\": \"json_schema\", \"schema\": {…}} with a \
             JSON schema object",
        )),
    }
}

/// `thinking` as the template's `enable_thinking`.
fn thinking(thinking: Option<&Value>) -> Result<Option<Map<String, Value>>, ApiError> {
    let Some(thinking) = thinking.filter(|t| !t.is_null()) else {
        return Ok(None);
    };
    let enabled = match thinking.get("type").and_then(Value::as_str) {
        Some("enabled") => {
            match thinking.get("budget_tokens").map(Value::as_u64) {
                Some(Some(n)) if n >= 1 => {}
                _ => {
                    return Err(ApiError::bad(
                        "thinking",
                        "thinking of type `enabled` needs `budget_tokens`, a positive integer",
                    ))
                }
            }
            true
        }
        Some("adaptive" | "between_tools") => true,
        Some("disabled") => false,
        _ => {
            return Err(ApiError::bad(
                "thinking",
                format!(
                    "invalid thinking {thinking} (allowed types: enabled, disabled, adaptive, \
                     between_tools)"
                ),
            ))
        }
    };
    let mut context = Map::new();
    context.insert("enable_thinking".into(), Value::Bool(enabled));
    Ok(Some(context))
}

/// Why a block type is refused in a message.
fn refused(i: usize, j: usize, role: &str, kind: &str) -> ApiError {
    let why = match kind {
        "document" => "documents are not supported: send their text".to_owned(),
        "tool_use" | "tool_result" | "thinking" | "redacted_thinking" | "text" => {
            format!("a `{kind}` block is not allowed in a {role} message")
        }
        _ => format!(
            "block type `{kind}` is not supported (allowed: text, tool_use, tool_result, thinking, \
             redacted_thinking)"
        ),
    };
    ApiError::bad(
        format!("messages[{i}].content[{j}]"),
        format!("messages[{i}].content[{j}]: {why}"),
    )
}

/// Appends message `i` as chat messages: an assistant turn is one message; a user turn is a
/// `tool` message per tool result and a user message for its text, in the order given.
fn push_message(out: &mut Vec<WireMessage>, i: usize, m: InputMessage) -> Result<(), ApiError> {
    let blocks = match m.content {
        Content::Text(text) => vec![Block {
            kind: "text".into(),
            text: Some(text),
            ..Block::default()
        }],
        Content::Blocks(blocks) => blocks,
    };
    match m.role.as_str() {
        "user" => user(out, i, blocks),
        "assistant" => {
            out.push(assistant(i, blocks)?);
            Ok(())
        }
        other => Err(ApiError::bad(
            format!("messages[{i}].role"),
            format!("messages[{i}].role `{other}` is not one of user, assistant (the system prompt goes in `system`)"),
        )),
    }
}

/// A user message of text and image parts, as OpenAI's chat takes it.
fn user_message(parts: Vec<ContentPart>) -> WireMessage {
    WireMessage {
        role: "user".to_owned(),
        content: Some(ChatContent::Parts(parts)),
        tool_calls: None,
        rest: Map::new(),
    }
}

/// An `image` block as OpenAI's `image_url` part (a data URL): its source is base64.
fn image_part(i: usize, j: usize, source: Option<&Value>) -> Result<ContentPart, ApiError> {
    let at = format!("messages[{i}].content[{j}]");
    let source =
        source.ok_or_else(|| ApiError::bad(&at, format!("{at}: an image block needs `source`")))?;
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => {}
        Some("url") => {
            return Err(ApiError::bad(
                &at,
                format!(
                    "{at}: this server does not fetch image URLs (wick serve --media-urls \
                     allows it); send the image as a base64 source"
                ),
            ))
        }
        other => {
            return Err(ApiError::bad(
                &at,
                format!("{at}: image source type {other:?} is not supported (allowed: base64)"),
            ))
        }
    }
    let media_type = source
        .get("media_type")
        .and_then(Value::as_str)
        .unwrap_or("image/png");
    let data = source.get("data").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad(&at, format!("{at}: an image source needs `data` (base64)"))
    })?;
    Ok(ContentPart {
        kind: "image_url".into(),
        text: None,
        image_url: Some(Value::String(format!("data:{media_type};base64,{data}"))),
        input_audio: None,
    })
}

fn user(out: &mut Vec<WireMessage>, i: usize, blocks: Vec<Block>) -> Result<(), ApiError> {
    let mut parts: Vec<ContentPart> = Vec::new();
    let text_part = |t: &str| ContentPart {
        kind: "text".into(),
        text: Some(t.to_owned()),
        image_url: None,
        input_audio: None,
    };
    for (j, b) in blocks.into_iter().enumerate() {
        match b.kind.as_str() {
            "text" => parts.push(text_part(b.text.as_deref().unwrap_or(""))),
            "image" => parts.push(image_part(i, j, b.source.as_ref())?),
            "tool_result" => {
                if !parts.is_empty() {
                    out.push(user_message(std::mem::take(&mut parts)));
                }
                let mut content = match b.content.map(|c| *c) {
                    None => String::new(),
                    Some(Content::Text(t)) => t,
                    Some(Content::Blocks(inner)) => tool_result_text(i, j, inner)?,
                };
                if b.is_error == Some(true) {
                    content = format!("Error: {content}");
                }
                let mut rest = Map::new();
                rest.insert(
                    "tool_call_id".into(),
                    Value::String(b.tool_use_id.unwrap_or_default()),
                );
                out.push(wire_message("tool", content, rest));
            }
            kind => return Err(refused(i, j, "user", kind)),
        }
    }
    if !parts.is_empty() {
        out.push(user_message(parts));
    }
    Ok(())
}

/// A tool result's blocks: text only.
fn tool_result_text(i: usize, j: usize, blocks: Vec<Block>) -> Result<String, ApiError> {
    let mut text = String::new();
    for b in blocks {
        match (b.kind.as_str(), b.text) {
            ("text", Some(t)) => text.push_str(&t),
            (kind, _) => {
                return Err(ApiError::bad(
                    format!("messages[{i}].content[{j}]"),
                    format!(
                        "messages[{i}].content[{j}]: a tool result's `{kind}` block is not \
                         supported (allowed: text{})",
                        if kind == "image" {
                            "; an image goes in the user message itself"
                        } else {
                            ""
                        }
                    ),
                ))
            }
        }
    }
    Ok(text)
}

fn assistant(i: usize, blocks: Vec<Block>) -> Result<WireMessage, ApiError> {
    let mut text = String::new();
    let mut reasoning: Option<String> = None;
    let mut calls = Vec::new();
    for (j, b) in blocks.into_iter().enumerate() {
        match b.kind.as_str() {
            "text" => text.push_str(b.text.as_deref().unwrap_or("")),
            "thinking" => reasoning
                .get_or_insert_with(String::new)
                .push_str(b.thinking.as_deref().unwrap_or("")),
            // Encrypted by its maker: nothing a local model can read.
            "redacted_thinking" => {}
            "tool_use" => calls.push(WireToolCall {
                id: b.id,
                function: WireFunctionCall {
                    name: b.name.unwrap_or_default(),
                    arguments: Some(b.input.unwrap_or_else(|| json!({}))),
                },
            }),
            kind => return Err(refused(i, j, "assistant", kind)),
        }
    }
    let mut rest = Map::new();
    if let Some(reasoning) = reasoning {
        rest.insert("reasoning_content".into(), Value::String(reasoning));
    }
    let mut message = wire_message("assistant", text, rest);
    if !calls.is_empty() {
        message.tool_calls = Some(calls);
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &Value) -> MessagesRequest {
        serde_json::from_value(body.clone()).unwrap()
    }

    fn check(body: &Value) -> Result<ValidChat, ApiError> {
        valid(parse(body), Purpose::Answer, &SamplingDefaults::default())
    }

    #[test]
    fn a_tool_round_trip_becomes_tool_calls_and_tool_messages() {
        let body = json!({
            "max_tokens": 10,
            "system": [{"type": "text", "text": "Be ", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "brief."}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Call it.", "signature": "x"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom",
                     "is_error": true},
                    {"type": "text", "text": "And tomorrow?"}]}
            ],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        });
        let valid = check(&body).unwrap();
        let m = valid.template_messages();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"]
        );
        assert_eq!(m[0]["content"], "Be brief.");
        assert_eq!(m[2]["content"], "Let me check.");
        assert_eq!(m[2]["reasoning_content"], "Call it.");
        assert_eq!(
            m[2]["tool_calls"][0],
            json!({"id": "toolu_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
        );
        assert_eq!(m[3]["tool_call_id"], "toolu_1");
        assert_eq!(m[3]["content"], "sunny");
        assert_eq!(m[4]["content"], "Error: boom");
        assert_eq!(m[5]["content"], "And tomorrow?");
        assert_eq!(valid.chat.tools[0].name, "get_weather");
        assert_eq!(valid.options.max_tokens, Some(10));
    }

    #[test]
    fn tool_choice_by_name_keeps_the_name() {
        let body = json!({
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"name": "a", "input_schema": {"type": "object"}},
                      {"name": "b", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "b", "disable_parallel_tool_use": true},
        });
        let valid = check(&body).unwrap();
        assert_eq!(valid.options.tool_choice, ToolChoice::Function("b".into()));
        assert!(valid.single_call);
        let mut any = body.clone();
        any["tool_choice"] = json!({"type": "any"});
        assert_eq!(
            check(&any).unwrap().options.tool_choice,
            ToolChoice::Required
        );
        let mut none = body.clone();
        none["tool_choice"] = json!({"type": "none"});
        assert_eq!(check(&none).unwrap().options.tool_choice, ToolChoice::None);
        // A count keeps the prompt but drops the forced call's grammar.
        let count = valid_count(&body);
        assert_eq!(count.options.tool_choice, ToolChoice::Auto);
        assert_eq!(count.options.max_tokens, Some(1));
    }

    fn valid_count(body: &Value) -> ValidChat {
        valid(parse(body), Purpose::Count, &SamplingDefaults::default()).unwrap()
    }

    #[test]
    fn sampling_stops_and_thinking_reach_the_pipeline() {
        let body = json!({
            "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 7,
            "stop_sequences": ["END"], "metadata": {"user_id": "u"},
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "Hi"}],
        });
        let valid = check(&body).unwrap();
        let s = valid.options.sampling.unwrap();
        assert!((s.temperature - 0.5).abs() < 1e-6 && (s.top_p - 0.9).abs() < 1e-6);
        assert_eq!(s.top_k, 7);
        assert_eq!(valid.options.stop, ["END"]);
        assert_eq!(valid.chat.extra_context["enable_thinking"], true);
        let mut off = body.clone();
        off["thinking"] = json!({"type": "disabled"});
        assert_eq!(
            check(&off).unwrap().chat.extra_context["enable_thinking"],
            false
        );
    }

    #[test]
    fn an_output_format_is_the_shared_json_schema_grammar() {
        let body = json!({
            "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}],
            "output_config": {"effort": "high",
                              "format": {"type": "json_schema", "schema": {"type": "object"}}},
        });
        let sampling = check(&body).unwrap().options.sampling.unwrap();
        assert_eq!(
            sampling.grammar,
            Some(wick::Grammar::JsonSchema(r#"{"type":"object"}"#.into()))
        );
        let mut bad = body.clone();
        bad["output_config"]["format"] = json!({"type": "json_schema"});
        assert!(check(&bad).unwrap_err().to_string().contains("json_schema"));
    }

    #[test]
    fn what_is_refused_says_why() {
        let user = |content: Value| json!({"max_tokens": 5, "messages": [{"role": "user", "content": content}]});
        let cases = [
            (
                json!({"messages": [{"role": "user", "content": "Hi"}]}),
                "`max_tokens` is required",
            ),
            (json!({"max_tokens": 5}), "`messages` is required"),
            (
                json!({"max_tokens": 5, "messages": []}),
                "must not be empty",
            ),
            (
                user(
                    json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]),
                ),
                "the image is empty",
            ),
            (
                user(
                    json!([{"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}]),
                ),
                "does not fetch image URLs",
            ),
            (
                user(
                    json!([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]),
                ),
                "goes in the user message",
            ),
            (
                user(json!([{"type": "tool_use", "id": "t", "name": "f", "input": {}}])),
                "not allowed in a user message",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "system", "content": "Hi"}]}),
                "goes in `system`",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "tool_choice": {"type": "any"}}),
                "needs at least one tool",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}],
                       "tools": [{"name": "a"}], "tool_choice": {"type": "tool", "name": "b"}}),
                "`b`, which is not in `tools`",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}],
                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                "client tools only",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "thinking": {"type": "enabled"}}),
                "budget_tokens",
            ),
            (
                json!({"max_tokens": 0, "messages": [{"role": "user", "content": "Hi"}]}),
                "max_tokens = 0",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "stop_sequences": [""]}),
                "must not be empty",
            ),
        ];
        for (body, want) in cases {
            let e = check(&body).unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{body}");
            let message = e.to_string();
            assert!(message.contains(want), "{body}: {message}");
        }
    }
}
