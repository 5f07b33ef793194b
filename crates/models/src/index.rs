//! The store's readable index, `models/index.json`: one entry per name, read-modify-written
//! under a lock and replaced atomically.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::download::write_file;
use crate::error::ModelError;
use crate::lock::FileLock;

/// One model in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The name it is known by (`wick pull … --as NAME`, else from its file name).
    pub name: String,
    /// Its file: relative to `models/` when the store owns it, absolute when it lives elsewhere
    /// (a Hugging Face cache file, which `wick rm` never deletes).
    pub file: PathBuf,
    /// Where it came from: a path, a URL, `hf:owner/repo/file`, or the default model's origin.
    pub source: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content, lower-case hex (a split model's: its first shard's).
    pub sha256: String,
    /// A split model's other shards, in order (its first is `file`); empty for one file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Shard>,
}

/// One shard of a split model beside the first, in the same folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// Its file, relative to `models/`.
    pub file: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of its content, lower-case hex.
    pub sha256: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Index {
    pub(crate) version: u32,
    pub(crate) models: Vec<Entry>,
}

impl Index {
    pub(crate) fn by_name(&self, name: &str) -> Option<&Entry> {
        self.models.iter().find(|e| e.name == name)
    }

    /// Entries that came from `source`.
    pub(crate) fn by_source<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.models.iter().filter(move |e| e.source == source)
    }

    /// A name that is free or already names `sha256`: `base`, else `base-<8 hex of sha256>`.
    pub(crate) fn free_name(&self, base: &str, sha256: &str) -> String {
        match self.by_name(base) {
            Some(e) if e.sha256 != sha256 => format!("{base}-{}", &sha256[..8]),
            _ => base.to_owned(),
        }
    }
}

/// Reads and writes one store's index.
#[derive(Debug, Clone)]
pub(crate) struct IndexFile {
    path: PathBuf,
    lock: PathBuf,
}

impl IndexFile {
    pub(crate) fn new(models_dir: &Path, tmp_dir: &Path) -> Self {
        Self {
            path: models_dir.join("index.json"),
            lock: tmp_dir.join("index.lock"),
        }
    }

    /// The index as it is now (empty when there is none yet).
    pub(crate) fn read(&self) -> Result<Index, ModelError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Index::default()),
            Err(e) => return Err(ModelError::io(&self.path, e)),
        };
        serde_json::from_str(&text).map_err(|e| ModelError::Index {
            path: self.path.clone(),
            reason: e.to_string(),
        })
    }

    /// Changes the index under its lock; the new index replaces the old one atomically.
    pub(crate) fn update<R>(
        &self,
        change: impl FnOnce(&mut Index) -> Result<R, ModelError>,
    ) -> Result<R, ModelError> {
        let _lock = FileLock::acquire(&self.lock)?;
        let mut index = self.read()?;
        let out = change(&mut index)?;
        index.version = 1;
        index.models.sort_by(|a, b| a.name.cmp(&b.name));
        let json = serde_json::to_string_pretty(&index).map_err(|e| ModelError::Index {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        }
        write_file(&self.path, format!("{json}\n").as_bytes())?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, sha: char) -> Entry {
        Entry {
            name: name.to_owned(),
            file: PathBuf::from(format!("{name}.gguf")),
            source: "src".to_owned(),
            size: 1,
            sha256: sha.to_string().repeat(64),
            shards: Vec::new(),
        }
    }

    #[test]
    fn updates_persist_and_names_stay_unique() {
        let dir = tempfile::tempdir().unwrap();
        let file = IndexFile::new(&dir.path().join("models"), &dir.path().join("tmp"));
        assert!(file.read().unwrap().models.is_empty());
        file.update(|i| {
            i.models.push(entry("b", 'b'));
            i.models.push(entry("a", 'a'));
            Ok(())
        })
        .unwrap();
        let index = file.read().unwrap();
        assert_eq!(index.models[0].name, "a", "sorted by name");
        assert_eq!(index.free_name("a", &"a".repeat(64)), "a");
        assert_eq!(index.free_name("a", &"c".repeat(64)), "a-cccccccc");
        assert_eq!(index.free_name("z", &"c".repeat(64)), "z");
        assert_eq!(index.by_source("src").count(), 2);
    }

    #[test]
    fn a_damaged_index_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        std::fs::write(dir.path().join("models/index.json"), "{not json").unwrap();
        let file = IndexFile::new(&dir.path().join("models"), &dir.path().join("tmp"));
        let err = file.read().unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
    }
}
