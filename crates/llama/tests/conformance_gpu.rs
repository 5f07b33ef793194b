//! The backend conformance suite on a GPU build of llama.cpp, with every layer offloaded and
//! with half: `scripts/build-gpu vulkan` builds the feature, and `scripts/test` runs this file
//! in that build on lavapipe (Mesa's Vulkan on the CPU, `GGML_VK_VISIBLE_DEVICES=0`);
//! `scripts/gpu-check` runs it with CUDA on a GPU. In a CPU build it holds no test.
#![cfg(any(feature = "vulkan", feature = "cuda"))]

use wick_backend::BackendConfig;
use wick_llama::LlamaBackend;

/// A backend on the verified test model with `layers` offloaded: 4 sequences of 512 tokens.
fn backend(layers: u32) -> LlamaBackend {
    let config = BackendConfig::new(wick_testutil::model_path())
        .with_n_ctx(512)
        .with_n_seq_max(4)
        .with_n_threads(Some(2))
        .with_n_gpu_layers(layers);
    let backend = LlamaBackend::load(&config).expect("the test model loads on the GPU");
    let info = wick_backend::Backend::info(&backend);
    let on_gpu: u32 = info
        .placement
        .iter()
        .filter(|p| p.device != "CPU")
        .map(|p| p.n_layers + u32::from(p.output))
        .sum();
    assert_eq!(
        on_gpu,
        layers.min(info.n_layer + 1),
        "{layers} layers offloaded: {:?}",
        info.placement
    );
    backend
}

/// Every layer (and the output layer) on the GPU.
mod all_layers {
    fn backend() -> wick_llama::LlamaBackend {
        super::backend(999)
    }

    wick_backend::backend_conformance!(backend);
}

/// The output layer and the last 14 of 30 on the GPU, the first 16 on the CPU.
mod half_layers {
    fn backend() -> wick_llama::LlamaBackend {
        super::backend(15)
    }

    wick_backend::backend_conformance!(backend);
}
