//! Test support shared by wick's integration tests: the real test model, found and verified;
//! synthetic GGUF files; a fake Hugging Face hub on 127.0.0.1 ([`FakeHub`]).
//!
//! The model is SmolLM2-135M-Instruct Q4_1, fetched once by `scripts/fetch-model` into
//! `$WICK_HOME/models` (default: the user cache dir + `/wick/models`). A missing or corrupt file
//! fails the test with a message naming the file and the expected hash: it is never skipped.
//!
//! ```no_run
//! let model = wick_testutil::model_path();
//! assert!(model.ends_with("SmolLM2-135M-Instruct.Q4_1.gguf"));
//! ```
#![deny(missing_docs)]

mod arch;
mod draw;
mod gguf;
mod hub;
mod lora;
mod moe;
mod projector;
mod shaped;
mod split;

pub use arch::{
    cohere2_model, deepseek2_model, exaone4_model, gemma2_model, gemma3_model, gpt_oss_model,
    granite_model, layer_norm_model, lfm2_model, mamba_model, mistral3_model, olmo2_model,
    phi3_model, qwen2_model, qwen3_model, qwen3moe_model, smollm3_model,
};
pub use draw::Draw;
pub use gguf::{synthetic_gguf, synthetic_gguf_with, SYNTHETIC_TEMPLATE};
pub use hub::{FakeHub, Logged, FAKE_COMMIT};
pub use lora::lora_adapter;
pub use moe::mixture_of_experts;
pub use projector::{png, vision_projector};
pub use shaped::{shaped_model, Shape, LLAMA_1B};
pub use split::split_gguf;

use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// `rel` under the directory of the crate whose test runs: the `CARGO_MANIFEST_DIR` cargo sets
/// when it runs the test, else `built`, that directory when the test was built (pass
/// `env!("CARGO_MANIFEST_DIR")`). A test binary built for a checkout elsewhere and reused here
/// (a shared target directory) so reads this checkout's files.
pub fn crate_path(built: &str, rel: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(built), PathBuf::from)
        .join(rel)
}

/// The test model's file name.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The test model's SHA-256.
pub const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

pub use wick_types::hex;

/// `$WICK_HOME`, as `scripts/common.sh` sets it: else the user cache dir (`$XDG_CACHE_HOME` or
/// `~/.cache`) + `/wick`.
pub fn wick_home() -> PathBuf {
    std::env::var_os("WICK_HOME")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .filter(|p| !p.is_empty())
                    .map_or_else(
                        || {
                            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                                .join(".cache")
                        },
                        PathBuf::from,
                    );
                cache.join("wick")
            },
            PathBuf::from,
        )
}

/// Where the test model is expected: `$WICK_TEST_MODEL`, else [`wick_home`]`/models/…`.
pub fn expected_model_path() -> PathBuf {
    if let Some(path) = std::env::var_os("WICK_TEST_MODEL").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    wick_home().join("models").join(MODEL_FILE)
}

/// `$WICK_HOME/test-models/name`, made once by `make` from the bytes of the model `source`:
/// written aside, then renamed, so a run cut short leaves no half file behind.
///
/// # Panics
///
/// When `source` does not read or the file cannot be written: this is test support.
pub fn made_once(
    source: &std::path::Path,
    name: &str,
    make: impl FnOnce(&[u8]) -> Vec<u8>,
) -> PathBuf {
    let dir = wick_home().join("test-models");
    let out = dir.join(name);
    if out.is_file() {
        return out;
    }
    std::fs::create_dir_all(&dir).expect("the test-models directory");
    let dense = std::fs::read(source).expect("the source model reads");
    let part = dir.join(format!("{name}.{}.part", std::process::id()));
    std::fs::write(&part, make(&dense)).expect("the model is written");
    std::fs::rename(&part, &out).expect("the model is renamed into place");
    out
}

/// The verified test model; checked once per test binary.
///
/// # Panics
///
/// When the file is missing or its SHA-256 is not [`MODEL_SHA256`]: the message names the file,
/// the hash and how to fetch it.
pub fn model_path() -> PathBuf {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let path = expected_model_path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "the test model {} is missing ({e}): run scripts/fetch-model \
                     (SmolLM2-135M-Instruct Q4_1, sha256 {MODEL_SHA256})",
                    path.display()
                )
            });
            let got = hex(&Sha256::digest(&bytes));
            assert_eq!(
                got,
                MODEL_SHA256,
                "the test model {} is corrupt (sha256 {got}, expected {MODEL_SHA256}): \
                 delete it and run scripts/fetch-model",
                path.display()
            );
            path
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lower_case_and_padded() {
        assert_eq!(hex(&[0, 0xab, 0x0f]), "00ab0f");
    }
}
