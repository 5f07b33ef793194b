//! Speculative decoding through `wick serve` on the real model (issue 17): prompt lookup (the
//! default) and a draft model (`--model-draft`) give the answers plain decoding gives, and a
//! draft model of another vocabulary is refused by name.

mod serve_util;

use std::process::Command;

use serde_json::{json, Value};
use serve_util::{client, metric, post_json, Server};

const PROMPTS: [&str; 3] = [
    "Repeat this list exactly: apples, pears, plums, cherries, apples, pears, plums.",
    "Tell me about the sea.",
    "Write a haiku about autumn.",
];

fn answer(server: &Server, prompt: &str) -> String {
    let body = json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 48,
        "temperature": 0,
    });
    let (status, answer) = post_json(server, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{answer}");
    answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Every prompt alone, then all at once.
fn answers(server: &Server) -> Vec<String> {
    let mut out: Vec<String> = PROMPTS.iter().map(|p| answer(server, p)).collect();
    let together: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = PROMPTS
            .iter()
            .map(|p| scope.spawn(move || answer(server, p)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    out.extend(together);
    out
}

fn drafts(server: &Server) -> (u64, u64) {
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    (
        metric(&text, "wick_spec_drafted_tokens_total"),
        metric(&text, "wick_spec_accepted_tokens_total"),
    )
}

#[test]
fn prompt_lookup_and_a_draft_model_answer_as_plain_decoding_does() {
    let model = wick_testutil::model_path();
    let plain = answers(&Server::start(&["--spec", "off", "--parallel", "3"]));
    assert_eq!(plain[..3], plain[3..], "alone and together agree");

    let lookup = Server::start(&["--parallel", "3"]);
    assert_eq!(answers(&lookup), plain, "prompt lookup (the default)");
    assert!(
        drafts(&lookup).0 > 0,
        "the repeated list gives lookup drafts"
    );

    // The model as its own draft: with batch-invariant kernels its greedy tokens are the
    // model's, so every draft token is accepted.
    let model = model.to_str().unwrap();
    let draft = Server::start(&["--model-draft", model, "--parallel", "3"]);
    assert_eq!(answers(&draft), plain, "draft model");
    let (drafted, accepted) = drafts(&draft);
    assert!(drafted > 0);
    assert_eq!(
        accepted, drafted,
        "the same model drafts its own greedy tokens"
    );
    let models: Value = client()
        .get(draft.url("/v1/models"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        models["data"].as_array().unwrap().len(),
        1,
        "the draft is not served"
    );
}

fn serve_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["serve", "--port", "0", "-m"])
        .arg(wick_testutil::model_path())
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_draft_model_of_another_vocabulary_or_a_draft_without_one_is_refused() {
    // The test model with one token's text changed (same length, so the file stays valid).
    let bytes = std::fs::read(wick_testutil::model_path()).unwrap();
    let needle = [&5u64.to_le_bytes()[..], b"hello"].concat();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the vocabulary holds \"hello\"");
    let mut other = bytes;
    other[at + 8..at + 13].copy_from_slice(b"hellp");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other-vocab.gguf");
    std::fs::write(&path, other).unwrap();

    let stderr = serve_fails(&["--model-draft", path.to_str().unwrap()]);
    assert!(
        stderr.contains("model_draft")
            && stderr.contains("\"hello\"")
            && stderr.contains("\"hellp\""),
        "{stderr}"
    );
    let stderr = serve_fails(&["--spec", "draft"]);
    assert!(stderr.contains("--model-draft"), "{stderr}");
    let stderr = serve_fails(&["--spec", "ngram", "--model-draft", path.to_str().unwrap()]);
    assert!(stderr.contains("--spec draft"), "{stderr}");
}
