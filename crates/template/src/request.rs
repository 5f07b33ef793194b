//! What a template renders: messages and tools as JSON, the special tokens, and options.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use wick_types::ChatRequest;

/// A conversation to render, in the shape chat templates index: messages and tools are
/// arbitrary JSON objects (`role`, `content`, `tool_calls`, `reasoning_content`, …).
///
/// This is also the format of the request files of `wick template render`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RenderRequest {
    /// The messages, oldest first.
    pub messages: Vec<Value>,
    /// Tool definitions (`{"type": "function", "function": {...}}`); `None` renders as `none`.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// The BOS token text; when `None` the template sees it as undefined.
    #[serde(default)]
    pub bos_token: Option<String>,
    /// The EOS token text; when `None` the template sees it as undefined.
    #[serde(default)]
    pub eos_token: Option<String>,
    /// Whether to end with the opening of an assistant turn.
    #[serde(default = "yes")]
    pub add_generation_prompt: bool,
    /// Whether the prompt ends inside the last message, right after its text, so that the
    /// answer continues it (transformers' `continue_final_message`; an assistant prefill).
    /// Needs `add_generation_prompt` false.
    #[serde(default)]
    pub continue_final_message: bool,
    /// Further variables passed to the template (`enable_thinking`, …).
    #[serde(default)]
    pub extra_context: Map<String, Value>,
}

fn yes() -> bool {
    true
}

impl RenderRequest {
    /// A request over `messages` with a generation prompt and nothing else.
    pub fn new(messages: Vec<Value>) -> Self {
        RenderRequest {
            messages,
            add_generation_prompt: true,
            ..RenderRequest::default()
        }
    }

    /// The same request with these special-token texts.
    #[must_use]
    pub fn with_tokens(mut self, bos: Option<String>, eos: Option<String>) -> Self {
        self.bos_token = bos;
        self.eos_token = eos;
        self
    }

    /// Every string in the request (for choosing tracking marks).
    pub(crate) fn strings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.messages {
            crate::jinja::strings_of(m, &mut out);
        }
        for t in self.tools.iter().flatten() {
            crate::jinja::strings_of(t, &mut out);
        }
        out.extend(self.bos_token.iter().cloned());
        out.extend(self.eos_token.iter().cloned());
        for v in self.extra_context.values() {
            crate::jinja::strings_of(v, &mut out);
        }
        out
    }
}

impl From<&ChatRequest> for RenderRequest {
    /// The messages of a [`ChatRequest`] (its system prompt prepended when it has none) and its
    /// tools, in the shape templates index ([`wick_types::Message::template_json`],
    /// [`wick_types::Tool::template_json`]), with its template variables.
    fn from(req: &ChatRequest) -> Self {
        let messages = req
            .effective_messages()
            .iter()
            .map(wick_types::Message::template_json)
            .collect();
        let tools = (!req.tools.is_empty()).then(|| {
            req.tools
                .iter()
                .map(wick_types::Tool::template_json)
                .collect()
        });
        RenderRequest {
            messages,
            tools,
            bos_token: None,
            eos_token: None,
            add_generation_prompt: req.add_generation_prompt,
            continue_final_message: req.continue_final_message,
            extra_context: req.extra_context.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wick_types::{Message, MessageToolCall, Role, Tool};

    #[test]
    fn request_file_fields_parse() {
        let r: RenderRequest = serde_json::from_str(
            r#"{"messages": [{"role": "user", "content": "hi"}], "bos_token": "<s>",
                "extra_context": {"enable_thinking": false}}"#,
        )
        .unwrap();
        assert!(r.add_generation_prompt);
        assert_eq!(r.bos_token.as_deref(), Some("<s>"));
        assert_eq!(r.tools, None);
        assert_eq!(r.extra_context["enable_thinking"], Value::Bool(false));
    }

    #[test]
    fn chat_requests_convert() {
        let mut req = ChatRequest::new(vec![Message::new(Role::User, "hi")]);
        req.system = Some("be brief".into());
        req.tools.push(Tool {
            name: "f".into(),
            description: None,
            parameters: Some(serde_json::json!({"type": "object"})),
        });
        let r = RenderRequest::from(&req);
        assert_eq!(r.messages.len(), 2);
        assert_eq!(r.messages[0]["role"], "system");
        assert_eq!(
            r.tools.unwrap()[0]["function"]["parameters"]["type"],
            "object"
        );
    }

    #[test]
    fn typed_messages_become_what_templates_index() {
        let mut call = Message::new(Role::Assistant, "");
        call.reasoning_content = Some("Paris, then.".into());
        call.tool_calls.push(MessageToolCall {
            id: Some("call_1".into()),
            name: "get_weather".into(),
            arguments: serde_json::json!({"city": "Paris"}),
        });
        let mut result = Message::new(Role::Tool, "sunny");
        result.tool_call_id = Some("call_1".into());
        result.name = Some("get_weather".into());
        result.extra.insert("thinking".into(), Value::Bool(true));
        let mut req = ChatRequest::new(vec![Message::new(Role::User, "Weather?"), call, result]);
        req.extra_context
            .insert("enable_thinking".into(), Value::Bool(false));
        req.tools.push(Tool {
            name: "get_weather".into(),
            description: Some("Weather of a city".into()),
            parameters: None,
        });
        let r = RenderRequest::from(&req);
        assert_eq!(
            Value::Array(r.messages),
            serde_json::json!([
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "reasoning_content": "Paris, then.",
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny", "tool_call_id": "call_1",
                 "name": "get_weather", "thinking": true},
            ])
        );
        assert_eq!(
            Value::Array(r.tools.unwrap()),
            serde_json::json!([{"type": "function", "function": {
                "name": "get_weather", "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {}}}}])
        );
        assert_eq!(r.extra_context["enable_thinking"], Value::Bool(false));
    }
}
