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

use std::ffi::OsStr;

use serve_util::{run_python_client, venv_python, Server};

#[test]
fn the_ollama_python_package_works_against_wick_serve() {
    let python = venv_python(
        "WICK_OPENAI_PYTHON",
        "venv-openai",
        "ollama",
        "ollama==0.6.3",
    );
    let server = Server::start(&["--output-format", "hermes", "--strict-model-names"]);
    let model = wick_testutil::model_path();
    run_python_client(
        &python,
        "ollama_client.py",
        &[OsStr::new(&server.base), model.as_os_str()],
        &["OLLAMA_HOST"],
        "all ollama client checks passed",
    );
}
