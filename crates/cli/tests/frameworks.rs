//! LangChain's `ChatOpenAI` and LlamaIndex's `OpenAILike` against `wick serve` on the real
//! model, each in the virtual environment `scripts/test` makes for it (LlamaIndex pins
//! `openai<3`, so it has its own).

mod serve_util;

use std::ffi::OsStr;

use serve_util::{run_python_client, venv_python, Server};

/// One server for both frameworks, one after the other: two model processes at once on a small
/// machine only slow each other down.
#[test]
fn langchain_and_llamaindex_work_against_wick_serve() {
    let server = Server::start(&["--output-format", "hermes"]);
    let base = server.url("/v1");
    let langchain = venv_python(
        "WICK_OPENAI_PYTHON",
        "venv-openai",
        "langchain_openai",
        "langchain-openai==1.7.4",
    );
    run_python_client(
        &langchain,
        "langchain_client.py",
        &[OsStr::new(&base)],
        &[],
        "all langchain checks passed",
    );
    let llamaindex = venv_python(
        "WICK_LLAMAINDEX_PYTHON",
        "venv-llamaindex",
        "llama_index.llms.openai_like",
        "llama-index-llms-openai-like==0.8.1",
    );
    run_python_client(
        &llamaindex,
        "llamaindex_client.py",
        &[OsStr::new(&base)],
        &[],
        "all llamaindex checks passed",
    );
}
