use serde::{Deserialize, Serialize};
use std::fmt;

/// The author of a chat message.
///
/// The four OpenAI roles are variants; any other role name a template knows (`ipython`,
/// `developer`, …) is kept verbatim in [`Role::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
#[non_exhaustive]
pub enum Role {
    /// Instructions that frame the conversation.
    System,
    /// The human side of the conversation.
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

/// One chat message: who said it and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote the message.
    pub role: Role,
    /// The message text. User-supplied text is always tokenized with special-token parsing off.
    pub content: String,
}

impl Message {
    /// A message from `role` with `content`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
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
    /// The JSON schema of the arguments, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<String>,
}

/// A conversation to format into a prompt (seed 001's `chat_request`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
}

fn default_true() -> bool {
    true
}

impl ChatRequest {
    /// A request over `messages` that ends with the assistant's turn opened.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            system: None,
            tools: Vec::new(),
            add_generation_prompt: true,
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
}
