//! The backend conformance suite on a GPU build of llama.cpp, every layer offloaded:
//! `scripts/build-gpu vulkan` builds the feature, and `scripts/test` runs this file in that
//! build on lavapipe (Mesa's Vulkan on the CPU, `GGML_VK_VISIBLE_DEVICES=0`). In a CPU build
//! it holds no test.
#![cfg(any(feature = "vulkan", feature = "cuda"))]

use wick_backend::BackendConfig;
use wick_llama::LlamaBackend;

/// A backend on the verified test model, every layer on the GPU: 4 sequences of 512 tokens.
fn backend() -> LlamaBackend {
    let config = BackendConfig::new(wick_testutil::model_path())
        .with_n_ctx(512)
        .with_n_seq_max(4)
        .with_n_threads(Some(2))
        .with_n_gpu_layers(999);
    let backend = LlamaBackend::load(&config).expect("the test model loads on the GPU");
    let placement = &wick_backend::Backend::info(&backend).placement;
    assert!(
        placement.iter().all(|p| p.device != "CPU"),
        "every layer is offloaded: {placement:?}"
    );
    backend
}

wick_backend::backend_conformance!(backend);
