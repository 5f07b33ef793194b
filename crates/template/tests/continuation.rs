//! `continue_final_message`: over every fixture template and case whose conversation ends with
//! a message that has text, the continued prompt is the whole conversation's prompt cut right
//! after that text, its segments keep their kinds, and it never opens a new turn.

mod common;

use serde_json::{json, Value};
use wick_template::{ChatTemplate, NamedTemplate, RenderRequest, SegmentKind, TemplateError};

/// The last message's text when it is a plain string with something besides space.
fn last_text(request: &RenderRequest) -> Option<String> {
    let last = request.messages.last()?;
    let text = last["content"].as_str()?;
    (!text.trim().is_empty()).then(|| text.to_owned())
}

#[test]
fn a_continued_prompt_is_the_closed_prompt_cut_after_the_last_text() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in common::cases() {
        let name = case["template"].as_str().unwrap().to_owned();
        let id = case["case"].as_str().unwrap().to_owned();
        let mut request = common::request(&case);
        let Some(text) = last_text(&request) else {
            continue;
        };
        let template = ChatTemplate::Jinja(common::template(&name));
        request.add_generation_prompt = false;
        let Ok(closed) = template.render_segments(&request) else {
            continue;
        };
        request.continue_final_message = true;
        let open = match template.render_segments(&request) {
            Ok(open) => open,
            // A template that hides the last message's text cannot be continued: said so.
            Err(TemplateError::Request { reason }) => {
                assert!(
                    reason.contains("cannot be continued"),
                    "{name}/{id}: {reason}"
                );
                continue;
            }
            Err(e) => panic!("{name}/{id}: {e}"),
        };
        let (open_text, closed_text) = (open.text(), closed.text());
        if !closed_text.starts_with(&open_text) || !open_text.trim_end().ends_with(text.trim()) {
            failures.push(format!("{name}/{id}: {open_text:?}"));
            continue;
        }
        // Cutting keeps each byte's kind: the open prompt's segments are the closed prompt's,
        // the last one possibly shortened.
        let (o, c) = (open.as_slice(), closed.as_slice());
        for (i, s) in o.iter().enumerate() {
            assert_eq!(s.kind, c[i].kind, "{name}/{id}: segment {i}");
            assert!(c[i].text.starts_with(&s.text), "{name}/{id}: segment {i}");
        }
        assert_eq!(template.render(&request).unwrap(), open_text, "{name}/{id}");
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 10, "only {checked} cases end with text");
}

#[test]
fn trailing_space_the_template_trims_is_not_kept_and_content_stays_content() {
    let template = ChatTemplate::Jinja(
        wick_template::JinjaTemplate::new(
            "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}<|end|>{% endfor %}\
             {% if add_generation_prompt %}<|assistant|>{% endif %}",
        )
        .unwrap(),
    );
    let mut request = RenderRequest::new(vec![
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": "The <|end|> "}),
    ]);
    request.add_generation_prompt = false;
    request.continue_final_message = true;
    let open = template.render_segments(&request).unwrap();
    assert_eq!(open.text(), "<|user|>Hi<|end|><|assistant|>The <|end|>");
    let last = open.as_slice().last().unwrap();
    assert_eq!(last.kind, SegmentKind::Content);
    assert_eq!(last.text, "The <|end|>");
}

#[test]
fn continuing_works_on_named_templates_and_is_refused_where_it_cannot() {
    let chatml = ChatTemplate::Named(NamedTemplate::Chatml);
    let mut request = RenderRequest::new(vec![
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": "Hello"}),
    ]);
    request.add_generation_prompt = false;
    request.continue_final_message = true;
    assert_eq!(
        chatml.render(&request).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello"
    );
    // Nothing to continue: the assistant's turn opens as usual.
    request.messages[1] = json!({"role": "assistant", "content": ""});
    let fresh = chatml.render(&request).unwrap();
    assert!(fresh.ends_with("<|im_start|>assistant\n"), "{fresh:?}");
    // Both flags, or no message at all: a request error.
    request.add_generation_prompt = true;
    assert!(matches!(
        chatml.render(&request),
        Err(TemplateError::Request { .. })
    ));
    let empty = RenderRequest {
        continue_final_message: true,
        add_generation_prompt: false,
        ..RenderRequest::default()
    };
    assert!(matches!(
        chatml.render(&empty),
        Err(TemplateError::Request { .. })
    ));
    // The last text part of a message with parts is what is continued.
    let parts: Value = json!({"role": "assistant", "content": [
        {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]});
    let template = ChatTemplate::Jinja(
        wick_template::JinjaTemplate::new(
            "{% for m in messages %}[{% for p in m.content %}{{ p.text }};{% endfor %}]{% endfor %}",
        )
        .unwrap(),
    );
    let request = RenderRequest {
        messages: vec![parts],
        continue_final_message: true,
        add_generation_prompt: false,
        ..RenderRequest::default()
    };
    assert_eq!(template.render(&request).unwrap(), "[one;two");
}
