//! Renders per second: a 20-turn conversation with tools through a real Jinja template (plain
//! and as segments), through a hand-written role template and through the role template derived
//! from the Jinja template; and the derivation itself.

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use wick_template::{DeriveOptions, JinjaTemplate, RenderRequest, RoleTemplate};

fn conversation() -> RenderRequest {
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    for i in 0..20 {
        messages.push(json!({"role": "user", "content": format!("Question {i}: what is the weather in city {i}?")}));
        messages.push(json!({"role": "assistant", "content": format!("Answer {i}: sunny, 20 degrees, light wind.")}));
    }
    messages.push(json!({"role": "user", "content": "Thanks!"}));
    let mut req = RenderRequest::new(messages);
    req.tools = Some(vec![
        json!({"type": "function", "function": {"name": "get_weather",
        "description": "Get the weather", "parameters": {"type": "object",
        "properties": {"location": {"type": "string"}}, "required": ["location"]}}}),
    ]);
    req
}

fn bench(c: &mut Criterion) {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
    )
    .expect("the Qwen2.5 fixture template");
    let jinja = JinjaTemplate::new(&source).unwrap();
    let mut role = RoleTemplate::default();
    for r in ["system", "user", "assistant"] {
        role.prefix.insert(r.into(), format!("<|im_start|>{r}\n"));
        role.suffix.insert(r.into(), "<|im_end|>\n".into());
    }
    role.generation_prompt = "<|im_start|>assistant\n".into();
    let req = conversation();
    c.bench_function("jinja render (20 turns, tools)", |b| {
        b.iter(|| jinja.render(&req).unwrap());
    });
    c.bench_function("jinja segments (20 turns, tools)", |b| {
        b.iter(|| jinja.render_segments(&req).unwrap());
    });
    c.bench_function("role template (20 turns)", |b| {
        b.iter(|| role.render(&req).unwrap());
    });
    let derived = RoleTemplate::derive(&jinja, &DeriveOptions::default()).unwrap();
    c.bench_function("derived role template (20 turns)", |b| {
        b.iter(|| derived.render(&req).unwrap());
    });
    c.bench_function("derive the role template", |b| {
        b.iter(|| RoleTemplate::derive(&jinja, &DeriveOptions::default()).unwrap());
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
