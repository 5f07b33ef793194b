//! The fuzz oracle shared by the parser targets: any input, fed whole and in chunks, must
//! parse without panicking, stream per S1–S5, give the same message both ways, and give
//! arguments that are JSON objects.

use wick_parse::{EndedBy, Event, Format, ParseOptions, ParsedMessage, Parser, ToolSchemas};

fn parse(format: Format, forced: bool, ended: EndedBy, text: &[u8], chunk: usize) -> (ParsedMessage, Vec<Event>) {
    let tools = ToolSchemas::from_openai(&serde_json::json!([
        {"type": "function", "function": {"name": "f", "parameters": {"properties": {
            "s": {"type": "string"}, "n": {"type": "integer"}, "u": {"type": ["string", "null"]}}}}}
    ]));
    let opts = ParseOptions::new().tools(tools).thinking_forced_open(forced).id_seed(3);
    let mut p = Parser::new(format, opts);
    let mut events = Vec::new();
    for c in text.chunks(chunk.max(1)) {
        events.extend(p.feed_bytes(c));
    }
    events.extend(p.finish(ended));
    let mut m = ParsedMessage::default();
    m.extend(&events);
    (m, events)
}

/// Runs one input against one of `formats` (picked by the first byte).
pub fn run(formats: &[Format], data: &[u8]) {
    let [sel, chunk, text @ ..] = data else { return };
    let format = formats[usize::from(*sel) % formats.len()];
    let forced = sel & 0x80 != 0;
    let ended = if sel & 0x40 != 0 { EndedBy::Length } else { EndedBy::Stop };
    let (whole, _) = parse(format, forced, ended, text, text.len());
    let (streamed, events) = parse(format, forced, ended, text, usize::from(*chunk % 17) + 1);
    assert_eq!(whole, streamed, "{format}: chunked parse differs");
    let mut next = 0;
    for e in &events {
        match e {
            Event::Content(s) | Event::Reasoning(s) => assert!(!s.is_empty()),
            Event::ToolCallStart { index, .. } => {
                assert_eq!(*index, next);
                next += 1;
            }
            Event::ToolCallArgs { index, text } => {
                assert_eq!(*index + 1, next);
                assert!(!text.is_empty());
            }
            _ => {}
        }
    }
    for call in &whole.tool_calls {
        let v: serde_json::Value = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|e| panic!("{format}: arguments {:?}: {e}", call.arguments));
        assert!(v.is_object(), "{format}: arguments not an object");
    }
}
