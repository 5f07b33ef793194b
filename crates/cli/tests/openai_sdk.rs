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

use std::ffi::OsStr;

use serve_util::{run_python_client, venv_python, Server};

fn openai_python() -> std::path::PathBuf {
    venv_python(
        "WICK_OPENAI_PYTHON",
        "venv-openai",
        "openai",
        "openai==3.54.0",
    )
}

#[test]
fn the_openai_python_package_works_against_wick_serve() {
    let python = openai_python();
    let server = Server::start(&["--output-format", "hermes", "--strict-model-names"]);
    let base = server.url("/v1");
    run_python_client(
        &python,
        "openai_client.py",
        &[OsStr::new(&base)],
        &[],
        "all openai client checks passed",
    );
}

#[test]
fn the_openai_python_packages_responses_api_works_against_wick_serve() {
    let python = openai_python();
    let server = Server::start(&["--output-format", "hermes"]);
    let base = server.url("/v1");
    run_python_client(
        &python,
        "openai_responses_client.py",
        &[OsStr::new(&base)],
        &[],
        "all openai responses client checks passed",
    );
}
