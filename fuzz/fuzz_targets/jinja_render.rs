//! Arbitrary chat templates, compiled and rendered under a small fuel budget: a clear error
//! or a prompt, never a panic, a hang or unbounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use wick_template::{DateTime, JinjaTemplate, RenderRequest};

fuzz_target!(|source: &str| {
    let Ok(template) = JinjaTemplate::with_options(source, 20_000, Some(DateTime::from_unix(1_700_000_000)))
    else {
        return;
    };
    let mut request = RenderRequest::new(vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Hi <|im_start|> {{ x }}"}),
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}),
        json!({"role": "tool", "content": "42"}),
    ]);
    request.tools = Some(vec![json!({"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}})]);
    request.add_generation_prompt = true;
    let _ = template.render(&request);
});
