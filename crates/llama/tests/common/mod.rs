//! The real test model, found and verified once per test binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use wick_backend::BackendConfig;
use wick_llama::LlamaBackend;

const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// `$WICK_TEST_MODEL`, else the default model under `$WICK_HOME` (or the user cache dir): the
/// file `scripts/fetch-model` puts there. Missing or corrupt is a failure, never a skip.
pub(crate) fn model_path() -> PathBuf {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let path = std::env::var_os("WICK_TEST_MODEL").map_or_else(
                || {
                    let home = std::env::var_os("WICK_HOME").map_or_else(
                        || {
                            let cache = std::env::var_os("XDG_CACHE_HOME").map_or_else(
                                || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"),
                                PathBuf::from,
                            );
                            cache.join("wick")
                        },
                        PathBuf::from,
                    );
                    home.join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
                },
                PathBuf::from,
            );
            let bytes = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "the test model {} is missing ({e}); run scripts/fetch-model \
                     (SmolLM2-135M-Instruct Q4_1, sha256 {MODEL_SHA256})",
                    path.display()
                )
            });
            let got = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>();
            assert_eq!(
                got,
                MODEL_SHA256,
                "the test model {} is corrupt: sha256 {got}, expected {MODEL_SHA256}; \
                 delete it and run scripts/fetch-model",
                path.display()
            );
            path
        })
        .clone()
}

/// A backend on the test model: 4 sequences of 512 tokens, 2 threads.
#[allow(dead_code)]
pub(crate) fn backend() -> LlamaBackend {
    let config = BackendConfig::new(model_path())
        .with_n_ctx(512)
        .with_n_seq_max(4)
        .with_n_threads(Some(2));
    LlamaBackend::load(&config).expect("the test model loads")
}
