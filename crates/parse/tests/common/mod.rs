//! The corpus harness shared by the fixture and property tests: loading cases, parsing them
//! under a chunking, comparing with `expected` (README C1–C4) and checking S1–S5.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

use serde_json::Value;
use wick_parse::{EndedBy, Event, Format, ParseOptions, ParsedMessage, Parser, ToolSchemas};

/// The tool-call corpus directory, inside the repository.
pub fn corpus_dir() -> PathBuf {
    wick_testutil::crate_path(
        env!("CARGO_MANIFEST_DIR"),
        "../../tests/fixtures/tool-calls",
    )
}

/// One corpus case.
#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub format: Format,
    pub forced_open: bool,
    pub ended_by: EndedBy,
    pub tools: ToolSchemas,
    pub output: String,
    pub expected: Value,
}

pub fn load_cases() -> Vec<Case> {
    let path = corpus_dir().join("cases.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let filter = std::env::var("CASE").ok();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("case JSON");
            Case {
                id: v["id"].as_str().expect("id").to_owned(),
                format: v["format"]
                    .as_str()
                    .expect("format")
                    .parse()
                    .expect("known format"),
                forced_open: v["thinking_forced_open"].as_bool().unwrap_or(false),
                ended_by: v["ended_by"]
                    .as_str()
                    .unwrap_or("stop")
                    .parse()
                    .expect("ended_by"),
                tools: ToolSchemas::from_openai(&v["tools"]),
                output: v["output"].as_str().expect("output").to_owned(),
                expected: v["expected"].clone(),
            }
        })
        .filter(|c| filter.as_ref().is_none_or(|f| c.id.starts_with(f.as_str())))
        .collect()
}

fn options(case: &Case) -> ParseOptions {
    ParseOptions::new()
        .tools(case.tools.clone())
        .thinking_forced_open(case.forced_open)
        .id_seed(42)
}

/// Parses the case fed at the given byte cut points (through `feed_bytes`).
pub fn parse_bytes(case: &Case, cuts: &[usize]) -> (ParsedMessage, Vec<Event>) {
    let mut p = Parser::new(case.format, options(case));
    let bytes = case.output.as_bytes();
    let mut events = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let c = c.clamp(last, bytes.len());
        events.extend(p.feed_bytes(&bytes[last..c]));
        last = c;
    }
    events.extend(p.finish(case.ended_by));
    let mut m = ParsedMessage::default();
    m.extend(&events);
    (m, events)
}

/// Parses the case fed in `&str` pieces split at the given char boundaries.
pub fn parse_chars(case: &Case, cuts: &[usize]) -> (ParsedMessage, Vec<Event>) {
    let mut p = Parser::new(case.format, options(case));
    let s = case.output.as_str();
    let mut events = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&s.len())) {
        events.extend(p.feed(&s[last..c]));
        last = c;
    }
    events.extend(p.finish(case.ended_by));
    let mut m = ParsedMessage::default();
    m.extend(&events);
    (m, events)
}

pub fn whole(case: &Case) -> (ParsedMessage, Vec<Event>) {
    parse_chars(case, &[])
}

/// Compares a parse with the case's `expected` (C1–C4); returns the differences.
pub fn compare(case: &Case, m: &ParsedMessage) -> Vec<String> {
    let mut errs = Vec::new();
    let e = &case.expected;
    let want_content = e["content"].as_str().unwrap_or("").trim();
    if m.content.trim() != want_content {
        errs.push(format!(
            "content: got {:?}, want {:?}",
            m.content.trim(),
            want_content
        ));
    }
    let want_reasoning = e["reasoning_content"]
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let got_reasoning = m
        .reasoning_content
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if got_reasoning != want_reasoning {
        errs.push(format!(
            "reasoning: got {got_reasoning:?}, want {want_reasoning:?}"
        ));
    }
    let want_calls = e["tool_calls"].as_array().cloned().unwrap_or_default();
    if want_calls.len() != m.tool_calls.len() {
        errs.push(format!(
            "tool_calls: got {} ({:?}), want {}",
            m.tool_calls.len(),
            m.tool_calls,
            want_calls.len()
        ));
    }
    let mut ids = std::collections::HashSet::new();
    for (got, want) in m.tool_calls.iter().zip(&want_calls) {
        if got.name != want["name"].as_str().unwrap_or("") {
            errs.push(format!("name: got {:?}, want {}", got.name, want["name"]));
        }
        match serde_json::from_str::<Value>(&got.arguments) {
            Ok(v) if json_eq(&v, &want["arguments"]) => {}
            Ok(v) => errs.push(format!("arguments: got {v}, want {}", want["arguments"])),
            Err(err) => errs.push(format!("arguments not JSON ({err}): {:?}", got.arguments)),
        }
        match want.get("id").and_then(Value::as_str) {
            Some(id) if got.id != id => errs.push(format!("id: got {:?}, want {id:?}", got.id)),
            _ => {}
        }
        if got.id.is_empty() || !ids.insert(got.id.clone()) {
            errs.push(format!("id empty or repeated: {:?}", got.id));
        }
    }
    let want_finish = e["finish_reason"].as_str().unwrap_or("");
    let got_finish = m.finish_reason.map(|f| {
        serde_json::to_value(f)
            .expect("serialize")
            .as_str()
            .unwrap_or("")
            .to_owned()
    });
    if got_finish.as_deref() != Some(want_finish) {
        errs.push(format!(
            "finish_reason: got {got_finish:?}, want {want_finish:?}"
        ));
    }
    errs
}

/// JSON equality with numbers by numeric value.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Checks the stream rules S1–S5 on an event list.
pub fn check_stream(events: &[Event]) -> Vec<String> {
    let mut errs = Vec::new();
    let mut next_index = 0;
    let mut current: Option<usize> = None;
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Content(s) | Event::Reasoning(s) if s.is_empty() => {
                errs.push(format!("empty text event at {i}"));
            }
            Event::ToolCallStart { index, id, name } => {
                if *index != next_index {
                    errs.push(format!("call index {index}, expected {next_index}"));
                }
                if id.is_empty() || name.is_empty() {
                    errs.push(format!("call {index} with empty id or name"));
                }
                current = Some(*index);
                next_index += 1;
            }
            Event::ToolCallArgs { index, text } if Some(*index) != current || text.is_empty() => {
                errs.push(format!(
                    "bad args event {index} {text:?} (current {current:?})"
                ));
            }
            Event::End { .. } if i + 1 != events.len() => errs.push("End not last".into()),
            _ => {}
        }
    }
    if !matches!(events.last(), Some(Event::End { .. })) {
        errs.push("no End event".into());
    }
    errs
}

/// A small deterministic generator of cut points.
pub fn random_cuts(len: usize, seed: u64) -> Vec<usize> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut cuts = Vec::new();
    let mut pos = 0;
    while pos < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        pos += 1 + usize::try_from(state % 8).unwrap_or(0);
        if pos < len {
            cuts.push(pos);
        }
    }
    cuts
}
