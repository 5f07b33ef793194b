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

use std::ffi::OsStr;

use serve_util::{run_python_client, venv_python, Server};

#[test]
fn the_anthropic_python_package_works_against_wick_serve() {
    let python = venv_python(
        "WICK_OPENAI_PYTHON",
        "venv-openai",
        "anthropic",
        "anthropic==2.10.0",
    );
    let key = "sdk-test-key";
    let server = Server::start(&[
        "--output-format",
        "hermes",
        "--api-key",
        key,
        "--strict-model-names",
    ]);
    run_python_client(
        &python,
        "anthropic_client.py",
        &[OsStr::new(&server.base), OsStr::new(key)],
        &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
        ],
        "all anthropic client checks passed",
    );
}
