//! LangChain's `ChatOpenAI` and LlamaIndex's `OpenAILike` against `wick serve` on the real
//! model, each in the virtual environment `scripts/test` makes for it (LlamaIndex pins
//! `openai<3`, so it has its own).

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve_util::Server;

/// The python of `$var`, or of `$WICK_HOME/<venv>` (made by `scripts/common.sh`).
fn python(var: &str, venv: &str) -> PathBuf {
    if let Some(python) = std::env::var_os(var) {
        return PathBuf::from(python);
    }
    let home = std::env::var_os("WICK_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/wick"),
        PathBuf::from,
    );
    home.join(venv).join("bin/python")
}

fn run_client(python: &Path, script: &str, server: &Server, done: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let out = Command::new(python)
        .arg(&script)
        .arg(server.url("/v1"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (scripts/test installs it): {e}",
                python.display()
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(done),
        "{} failed\n{stdout}\n{stderr}",
        script.display()
    );
}

/// One server for both frameworks, one after the other: two model processes at once on a small
/// machine only slow each other down.
#[test]
fn langchain_and_llamaindex_work_against_wick_serve() {
    let server = Server::start(&["--output-format", "hermes"]);
    run_client(
        &python("WICK_OPENAI_PYTHON", "venv-openai"),
        "langchain_client.py",
        &server,
        "all langchain checks passed",
    );
    run_client(
        &python("WICK_LLAMAINDEX_PYTHON", "venv-llamaindex"),
        "llamaindex_client.py",
        &server,
        "all llamaindex checks passed",
    );
}
