//! A Responses request → the chat pipeline's request: `instructions` become the system
//! message, the input items (after those of the response it continues) become the
//! OpenAI-style messages the chat template reads (function calls as `tool_calls`, their
//! outputs as `tool` messages, reasoning as `reasoning_content`), and the whole goes through
//! [`validate::chat`], the checks every chat API shares; its errors are renamed to the
//! Responses fields (`input`, `max_output_tokens`, `text.format`, `reasoning.effort`).

use serde_json::{json, Map, Value};

use super::wire::{InputItem, ResponseTool, ResponsesRequest, TextPart};
use crate::validate::{self, ValidChat};
use crate::wire::{
    ChatCompletionRequest, Content as ChatContent, ContentPart, WireFunction, WireFunctionCall,
    WireMessage, WireSampling, WireTool, WireToolCall,
};
use crate::ApiError;
use crate::SamplingDefaults;

/// A request converted: the chat request checked, this request's own input items (as item
/// objects, for the store) and the settings the response object echoes.
#[derive(Debug)]
pub(crate) struct Converted {
    pub(crate) valid: ValidChat,
    pub(crate) items: Vec<Value>,
    pub(crate) echo: Echo,
}

/// The request's settings as the response object shows them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Echo {
    pub(crate) instructions: Option<String>,
    pub(crate) tools: Vec<Value>,
    pub(crate) tool_choice: Value,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) max_output_tokens: Option<i64>,
    pub(crate) text: Value,
    pub(crate) reasoning: Value,
    pub(crate) parallel_tool_calls: bool,
    pub(crate) metadata: Map<String, Value>,
    pub(crate) user: Option<String>,
    pub(crate) store: bool,
    pub(crate) previous_response_id: Option<String>,
}

/// Checks a request and converts it; `history` holds the items of the response it continues
/// (that response's input items, then its output), oldest first.
pub(crate) fn convert(
    req: ResponsesRequest,
    history: &[Value],
    d: &SamplingDefaults,
) -> Result<Converted, ApiError> {
    let items = own_items(req.input)?;
    if items.is_empty() && history.is_empty() {
        return Err(ApiError::bad(
            "input",
            "`input` is required and must not be empty",
        ));
    }
    let tools: Vec<WireTool> = req
        .tools
        .clone()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| tool(i, t))
        .collect::<Result<_, _>>()?;
    let tool_choice = tool_choice(req.tool_choice.as_ref())?;
    if let Some(n) = req.max_output_tokens.filter(|n| *n < 1) {
        return Err(ApiError::bad(
            "max_output_tokens",
            format!("max_output_tokens = {n}: must be 1 or more"),
        ));
    }
    let text_format = req.text.as_ref().and_then(|t| t.format.clone());
    let effort = req.reasoning.as_ref().and_then(|r| r.effort.clone());
    let mut messages = Vec::new();
    if let Some(instructions) = &req.instructions {
        messages.push(message("system", instructions.clone(), Map::new()));
    }
    let mut builder = Messages::default();
    for item in history {
        builder
            .push(item)
            .map_err(|e| rename(e, "previous_response_id"))?;
    }
    for (i, item) in items.iter().enumerate() {
        builder.push(item).map_err(|e| match e {
            ApiError::BadRequest { message, .. } => {
                ApiError::bad(format!("input[{i}]"), format!("input[{i}]: {message}"))
            }
            other => other,
        })?;
    }
    messages.extend(builder.out);
    let chat = ChatCompletionRequest {
        model: req.model,
        messages: Some(messages),
        tools: Some(tools),
        tool_choice: Some(tool_choice.clone()),
        parallel_tool_calls: req.parallel_tool_calls,
        sampling: WireSampling {
            max_tokens: req.max_output_tokens,
            temperature: req.temperature,
            top_p: req.top_p,
            return_progress: req.return_progress,
            timings_per_token: req.timings_per_token,
            ..WireSampling::default()
        },
        stream: req.stream,
        response_format: response_format(text_format.as_ref())?,
        reasoning_effort: effort.clone(),
        // OpenAI's Responses API answers with a new message after a final assistant one.
        continue_final_message: Some(false),
        ..ChatCompletionRequest::default()
    };
    let valid = validate::chat(chat, d).map_err(|e| rename(e, ""))?;
    let echo = Echo {
        instructions: req.instructions,
        tools: req
            .tools
            .unwrap_or_default()
            .iter()
            .map(echo_tool)
            .collect(),
        tool_choice: req
            .tool_choice
            .filter(|c| !c.is_null())
            .unwrap_or_else(|| json!("auto")),
        temperature: valid.options.sampling.as_ref().map(|s| wide(s.temperature)),
        top_p: valid.options.sampling.as_ref().map(|s| wide(s.top_p)),
        max_output_tokens: req.max_output_tokens,
        text: json!({"format": text_format.unwrap_or_else(|| json!({"type": "text"}))}),
        reasoning: json!({"effort": effort, "summary": null}),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        metadata: req.metadata.unwrap_or_default(),
        user: req.user,
        store: req.store.unwrap_or(true),
        previous_response_id: req.previous_response_id,
    };
    Ok(Converted { valid, items, echo })
}

/// A setting as a client wrote it: `0.95`, not the nearest `f32` widened (`0.949999988…`).
fn wide(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// The chat pipeline's field names in an error, as the Responses API names them; `history`
/// (when not empty) names every message error, as the stored items are not the client's.
fn rename(e: ApiError, history: &str) -> ApiError {
    let ApiError::BadRequest { message, param } = e else {
        return e;
    };
    let param = param.map(|p| {
        if !history.is_empty() {
            return history.to_owned();
        }
        match p.as_str() {
            "max_tokens" => "max_output_tokens".to_owned(),
            "response_format" => "text.format".to_owned(),
            "reasoning_effort" => "reasoning.effort".to_owned(),
            p if p == "messages" || p.starts_with("messages[") => "input".to_owned(),
            _ => p,
        }
    });
    ApiError::BadRequest { message, param }
}

/// `input` as item objects: a string is one user message.
fn own_items(input: Option<Value>) -> Result<Vec<Value>, ApiError> {
    match input {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![
            json!({"type": "message", "role": "user", "content": text}),
        ]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(ApiError::bad(
            "input",
            format!("`input` must be a string or a list of items, not {other}"),
        )),
    }
}

fn message(role: &str, text: String, rest: Map<String, Value>) -> WireMessage {
    WireMessage {
        role: role.to_owned(),
        content: Some(ChatContent::Text(text)),
        tool_calls: None,
        rest,
    }
}

/// Builds chat messages from items, in order.
#[derive(Debug, Default)]
struct Messages {
    out: Vec<WireMessage>,
    /// Reasoning for the next assistant message.
    reasoning: Option<String>,
    /// Whether the last message is an assistant turn that later function calls join.
    open_assistant: bool,
}

impl Messages {
    fn push(&mut self, item: &Value) -> Result<(), ApiError> {
        let item: InputItem = serde_json::from_value(item.clone())
            .map_err(|e| ApiError::bad("input", format!("not an input item: {e}")))?;
        match item.kind.as_deref() {
            None | Some("message") => self.message(item),
            Some("function_call") => self.function_call(item),
            Some("function_call_output") => {
                let Some(call_id) = item.call_id else {
                    return Err(ApiError::bad(
                        "input",
                        "a function_call_output needs `call_id`",
                    ));
                };
                let output = match item.output {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s,
                    Some(parts) => parts_text(parts)?,
                };
                let mut rest = Map::new();
                rest.insert("tool_call_id".into(), Value::String(call_id));
                self.out.push(message("tool", output, rest));
                self.open_assistant = false;
                Ok(())
            }
            Some("reasoning") => {
                // An open model's own reasoning text, else the summary.
                let text = match item.content.filter(|c| !c.is_null()) {
                    Some(parts) => parts_text(parts)?,
                    None => item
                        .summary
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|p| p.text)
                        .collect::<Vec<_>>()
                        .join("\n\n"),
                };
                self.reasoning
                    .get_or_insert_with(String::new)
                    .push_str(&text);
                self.open_assistant = false;
                Ok(())
            }
            Some(kind) => Err(ApiError::bad(
                "input",
                format!(
                    "item type `{kind}` is not supported (allowed: message, function_call, \
                     function_call_output, reasoning)"
                ),
            )),
        }
    }

    fn message(&mut self, item: InputItem) -> Result<(), ApiError> {
        let role = item.role.unwrap_or_default();
        if !["user", "system", "developer", "assistant"].contains(&role.as_str()) {
            return Err(ApiError::bad(
                "input",
                format!("role `{role}` is not one of user, assistant, system, developer"),
            ));
        }
        if role != "assistant" {
            if let Some(parts) = item.content.as_ref().filter(|c| c.is_array()) {
                if parts.as_array().is_some_and(|a| {
                    a.iter()
                        .any(|p| matches!(p["type"].as_str(), Some("input_image" | "input_audio")))
                }) {
                    let parts = media_parts(parts)?;
                    self.out.push(WireMessage {
                        role: role.clone(),
                        content: Some(ChatContent::Parts(parts)),
                        tool_calls: None,
                        rest: Map::new(),
                    });
                    self.open_assistant = false;
                    return Ok(());
                }
            }
        }
        let text = match item.content {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(parts) => parts_text(parts)?,
        };
        if role == "assistant" {
            self.assistant(text);
        } else {
            self.out.push(message(&role, text, Map::new()));
            self.open_assistant = false;
        }
        Ok(())
    }

    /// Opens an assistant turn with `text` and the reasoning before it.
    fn assistant(&mut self, text: String) {
        let mut rest = Map::new();
        if let Some(reasoning) = self.reasoning.take() {
            rest.insert("reasoning_content".into(), Value::String(reasoning));
        }
        self.out.push(message("assistant", text, rest));
        self.open_assistant = true;
    }

    fn function_call(&mut self, item: InputItem) -> Result<(), ApiError> {
        let (Some(call_id), Some(name)) = (item.call_id, item.name) else {
            return Err(ApiError::bad(
                "input",
                "a function_call needs `call_id`, `name` and `arguments`",
            ));
        };
        if !self.open_assistant {
            self.assistant(String::new());
        }
        let call = WireToolCall {
            id: Some(call_id),
            function: WireFunctionCall {
                name,
                arguments: item.arguments,
            },
        };
        if let Some(last) = self.out.last_mut() {
            last.tool_calls.get_or_insert_with(Vec::new).push(call);
        }
        Ok(())
    }
}

/// The text of content parts (`input_text`, `output_text`, `text`, `reasoning_text`,
/// `summary_text`, `refusal`), joined.
/// A user message's parts with images (`input_image`: a data URL in `image_url`) or sounds
/// (`input_audio`), as chat content parts.
fn media_parts(parts: &Value) -> Result<Vec<ContentPart>, ApiError> {
    let mut out = Vec::new();
    for (j, part) in parts.as_array().into_iter().flatten().enumerate() {
        let kind = part["type"].as_str().unwrap_or_default();
        let text = |t: Option<&str>| ContentPart {
            kind: "text".into(),
            text: Some(t.unwrap_or_default().to_owned()),
            image_url: None,
            input_audio: None,
        };
        out.push(match kind {
            "input_text" | "text" | "output_text" => text(part["text"].as_str()),
            "input_image" => {
                let url = part["image_url"].as_str().ok_or_else(|| {
                    ApiError::bad(
                        "input",
                        format!(
                            "content[{j}]: an input_image needs `image_url` (a data URL; \
                             `file_id` is not supported)"
                        ),
                    )
                })?;
                // Checked here too, so an error names the input item.
                crate::media::image_url(url, &format!("content[{j}]"))
                    .map_err(|e| ApiError::bad("input", e.to_string()))?;
                ContentPart {
                    kind: "image_url".into(),
                    text: None,
                    image_url: Some(Value::String(url.to_owned())),
                    input_audio: None,
                }
            }
            "input_audio" => ContentPart {
                kind: "input_audio".into(),
                text: None,
                image_url: None,
                input_audio: part.get("input_audio").cloned(),
            },
            other => {
                return Err(ApiError::bad(
                    "input",
                    format!(
                        "content[{j}]: part type `{other}` is not supported (allowed: \
                         input_text, input_image, input_audio)"
                    ),
                ))
            }
        });
    }
    Ok(out)
}

fn parts_text(parts: Value) -> Result<String, ApiError> {
    let parts: Vec<TextPart> = serde_json::from_value(parts).map_err(|e| {
        ApiError::bad(
            "input",
            format!("content must be a string or a list of content parts: {e}"),
        )
    })?;
    let mut text = String::new();
    for (j, part) in parts.into_iter().enumerate() {
        match part.kind.as_str() {
            "input_text" | "output_text" | "text" | "reasoning_text" | "summary_text" => {
                text.push_str(part.text.as_deref().unwrap_or(""));
            }
            "refusal" => text.push_str(part.refusal.as_deref().unwrap_or("")),
            "input_image" | "input_file" | "input_audio" => {
                return Err(ApiError::bad(
                    "input",
                    format!("content[{j}]: `{}` parts go in user messages", part.kind),
                ))
            }
            kind => {
                return Err(ApiError::bad(
                    "input",
                    format!(
                        "content[{j}]: part type `{kind}` is not supported (allowed: input_text, \
                         output_text)"
                    ),
                ))
            }
        }
    }
    Ok(text)
}

/// A function tool as the chat pipeline's tool.
fn tool(i: usize, t: ResponseTool) -> Result<WireTool, ApiError> {
    match t.kind.as_deref() {
        Some("function") => {}
        kind => {
            return Err(ApiError::bad(
                "tools",
                format!(
                    "tools[{i}]: tool type `{}` is not supported: wick runs function tools, \
                     which the client calls (`{{\"type\": \"function\", \"name\", \
                     \"parameters\"}}`); hosted tools such as web or file search need \
                     OpenAI's servers",
                    kind.unwrap_or("none")
                ),
            ))
        }
    }
    let Some(name) = t.name.filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad(
            "tools",
            format!("tools[{i}]: a function tool needs a `name`"),
        ));
    };
    Ok(WireTool {
        kind: Some("function".into()),
        function: WireFunction {
            name,
            description: t.description,
            parameters: t.parameters,
        },
    })
}

/// A tool as the response object shows it.
fn echo_tool(t: &ResponseTool) -> Value {
    json!({
        "type": "function",
        "name": t.name,
        "description": t.description,
        "parameters": t.parameters,
        "strict": t.strict.unwrap_or(true),
    })
}

/// `tool_choice` as the chat pipeline's: the strings as they are, a named function nested.
fn tool_choice(choice: Option<&Value>) -> Result<Value, ApiError> {
    match choice {
        None | Some(Value::Null) => Ok(json!("auto")),
        Some(Value::String(_)) => Ok(choice.cloned().unwrap_or_default()),
        Some(v) => match (
            v.get("type").and_then(Value::as_str),
            v.get("name").and_then(Value::as_str),
        ) {
            (Some("function"), Some(name)) => {
                Ok(json!({"type": "function", "function": {"name": name}}))
            }
            _ => Err(ApiError::bad(
                "tool_choice",
                format!(
                    "invalid tool_choice {v} (allowed: \"auto\", \"none\", \"required\", \
                     {{\"type\": \"function\", \"name\": …}})"
                ),
            )),
        },
    }
}

/// `text.format` as the chat pipeline's `response_format`.
fn response_format(format: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(format) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("text"), _) => Ok(None),
        (Some("json_object"), _) => Ok(Some(json!({"type": "json_object"}))),
        (Some("json_schema"), Some(schema)) if schema.is_object() => Ok(Some(json!({
            "type": "json_schema",
            "json_schema": {"name": format.get("name"), "schema": schema,
                            "strict": format.get("strict")},
        }))),
        _ => Err(ApiError::bad(
            "text.format",
            "text.format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or \
             {\"type\": \"json_schema\", \"name\": …, \"schema\": {…}} with a JSON schema object",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert_json(body: &Value, history: &[Value]) -> Result<Converted, ApiError> {
        convert(
            serde_json::from_value(body.clone()).unwrap(),
            history,
            &SamplingDefaults::default(),
        )
    }

    #[test]
    fn a_round_trip_becomes_one_assistant_turn_with_its_calls_then_tool_messages() {
        let body = json!({
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                             {"type": "input_text", "text": "in Paris?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [],
                 "content": [{"type": "reasoning_text", "text": "Call it."}]},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time",
                 "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2",
                 "output": [{"type": "input_text", "text": "noon"}]},
            ],
        });
        let converted = convert_json(&body, &[]).unwrap();
        let m = converted.valid.template_messages();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(m[0]["content"], "Be brief.");
        assert_eq!(m[1]["content"], "Weather in Paris?");
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(m[2]["reasoning_content"], "Call it.");
        let calls = m[2]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2, "{m:?}");
        assert_eq!(calls[0]["id"], "call_1");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(m[3]["tool_call_id"], "call_1");
        assert_eq!(m[4]["content"], "noon");
        // The items kept for the store are the client's, as sent (instructions apart).
        assert_eq!(converted.items.len(), 7);
    }

    #[test]
    fn a_string_input_is_one_user_message_after_the_history() {
        let history = [
            json!({"type": "message", "role": "user", "content": "Hi"}),
            json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Greet."}]}),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
        ];
        let body = json!({"input": "Again", "previous_response_id": "resp_1"});
        let converted = convert_json(&body, &history).unwrap();
        let m = converted.valid.template_messages();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(m[1]["reasoning_content"], "Greet.");
        assert_eq!(m[1]["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(
            converted.items,
            [json!({"type": "message", "role": "user", "content": "Again"})]
        );
        assert_eq!(
            converted.echo.previous_response_id.as_deref(),
            Some("resp_1")
        );
        assert!(converted.echo.store);
    }

    #[test]
    fn the_chat_checks_errors_take_the_responses_field_names() {
        let cases = [
            (
                json!({"input": "x", "max_output_tokens": -1}),
                "max_output_tokens",
            ),
            (
                json!({"input": "x", "reasoning": {"effort": "huge"}}),
                "reasoning.effort",
            ),
            (
                json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": 1}}}),
                "text.format",
            ),
            (
                json!({"input": [{"role": "user", "content": 3}]}),
                "input[0]",
            ),
        ];
        for (body, param) in cases {
            let e = convert_json(&body, &[]).unwrap_err();
            assert!(
                matches!(&e, ApiError::BadRequest { param: Some(p), .. } if p == param),
                "{body}: {e:?}"
            );
        }
        // A json_schema format reaches the chat pipeline's grammar.
        let body = json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                                                             "schema": {"type": "object"}}}});
        let converted = convert_json(&body, &[]).unwrap();
        let grammar = converted.valid.options.sampling.unwrap().grammar;
        assert!(
            matches!(grammar, Some(wick::Grammar::JsonSchema(_))),
            "{grammar:?}"
        );
    }
}
