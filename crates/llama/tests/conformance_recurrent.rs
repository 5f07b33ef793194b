//! The backend conformance suite against llama.cpp and a hybrid model with a recurrent state
//! (the test model as LFM2: short convolutions beside attention). Every operation keeps its
//! contract there too: cutting a sequence back, copying a prefix, verifying drafts, logits.

use wick_backend::BackendConfig;
use wick_llama::LlamaBackend;

/// A backend on the test model rewritten as an LFM2 model ([`wick_testutil::lfm2_model`]),
/// as `common::backend` loads the test model: 4 sequences of 512 tokens, 2 threads.
fn recurrent_backend() -> LlamaBackend {
    let model = wick_testutil::made_once(
        &wick_testutil::model_path(),
        "SmolLM2-135M-Instruct.Q4_1.lfm2.gguf",
        |dense| wick_testutil::lfm2_model(dense, 47),
    );
    let config = BackendConfig::new(model)
        .with_n_ctx(512)
        .with_n_seq_max(4)
        .with_n_threads(Some(2));
    let backend = LlamaBackend::load(&config).expect("the LFM2-style test model loads");
    assert!(
        wick_backend::Backend::info(&backend).recurrent,
        "LFM2's short convolutions keep a recurrent state"
    );
    backend
}

wick_backend::backend_conformance!(recurrent_backend);
