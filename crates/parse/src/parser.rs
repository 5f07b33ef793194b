//! The public push parser.

use std::sync::Arc;

use wick_types::FinishReason;

use crate::engine::Engine;
use crate::event::{EndedBy, Event};
use crate::ids::{random_seed, IdGen};
use crate::out::Out;
use crate::tools::ToolSchemas;
use crate::Format;

/// What a [`Parser`] needs to know about the request.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ParseOptions {
    /// The request's tools (for schema typing of untyped argument encodings).
    pub tools: ToolSchemas,
    /// The prompt ended inside a reasoning block (e.g. with `<think>\n`).
    pub thinking_forced_open: bool,
    /// Seed for generated call ids (tests); `None` seeds randomly.
    pub id_seed: Option<u64>,
    /// The output is constrained to one tool call (a forced `tool_choice`): text outside a
    /// committed call can only be the call's own syntax cut short, and never becomes content.
    pub forced_call: bool,
}

impl ParseOptions {
    /// Default options: no tools, not forced open, random ids.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the tools.
    #[must_use]
    pub fn tools(mut self, tools: ToolSchemas) -> Self {
        self.tools = tools;
        self
    }

    /// Sets whether the output starts inside reasoning.
    #[must_use]
    pub fn thinking_forced_open(mut self, forced: bool) -> Self {
        self.thinking_forced_open = forced;
        self
    }

    /// Sets whether the output is a forced tool call ([`ParseOptions::forced_call`]).
    #[must_use]
    pub fn forced_call(mut self, forced: bool) -> Self {
        self.forced_call = forced;
        self
    }

    /// Makes generated ids deterministic.
    #[must_use]
    pub fn id_seed(mut self, seed: u64) -> Self {
        self.id_seed = Some(seed);
        self
    }
}

/// An incremental parser for one model answer; see the crate docs.
#[derive(Debug)]
pub struct Parser {
    format: Format,
    engine: Engine,
    utf8: Vec<u8>,
    finished: bool,
    forced_call: bool,
}

impl Parser {
    /// A parser for `format`.
    pub fn new(format: Format, options: ParseOptions) -> Self {
        let syn = format.syntax();
        let ids = IdGen::new(syn.ids, options.id_seed.unwrap_or_else(random_seed));
        let engine = Engine::new(
            syn,
            Arc::new(options.tools),
            Out::new(ids),
            options.thinking_forced_open,
        );
        Parser {
            format,
            engine,
            utf8: Vec::new(),
            finished: false,
            forced_call: options.forced_call,
        }
    }

    /// The format this parser reads.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Feeds the next piece of output text; returns the events it settles.
    pub fn feed(&mut self, text: &str) -> Vec<Event> {
        if self.finished || text.is_empty() {
            return Vec::new();
        }
        self.engine.feed(text);
        self.settled()
    }

    /// The events settled so far; no content for a forced call.
    fn settled(&mut self) -> Vec<Event> {
        let mut events = std::mem::take(&mut self.engine.out.events);
        if self.forced_call {
            events.retain(|e| !matches!(e, Event::Content(_)));
        }
        events
    }

    /// Feeds raw bytes (token pieces may split UTF-8 characters): an incomplete trailing
    /// sequence is held until its remaining bytes arrive; invalid bytes become U+FFFD.
    pub fn feed_bytes(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.utf8.extend_from_slice(bytes);
        let mut text = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.utf8[start..]) {
                Ok(s) => {
                    text.push_str(s);
                    start = self.utf8.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    text.push_str(&String::from_utf8_lossy(&self.utf8[start..start + valid]));
                    let Some(n) = e.error_len() else {
                        start += valid;
                        break;
                    };
                    text.push('\u{FFFD}');
                    start += valid + n;
                }
            }
        }
        self.utf8.drain(..start);
        self.feed(&text)
    }

    /// Ends the output: resolves every hold, closes an open call, and ends with
    /// [`Event::End`]. Later calls return nothing.
    pub fn finish(&mut self, ended_by: EndedBy) -> Vec<Event> {
        if self.finished {
            return Vec::new();
        }
        if !self.utf8.is_empty() {
            let rest = String::from_utf8_lossy(&std::mem::take(&mut self.utf8)).into_owned();
            self.engine.feed(&rest);
        }
        self.finished = true;
        self.engine.finish();
        let mut events = self.settled();
        let finish_reason = match ended_by {
            EndedBy::Length => FinishReason::Length,
            EndedBy::Stop if self.engine.out.calls() > 0 => FinishReason::ToolCalls,
            EndedBy::Stop => FinishReason::Stop,
        };
        events.push(Event::End { finish_reason });
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParsedMessage;

    fn parse(format: Format, output: &str, forced: bool) -> ParsedMessage {
        parse_ended(format, output, forced, EndedBy::Length)
    }

    /// `output` fed one character at a time, and whole: both must agree.
    fn parse_ended(format: Format, output: &str, forced: bool, ended: EndedBy) -> ParsedMessage {
        let run = |pieces: Vec<String>| {
            let options = ParseOptions::new().id_seed(1).forced_call(forced);
            let mut parser = Parser::new(format, options);
            let mut message = ParsedMessage::default();
            for piece in pieces {
                message.extend(&parser.feed(&piece));
            }
            message.extend(&parser.finish(ended));
            message
        };
        let by_char = run(output.chars().map(String::from).collect());
        assert_eq!(by_char, run(vec![output.to_owned()]), "{output:?}");
        by_char
    }

    #[test]
    fn issue_15_a_generic_response_that_is_not_a_string_is_its_json_as_llama_cpp_dumps_it() {
        let cases = [
            (
                r#"{"response": {"b": 1, "a": [1, null]}}"#,
                "{\n  \"a\": [\n    1,\n    null\n  ],\n  \"b\": 1\n}",
            ),
            (r#"{"response": 42}"#, "42"),
            (r#"{"response": -1.5}"#, "-1.5"),
            (r#"{"response": true}"#, "true"),
            (r#"{"response": null}"#, "null"),
            (r#"{"response": []}"#, "[]"),
            (r#"{"response": "text"}"#, "text"),
        ];
        for (output, content) in cases {
            let m = parse_ended(Format::Generic, output, false, EndedBy::Stop);
            assert_eq!(m.content, content, "{output}");
            assert!(m.tool_calls.is_empty());
        }
        // Cut inside the value: closed at its last valid point.
        let m = parse_ended(
            Format::Generic,
            r#"{"response": [1, {"z": tr"#,
            false,
            EndedBy::Length,
        );
        assert_eq!(m.content, "[\n  1,\n  {}\n]");
    }

    #[test]
    fn issue_15_gpt_oss_output_that_begins_inside_the_header_the_prompt_opened() {
        let m = parse_ended(
            Format::GptOss,
            " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
            false,
            EndedBy::Stop,
        );
        assert_eq!(m.content, "");
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].name, "get_weather");
        assert_eq!(m.tool_calls[0].arguments, r#"{"city": "Paris"}"#);
        let m = parse_ended(
            Format::GptOss,
            "analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
            false,
            EndedBy::Stop,
        );
        assert_eq!(
            (m.reasoning_content.as_deref(), m.content.as_str()),
            (Some("Think."), "Hi!")
        );
        let m = parse_ended(Format::GptOss, "final<|message|>Hi!", false, EndedBy::Stop);
        assert_eq!(m.content, "Hi!");
        // Text that only starts like a header is content.
        for text in ["finally, a text", "Hi there", "to be or not", "fin"] {
            let m = parse_ended(Format::GptOss, text, false, EndedBy::Stop);
            assert_eq!(m.content, text);
        }
    }

    #[test]
    fn issue_15_a_forced_call_cut_anywhere_puts_none_of_its_syntax_in_content() {
        let calls = [
            (Format::Generic, r#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}"#),
            (Format::Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            (Format::MistralNemo, r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]"#),
        ];
        for (format, call) in calls {
            for cut in (0..=call.len()).filter(|&i| call.is_char_boundary(i)) {
                let forced = parse(format, &call[..cut], true);
                assert_eq!(forced.content, "", "{format:?} cut at {cut}");
                // Once the call commits, a forced parse reads what an unforced one reads.
                let free = parse(format, &call[..cut], false);
                if !free.tool_calls.is_empty() {
                    assert_eq!(
                        forced.tool_calls, free.tool_calls,
                        "{format:?} cut at {cut}"
                    );
                }
            }
        }
    }
}
