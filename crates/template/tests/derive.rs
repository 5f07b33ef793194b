//! Role templates derived from the fixture Jinja templates: exact on the probes, refused where
//! the analysis says no role template exists, and equal to the analysis' role templates.

mod common;

use serde_json::{Map, Value};
use wick_template::{DeriveOptions, RoleTemplate};

fn analysis() -> Value {
    let text = std::fs::read_to_string(common::fixtures().join("role-templates.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The extra template variables an entry's notes say it was analysed with.
fn extra_context(entry: &Value) -> Map<String, Value> {
    entry["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str()?.strip_prefix("analysed with extra_context "))
        .find_map(|json| serde_json::from_str::<Map<String, Value>>(json).ok())
        .unwrap_or_default()
}

fn derive(entry: &Value) -> Result<RoleTemplate, wick_template::DeriveError> {
    let name = entry["template"].as_str().unwrap();
    let t = common::template(name);
    let mut opts = DeriveOptions::with_tokens(
        entry["bos_token"].as_str().map(ToOwned::to_owned),
        entry["eos_token"].as_str().map(ToOwned::to_owned),
    );
    opts.extra_context = extra_context(entry);
    RoleTemplate::derive(&t, &opts)
}

/// The analysis' value of a role template field, as the derived template writes it.
fn derived_field(t: &RoleTemplate, field: &str) -> Value {
    let role_value = serde_json::to_value(t).unwrap();
    match field {
        // `None` means "as for any other assistant message".
        "final_assistant_prefix" => Value::from(
            t.final_assistant_prefix
                .clone()
                .or_else(|| t.prefix.get("assistant").cloned()),
        ),
        "final_assistant_suffix" => Value::from(
            t.final_assistant_suffix
                .clone()
                .or_else(|| t.suffix.get("assistant").cloned()),
        ),
        _ => role_value[field].clone(),
    }
}

#[test]
fn derived_role_templates_equal_the_analysis() {
    let mut checked = 0;
    for entry in analysis()["templates"].as_array().unwrap() {
        let name = entry["template"].as_str().unwrap();
        if entry["verdict"] == "not_expressible" {
            continue;
        }
        let t = derive(entry).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = entry["role_template"].as_object().unwrap();
        for (field, want) in expected {
            let got = derived_field(&t, field);
            match (field.as_str(), want) {
                ("prefix" | "suffix", Value::Object(roles)) => {
                    for (role, text) in roles {
                        let got = &got[role];
                        assert_eq!(got, text, "{name}: {field}.{role}");
                    }
                }
                _ => assert_eq!(&got, want, "{name}: {field}"),
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 41);
}

#[test]
fn templates_without_a_role_template_are_refused() {
    let analysis = analysis();
    let refused: Vec<&Value> = analysis["templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["verdict"] == "not_expressible")
        .collect();
    assert!(!refused.is_empty());
    for entry in refused {
        let name = entry["template"].as_str().unwrap();
        assert!(derive(entry).is_err(), "{name} must not derive");
    }
}

/// Conversations of the test's own (not the derivation's probes), with everyday contents.
fn conversations(with_system: bool) -> Vec<(Vec<Value>, bool)> {
    let say = |role: &str, content: &str| serde_json::json!({"role": role, "content": content});
    let mut turns = vec![
        say("user", "What is 2+2?"),
        say("assistant", "  It is 4.  "),
        say("user", "And\n  3+3?\n"),
        say("assistant", "Six.\n\nAnything else?"),
    ];
    if with_system {
        turns.insert(0, say("system", " Be terse.\nAlways. "));
    }
    let n = turns.len();
    vec![
        (turns[..n - 1].to_vec(), true),
        (turns.clone(), false),
        (turns[..n - 2].to_vec(), false),
    ]
}

#[test]
fn derived_role_templates_render_like_jinja() {
    for entry in analysis()["templates"].as_array().unwrap() {
        let name = entry["template"].as_str().unwrap();
        if entry["verdict"] == "not_expressible" {
            continue;
        }
        let role = derive(entry).unwrap();
        let jinja = common::template(name);
        let with_system = role.prefix.contains_key("system");
        for (messages, add_generation_prompt) in conversations(with_system) {
            let mut req = wick_template::RenderRequest::new(messages).with_tokens(
                entry["bos_token"].as_str().map(ToOwned::to_owned),
                entry["eos_token"].as_str().map(ToOwned::to_owned),
            );
            req.add_generation_prompt = add_generation_prompt;
            req.extra_context = extra_context(entry);
            if jinja.render(&req).is_err() {
                // Tool-use templates raise without tools: derived with an empty tool list.
                req.tools = Some(Vec::new());
            }
            let expected = jinja.render(&req).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(role.render(&req).unwrap().text(), expected, "{name}");
        }
    }
}
