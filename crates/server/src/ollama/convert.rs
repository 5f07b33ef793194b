//! Ollama requests → the chat pipeline's: messages become the OpenAI-style messages the chat
//! template reads (tool calls with object arguments, `tool` results, `thinking` as
//! `reasoning_content`), `options` become the sampling fields, `format` the `response_format`
//! grammar, `think` the template's `enable_thinking`; the whole goes through
//! [`validate::chat`], the checks every chat API shares. A raw `/api/generate` prompt skips
//! the template and goes through [`validate::options`] alone.

use serde_json::{json, Map, Value};
use wick::{GenerateOptions, PromptInput};

use super::wire::{ChatRequest, GenerateRequest, Message, Options};
use crate::validate::{self, ValidChat};
use crate::wire::{
    ChatCompletionRequest, Content, ContentPart, Stop, WireFunctionCall, WireMessage, WireSampling,
    WireToolCall,
};
use crate::ApiError;
use crate::{KeepAlive, SamplingDefaults};

/// What an Ollama request asks for, checked.
#[derive(Debug)]
pub(crate) enum Ask {
    /// Nothing to answer (no messages, an empty prompt): Ollama's way to load a model.
    Load { model: Option<String> },
    /// A conversation, through the chat template.
    Chat(Box<ValidChat>),
    /// A raw prompt, without the chat template.
    Raw(Box<RawPrompt>),
}

/// A raw `/api/generate` prompt, checked: with a `suffix`, the text between `input` and it
/// (fill-in-the-middle, when the model has the tokens for it).
#[derive(Debug)]
pub(crate) struct RawPrompt {
    pub(crate) model: Option<String>,
    pub(crate) input: PromptInput,
    pub(crate) suffix: Option<String>,
    pub(crate) options: GenerateOptions,
}

/// A checked request: what to answer, whether to stream (Ollama's default: yes), and the
/// context asked for with `options.num_ctx`, which must fit the server's.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) ask: Ask,
    pub(crate) stream: bool,
    pub(crate) num_ctx: Option<u64>,
    /// How long the model stays loaded once idle, when the request says.
    pub(crate) keep_alive: Option<KeepAlive>,
}

/// Ollama's `keep_alive`, checked (`null`: the model's default).
pub(crate) fn keep_alive(value: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => KeepAlive::parse_ollama(v)
            .map(Some)
            .map_err(|message| ApiError::bad("keep_alive", message)),
    }
}

/// Checks a `/api/chat` request.
pub(crate) fn chat(req: ChatRequest, d: &SamplingDefaults) -> Result<Checked, ApiError> {
    let keep_alive = keep_alive(req.keep_alive.as_ref())?;
    let options = req.options.unwrap_or_default();
    let num_ctx = num_ctx(&options)?;
    let stream = req.stream.unwrap_or(true);
    let messages = req.messages.unwrap_or_default();
    if messages.is_empty() {
        return Ok(Checked {
            ask: Ask::Load { model: req.model },
            stream,
            num_ctx,
            keep_alive,
        });
    }
    let messages = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let chat = ChatCompletionRequest {
        model: req.model,
        messages: Some(messages),
        tools: req.tools,
        sampling: sampling(&options)?,
        response_format: format(req.format.as_ref())?,
        chat_template_kwargs: think(req.think.as_ref())?,
        ..ChatCompletionRequest::default()
    };
    let valid = validate::chat(chat, d)?;
    Ok(Checked {
        ask: Ask::Chat(Box::new(valid)),
        stream,
        num_ctx,
        keep_alive,
    })
}

/// Checks a `/api/generate` request.
pub(crate) fn generate(req: GenerateRequest, d: &SamplingDefaults) -> Result<Checked, ApiError> {
    if req.template.as_deref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::bad(
            "template",
            "`template` is not supported: wick formats prompts with the model's own chat \
             template (start the server with --chat-template to replace it), or send the \
             prompt as it is with `raw: true`",
        ));
    }
    if req.context.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad(
            "context",
            "`context` (an earlier answer's tokens) is not supported: send the conversation \
             to /api/chat, whose prompt cache makes the continuation cheap",
        ));
    }
    let images = req.images.unwrap_or_default();
    let keep_alive = keep_alive(req.keep_alive.as_ref())?;
    let options = req.options.unwrap_or_default();
    let num_ctx = num_ctx(&options)?;
    let stream = req.stream.unwrap_or(true);
    let prompt = req.prompt.unwrap_or_default();
    if prompt.is_empty() {
        return Ok(Checked {
            ask: Ask::Load { model: req.model },
            stream,
            num_ctx,
            keep_alive,
        });
    }
    let response_format = format(req.format.as_ref())?;
    let suffix = req.suffix.filter(|s| !s.is_empty());
    if req.raw == Some(true) || suffix.is_some() {
        if !images.is_empty() {
            return Err(ApiError::bad(
                "images",
                "images: a raw prompt (or one with a suffix) takes no images: send them without \
                 `raw`, and the model's chat template places them",
            ));
        }
        let sampling = sampling(&options)?;
        let max = sampling.max_tokens;
        let mut generate = validate::options(&sampling, max, "num_predict", d)?;
        if let Some(grammar) = validate::response_format(response_format.as_ref())? {
            if let Some(s) = generate.sampling.as_mut() {
                s.grammar = Some(grammar);
            }
        }
        return Ok(Checked {
            ask: Ask::Raw(Box::new(RawPrompt {
                model: req.model,
                // The prompt as it is: its special-token text becomes control tokens, as in
                // Ollama's raw mode, where the client writes the whole template.
                input: PromptInput::Text {
                    text: prompt,
                    formatted: true,
                },
                suffix,
                options: generate,
            })),
            stream,
            num_ctx,
            keep_alive,
        });
    }
    let mut messages = Vec::new();
    if let Some(system) = req.system.filter(|s| !s.is_empty()) {
        messages.push(text_message("system", system));
    }
    messages.push(with_images("images", "user", prompt, &images)?);
    let chat = ChatCompletionRequest {
        model: req.model,
        messages: Some(messages),
        sampling: sampling(&options)?,
        response_format,
        chat_template_kwargs: think(req.think.as_ref())?,
        ..ChatCompletionRequest::default()
    };
    Ok(Checked {
        ask: Ask::Chat(Box::new(validate::chat(chat, d)?)),
        stream,
        num_ctx,
        keep_alive,
    })
}

fn text_message(role: &str, text: String) -> WireMessage {
    WireMessage {
        role: role.to_owned(),
        content: Some(Content::Text(text)),
        tool_calls: None,
        rest: Map::new(),
    }
}

/// A message of `role` with `images` (base64, Ollama's form) before its text, as OpenAI's
/// content parts (the images as data URLs).
fn with_images(
    param: &str,
    role: &str,
    text: String,
    images: &[Value],
) -> Result<WireMessage, ApiError> {
    if images.is_empty() {
        return Ok(text_message(role, text));
    }
    let mut parts = Vec::with_capacity(images.len() + 1);
    for (k, image) in images.iter().enumerate() {
        let data = image
            .as_str()
            .ok_or_else(|| ApiError::bad(param, format!("{param}[{k}] must be a base64 string")))?;
        parts.push(ContentPart {
            kind: "image_url".into(),
            text: None,
            image_url: Some(Value::String(format!("data:;base64,{data}"))),
            input_audio: None,
        });
    }
    parts.push(ContentPart {
        kind: "text".into(),
        text: Some(text),
        image_url: None,
        input_audio: None,
    });
    Ok(WireMessage {
        role: role.to_owned(),
        content: Some(Content::Parts(parts)),
        tool_calls: None,
        rest: Map::new(),
    })
}

/// One Ollama message as the chat pipeline's.
fn message(i: usize, m: Message) -> Result<WireMessage, ApiError> {
    let images = m.images.clone().unwrap_or_default();
    let mut rest = Map::new();
    if let Some(thinking) = m.thinking.filter(|t| !t.is_empty()) {
        rest.insert("reasoning_content".into(), Value::String(thinking));
    }
    if let Some(name) = m.tool_name {
        // Templates read a tool result's function name as `name`.
        rest.insert("name".into(), Value::String(name.clone()));
        rest.insert("tool_name".into(), Value::String(name));
    }
    let tool_calls = m.tool_calls.map(|calls| {
        calls
            .into_iter()
            .map(|c| WireToolCall {
                id: None,
                function: WireFunctionCall {
                    name: c.function.name,
                    arguments: Some(c.function.arguments.unwrap_or_else(|| json!({}))),
                },
            })
            .collect()
    });
    let mut out = with_images(
        &format!("messages[{i}].images"),
        &m.role,
        m.content.unwrap_or_default(),
        &images,
    )?;
    out.tool_calls = tool_calls;
    out.rest = rest;
    Ok(out)
}

/// `options.num_ctx`, when given: a positive integer.
fn num_ctx(options: &Options) -> Result<Option<u64>, ApiError> {
    match options.num_ctx {
        None => Ok(None),
        Some(n) => u64::try_from(n)
            .ok()
            .filter(|n| *n >= 1)
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad(
                    "options.num_ctx",
                    format!("options.num_ctx = {n}: must be 1 or more"),
                )
            }),
    }
}

/// `options` as the sampling fields every API shares. `num_predict` -1 (no limit) and -2
/// (fill the context) both mean the server's budget.
fn sampling(o: &Options) -> Result<WireSampling, ApiError> {
    let max_tokens = match o.num_predict {
        None | Some(-1 | -2) => None,
        Some(n) if n >= 1 => Some(n),
        Some(n) => {
            return Err(ApiError::bad(
                "options.num_predict",
                format!(
                    "options.num_predict = {n}: must be 1 or more, or -1 (no limit) or -2 \
                     (fill the context)"
                ),
            ))
        }
    };
    Ok(WireSampling {
        stop: o.stop.clone().map(Stop::Many),
        max_tokens,
        temperature: o.temperature,
        top_p: o.top_p,
        top_k: o.top_k,
        min_p: o.min_p,
        repetition_penalty: o.repeat_penalty,
        frequency_penalty: o.frequency_penalty,
        presence_penalty: o.presence_penalty,
        seed: o.seed,
        ..WireSampling::default()
    })
}

/// `format` as the chat pipeline's `response_format`: `"json"` any JSON object, an object a
/// JSON schema; `""` or `null` none.
fn format(format: Option<&Value>) -> Result<Option<Value>, ApiError> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(json!({"type": "json_object"}))),
        Some(schema @ Value::Object(_)) => Ok(Some(
            json!({"type": "json_schema", "json_schema": {"schema": schema}}),
        )),
        Some(other) => Err(ApiError::bad(
            "format",
            format!("invalid format {other} (allowed: \"json\" or a JSON schema object)"),
        )),
    }
}

/// `think` as the template's `enable_thinking` (and, for an effort, `reasoning_effort`).
fn think(think: Option<&Value>) -> Result<Option<Map<String, Value>>, ApiError> {
    let mut context = Map::new();
    match think {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Bool(on)) => {
            context.insert("enable_thinking".into(), Value::Bool(*on));
        }
        Some(Value::String(effort)) if ["low", "medium", "high"].contains(&effort.as_str()) => {
            context.insert("enable_thinking".into(), Value::Bool(true));
            context.insert("reasoning_effort".into(), Value::String(effort.clone()));
        }
        Some(other) => {
            return Err(ApiError::bad(
                "think",
                format!(
                    "invalid think {other} (allowed: true, false, \"low\", \"medium\", \"high\")"
                ),
            ))
        }
    }
    Ok(Some(context))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_of(body: Value) -> Result<Checked, ApiError> {
        chat(
            serde_json::from_value(body).unwrap(),
            &SamplingDefaults::default(),
        )
    }

    fn valid_chat(body: Value) -> ValidChat {
        match chat_of(body).unwrap().ask {
            Ask::Chat(valid) => *valid,
            other => panic!("not a chat: {other:?}"),
        }
    }

    #[test]
    fn options_map_onto_the_shared_sampling_fields() {
        let valid = valid_chat(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_predict": 7, "temperature": 0.5, "top_k": 3, "top_p": 0.7,
                        "min_p": 0.1, "repeat_penalty": 1.2, "seed": 9, "stop": ["x"],
                        "presence_penalty": 0.3, "frequency_penalty": 0.4,
                        "mirostat": 2, "num_thread": 8},
        }));
        assert_eq!(valid.options.max_tokens, Some(7));
        assert_eq!(valid.options.stop, ["x"]);
        let s = valid.options.sampling.unwrap();
        assert!((s.temperature - 0.5).abs() < 1e-6);
        assert_eq!(s.top_k, 3);
        assert!((s.top_p - 0.7).abs() < 1e-6);
        assert!((s.min_p - 0.1).abs() < 1e-6);
        assert!((s.repetition_penalty - 1.2).abs() < 1e-6);
        assert!((s.presence_penalty - 0.3).abs() < 1e-6);
        assert!((s.frequency_penalty - 0.4).abs() < 1e-6);
    }

    #[test]
    fn ollama_streams_unless_told_not_to() {
        let messages = json!([{"role": "user", "content": "hi"}]);
        assert!(chat_of(json!({"messages": messages})).unwrap().stream);
        assert!(
            !chat_of(json!({"messages": messages, "stream": false}))
                .unwrap()
                .stream
        );
    }

    #[test]
    fn num_predict_minus_one_is_the_servers_budget_and_zero_is_refused() {
        let valid = valid_chat(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_predict": -1},
        }));
        assert_eq!(valid.options.max_tokens, None);
        let e = chat_of(json!({
            "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_predict": 0},
        }))
        .unwrap_err();
        assert!(e.to_string().contains("num_predict"), "{e}");
    }

    #[test]
    fn format_json_and_schemas_become_grammars() {
        for format in [json!("json"), json!({"type": "object"})] {
            let valid = valid_chat(json!({
                "messages": [{"role": "user", "content": "hi"}], "format": format,
            }));
            assert!(valid.options.sampling.unwrap().grammar.is_some());
        }
        let e = chat_of(json!({
            "messages": [{"role": "user", "content": "hi"}], "format": "yaml",
        }))
        .unwrap_err();
        assert!(e.to_string().contains("format"), "{e}");
    }

    #[test]
    fn think_sets_enable_thinking() {
        let valid = valid_chat(json!({
            "messages": [{"role": "user", "content": "hi"}], "think": false,
        }));
        assert_eq!(valid.chat.extra_context["enable_thinking"], false);
        let valid = valid_chat(json!({
            "messages": [{"role": "user", "content": "hi"}], "think": "high",
        }));
        assert_eq!(valid.chat.extra_context["enable_thinking"], true);
        assert_eq!(valid.chat.extra_context["reasoning_effort"], "high");
    }

    #[test]
    fn tool_calls_in_history_keep_object_arguments_and_tool_results_their_name() {
        let valid = valid_chat(json!({
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "", "thinking": "hmm",
                 "tool_calls": [{"function": {"name": "get_weather",
                                              "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
            ],
        }));
        let m = valid.template_messages();
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            json!({"city": "Paris"})
        );
        assert_eq!(m[1]["reasoning_content"], "hmm");
        assert_eq!(m[2]["role"], "tool");
        assert_eq!(m[2]["name"], "get_weather");
    }

    #[test]
    fn images_go_before_the_text_and_no_messages_is_a_load() {
        let Ask::Chat(valid) = chat_of(json!({
            "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}],
        }))
        .unwrap()
        .ask
        else {
            panic!("a chat")
        };
        assert_eq!(valid.template_messages()[0]["content"], "\u{FFFC}hi");
        let e = chat_of(json!({
            "messages": [{"role": "user", "content": "hi", "images": [1]}],
        }))
        .unwrap_err();
        assert!(e.to_string().contains("messages[0].images[0]"), "{e}");
        assert!(matches!(
            chat_of(json!({"model": "m"})).unwrap().ask,
            Ask::Load { .. }
        ));
    }

    #[test]
    fn generate_refuses_template_and_context_and_keeps_raw_prompts_raw() {
        let gen = |body: Value| {
            generate(
                serde_json::from_value(body).unwrap(),
                &SamplingDefaults::default(),
            )
        };
        for (field, value) in [
            ("template", json!("{{ .Prompt }}")),
            ("context", json!([1, 2])),
        ] {
            let mut body = json!({"prompt": "x"});
            body[field] = value;
            let e = gen(body).unwrap_err();
            assert_eq!(
                e,
                ApiError::BadRequest {
                    message: e.to_string(),
                    param: Some(field.into())
                }
            );
        }
        let raw = gen(json!({"prompt": "<|im_start|>x", "raw": true, "format": "json"})).unwrap();
        let Ask::Raw(raw) = raw.ask else {
            panic!("not raw")
        };
        assert_eq!(
            raw.input,
            PromptInput::Text {
                text: "<|im_start|>x".into(),
                formatted: true
            }
        );
        assert!(raw.options.sampling.unwrap().grammar.is_some());
        assert_eq!(raw.suffix, None);
        // A suffix makes a fill-in-the-middle prompt, raw or not.
        let fill = gen(json!({"prompt": "def f(x):", "suffix": "return y"})).unwrap();
        let Ask::Raw(fill) = fill.ask else {
            panic!("not raw")
        };
        assert_eq!(fill.suffix.as_deref(), Some("return y"));
        let templated = gen(json!({"prompt": "x", "system": "be brief"})).unwrap();
        let Ask::Chat(chat) = templated.ask else {
            panic!("not a chat")
        };
        assert_eq!(chat.chat.messages[0].role, wick::Role::System);
        assert_eq!(chat.chat.messages[1].content, "x");
        assert!(matches!(
            gen(json!({"prompt": ""})).unwrap().ask,
            Ask::Load { .. }
        ));
    }

    #[test]
    fn num_ctx_must_be_positive() {
        let checked = chat_of(json!({"options": {"num_ctx": 256}})).unwrap();
        assert_eq!(checked.num_ctx, Some(256));
        assert!(chat_of(json!({"options": {"num_ctx": 0}})).is_err());
    }
}
