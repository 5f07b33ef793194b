//! Fixture access shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;
use wick_template::{DateTime, JinjaTemplate, RenderRequest, DEFAULT_FUEL};

/// `tests/fixtures/chat-templates`, inside the repository.
pub(crate) fn fixtures() -> PathBuf {
    wick_testutil::crate_path(
        env!("CARGO_MANIFEST_DIR"),
        "../../tests/fixtures/chat-templates",
    )
}

/// The instant the fixtures were rendered at.
pub(crate) const FIXTURE_TIME: DateTime = DateTime {
    year: 2025,
    month: 6,
    day: 15,
    hour: 12,
    minute: 0,
    second: 0,
};

pub(crate) fn template_source(name: &str) -> String {
    std::fs::read_to_string(fixtures().join("templates").join(format!("{name}.jinja")))
        .unwrap_or_else(|e| panic!("template {name}: {e}"))
}

pub(crate) fn template(name: &str) -> JinjaTemplate {
    JinjaTemplate::with_options(&template_source(name), DEFAULT_FUEL, Some(FIXTURE_TIME))
        .unwrap_or_else(|e| panic!("template {name}: {e}"))
}

pub(crate) fn all_template_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("templates"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".jinja").map(ToOwned::to_owned)
        })
        .collect();
    names.sort();
    names
}

pub(crate) fn cases() -> Vec<Value> {
    std::fs::read_to_string(fixtures().join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The request of a fixture case.
pub(crate) fn request(case: &Value) -> RenderRequest {
    serde_json::from_value(case.clone()).unwrap()
}
