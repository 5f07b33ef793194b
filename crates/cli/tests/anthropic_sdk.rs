//! `wick serve` driven by the official `anthropic` Python package (`anthropic_client.py`):
//! plain and streamed messages (`messages.stream` and `get_final_message`), streamed = whole
//! for a greedy request, the raw event order, a forced tool call by name and its `tool_result`
//! round trip, `count_tokens`, the beta client's `?beta=true`, and errors surfacing as the
//! SDK's exception types (a wrong key, an image, an unknown model).
//!
//! The package lives in the same virtual environment as `openai` (`ensure_openai_venv` in
//! `scripts/common.sh` installs both; its python is `$WICK_OPENAI_PYTHON`). When it is missing
//! this test installs it, and fails if it cannot.

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve_util::Server;

const ANTHROPIC_PACKAGE: &str = "anthropic==2.10.0";

fn wick_home() -> PathBuf {
    std::env::var_os("WICK_HOME").map_or_else(
        || {
            let cache = std::env::var_os("XDG_CACHE_HOME").map_or_else(
                || PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache"),
                PathBuf::from,
            );
            cache.join("wick")
        },
        PathBuf::from,
    )
}

/// The venv's python, with the package installed when it is missing.
fn anthropic_python() -> PathBuf {
    let python = std::env::var_os("WICK_OPENAI_PYTHON")
        .map_or_else(|| wick_home().join("venv-openai/bin/python"), PathBuf::from);
    if !has_anthropic(&python) {
        if !python.exists() {
            let venv = python
                .parent()
                .and_then(Path::parent)
                .expect("the python is VENV/bin/python");
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(venv)
                .status();
            assert!(
                made.is_ok_and(|s| s.success()),
                "cannot create a venv at {}",
                venv.display()
            );
        }
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", ANTHROPIC_PACKAGE])
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "cannot pip install {ANTHROPIC_PACKAGE}"
        );
    }
    python
}

fn has_anthropic(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import anthropic"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_anthropic_python_package_works_against_wick_serve() {
    let python = anthropic_python();
    assert!(
        has_anthropic(&python),
        "no anthropic package in {}",
        python.display()
    );
    let key = "sdk-test-key";
    let server = Server::start(&[
        "--output-format",
        "hermes",
        "--api-key",
        key,
        "--strict-model-names",
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/anthropic_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(&server.base)
        .arg(key)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("ANTHROPIC_BASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "anthropic_client.py failed\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("all anthropic client checks passed"),
        "{stdout}"
    );
}
