//! `wick parse` through the real binary.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn wick_parse(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wick"))
        .arg("parse")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command may exit (bad arguments) before reading its input.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const HERMES: &str = "<think>\nWeather?\n</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zoë 👋\"}}\n</tool_call>";

#[test]
fn whole_parse_prints_one_message() {
    let v = json(&wick_parse(&["--format", "hermes"], HERMES.as_bytes()));
    assert_eq!(v["reasoning_content"].as_str().unwrap().trim(), "Weather?");
    assert_eq!(v["content"], "\n");
    assert_eq!(v["tool_calls"][0]["name"], "get_weather");
    assert_eq!(v["tool_calls"][0]["arguments"], r#"{"city": "Zoë 👋"}"#);
    assert!(v["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .starts_with("call_"));
    assert_eq!(v["finish_reason"], "tool_calls");
}

#[test]
fn chunked_parses_equal_the_whole_parse() {
    let strip_ids = |mut v: serde_json::Value| {
        v["tool_calls"][0]["id"] = serde_json::Value::Null;
        v
    };
    let whole = strip_ids(json(&wick_parse(
        &["--format", "hermes"],
        HERMES.as_bytes(),
    )));
    for args in [
        ["--chunk-size", "1"],
        ["--chunk-size", "3"],
        ["--chunk-seed", "7"],
    ] {
        let mut a = vec!["--format", "hermes"];
        a.extend(args);
        assert_eq!(
            strip_ids(json(&wick_parse(&a, HERMES.as_bytes()))),
            whole,
            "{args:?}"
        );
    }
}

#[test]
fn deltas_follow_the_openai_shape() {
    let out = wick_parse(
        &["--format", "hermes", "--deltas", "--chunk-size", "5"],
        HERMES.as_bytes(),
    );
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["delta"]["role"], "assistant");
    let first_call = lines
        .iter()
        .find(|l| l["delta"]["tool_calls"].is_array())
        .unwrap();
    let tc = &first_call["delta"]["tool_calls"][0];
    assert_eq!(tc["index"], 0);
    assert_eq!(tc["type"], "function");
    assert_eq!(tc["function"]["name"], "get_weather");
    assert_eq!(tc["function"]["arguments"], "");
    let args: String = lines
        .iter()
        .filter_map(|l| l["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, r#"{"city": "Zoë 👋"}"#);
    let names = lines
        .iter()
        .filter(|l| l["delta"]["tool_calls"][0]["function"]["name"].is_string())
        .count();
    assert_eq!(names, 1, "the name is sent once");
    let last = lines.last().unwrap();
    assert_eq!(last["finish_reason"], "tool_calls");
    assert_eq!(last["delta"], serde_json::json!({}));
}

#[test]
fn length_and_tools_and_forced_open() {
    let dir = std::env::temp_dir().join(format!("wick-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        r#"[{"type": "function", "function": {"name": "lookup", "parameters": {"properties": {"id": {"type": "string"}, "n": {"type": "integer"}}}}}]"#,
    )
    .unwrap();
    let out = wick_parse(
        &["--format", "qwen3_coder_xml", "--tools", tools.to_str().unwrap(), "--thinking-forced-open", "--ended-by", "length"],
        b"Plan.\n</think>\n<tool_call>\n<function=lookup>\n<parameter=id>\n5123\n</parameter>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>",
    );
    let v = json(&out);
    assert_eq!(v["reasoning_content"].as_str().unwrap().trim(), "Plan.");
    assert_eq!(v["tool_calls"][0]["arguments"], r#"{"id": "5123", "n": 2}"#);
    assert_eq!(v["finish_reason"], "length");
}

#[test]
fn unknown_format_lists_the_known_ones() {
    let out = wick_parse(&["--format", "nope"], b"hi");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown format `nope`"), "{err}");
    assert!(
        err.contains("hermes") && err.contains("qwen3_coder_xml"),
        "{err}"
    );
}

#[test]
fn list_formats_names_all_29() {
    let out = wick_parse(&["--list-formats"], b"");
    assert!(out.status.success());
    let names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(names.len(), 29);
    assert_eq!(names[0], "content_only");
    assert!(names.contains(&"gpt_oss".to_owned()));
}

#[test]
fn invalid_utf8_is_a_clear_error() {
    let out = wick_parse(&["--format", "hermes"], b"ok \xff bad");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid UTF-8 (at byte 3)"));
}
