//! Answers from a running OpenAI-compatible server: `POST /v1/chat/completions` with
//! `stream: true`, read as server-sent events.

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::CONTENT_TYPE;
use serde_json::{json, Value};
use wick::{Message, Role};

use super::{Answer, ChatArgs, Conversation, Interrupt, Printer, Responder};

/// A server and the request settings sent with every turn.
#[derive(Debug)]
pub(super) struct Remote {
    client: Client,
    /// The server's root, without a trailing `/` or `/v1`.
    base: String,
    api_key: Option<String>,
    model: Option<String>,
    /// `max_tokens`, `temperature`, `top_p`, `seed`.
    settings: serde_json::Map<String, Value>,
}

impl Remote {
    /// Connects to `url`. Without `--model`, asks the server for its first model
    /// (`GET /v1/models`); a server that cannot list them gets requests without a model.
    pub(super) fn connect(url: &str, args: &ChatArgs) -> Result<Self> {
        let client = Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Answers stream for as long as they take.
            .timeout(None)
            .build()
            .context("starting the HTTP client")?;
        let mut settings = serde_json::Map::new();
        settings.insert("max_tokens".into(), args.max_tokens.into());
        settings.insert(
            "temperature".into(),
            args.sampling.sampler().temperature.into(),
        );
        settings.insert("top_p".into(), args.sampling.top_p.into());
        if let Some(seed) = args.sampling.seed {
            settings.insert("seed".into(), seed.into());
        }
        let mut remote = Remote {
            client,
            base: base_url(url),
            api_key: args.api_key.clone(),
            model: args.model.clone(),
            settings,
        };
        if remote.model.is_none() {
            remote.model = remote.first_model()?;
        }
        Ok(remote)
    }

    /// The model the requests name, for the banner.
    pub(super) fn name(&self) -> String {
        let model = self.model.as_deref().unwrap_or("the server's model");
        format!("{model} at {}", self.base)
    }

    fn first_model(&self) -> Result<Option<String>> {
        let url = format!("{}/v1/models", self.base);
        let response = self
            .authorized(self.client.get(&url))
            .send()
            .with_context(|| format!("cannot reach the server at {}", self.base))?;
        if !response.status().is_success() {
            return Ok(None);
        }
        let models: Value = response
            .text()
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null);
        Ok(models["data"][0]["id"].as_str().map(str::to_owned))
    }

    fn authorized(&self, request: RequestBuilder) -> RequestBuilder {
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    fn body(&self, conversation: &Conversation) -> Value {
        let mut messages: Vec<Message> = Vec::new();
        if let Some(system) = &conversation.system {
            messages.push(Message::new(Role::System, system.clone()));
        }
        messages.extend(conversation.messages.iter().cloned());
        let mut body = self.settings.clone();
        if let Some(model) = &self.model {
            body.insert("model".into(), model.clone().into());
        }
        let messages: Vec<serde_json::Value> = messages.iter().map(message_json).collect();
        body.insert("messages".into(), json!(messages));
        body.insert("stream".into(), true.into());
        Value::Object(body)
    }
}

impl Responder for Remote {
    fn answer<W: Write>(
        &mut self,
        conversation: &Conversation,
        out: &mut Printer<W>,
        interrupt: &Interrupt,
    ) -> Result<Answer> {
        let url = format!("{}/v1/chat/completions", self.base);
        let response = self
            .authorized(self.client.post(&url))
            .header(CONTENT_TYPE, "application/json")
            .body(self.body(conversation).to_string())
            .send()
            .with_context(|| format!("cannot reach the server at {}", self.base))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().unwrap_or_default();
            bail!("the server answered {status}: {}", error_message(&body));
        }
        let mut answer = Answer::default();
        for line in BufReader::new(response).lines() {
            // Breaking out drops the response, closing the connection: the server cancels.
            if interrupt.stopped() {
                break;
            }
            let line = line.context("reading the server's answer")?;
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(data)
                .with_context(|| format!("the server sent an event that is not JSON: {data}"))?;
            if chunk.get("error").is_some() {
                bail!("the server failed: {}", error_message(data));
            }
            show_delta(&chunk["choices"][0]["delta"], out, &mut answer)?;
        }
        Ok(answer)
    }
}

/// `url` without a trailing `/` or `/v1`, so that both `http://h:8080` and
/// `http://h:8080/v1/` name the same server.
fn base_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    url.strip_suffix("/v1").unwrap_or(url).to_owned()
}

/// The `error.message` of an OpenAI error body, else the body itself.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["error"].as_str())
            .or_else(|| v["message"].as_str())
    });
    match message {
        Some(m) => m.to_owned(),
        None if body.trim().is_empty() => "(no details)".to_owned(),
        None => body.trim().to_owned(),
    }
}

/// A message as OpenAI's chat takes it: with images, its content as text and `image_url`
/// parts (data URLs) in the order the message holds them.
fn message_json(message: &Message) -> serde_json::Value {
    use base64::Engine as _;
    let mut value = json!(message);
    if message.media.is_empty() {
        return value;
    }
    let mut parts = Vec::new();
    let mut media = message.media.iter();
    for (i, text) in message.content.split(wick::MEDIA_MARKER).enumerate() {
        if i > 0 {
            if let Some(image) = media.next() {
                let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
                parts.push(json!({"type": "image_url",
                                  "image_url": {"url": format!("data:image/png;base64,{data}")}}));
            }
        }
        if !text.is_empty() {
            parts.push(json!({"type": "text", "text": text}));
        }
    }
    value["content"] = json!(parts);
    value
}

/// Prints one `choices[0].delta`: reasoning, content, tool-call names and arguments.
fn show_delta<W: Write>(delta: &Value, out: &mut Printer<W>, answer: &mut Answer) -> Result<()> {
    let reasoning = delta["reasoning_content"]
        .as_str()
        .or_else(|| delta["reasoning"].as_str());
    if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
        out.reasoning(text)?;
    }
    if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
        out.content(text)?;
        answer.content.push_str(text);
    }
    for call in delta["tool_calls"].as_array().into_iter().flatten() {
        let function = &call["function"];
        if let Some(name) = function["name"].as_str() {
            out.tool_call_start(name)?;
        }
        if let Some(args) = function["arguments"].as_str().filter(|a| !a.is_empty()) {
            out.tool_call_args(args)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_url_drops_slashes_and_v1() {
        for url in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
        ] {
            assert_eq!(base_url(url), "http://127.0.0.1:8080", "{url}");
        }
    }

    #[test]
    fn error_messages_come_from_openai_bodies() {
        let body = r#"{"error":{"message":"invalid api key","type":"authentication_error"}}"#;
        assert_eq!(error_message(body), "invalid api key");
        assert_eq!(error_message(r#"{"error":"overloaded"}"#), "overloaded");
        assert_eq!(error_message("Bad Gateway\n"), "Bad Gateway");
        assert_eq!(error_message(""), "(no details)");
    }

    #[test]
    fn deltas_print_reasoning_content_and_tool_calls() {
        let mut out = Vec::new();
        let mut printer = Printer::new(&mut out, false);
        let mut answer = Answer::default();
        for delta in [
            json!({"role": "assistant", "content": ""}),
            json!({"reasoning_content": "Sum."}),
            json!({"content": "It is "}),
            json!({"content": "4."}),
            json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                   "function": {"name": "add", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":2}"}}]}),
        ] {
            show_delta(&delta, &mut printer, &mut answer).unwrap();
        }
        printer.finish().unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[reasoning] Sum.\nIt is 4.\ntool call add({\"a\":2})\n"
        );
        assert_eq!(answer.content, "It is 4.");
    }
}
