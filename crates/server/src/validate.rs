//! Wire requests → validated domain types: every out-of-range value stops here with a 400
//! that names the field and what is allowed.

use serde_json::{json, Map, Value};
use wick::{ChatRequest, GenerateOptions, Grammar, SamplerOpts, ToolChoice};
use wick::{Message, MessageToolCall, Role, Tool};

use crate::wire::{ChatCompletionRequest, Content, Stop, WireMessage, WireSampling, WireTool};
use crate::{ApiError, SamplingDefaults};

/// Most stop strings one request may have.
const MAX_STOPS: usize = 16;

/// A chat request that passed every check.
#[derive(Debug, Clone)]
pub(crate) struct ValidChat {
    pub(crate) model: Option<String>,
    pub(crate) chat: ChatRequest,
    pub(crate) options: GenerateOptions,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// `parallel_tool_calls: false`: keep the first tool call only.
    pub(crate) single_call: bool,
    /// llama-server's telemetry a stream asked for.
    pub(crate) telemetry: crate::telemetry::Asked,
    /// The log-probabilities the answer shows (`logprobs`, `top_logprobs`); `options` may
    /// report tokens without showing them (for `timings_per_token`).
    pub(crate) shown_logprobs: Option<u8>,
}

#[cfg(test)]
impl ValidChat {
    /// The messages as the chat template will see them (for tests of the API adapters).
    pub(crate) fn template_messages(&self) -> Vec<Value> {
        self.chat
            .messages
            .iter()
            .map(Message::template_json)
            .collect()
    }
}

/// Checks a chat request.
pub(crate) fn chat(
    req: ChatCompletionRequest,
    d: &SamplingDefaults,
) -> Result<ValidChat, ApiError> {
    let logprobs = chat_logprobs(req.logprobs, req.top_logprobs)?;
    let Some(messages) = req.messages else {
        return Err(ApiError::bad("messages", "`messages` is required"));
    };
    if messages.is_empty() {
        return Err(ApiError::bad("messages", "`messages` must not be empty"));
    }
    let tools = req
        .tools
        .unwrap_or_default()
        .into_iter()
        .map(tool)
        .collect::<Result<Vec<_>, _>>()?;
    let tool_choice = tool_choice(req.tool_choice.as_ref(), &tools)?;
    let max = req.max_completion_tokens.or(req.sampling.max_tokens);
    let field = if req.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let mut options = options(&req.sampling, max, field, d)?;
    options.tool_choice = tool_choice;
    options.logprobs = logprobs;
    let stream = req.stream.unwrap_or(false);
    let telemetry = crate::telemetry::Asked {
        progress: stream && req.sampling.return_progress == Some(true),
        timings_per_token: stream && req.sampling.timings_per_token == Some(true),
    };
    // Timings along the way need what the prompt cache held, which progress reports say, and
    // the tokens so far, which per-token reports count.
    options.progress = telemetry.progress || telemetry.timings_per_token;
    if telemetry.timings_per_token {
        options.logprobs.get_or_insert(0);
    }
    if let Some(format) = response_format(req.response_format.as_ref())? {
        if req.sampling.grammar.is_some() || req.sampling.json_schema.is_some() {
            return Err(ApiError::bad(
                "response_format",
                "give either `grammar` / `json_schema` or a JSON `response_format`, not both",
            ));
        }
        if let Some(sampling) = options.sampling.as_mut() {
            sampling.grammar = Some(format);
        }
    }
    let mut extra_context = req.chat_template_kwargs.unwrap_or_default();
    if let Some(effort) = req.reasoning_effort {
        if !["none", "minimal", "low", "medium", "high"].contains(&effort.as_str()) {
            return Err(ApiError::bad(
                "reasoning_effort",
                format!(
                    "invalid reasoning_effort `{effort}` (allowed: none, minimal, low, medium, high)"
                ),
            ));
        }
        if effort == "none" {
            // llama-server's reading: no reasoning at all, which templates learn from
            // `enable_thinking` (a request's own value wins).
            extra_context
                .entry("enable_thinking")
                .or_insert(Value::Bool(false));
        } else {
            extra_context.insert("reasoning_effort".into(), Value::String(effort));
        }
    }
    let messages = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let (add_generation_prompt, continue_final_message) = continuation(
        &messages,
        req.add_generation_prompt,
        req.continue_final_message,
    )?;
    Ok(ValidChat {
        model: req.model,
        chat: ChatRequest {
            messages,
            tools,
            add_generation_prompt,
            continue_final_message,
            extra_context,
            ..ChatRequest::default()
        },
        options,
        stream,
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        single_call: req.parallel_tool_calls == Some(false),
        telemetry,
        shown_logprobs: logprobs,
    })
}

/// `(add_generation_prompt, continue_final_message)` of a chat: an answer continues the last
/// message when the request says so, or, when it does not, when that message is the
/// assistant's (a prefill, as llama-server, Anthropic and Ollama read it); otherwise it opens a
/// fresh assistant turn unless `add_generation_prompt` is false.
pub(crate) fn continuation(
    messages: &[Message],
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<bool>,
) -> Result<(bool, bool), ApiError> {
    let last = messages.last();
    let prefill = last.is_some_and(|m| m.role == Role::Assistant);
    let continued = continue_final_message.unwrap_or(prefill);
    if !continued {
        return Ok((add_generation_prompt.unwrap_or(true), false));
    }
    if continue_final_message == Some(true) && add_generation_prompt == Some(true) {
        return Err(ApiError::bad(
            "continue_final_message",
            "set either `add_generation_prompt` or `continue_final_message`, not both",
        ));
    }
    if last.is_some_and(|m| !m.tool_calls.is_empty()) {
        return Err(ApiError::bad(
            "messages",
            "the last message has tool calls: an answer cannot continue it (send the tool \
             results, or set `continue_final_message` false)",
        ));
    }
    let n = messages.len();
    if continue_final_message.is_none() && n >= 2 && messages[n - 2].role == Role::Assistant {
        return Err(ApiError::bad(
            "messages",
            "the conversation ends with two assistant messages: an answer continues the last \
             message, so send one",
        ));
    }
    Ok((false, true))
}

/// The per-request options shared by chat and text completions.
pub(crate) fn options(
    s: &WireSampling,
    max_tokens: Option<i64>,
    max_field: &'static str,
    defaults: &SamplingDefaults,
) -> Result<GenerateOptions, ApiError> {
    if let Some(n) = s.n {
        if n != 1 {
            return Err(ApiError::bad(
                "n",
                format!("n = {n} is not supported: wick returns one choice (n = 1)"),
            ));
        }
    }
    let max_tokens = match max_tokens {
        None => None,
        Some(n) if n >= 1 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        Some(n) => {
            return Err(ApiError::bad(
                max_field,
                format!("{max_field} = {n}: must be 1 or more"),
            ))
        }
    };
    // The limits are `SamplerOpts::validate`'s, checked below; here only what the wire adds
    // (values beyond f32 or u32 are out of range too).
    let d = &defaults.sampling;
    let sampling = SamplerOpts {
        temperature: float(s.temperature, "temperature")?.unwrap_or(d.temperature),
        top_p: float(s.top_p, "top_p")?.unwrap_or(d.top_p),
        min_p: float(s.min_p, "min_p")?.unwrap_or(d.min_p),
        top_k: count(s.top_k, "top_k")?.unwrap_or(d.top_k),
        repetition_penalty: float(s.repetition_penalty, "repetition_penalty")?
            .unwrap_or(d.repetition_penalty),
        frequency_penalty: float(s.frequency_penalty, "frequency_penalty")?.unwrap_or(0.0),
        presence_penalty: float(s.presence_penalty, "presence_penalty")?.unwrap_or(0.0),
        seed: seed(s.seed.or(defaults.seed)),
        logit_bias: logit_bias(s.logit_bias.as_ref())?,
        grammar: match (&s.grammar, &s.json_schema) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad(
                    "json_schema",
                    "give either `grammar` or `json_schema`, not both",
                ))
            }
            (Some(g), None) if g.trim().is_empty() => {
                return Err(ApiError::bad("grammar", "`grammar` must not be empty"))
            }
            (Some(g), None) => {
                wick::check_gbnf(g)
                    .map_err(|e| ApiError::bad("grammar", format!("invalid GBNF grammar: {e}")))?;
                Some(Grammar::Gbnf(g.clone()))
            }
            (None, Some(schema)) => Some(schema_grammar(schema, "json_schema")?),
            (None, None) => None,
        },
        ..SamplerOpts::default()
    };
    sampling.validate().map_err(|e| {
        ApiError::bad(
            e.field,
            format!(
                "{} = {} is out of range (allowed: {})",
                e.field, e.value, e.allowed
            ),
        )
    })?;
    Ok(GenerateOptions {
        max_tokens,
        sampling: Some(sampling),
        stop: stops(s.stop.clone())?,
        tool_choice: ToolChoice::Auto,
        logprobs: None,
        logprobs_after_sampling: false,
        ignore_eos: s.ignore_eos.unwrap_or(false),
        // Streams turn it on where they report progress (only a stream can show it).
        progress: false,
        spec_max: spec_max(s)?,
        lora: s.lora.as_ref().map(lora).transpose()?,
    })
}

/// llama-server's `lora`: `[{"id": 0, "scale": 0.5}, …]` (a missing scale is 0). Whether
/// each id names a loaded adapter is the library's check.
pub(crate) fn lora(value: &Value) -> Result<Vec<(usize, f32)>, ApiError> {
    const SHAPE: &str = "`lora` must be an array of objects with `id` and `scale` fields";
    let bad = |m: String| ApiError::bad("lora", m);
    let Value::Array(items) = value else {
        return Err(bad(SHAPE.to_owned()));
    };
    items
        .iter()
        .map(|item| {
            let Value::Object(entry) = item else {
                return Err(bad(SHAPE.to_owned()));
            };
            let id = entry
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| usize::try_from(id).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "{SHAPE}; `id` must be an adapter's index (0 or more), got {}",
                        entry.get("id").unwrap_or(&Value::Null)
                    ))
                })?;
            let scale = match entry.get("scale") {
                None | Some(Value::Null) => 0.0,
                Some(v) => float(v.as_f64(), "lora")?.ok_or_else(|| {
                    bad(format!(
                        "the scale of adapter {id} must be a finite number, got {v}"
                    ))
                })?,
            };
            Ok((id, scale))
        })
        .collect()
}

/// Most tokens a request may have drafted per step.
const MAX_SPEC: i64 = 64;

/// `spec_max` (or llama-server's `speculative.n_max`): 0 to [`MAX_SPEC`].
fn spec_max(s: &WireSampling) -> Result<Option<usize>, ApiError> {
    let (field, value) = match (s.spec_max, s.speculative_n_max) {
        (Some(v), _) => ("spec_max", v),
        (None, Some(v)) => ("speculative.n_max", v),
        (None, None) => return Ok(None),
    };
    match usize::try_from(value) {
        Ok(n) if value <= MAX_SPEC => Ok(Some(n)),
        _ => Err(ApiError::bad(
            field,
            format!("{field} = {value} is out of range (allowed: 0 to {MAX_SPEC})"),
        )),
    }
}

/// The sampling a request gets for every field it leaves out (the seed: a fresh one each
/// time), the one set of defaults every API validates with and `/props` reports.
pub(crate) fn request_defaults() -> SamplerOpts {
    SamplerOpts {
        temperature: 0.8,
        top_p: 0.95,
        min_p: 0.05,
        top_k: 40,
        repetition_penalty: 1.0,
        ..SamplerOpts::default()
    }
}

/// Chat's `logprobs` and `top_logprobs` (0 to 20, only with `logprobs: true`).
fn chat_logprobs(on: Option<bool>, top: Option<i64>) -> Result<Option<u8>, ApiError> {
    match (on == Some(true), top) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(ApiError::bad(
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`",
        )),
        (true, top) => top_count(top.unwrap_or(0), "top_logprobs", 20).map(Some),
    }
}

/// Legacy completions' `logprobs`: `null` or a count of alternatives, 0 to 5.
pub(crate) fn completion_logprobs(value: Option<&Value>) -> Result<Option<u8>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_i64().is_some() => {
            top_count(n.as_i64().unwrap_or(-1), "logprobs", 5).map(Some)
        }
        Some(other) => Err(ApiError::bad(
            "logprobs",
            format!("logprobs = {other}: must be an integer from 0 to 5"),
        )),
    }
}

fn top_count(n: i64, field: &'static str, max: u8) -> Result<u8, ApiError> {
    match u8::try_from(n) {
        Ok(k) if k <= max => Ok(k),
        _ => Err(ApiError::bad(
            field,
            format!("{field} = {n} is out of range (allowed: 0 to {max})"),
        )),
    }
}

/// A wire number as `f32`; one beyond `f32` is out of range.
#[allow(clippy::cast_possible_truncation)]
fn float(v: Option<f64>, field: &'static str) -> Result<Option<f32>, ApiError> {
    match v {
        Some(x) if x.is_finite() && (x as f32).is_infinite() => Err(ApiError::bad(
            field,
            format!("{field} = {x} is out of range"),
        )),
        other => Ok(other.map(|x| x as f32)),
    }
}

/// A wire integer as `u32`; a negative or larger one is out of range.
fn count(v: Option<i64>, field: &'static str) -> Result<Option<u32>, ApiError> {
    v.map(|x| {
        u32::try_from(x).map_err(|_| ApiError::bad(field, format!("{field} = {x} is out of range")))
    })
    .transpose()
}

/// The seed: as given (any integer; folded to 32 bits), or a fresh one.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn seed(seed: Option<i64>) -> u32 {
    match seed {
        Some(s) => (s as u64 ^ ((s as u64) >> 32)) as u32,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()),
    }
}

#[allow(clippy::cast_possible_truncation)]
fn logit_bias(
    bias: Option<&std::collections::BTreeMap<String, f64>>,
) -> Result<Vec<(wick::TokenId, f32)>, ApiError> {
    let mut out = Vec::new();
    for (token, value) in bias.into_iter().flatten() {
        let Ok(id) = token.parse::<u32>().map(wick::TokenId) else {
            return Err(ApiError::bad(
                "logit_bias",
                format!("logit_bias key `{token}` is not a token id"),
            ));
        };
        // OpenAI's wire range, narrower than what a sampler takes; -100 bans the token.
        if !(-100.0..=100.0).contains(value) {
            return Err(ApiError::bad(
                "logit_bias",
                format!("logit_bias[{token}] = {value} is out of range (allowed: -100 to 100)"),
            ));
        }
        #[allow(clippy::float_cmp)]
        let value = if *value == -100.0 {
            f32::NEG_INFINITY
        } else {
            *value as f32
        };
        out.push((id, value));
    }
    Ok(out)
}

fn stops(stop: Option<Stop>) -> Result<Vec<String>, ApiError> {
    let stops = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stops.len() > MAX_STOPS {
        return Err(ApiError::bad(
            "stop",
            format!(
                "{} stop strings given (allowed: at most {MAX_STOPS})",
                stops.len()
            ),
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::bad("stop", "stop strings must not be empty"));
    }
    Ok(stops)
}

fn tool(t: WireTool) -> Result<Tool, ApiError> {
    if t.kind.as_deref().is_some_and(|k| k != "function") {
        return Err(ApiError::bad(
            "tools",
            format!(
                "tool type `{}` is not supported (allowed: function)",
                t.kind.unwrap_or_default()
            ),
        ));
    }
    if t.function.name.is_empty() {
        return Err(ApiError::bad(
            "tools",
            "a tool's function name must not be empty",
        ));
    }
    if let Some(p) = &t.function.parameters {
        if !p.is_object() {
            return Err(ApiError::bad(
                "tools",
                format!(
                    "the parameters of `{}` must be a JSON schema object",
                    t.function.name
                ),
            ));
        }
    }
    Ok(Tool {
        name: t.function.name,
        description: t.function.description,
        parameters: t.function.parameters,
    })
}

fn tool_choice(choice: Option<&Value>, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let bad = |m: String| Err(ApiError::bad("tool_choice", m));
    let choice = match choice {
        None | Some(Value::Null) => return Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => return bad(format!("invalid tool_choice `{other}` (allowed: none, auto, required, or {{\"type\": \"function\", \"function\": {{\"name\": …}}}})")),
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Function(name.to_owned()),
            None => return bad("tool_choice object needs function.name".into()),
        },
    };
    match &choice {
        ToolChoice::Required if tools.is_empty() => {
            bad("tool_choice `required` needs at least one tool in `tools`".into())
        }
        ToolChoice::Function(name) if !tools.iter().any(|t| &t.name == name) => bad(format!(
            "tool_choice names `{name}`, which is not in `tools`"
        )),
        _ => Ok(choice),
    }
}

pub(crate) fn response_format(format: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(format) = format else {
        return Ok(None);
    };
    let bad = |m: &str| Err(ApiError::bad("response_format", m));
    match format.get("type").and_then(Value::as_str) {
        None | Some("text") => Ok(None),
        // llama-server's extension: a json_object answer held to a `schema` given beside it.
        Some("json_object") => match format.get("schema") {
            None | Some(Value::Null) => Ok(Some(Grammar::JsonSchema(
                json!({"type": "object"}).to_string(),
            ))),
            Some(schema) => schema_grammar(schema, "response_format").map(Some),
        },
        Some("json_schema") => match format.pointer("/json_schema/schema") {
            Some(schema) if schema.is_object() => Ok(Some(Grammar::JsonSchema(schema.to_string()))),
            Some(_) => bad("response_format.json_schema.schema must be a JSON schema object"),
            None => bad("response_format of type json_schema needs json_schema.schema"),
        },
        Some(_) => bad("invalid response_format type (allowed: text, json_object, json_schema)"),
    }
}

/// A JSON schema given in `field` as the grammar of the answer: an object whose `type`, when
/// given, is a JSON type (or a list of them).
fn schema_grammar(schema: &Value, field: &'static str) -> Result<Grammar, ApiError> {
    const TYPES: [&str; 7] = [
        "object", "array", "string", "number", "integer", "boolean", "null",
    ];
    let known = |t: &Value| t.as_str().is_some_and(|t| TYPES.contains(&t));
    let type_ok = match schema.get("type") {
        None => true,
        Some(Value::Array(types)) => types.iter().all(known),
        Some(t) => known(t),
    };
    if !schema.is_object() || !type_ok {
        return Err(ApiError::bad(
            field,
            format!("{field}: the schema must be a JSON schema object (with a JSON `type`)"),
        ));
    }
    Ok(Grammar::JsonSchema(schema.to_string()))
}

/// One message, typed: text content (parts joined), tool-call arguments as JSON values (a
/// JSON text is parsed; one that does not parse stays a string), the fields wick knows
/// checked, other fields kept for the template as they are.
fn message(i: usize, m: WireMessage) -> Result<Message, ApiError> {
    let param = format!("messages[{i}]");
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(ApiError::bad(
                param,
                format!(
                    "messages[{i}].role `{other}` is not one of system, developer, user, assistant, tool"
                ),
            ))
        }
    };
    // Text as the client wrote it (media markers scrubbed), media where their parts stand.
    let mut typed = Message::new(role, "");
    match m.content {
        None => {}
        Some(Content::Text(t)) => typed.push_text(&t),
        Some(Content::Parts(parts)) => {
            for (j, part) in parts.into_iter().enumerate() {
                let at = format!("messages[{i}].content[{j}]");
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => typed.push_text(&t),
                    ("image_url", _) => {
                        let url = match &part.image_url {
                            Some(Value::String(url)) => Some(url.as_str()),
                            Some(Value::Object(o)) => o.get("url").and_then(Value::as_str),
                            _ => None,
                        };
                        let url = url.ok_or_else(|| {
                            ApiError::bad(&at, format!("{at}: an image_url part needs `image_url.url`"))
                        })?;
                        typed.push_media(crate::media::image_url(url, &at)?);
                    }
                    ("input_audio", _) => {
                        let data = part
                            .input_audio
                            .as_ref()
                            .and_then(|a| a.get("data"))
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                ApiError::bad(&at, format!("{at}: an input_audio part needs `input_audio.data` (base64)"))
                            })?;
                        typed.push_media(crate::media::from_base64(wick::MediaKind::Audio, data, &at)?);
                    }
                    (kind, _) => {
                        return Err(ApiError::bad(
                            param,
                            format!("messages[{i}]: content part type `{kind}` is not supported (allowed: text, image_url, input_audio)"),
                        ))
                    }
                }
            }
        }
    }
    let mut extra = m.rest;
    let mut text_field = |key: &str| -> Result<Option<String>, ApiError> {
        match extra.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::bad(
                format!("messages[{i}].{key}"),
                format!("messages[{i}].{key} must be a string"),
            )),
        }
    };
    let reasoning_content = text_field("reasoning_content")?;
    let tool_call_id = text_field("tool_call_id")?;
    let name = text_field("name")?;
    let tool_calls = m
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| MessageToolCall {
            id: c.id,
            name: c.function.name,
            arguments: match c.function.arguments {
                Some(Value::String(s)) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                Some(v) => v,
                None => Value::Object(Map::new()),
            },
        })
        .collect();
    Ok(Message {
        reasoning_content,
        tool_calls,
        tool_call_id,
        name,
        extra,
        ..typed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_assistant_message_is_continued_unless_the_request_says_otherwise() {
        let user = Message::new(Role::User, "Hi");
        let said = Message::new(Role::Assistant, "The");
        let both = [user.clone(), said.clone()];
        assert_eq!(
            continuation(std::slice::from_ref(&user), None, None).unwrap(),
            (true, false)
        );
        assert_eq!(
            continuation(std::slice::from_ref(&user), Some(false), None).unwrap(),
            (false, false)
        );
        // A prefill, llama-server's default, whatever add_generation_prompt says.
        assert_eq!(continuation(&both, None, None).unwrap(), (false, true));
        assert_eq!(
            continuation(&both, Some(true), None).unwrap(),
            (false, true)
        );
        assert_eq!(
            continuation(&both, None, Some(false)).unwrap(),
            (true, false)
        );
        assert_eq!(
            continuation(&both, Some(false), Some(true)).unwrap(),
            (false, true)
        );
        // Continuing a user message is what was asked.
        assert_eq!(
            continuation(std::slice::from_ref(&user), None, Some(true)).unwrap(),
            (false, true)
        );
        let mut called = said.clone();
        called.tool_calls.push(MessageToolCall {
            id: Some("c".into()),
            name: "f".into(),
            arguments: json!({}),
        });
        for (messages, agp, cont, field) in [
            (
                both.to_vec(),
                Some(true),
                Some(true),
                "continue_final_message",
            ),
            (vec![user.clone(), called], None, None, "messages"),
            (vec![user, said.clone(), said], None, None, "messages"),
        ] {
            let err = continuation(&messages, agp, cont).unwrap_err();
            assert!(format!("{err:?}").contains(field), "{messages:?}: {err:?}");
        }
    }

    #[test]
    fn ignore_eos_reaches_the_options_and_is_off_by_default() {
        let defaults = SamplingDefaults::default();
        let on: WireSampling = serde_json::from_value(json!({"ignore_eos": true})).unwrap();
        let off: WireSampling = serde_json::from_value(json!({})).unwrap();
        let opts = |s: &WireSampling| options(s, None, "max_tokens", &defaults).unwrap();
        assert!(opts(&on).ignore_eos);
        assert!(!opts(&off).ignore_eos);
    }

    #[test]
    fn lora_takes_llama_server_s_list_and_names_what_is_wrong() {
        let list = json!([{"id": 1, "scale": 0.5}, {"id": 0}, {"id": 2, "scale": null}]);
        assert_eq!(lora(&list).unwrap(), vec![(1, 0.5), (0, 0.0), (2, 0.0)]);
        assert_eq!(lora(&json!([])).unwrap(), vec![]);
        for bad in [
            json!({"id": 0, "scale": 1}),
            json!([0.5]),
            json!([{"scale": 1}]),
            json!([{"id": -1, "scale": 1}]),
            json!([{"id": 0.5, "scale": 1}]),
            json!([{"id": 0, "scale": "1"}]),
            json!([{"id": 0, "scale": 1e300}]),
        ] {
            let err = lora(&bad).unwrap_err();
            assert!(
                matches!(&err, ApiError::BadRequest { .. }),
                "{bad}: {err:?}"
            );
            assert!(format!("{err:?}").contains("lora"), "{bad}: {err:?}");
        }
    }
}
