//! The errors of wick-models: one enum for finding, fetching and storing models, one for GGUF.
//!
//! Messages are whole sentences that include their causes, so one `to_string()` (a server's
//! error body, a CLI's last line) says everything.

use std::path::PathBuf;

use crate::reference::ACCEPTED_FORMS;

/// Why a file is not a usable GGUF model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or read.
    #[error("cannot read it: {cause}")]
    Io {
        /// The underlying I/O error (its message is part of this one's).
        cause: std::io::Error,
    },
    /// Not a regular file (a directory, a device).
    #[error("cannot read it: not a regular file")]
    NotAFile,
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file (its first bytes are not the GGUF magic)")]
    BadMagic,
    /// A GGUF version this reader does not know.
    #[error("unsupported GGUF version {version} (supported: 2 and 3)")]
    Version {
        /// The version in the header.
        version: u32,
    },
    /// The file ends before the header, the metadata or the tensor data does.
    #[error(
        "truncated: the file is {actual} bytes but its {part} needs at least {needed} \
         (an interrupted download?)"
    )]
    Truncated {
        /// Which part of the file runs past its end.
        part: &'static str,
        /// The bytes the file would need.
        needed: u64,
        /// The file's size.
        actual: u64,
    },
    /// The header holds a value that no valid file has.
    #[error("malformed GGUF header at byte {offset}: {reason}")]
    Malformed {
        /// Where in the file the bad value starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// Everything that can go wrong naming, fetching, verifying or storing a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The text is not a model reference.
    #[error("`{input}` is not a model reference: {reason}. {ACCEPTED_FORMS}")]
    BadReference {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A local file that is not a usable GGUF model.
    #[error("{}: {cause}", path.display())]
    Gguf {
        /// The file (or the URL it came from).
        path: PathBuf,
        /// What is wrong with it.
        cause: GgufError,
    },
    /// No model was named and the default model is not on disk.
    #[error(
        "no model given and the default model is not at {} \
         (SmolLM2-135M-Instruct Q4_1, sha256 {sha256}); fetch it with `scripts/fetch-model`, \
         or pass a model with -m REF. {ACCEPTED_FORMS}",
        path.display()
    )]
    NoDefaultModel {
        /// Where the default model belongs.
        path: PathBuf,
        /// Its SHA-256.
        sha256: &'static str,
    },
    /// A name that the store does not hold.
    #[error("no model named `{name}` in the store (`wick ls` lists them). {ACCEPTED_FORMS}")]
    UnknownName {
        /// The name asked for.
        name: String,
    },
    /// The store lists a model whose file has gone.
    #[error("the store lists `{name}` at {}, but the file is gone: `wick rm {name}` and pull it again", path.display())]
    MissingFile {
        /// The name in the store.
        name: String,
        /// Where its file was.
        path: PathBuf,
    },
    /// `--as NAME` names a different model already.
    #[error("`{name}` already names another model (sha256 {sha256}): pick another name or `wick rm {name}` first")]
    NameTaken {
        /// The name.
        name: String,
        /// The SHA-256 of the model it names.
        sha256: String,
    },
    /// A name that cannot be used as an alias.
    #[error(
        "`{name}` cannot name a model: use letters, digits, `.`, `_` and `-`, not ending in .gguf"
    )]
    BadName {
        /// The name given.
        name: String,
    },
    /// A SHA-256 pin that is not 64 hex digits.
    #[error("`{input}` is not a SHA-256 (64 hex digits)")]
    BadSha256 {
        /// What was given.
        input: String,
    },
    /// The server answered with a status other than success.
    #[error("HTTP {status} from {url}{hint}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The URL asked for.
        url: String,
        /// A hint on what to do (may be empty).
        hint: String,
    },
    /// The server refused access (401 or 403).
    #[error("HTTP {status} from {url}: {}", if *token_sent { "the token in HF_TOKEN was refused" } else { "access needs a token: set HF_TOKEN" })]
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// The URL asked for.
        url: String,
        /// Whether a bearer token was sent.
        token_sent: bool,
    },
    /// The body is smaller than any model (as the seed checks, at least 1 MB).
    #[error("{url} is {size} bytes, too small to be a model (at least {min} bytes expected)")]
    TooSmall {
        /// The URL.
        url: String,
        /// The size the server gave.
        size: u64,
        /// The least size accepted.
        min: u64,
    },
    /// The server sent a different number of bytes than it announced.
    #[error("{url}: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        /// The URL.
        url: String,
        /// The announced size.
        expected: u64,
        /// The bytes received.
        actual: u64,
    },
    /// The content's SHA-256 is not the pinned one; nothing was kept.
    #[error("{url}: sha256 is {actual}, expected {expected}; nothing was kept")]
    HashMismatch {
        /// The URL.
        url: String,
        /// The pinned SHA-256.
        expected: String,
        /// The SHA-256 of what arrived.
        actual: String,
    },
    /// The connection failed or broke off; a partial file is kept for the next attempt.
    #[error("downloading {url}: {reason}{}", if *partial { " (the partial download is kept: run the command again to resume)" } else { "" })]
    Transport {
        /// The URL.
        url: String,
        /// What failed, with its causes.
        reason: String,
        /// Whether a partial download was kept for the next attempt.
        partial: bool,
    },
    /// A Hugging Face API answer that is not what the API returns.
    #[error("unexpected answer from {url}: {reason}")]
    Api {
        /// The URL asked.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// No file of the repository matches the quantization.
    #[error(
        "{repo} has no GGUF file for quantization {quant}; its GGUF files: {}",
        list(candidates)
    )]
    NoMatch {
        /// `owner/repo`.
        repo: String,
        /// The quantization asked for.
        quant: String,
        /// The repository's GGUF files.
        candidates: Vec<String>,
    },
    /// More than one file matches: name one with `hf:owner/repo/FILE`.
    #[error("{repo}: {} files match {quant}, name one as hf:{repo}/FILE: {}", candidates.len(), list(candidates))]
    Ambiguous {
        /// `owner/repo`.
        repo: String,
        /// The quantization asked for.
        quant: String,
        /// The matching files.
        candidates: Vec<String>,
    },
    /// A split model was named by a shard other than its first.
    #[error("{file} is shard {index} of a split model: name its first shard, {first}")]
    NotFirstShard {
        /// The shard named.
        file: String,
        /// Its number.
        index: u32,
        /// The first shard's name.
        first: String,
    },
    /// A file or directory could not be read or written.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error (its message is part of this one's).
        cause: std::io::Error,
    },
    /// The store's index cannot be read.
    #[error("the model index {} is damaged: {reason}", path.display())]
    Index {
        /// The index file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            cause,
        }
    }

    /// Whether trying again may succeed with the partial download that was kept.
    pub fn is_resumable(&self) -> bool {
        matches!(self, Self::Transport { .. })
    }
}
