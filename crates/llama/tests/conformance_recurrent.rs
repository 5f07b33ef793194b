//! The backend conformance suite against llama.cpp and models with a recurrent state: the
//! test model as LFM2 (short convolutions beside attention: a hybrid) and as Mamba (selective
//! state spaces only). Every operation keeps its contract there too: cutting a sequence back,
//! copying a prefix, verifying drafts, logits.

use wick_backend::BackendConfig;
use wick_llama::LlamaBackend;

/// A backend on `name` in `$WICK_HOME/test-models`, made once from the test model by `make`,
/// as `common::backend` loads the test model: 4 sequences of 512 tokens, 2 threads.
fn recurrent_backend(name: &str, make: impl FnOnce(&[u8]) -> Vec<u8>) -> LlamaBackend {
    let model = wick_testutil::made_once(&wick_testutil::model_path(), name, make);
    let config = BackendConfig::new(model)
        .with_n_ctx(512)
        .with_n_seq_max(4)
        .with_n_threads(Some(2));
    let backend = LlamaBackend::load(&config).expect("the test model loads");
    assert!(
        wick_backend::Backend::info(&backend).recurrent,
        "{name} keeps a recurrent state"
    );
    backend
}

/// The test model as LFM2 ([`wick_testutil::lfm2_model`]).
fn lfm2() -> LlamaBackend {
    recurrent_backend("SmolLM2-135M-Instruct.Q4_1.lfm2.gguf", |dense| {
        wick_testutil::lfm2_model(dense, 47)
    })
}

/// The test model as a 6-layer Mamba ([`wick_testutil::mamba_model`]).
fn mamba() -> LlamaBackend {
    recurrent_backend("SmolLM2-135M-Instruct.Q4_1.mamba6.gguf", |dense| {
        wick_testutil::mamba_model(dense, 6, 53)
    })
}

mod hybrid {
    wick_backend::backend_conformance!(super::lfm2);
}

mod state_space {
    wick_backend::backend_conformance!(super::mamba);
}
