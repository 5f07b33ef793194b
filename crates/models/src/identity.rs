//! A model file's identity: its SHA-256, computed once per file version and remembered.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::download::sha256_file;
use crate::{ModelError, Settings};

/// The SHA-256 of the model file at `path` (lower-case hex).
///
/// Store blobs are named by their hash, so theirs is read from the name; any other file is
/// hashed once and the result kept in `$WICK_HOME/models/identities.json`, keyed by the
/// canonical path, size and modification time, so an edited or replaced file is hashed again.
///
/// # Errors
///
/// The file cannot be read.
pub fn model_sha256(settings: &Settings, path: &Path) -> Result<String, ModelError> {
    let canonical = path.canonicalize().map_err(|e| ModelError::io(path, e))?;
    if let Some(hex) = blob_hash(&canonical) {
        return Ok(hex);
    }
    let meta = std::fs::metadata(&canonical).map_err(|e| ModelError::io(&canonical, e))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let key = format!("{}|{}|{mtime}", canonical.display(), meta.len());
    let memo = settings.home.join("models").join("identities.json");
    let mut known: BTreeMap<String, String> = std::fs::read(&memo)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if let Some(hex) = known.get(&key) {
        return Ok(hex.clone());
    }
    let hex = sha256_file(&canonical)?;
    known.insert(key, hex.clone());
    // Best effort: a cache that cannot be written only means hashing again next time.
    if let Some(dir) = memo.parent() {
        let _ = std::fs::create_dir_all(dir);
        let tmp = memo.with_extension(format!("json.{}.tmp", std::process::id()));
        if let Ok(text) = serde_json::to_vec_pretty(&known) {
            if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, &memo).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    Ok(hex)
}

/// The hash in a store blob's name (`sha256-<hex>.gguf`).
fn blob_hash(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let hex = name.strip_prefix("sha256-")?.strip_suffix(".gguf")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_hashed_once_per_version_and_blobs_by_name() {
        let home = tempfile::tempdir().expect("tmp");
        let settings = Settings::new(home.path());
        let file = home.path().join("m.gguf");
        std::fs::write(&file, b"abc").expect("write");
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(model_sha256(&settings, &file).unwrap(), abc);
        assert!(home.path().join("models/identities.json").is_file());
        assert_eq!(model_sha256(&settings, &file).unwrap(), abc);
        std::fs::write(&file, b"abcd").expect("write");
        assert_ne!(
            model_sha256(&settings, &file).unwrap(),
            abc,
            "a new version is hashed"
        );
        let blob = home.path().join(format!("sha256-{}.gguf", "ab".repeat(32)));
        std::fs::write(&blob, b"x").expect("write");
        assert_eq!(model_sha256(&settings, &blob).unwrap(), "ab".repeat(32));
    }
}
