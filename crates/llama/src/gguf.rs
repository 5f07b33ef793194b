//! A cheap check that a file is a GGUF model before llama.cpp sees it.

use std::io::Read;
use std::path::Path;

use wick_backend::BackendError;

/// Checks that `path` is a readable GGUF file (magic `GGUF`, version 2 or 3) with at least a
/// header's worth of bytes, so a text file or a truncated download is a clear error instead of a
/// llama.cpp failure.
///
/// # Errors
///
/// [`BackendError::Load`] saying what is wrong with the file.
pub fn check_gguf(path: &Path) -> Result<(), BackendError> {
    let load_err = |reason: String| BackendError::Load {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| load_err(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(load_err("not a regular file".into()));
    }
    let mut header = [0u8; 24];
    let mut file =
        std::fs::File::open(path).map_err(|e| load_err(format!("cannot open it: {e}")))?;
    file.read_exact(&mut header).map_err(|_| {
        load_err(format!(
            "only {} bytes: too short for a GGUF header (truncated download?)",
            meta.len()
        ))
    })?;
    if &header[..4] != b"GGUF" {
        return Err(load_err(
            "not a GGUF file (its first bytes are not the GGUF magic)".into(),
        ));
    }
    let version = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if !(2..=3).contains(&version) {
        return Err(load_err(format!(
            "unsupported GGUF version {version} (supported: 2 and 3)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_text_truncated_and_missing_files() {
        let dir = std::env::temp_dir().join(format!("wick-gguf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = dir.join("text.gguf");
        std::fs::write(&text, "this is not a model, just some text that is long").unwrap();
        assert!(check_gguf(&text)
            .unwrap_err()
            .to_string()
            .contains("not a GGUF file"));
        let short = dir.join("short.gguf");
        std::fs::write(&short, b"GGUF\x03\0\0\0").unwrap();
        assert!(check_gguf(&short)
            .unwrap_err()
            .to_string()
            .contains("too short"));
        let future = dir.join("future.gguf");
        let mut bytes = b"GGUF\x09\0\0\0".to_vec();
        bytes.resize(64, 0);
        std::fs::write(&future, bytes).unwrap();
        assert!(check_gguf(&future)
            .unwrap_err()
            .to_string()
            .contains("version 9"));
        let missing = dir.join("missing.gguf");
        assert!(check_gguf(&missing)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
