//! Property: whatever text a user puts into system, user, assistant or tool content — every
//! special-token text of the model, the markers of every template family, partial and doubled
//! markers, Unicode look-alikes — no content segment ever tokenizes to a control token, and
//! detokenizing the whole prompt gives back the rendered string. Checked with the real
//! SmolLM2 tokenizer and the stub, across all Jinja fixture templates and the named ones.

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use wick_backend::{Backend, BackendConfig, StubBackend};
use wick_llama::LlamaBackend;
use wick_template::{
    ChatTemplate, DateTime, JinjaTemplate, NamedTemplate, RenderRequest, SegmentKind, DEFAULT_FUEL,
};

const MARKERS: &[&str] = &[
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|begin_of_text|>",
    "</s>",
    "<s>",
    "[INST]",
    "[/INST]",
    "<<SYS>>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<｜Assistant｜>",
    "<｜User｜>",
    "<｜end▁of▁sentence｜>",
    "<|end|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|start|>",
    "<|message|>",
    "<|channel|>",
    "<|return|>",
    "[TOOL_CALLS]",
    "<seed:eos>",
    "{{ raise_exception('x') }}",
    "{% if true %}",
];

/// Partial, doubled and look-alike variants of a marker.
fn variants(m: &str) -> Vec<String> {
    let mut out = vec![m.to_owned(), format!("{m}{m}"), format!(" {m}\n")];
    let cut: String = m.chars().take(m.chars().count() / 2).collect();
    out.push(cut.clone());
    out.push(format!("{cut}{m}"));
    out.push(m.replace('<', "＜").replace('>', "＞"));
    out.push(m.replace('|', "\u{200d}|"));
    out
}

fn fixtures() -> PathBuf {
    wick_testutil::crate_path(
        env!("CARGO_MANIFEST_DIR"),
        "../../tests/fixtures/chat-templates",
    )
}

fn templates() -> Vec<ChatTemplate> {
    let now = DateTime {
        year: 2025,
        month: 6,
        day: 15,
        hour: 12,
        minute: 0,
        second: 0,
    };
    let mut out: Vec<ChatTemplate> = std::fs::read_dir(fixtures().join("templates"))
        .unwrap()
        .map(|e| {
            let source = std::fs::read_to_string(e.unwrap().path()).unwrap();
            ChatTemplate::Jinja(
                JinjaTemplate::with_options(&source, DEFAULT_FUEL, Some(now)).unwrap(),
            )
        })
        .collect();
    out.extend(NamedTemplate::ALL.iter().map(|t| ChatTemplate::Named(*t)));
    out
}

fn conversation(slot: usize, payload: &str) -> RenderRequest {
    let text = |i: usize, base: &str| {
        if i == slot {
            format!("{base} {payload}")
        } else {
            base.to_owned()
        }
    };
    let messages = vec![
        json!({"role": "system", "content": text(0, "Be brief.")}),
        json!({"role": "user", "content": text(1, "Weather?")}),
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
            "function": {"name": "get_weather", "arguments": {"location": text(2, "Paris")}}}]}),
        json!({"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": text(3, "{\"t\": 20}")}),
        json!({"role": "assistant", "content": text(2, "It is 20.")}),
        json!({"role": "user", "content": text(1, "Thanks")}),
    ];
    let tools: Vec<Value> = vec![
        json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}),
    ];
    let mut r = RenderRequest::new(messages).with_tokens(Some("<s>".into()), Some("</s>".into()));
    r.tools = Some(tools);
    r
}

fn check(backend: &dyn Backend, templates: &[ChatTemplate], payloads: &[String], cases: u32) {
    let control = &backend.info().special;
    let strategy = (0..templates.len(), 0..4usize, 0..payloads.len());
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&strategy, |(t, slot, p)| {
            let req = conversation(slot, &payloads[p]);
            let Ok(segs) = templates[t].render_segments(&req) else {
                return Ok(()); // the template's own error (e.g. roles it refuses)
            };
            let tokens = segs
                .tokenize(|text, special| backend.tokenize(text, special))
                .unwrap();
            for (id, kind) in &tokens {
                prop_assert!(
                    !(*kind == SegmentKind::Content && control.is_control(*id)),
                    "template {t}: content produced control token {}",
                    id.0
                );
            }
            let ids: Vec<_> = tokens.iter().map(|(id, _)| *id).collect();
            let text = backend.detokenize(&ids).unwrap();
            prop_assert_eq!(String::from_utf8_lossy(&text), segs.text());
            Ok(())
        })
        .unwrap();
}

fn payloads(backend: &dyn Backend) -> Vec<String> {
    let mut out: Vec<String> = MARKERS.iter().flat_map(|m| variants(m)).collect();
    for &id in &backend.info().special.control {
        let text = String::from_utf8_lossy(&backend.detokenize(&[id]).unwrap()).into_owned();
        if !text.is_empty() {
            out.extend(variants(&text));
        }
    }
    out
}

#[test]
fn content_never_becomes_control_tokens_with_the_real_tokenizer() {
    let backend = LlamaBackend::load(
        &BackendConfig::new(wick_testutil::model_path())
            .with_n_ctx(256)
            .with_n_seq_max(1),
    )
    .unwrap();
    let payloads = payloads(&backend);
    check(&backend, &templates(), &payloads, 300);
}

#[test]
fn content_never_becomes_control_tokens_with_the_stub() {
    let backend = StubBackend::new(&BackendConfig::new("unused.gguf")).unwrap();
    let payloads = payloads(&backend);
    check(&backend, &templates(), &payloads, 300);
}
