//! A backend on the real test model.

use wick_backend::BackendConfig;
use wick_llama::LlamaBackend;

/// A backend on the verified test model: 4 sequences of 512 tokens, 2 threads.
pub(crate) fn backend() -> LlamaBackend {
    let config = BackendConfig::new(wick_testutil::model_path())
        .with_n_ctx(512)
        .with_n_seq_max(4)
        .with_n_threads(Some(2));
    LlamaBackend::load(&config).expect("the test model loads")
}
