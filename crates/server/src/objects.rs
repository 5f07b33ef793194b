//! The OpenAI response objects as typed structs that borrow what they show: the
//! `chat.completion`, `chat.completion.chunk` and `text_completion` envelopes, their choices
//! and `usage`. Fields serialize in declaration order, the order OpenAI sends them.

use serde::ser::Serializer;
use serde::Serialize;
use wick::ChoiceDelta;
use wick::{FinishReason, ParsedMessage, ParsedToolCall, Usage};

use crate::logprobs::{ChatLogprobs, LegacyLogprobs};
use crate::telemetry::{Progress, Timings};

/// What every object of one response shares.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
}

impl Head {
    /// A fresh response id (`prefix-` and 24 hex digits), created now, for `model`.
    pub(crate) fn new(prefix: &str, model: String) -> Self {
        Head {
            id: new_id(&format!("{prefix}-")),
            created: crate::state::unix_now(),
            model,
        }
    }

    /// The object `object` with `choices` and `usage`.
    pub(crate) fn object<C: Serialize>(
        &self,
        object: &'static str,
        choices: C,
        usage: UsageField,
    ) -> Envelope<'_, C> {
        Envelope {
            id: &self.id,
            object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
            prompt_progress: None,
            timings: None,
        }
    }
}

/// A fresh response id: `prefix` and 24 hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    #[allow(clippy::cast_possible_truncation)]
    let t = t as u64;
    format!(
        "{prefix}{:016x}{n:08x}",
        t.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

/// An OpenAI object, whole or chunk: `{"id", "object", "created", "model", "choices", "usage"?}`.
#[derive(Debug, Serialize)]
pub(crate) struct Envelope<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "UsageField::is_absent")]
    usage: UsageField,
    /// llama-server's `prompt_progress` (`return_progress`).
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_progress: Option<Progress>,
    /// llama-server's `timings`.
    #[serde(skip_serializing_if = "Option::is_none")]
    timings: Option<Timings>,
}

impl<C> Envelope<'_, C> {
    /// The same object with llama-server's `prompt_progress`.
    pub(crate) fn with_progress(self, progress: Progress) -> Self {
        Envelope {
            prompt_progress: Some(progress),
            ..self
        }
    }

    /// The same object with llama-server's `timings`.
    pub(crate) fn with_timings(self, timings: Timings) -> Self {
        Envelope {
            timings: Some(timings),
            ..self
        }
    }
}

/// The choice of a chat chunk that reports the prompt's progress (llama-server's shape): the
/// assistant's role, no content yet.
#[derive(Debug, Serialize)]
pub(crate) struct ProgressChoice {
    index: u32,
    delta: ProgressDelta,
    logprobs: (),
    finish_reason: (),
}

#[derive(Debug, Serialize)]
struct ProgressDelta {
    role: &'static str,
    content: (),
}

/// [`ProgressChoice`]'s one value.
pub(crate) const PROGRESS_CHOICE: ProgressChoice = ProgressChoice {
    index: 0,
    delta: ProgressDelta {
        role: "assistant",
        content: (),
    },
    logprobs: (),
    finish_reason: (),
};

/// An object's `usage` field: left out (chunks without `include_usage`), `null` (the chunks
/// before the usage chunk), or the counts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum UsageField {
    Absent,
    Null,
    Counts(Usage),
}

impl UsageField {
    /// In a stream: `null` with `include_usage`, left out without.
    pub(crate) fn null_if(include_usage: bool) -> Self {
        if include_usage {
            UsageField::Null
        } else {
            UsageField::Absent
        }
    }

    fn is_absent(&self) -> bool {
        matches!(self, UsageField::Absent)
    }
}

impl Serialize for UsageField {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            UsageField::Absent | UsageField::Null => serializer.serialize_none(),
            UsageField::Counts(u) => UsageObject {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
                total_tokens: u.prompt_tokens + u.completion_tokens,
                prompt_tokens_details: PromptTokensDetails {
                    cached_tokens: u.cached_tokens,
                },
            }
            .serialize(serializer),
        }
    }
}

/// The `usage` object.
#[derive(Serialize)]
struct UsageObject {
    prompt_tokens: u32,
    completion_tokens: u32,
    total_tokens: u32,
    prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Serialize)]
struct PromptTokensDetails {
    cached_tokens: u32,
}

/// The choice of a `chat.completion`. Its `logprobs` cover every generated token, reasoning
/// and tool-call text included (what llama.cpp's server reports too), not only `content`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatChoice<'a> {
    index: u32,
    message: AssistantMessage<'a>,
    logprobs: Option<ChatLogprobs<'a>>,
    finish_reason: Option<FinishReason>,
}

impl<'a> ChatChoice<'a> {
    pub(crate) fn new(
        message: &'a ParsedMessage,
        logprobs: Option<ChatLogprobs<'a>>,
        finish_reason: Option<FinishReason>,
    ) -> Self {
        ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                // `null` for a message that only calls tools.
                content: (!message.content.is_empty() || message.tool_calls.is_empty())
                    .then_some(message.content.as_str()),
                reasoning_content: message.reasoning_content.as_deref(),
                tool_calls: ToolCalls(&message.tool_calls),
            },
            logprobs,
            finish_reason,
        }
    }
}

/// The assistant message of a whole answer.
#[derive(Debug, Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "ToolCalls::is_empty")]
    tool_calls: ToolCalls<'a>,
}

/// `message.tool_calls[]`: `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug)]
struct ToolCalls<'a>(&'a [ParsedToolCall]);

impl ToolCalls<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for ToolCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|c| ToolCall {
            id: &c.id,
            kind: "function",
            function: Function {
                name: &c.name,
                arguments: &c.arguments,
            },
        }))
    }
}

/// One tool call of a whole message.
#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

/// A tool call's function.
#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// The choice of a `chat.completion.chunk`: a delta, with the tokens it completes.
#[derive(Debug, Serialize)]
pub(crate) struct ChunkChoice<'a> {
    index: u32,
    delta: ChoiceDelta<'a>,
    logprobs: Option<ChatLogprobs<'a>>,
    finish_reason: Option<FinishReason>,
}

impl<'a> ChunkChoice<'a> {
    pub(crate) fn new(choice: wick::ChoiceChunk<'a>, logprobs: Option<ChatLogprobs<'a>>) -> Self {
        ChunkChoice {
            index: choice.index,
            delta: choice.delta,
            logprobs,
            finish_reason: choice.finish_reason,
        }
    }
}

/// The choice of a `text_completion` (whole: all the text; a chunk: its delta).
#[derive(Debug, Serialize)]
pub(crate) struct TextChoice<'a> {
    text: &'a str,
    index: u32,
    logprobs: Option<LegacyLogprobs<'a>>,
    finish_reason: Option<FinishReason>,
}

impl<'a> TextChoice<'a> {
    pub(crate) fn new(
        text: &'a str,
        logprobs: Option<LegacyLogprobs<'a>>,
        finish_reason: Option<FinishReason>,
    ) -> Self {
        TextChoice {
            text,
            index: 0,
            logprobs,
            finish_reason,
        }
    }

    /// The same choice as the `index`-th of a batch.
    pub(crate) fn at(mut self, index: usize) -> Self {
        self.index = u32::try_from(index).unwrap_or(u32::MAX);
        self
    }
}

/// No choices: the usage chunk's `[]`.
pub(crate) const NO_CHOICES: [(); 0] = [];

#[cfg(test)]
mod tests {
    use super::*;
    use wick::DeltaBuilder;
    use wick::Event;

    fn head() -> Head {
        Head {
            id: "chatcmpl-1".into(),
            created: 7,
            model: "m".into(),
        }
    }

    fn json(value: &impl Serialize) -> String {
        serde_json::to_string(value).unwrap()
    }

    const USAGE: Usage = Usage {
        prompt_tokens: 5,
        completion_tokens: 3,
        cached_tokens: 1,
    };

    #[test]
    fn a_tool_call_message_has_null_content_and_openai_calls() {
        let message = ParsedMessage {
            content: String::new(),
            reasoning_content: Some("think \"hard\"".into()),
            tool_calls: vec![ParsedToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city": "Paris"}"#.into(),
            }],
            finish_reason: Some(FinishReason::ToolCalls),
        };
        let choice = ChatChoice::new(&message, None, Some(FinishReason::ToolCalls));
        let head = head();
        let object = head.object("chat.completion", [choice], UsageField::Counts(USAGE));
        assert_eq!(
            json(&object),
            concat!(
                r#"{"id":"chatcmpl-1","object":"chat.completion","created":7,"model":"m","#,
                r#""choices":[{"index":0,"message":{"role":"assistant","content":null,"#,
                r#""reasoning_content":"think \"hard\"","tool_calls":[{"id":"call_1","#,
                r#""type":"function","function":{"name":"get_weather","#,
                r#""arguments":"{\"city\": \"Paris\"}"}}]},"logprobs":null,"#,
                r#""finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"#,
                r#""completion_tokens":3,"total_tokens":8,"#,
                r#""prompt_tokens_details":{"cached_tokens":1}}}"#
            )
        );
    }

    #[test]
    fn a_plain_message_has_its_content_and_no_calls() {
        let message = ParsedMessage {
            content: String::new(),
            ..ParsedMessage::default()
        };
        let choice = ChatChoice::new(&message, None, Some(FinishReason::Stop));
        assert_eq!(
            json(&choice),
            r#"{"index":0,"message":{"role":"assistant","content":""},"logprobs":null,"finish_reason":"stop"}"#
        );
    }

    #[test]
    fn tool_call_chunks_and_the_usage_chunk() {
        let events = [
            Event::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
            },
            Event::ToolCallArgs {
                index: 0,
                text: "{\"a\"".into(),
            },
        ];
        let choices = DeltaBuilder::new().push(&events);
        let frames: Vec<String> = choices
            .into_iter()
            .map(|c| {
                let choice = ChunkChoice::new(c, None);
                json(&head().object("chat.completion.chunk", [choice], UsageField::null_if(true)))
            })
            .collect();
        let prefix = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":"#;
        assert_eq!(
            frames,
            [
                format!(
                    r#"{prefix}{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}],"usage":null}}"#
                ),
                format!(
                    r#"{prefix}{{"tool_calls":[{{"index":0,"id":"call_1","type":"function","function":{{"name":"f","arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}],"usage":null}}"#
                ),
                format!(
                    r#"{prefix}{{"tool_calls":[{{"index":0,"function":{{"arguments":"{{\"a\""}}}}]}},"logprobs":null,"finish_reason":null}}],"usage":null}}"#
                ),
            ]
        );
        let head = head();
        let usage = head.object(
            "chat.completion.chunk",
            NO_CHOICES,
            UsageField::Counts(USAGE),
        );
        assert!(json(&usage).ends_with(
            r#""model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":1}}}"#
        ));
        let plain = head.object(
            "chat.completion.chunk",
            NO_CHOICES,
            UsageField::null_if(false),
        );
        assert!(json(&plain).ends_with(r#""model":"m","choices":[]}"#));
    }

    #[test]
    fn text_choices_put_text_first() {
        let choice = TextChoice::new("Hi", None, None);
        assert_eq!(
            json(&choice),
            r#"{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}"#
        );
    }
}
