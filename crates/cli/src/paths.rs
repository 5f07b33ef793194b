//! Where wick keeps its files.

use std::path::PathBuf;

/// The default model's file name.
pub(crate) const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model's SHA-256.
pub(crate) const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// `$WICK_HOME`, else the user's cache directory + `/wick`.
pub(crate) fn wick_home() -> PathBuf {
    if let Some(home) = std::env::var_os("WICK_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    dirs::cache_dir()
        .unwrap_or_else(|| std::env::temp_dir().join("wick-cache"))
        .join("wick")
}

/// Where the default model lives.
pub(crate) fn default_model() -> PathBuf {
    wick_home().join("models").join(DEFAULT_MODEL_FILE)
}
