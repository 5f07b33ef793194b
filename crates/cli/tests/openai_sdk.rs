//! `wick serve` driven by the official `openai` Python package (`openai_client.py`): chat,
//! streaming, tool calls accumulated by the SDK, `json_schema` output, logprobs, embeddings,
//! models, usage; and its Responses API (`openai_responses_client.py`): create, stream and
//! `get_final_response`, a forced function call and its round trip through
//! `previous_response_id`, `json_schema` output, retrieve/delete and a 404.
//!
//! The package lives in a virtual environment under the cache dir (`scripts/test` creates it,
//! `ensure_openai_venv` in `scripts/common.sh`; its python is `$WICK_OPENAI_PYTHON`). When it
//! is missing this test creates it, and fails if it cannot.

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serve_util::Server;

const OPENAI_PACKAGE: &str = "openai==3.54.0";

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

/// The venv's python, creating the venv when it is missing.
fn openai_python() -> PathBuf {
    if let Some(python) = std::env::var_os("WICK_OPENAI_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = wick_home().join("venv-openai");
    let python = venv.join("bin/python");
    if !has_openai(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "cannot create a venv at {}",
            venv.display()
        );
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", OPENAI_PACKAGE])
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "cannot pip install {OPENAI_PACKAGE}"
        );
    }
    python
}

fn has_openai(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_openai_python_package_works_against_wick_serve() {
    let python = openai_python();
    assert!(
        has_openai(&python),
        "no openai package in {}",
        python.display()
    );
    let server = Server::start(&["--output-format", "hermes", "--strict-model-names"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(server.url("/v1"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai_client.py failed\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("all openai client checks passed"),
        "{stdout}"
    );
}

#[test]
fn the_openai_python_packages_responses_api_works_against_wick_serve() {
    let python = openai_python();
    let server = Server::start(&["--output-format", "hermes"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_responses_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(server.url("/v1"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai_responses_client.py failed\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("all openai responses client checks passed"),
        "{stdout}"
    );
}
