//! Model sources, verified resumable downloads, the model store and GGUF metadata.
//!
//! One reference syntax names a model everywhere ([`ModelRef`]): a local path, an
//! `http(s)://` URL, `hf:owner/repo/file.gguf`, `owner/repo[:QUANT]` (the file of that
//! quantization, [`DEFAULT_QUANT`] by default), a name in the store, or nothing for the default
//! model. [`ModelStore`] turns a reference into a verified GGUF file:
//!
//! - local files are checked to be complete GGUF files ([`GgufHeader::read`]) before any
//!   loader sees them;
//! - remote files stream into `$WICK_HOME/tmp` with a progress bar on a terminal, resume with
//!   `Range` after a broken connection, are checked against a SHA-256 (`--sha256`, or the
//!   Hugging Face LFS hash), and are renamed into `$WICK_HOME/models/blobs/` only when whole and
//!   verified; a failed download leaves nothing that looks whole;
//! - a lock per source makes a second process wait and then reuse the first one's download;
//! - Hugging Face files that the hub cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`) already holds are
//!   used where they are, without a request;
//! - `models/index.json` records each model's name, source, size and SHA-256.
//!
//! ```
//! use wick_models::{ModelRef, ModelStore, PullOptions, Settings};
//!
//! let home = tempfile::tempdir()?;
//! let store = ModelStore::new(Settings::new(home.path()))?;
//!
//! // A local GGUF file, imported under a name, then resolved by that name.
//! let file = home.path().join("tiny.gguf");
//! std::fs::write(&file, wick_testutil::synthetic_gguf(2 << 20, "llama", 15, 0))?;
//! let reference: ModelRef = file.to_str().unwrap().parse()?;
//! let pulled = store.pull(&reference, &PullOptions::default().with_name(Some("tiny")))?;
//! assert_eq!(pulled.entry.name, "tiny");
//!
//! let path = store.resolve(&"tiny".parse()?)?;
//! let header = wick_models::GgufHeader::read(&path)?;
//! assert_eq!(header.quantization().as_deref(), Some("Q4_K_M"));
//!
//! // Bad references say what is accepted.
//! let err = "what?".parse::<ModelRef>().unwrap_err();
//! assert!(err.to_string().contains("hf:owner/repo/file.gguf"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod download;
mod error;
mod ggml_types;
mod gguf;
mod hf;
mod identity;
mod index;
mod lock;
mod pull;
mod reference;
mod settings;
mod split;
mod store;

pub use download::MIN_MODEL_BYTES;
pub use error::{GgufError, ModelError};
pub use gguf::{GgufHeader, GgufValue, SpecialToken};
pub use identity::model_sha256;
pub use index::{Entry, Shard};
pub use pull::{ProgressFn, PullOptions, PullProgress, Pulled};
pub use reference::{HfRepo, ModelRef, ACCEPTED_FORMS, DEFAULT_QUANT};
pub use settings::{
    wick_home, Settings, DEFAULT_HF_ENDPOINT, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SHA256,
    DEFAULT_MODEL_SOURCE,
};
pub use store::{Listed, ModelStore};
