//! Every case of `shared/chat-templates/cases.jsonl` renders byte for byte as transformers
//! renders it, or fails where transformers fails (with the raised message where the template
//! raised).

mod common;

use std::collections::HashMap;

use wick_template::TemplateError;

#[test]
fn every_fixture_case_renders_like_transformers() {
    let cases = common::cases();
    assert!(cases.len() > 600, "only {} cases", cases.len());
    let mut templates = HashMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["template"].as_str().unwrap();
        let id = case["case"].as_str().unwrap();
        let t = templates
            .entry(name.to_owned())
            .or_insert_with(|| common::template(name));
        let got = t.render(&common::request(case));
        match (case.get("expected").and_then(|e| e.as_str()), got) {
            (Some(expected), Ok(got)) if got == expected => {}
            (Some(expected), Ok(got)) => failures.push(format!(
                "{name}/{id}: differs at byte {}\n  expected: {:?}\n  got:      {:?}",
                first_difference(expected, &got),
                excerpt(expected, first_difference(expected, &got)),
                excerpt(&got, first_difference(expected, &got)),
            )),
            (Some(_), Err(e)) => failures.push(format!("{name}/{id}: unexpected error {e}")),
            (None, Ok(_)) => failures.push(format!(
                "{name}/{id}: rendered, expected error {}",
                case["expected_error"]
            )),
            (None, Err(e)) => {
                if case["error_kind"] == "raise_exception" {
                    let want = case["expected_error"].as_str().unwrap();
                    let ok = matches!(&e, TemplateError::Raised { message } if message.contains(want.trim_end_matches("...")));
                    if !ok {
                        failures.push(format!("{name}/{id}: raised {e:?}, expected {want:?}"));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn first_difference(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

fn excerpt(s: &str, at: usize) -> String {
    let mut from = at.saturating_sub(40);
    while !s.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (at + 60).min(s.len());
    while !s.is_char_boundary(to) {
        to -= 1;
    }
    s[from..to].to_owned()
}

#[test]
fn all_sixty_templates_render_the_tool_less_conversations() {
    let cases = common::cases();
    let mut conversations: Vec<&serde_json::Value> = Vec::new();
    for case in &cases {
        let fresh = !conversations.iter().any(|c| c["case"] == case["case"]);
        if case["tools"].is_null() && fresh {
            conversations.push(case);
        }
    }
    assert!(conversations.len() >= 10);
    let names = common::all_template_names();
    assert_eq!(names.len(), 60);
    let mut rendered = 0;
    for name in &names {
        let t = common::template(name);
        for conv in &conversations {
            let mut req = common::request(conv);
            // Tokens as most templates expect them; undefined ones stay undefined elsewhere.
            req.bos_token = Some("<s>".into());
            req.eos_token = Some("</s>".into());
            if let Ok(prompt) = t.render(&req) {
                let segs = t.render_segments(&req).unwrap();
                assert_eq!(segs.text(), prompt, "{name}/{}", conv["case"]);
                rendered += 1;
            }
        }
    }
    assert!(rendered > 500, "only {rendered} renderings succeeded");
}

/// jinja2's `Markup` arithmetic (issue 15): `"…"|safe + text` escapes `text`, as transformers
/// renders it; the cases were rendered by jinja2 with transformers' environment.
#[test]
fn issue_15_safe_plus_text_escapes_the_text_like_jinja2() {
    let cases: Vec<serde_json::Value> =
        std::fs::read_to_string(common::fixtures().join("markup.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    assert!(cases.len() >= 3);
    for case in &cases {
        let t = common::template(case["template"].as_str().unwrap());
        let got = t.render(&common::request(case)).expect("renders");
        assert_eq!(got, case["expected"].as_str().unwrap(), "{}", case["case"]);
    }
    assert!(cases
        .iter()
        .any(|c| c["expected"].as_str().unwrap().contains("&#34;")));
}
