//! The conformance suite against the stub backend.

use wick_backend::{BackendConfig, StubBackend};

fn make() -> StubBackend {
    StubBackend::new(&BackendConfig::new("unused.gguf").with_n_ctx(512))
        .expect("the stub backend always initialises")
}

wick_backend::backend_conformance!(make);
