use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// The author of a chat message.
///
/// The four OpenAI roles are variants; any other role name a template knows (`ipython`,
/// `developer`, …) is kept verbatim in [`Role::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
#[non_exhaustive]
pub enum Role {
    /// Instructions that frame the conversation.
    System,
    /// The human side of the conversation.
    #[default]
    User,
    /// The model's side of the conversation.
    Assistant,
    /// The result of a tool call.
    Tool,
    /// Any other role name, kept as given.
    Other(String),
}

impl Role {
    /// The role's wire name (`"system"`, `"user"`, …).
    pub fn as_str(&self) -> &str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Other(name) => name,
        }
    }
}

impl From<String> for Role {
    fn from(name: String) -> Self {
        match name.as_str() {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::Other(name),
        }
    }
}

impl From<Role> for String {
    fn from(role: Role) -> Self {
        role.as_str().to_owned()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat message: who said it, what, and for an assistant turn the tools it called. This is
/// the one typed form a message keeps from validation to the chat template.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote the message.
    pub role: Role,
    /// The message text. User-supplied text is always tokenized with special-token parsing off.
    pub content: String,
    /// An assistant turn's reasoning, for templates that render it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The calls an assistant turn made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<MessageToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The name of the tool (or participant) the message is from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Further fields the template may read, passed to it as they are (wick reads none of
    /// them).
    #[serde(flatten, default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// The images (or sounds) the message holds, in order: each goes where a
    /// [`crate::MEDIA_MARKER`] stands in `content` ([`Message::push_media`] puts both).
    #[serde(skip)]
    pub media: Vec<crate::Media>,
}

impl Message {
    /// A message from `role` with `content` (any [`crate::MEDIA_MARKER`] in it becomes U+FFFD:
    /// only [`Message::push_media`] places media).
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        let content: String = content.into();
        Message {
            role,
            content: crate::scrub(&content).into_owned(),
            ..Message::default()
        }
    }

    /// Appends text to the content (media markers in it scrubbed, see [`crate::scrub`]).
    pub fn push_text(&mut self, text: &str) {
        self.content.push_str(&crate::scrub(text));
    }

    /// Appends an image or sound: its place in the content, and the medium.
    pub fn push_media(&mut self, media: crate::Media) {
        self.content.push(crate::MEDIA_MARKER);
        self.media.push(media);
    }

    /// This message with `media` appended after its text.
    #[must_use]
    pub fn with_media(mut self, media: crate::Media) -> Self {
        self.push_media(media);
        self
    }

    /// The message as chat templates index it: `role`, `content`, the optional fields that are
    /// set, each tool call as `{"id", "type": "function", "function": {"name", "arguments"}}`
    /// (arguments an object), and the extra fields.
    pub fn template_json(&self) -> Value {
        let mut out = self.extra.clone();
        out.insert("role".into(), Value::String(self.role.as_str().to_owned()));
        out.insert("content".into(), Value::String(self.content.clone()));
        let optional = [
            ("reasoning_content", &self.reasoning_content),
            ("tool_call_id", &self.tool_call_id),
            ("name", &self.name),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                out.insert(key.into(), Value::String(value.clone()));
            }
        }
        if !self.tool_calls.is_empty() {
            let calls = self.tool_calls.iter().map(MessageToolCall::template_json);
            out.insert("tool_calls".into(), Value::Array(calls.collect()));
        }
        Value::Object(out)
    }
}

/// A tool call an assistant message made, as the conversation hands it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageToolCall {
    /// The call's id, which the `tool` message answering it names.
    #[serde(default)]
    pub id: Option<String>,
    /// The function called.
    pub name: String,
    /// The arguments: a JSON object (or, for a model that wrote something else, the value it
    /// wrote).
    pub arguments: Value,
}

impl MessageToolCall {
    /// The call as templates index it (`id` is `null` when the client gave none).
    pub fn template_json(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The function's name.
    pub name: String,
    /// What the function does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON schema of the arguments (an object), parsed once when the request is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

impl Tool {
    /// The tool as chat templates index it: `{"type": "function", "function": {name,
    /// description, parameters}}` (parameters an empty object schema when it has none).
    pub fn template_json(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        let parameters = self
            .parameters
            .clone()
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        function.insert("parameters".into(), parameters);
        serde_json::json!({"type": "function", "function": function})
    }
}

/// A conversation to format into a prompt (seed 001's `chat_request`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The messages, oldest first.
    pub messages: Vec<Message>,
    /// A system prompt placed before the messages when they have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether to end the prompt with the opening of an assistant turn.
    #[serde(default = "default_true")]
    pub add_generation_prompt: bool,
    /// Whether the answer continues the last message (an assistant prefill): the prompt ends
    /// right after its text instead of closing it. Needs `add_generation_prompt` false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_final_message: bool,
    /// Further variables for the chat template (`enable_thinking`, `reasoning_effort`, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra_context: Map<String, Value>,
}

fn default_true() -> bool {
    true
}

/// No messages, the assistant's turn opened (as `serde` and [`ChatRequest::new`] default it: a
/// derived `Default` would close it, and `..ChatRequest::default()` would drop the generation
/// prompt).
impl Default for ChatRequest {
    fn default() -> Self {
        ChatRequest::new(Vec::new())
    }
}

impl ChatRequest {
    /// A request over `messages` that ends with the assistant's turn opened.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            system: None,
            tools: Vec::new(),
            add_generation_prompt: true,
            continue_final_message: false,
            extra_context: Map::new(),
        }
    }

    /// The messages with [`ChatRequest::system`] prepended when the conversation has no system
    /// message of its own.
    pub fn effective_messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.messages.len() + 1);
        if let Some(system) = &self.system {
            if self.messages.first().is_none_or(|m| m.role != Role::System) {
                out.push(Message::new(Role::System, system.clone()));
            }
        }
        out.extend(self.messages.iter().cloned());
        out
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// An end-of-generation token or a stop sequence.
    Stop,
    /// The token budget or the context window ran out.
    Length,
    /// The model called a tool.
    ToolCalls,
}

/// Token accounting for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Prompt tokens whose KV state was reused instead of computed.
    pub cached_tokens: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_through_json() {
        for name in ["system", "user", "assistant", "tool", "ipython"] {
            let role: Role = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(role.as_str(), name);
            assert_eq!(
                serde_json::to_value(&role).unwrap(),
                serde_json::json!(name)
            );
        }
        assert_eq!(
            Role::from("developer".to_owned()),
            Role::Other("developer".into())
        );
    }

    #[test]
    fn system_prompt_is_prepended_only_when_missing() {
        let mut req = ChatRequest::new(vec![Message::new(Role::User, "hi")]);
        req.system = Some("be brief".into());
        let msgs = req.effective_messages();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0], Message::new(Role::System, "be brief"));

        req.messages.insert(0, Message::new(Role::System, "own"));
        let msgs = req.effective_messages();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].content, "own");
    }

    #[test]
    fn finish_reason_wire_names() {
        assert_eq!(
            serde_json::to_value(FinishReason::ToolCalls).unwrap(),
            serde_json::json!("tool_calls")
        );
    }

    #[test]
    fn messages_keep_unknown_fields_beside_the_typed_ones() {
        let m: Message = serde_json::from_value(serde_json::json!({
            "role": "assistant", "content": "", "thinking": "x",
            "tool_calls": [{"id": null, "name": "f", "arguments": {"a": 1}}]
        }))
        .unwrap();
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(m.tool_calls[0].arguments["a"], 1);
        assert_eq!(m.extra["thinking"], "x");
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(back["thinking"], "x");
        assert!(back.get("tool_call_id").is_none());
    }

    #[test]
    fn every_way_to_make_a_request_opens_the_assistant_turn() {
        assert!(ChatRequest::default().add_generation_prompt);
        assert!(ChatRequest::new(Vec::new()).add_generation_prompt);
        let parsed: ChatRequest = serde_json::from_str(r#"{"messages": []}"#).unwrap();
        assert!(parsed.add_generation_prompt);
    }
}
