//! `wick serve` driven by the official `ollama` Python package (`ollama_client.py`): `chat`
//! plain and streamed (streamed = whole for a greedy request), `generate` (templated, streamed,
//! raw), a tool call's shape (arguments as an object) and its round trip, `format="json"` and a
//! schema, `embed` and `embeddings`, `list`, `show`, `ps`, `pull` and `delete` through the
//! model store, and errors surfacing as `ollama.ResponseError` with their status (an unknown
//! model is a 404).
//!
//! The package lives in the same virtual environment as `openai` and `anthropic`
//! (`ensure_openai_venv` in `scripts/common.sh` installs them; its python is
//! `$WICK_OPENAI_PYTHON`). When it is missing this test installs it, and fails if it cannot.

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve_util::Server;

const OLLAMA_PACKAGE: &str = "ollama==0.6.3";

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
fn ollama_python() -> PathBuf {
    let python = std::env::var_os("WICK_OPENAI_PYTHON")
        .map_or_else(|| wick_home().join("venv-openai/bin/python"), PathBuf::from);
    if !has_ollama(&python) {
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
            .args(["-m", "pip", "install", "--quiet", OLLAMA_PACKAGE])
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "cannot pip install {OLLAMA_PACKAGE}"
        );
    }
    python
}

fn has_ollama(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import ollama"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_ollama_python_package_works_against_wick_serve() {
    let python = ollama_python();
    assert!(
        has_ollama(&python),
        "no ollama package in {}",
        python.display()
    );
    let server = Server::start(&["--output-format", "hermes"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ollama_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(&server.base)
        .arg(wick_testutil::model_path())
        .env_remove("OLLAMA_HOST")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ollama_client.py failed\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("all ollama client checks passed"),
        "{stdout}"
    );
}
