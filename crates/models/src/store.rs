//! [`ModelStore`]: model references resolved to files, the store under `$WICK_HOME/models`,
//! and its listing and removal. Pulling (downloads, imports) is in `pull.rs`.

use std::path::{Path, PathBuf};

use crate::download::{sha256_file, Downloader};
use crate::error::ModelError;
use crate::gguf::GgufHeader;
use crate::hf::{cached_file, cached_files, pick_file};
use crate::index::{Entry, IndexFile};
use crate::reference::{HfRepo, ModelRef};
use crate::settings::{Settings, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SHA256, DEFAULT_MODEL_SOURCE};

/// The models on this machine: resolves references to files (downloading when needed), pulls
/// models into the store, lists and removes them.
///
/// ```no_run
/// use wick_models::{ModelRef, ModelStore, Settings};
///
/// let store = ModelStore::new(Settings::from_env())?;
/// let path = store.resolve(&"my-model".parse::<ModelRef>()?)?;
/// println!("{}", path.display());
/// # Ok::<(), wick_models::ModelError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ModelStore {
    pub(crate) settings: Settings,
    pub(crate) index: IndexFile,
    pub(crate) downloader: Downloader,
}

/// A model in the store, as [`ModelStore::list`] shows it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Listed {
    /// The index entry.
    pub entry: Entry,
    /// Its file.
    pub path: PathBuf,
    /// Its GGUF header; `None` when the file is gone or unreadable.
    pub header: Option<GgufHeader>,
    /// Whether it is the default model (used when no model is named).
    pub is_default: bool,
}

impl ModelStore {
    /// A store with `settings`.
    ///
    /// # Errors
    ///
    /// [`ModelError::Transport`] when the HTTP client cannot be set up (no TLS roots).
    pub fn new(settings: Settings) -> Result<Self, ModelError> {
        let downloader =
            Downloader::new(settings.progress, settings.retries, settings.read_timeout)?;
        let index = IndexFile::new(&settings.models_dir(), &settings.tmp_dir());
        Ok(Self {
            settings,
            index,
            downloader,
        })
    }

    /// The settings in use.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The GGUF file that `reference` names, downloading it into the store when it is remote
    /// and neither the store nor the Hugging Face cache has it. Local files are checked to be
    /// complete GGUF files.
    ///
    /// # Errors
    ///
    /// [`ModelError`]: an unusable file, an unknown name, a missing default model, or any
    /// download error.
    pub fn resolve(&self, reference: &ModelRef) -> Result<PathBuf, ModelError> {
        let path = match reference {
            ModelRef::Default => {
                let path = self.settings.default_model_path();
                if !path.exists() {
                    return Err(ModelError::NoDefaultModel {
                        path,
                        sha256: DEFAULT_MODEL_SHA256,
                    });
                }
                path
            }
            ModelRef::Path(path) => path.clone(),
            ModelRef::Name(name) => self.named(name)?.1,
            ModelRef::Url(url) => match self.stored(url, None)? {
                Some(entry) => self.entry_path(&entry),
                None => self.pull(reference, &crate::PullOptions::default())?.path,
            },
            ModelRef::HfFile { repo, file } => match self.find_hf(repo, file)? {
                Some(path) => path,
                None => self.pull(reference, &crate::PullOptions::default())?.path,
            },
            ModelRef::HfQuant { repo, quant } => {
                match self.find_hf_quant(repo, quant.as_deref())? {
                    Some(path) => path,
                    None => self.pull(reference, &crate::PullOptions::default())?.path,
                }
            }
        };
        check_gguf(&path)?;
        Ok(path)
    }

    /// The GGUF file that `reference` names when it is on this machine already (a local file,
    /// a name of the store, a URL or Hugging Face file pulled before or in the Hugging Face
    /// cache), without downloading anything; `None` when it would have to be downloaded (or a
    /// file or name does not exist).
    ///
    /// # Errors
    ///
    /// [`ModelError::Index`] or [`ModelError::Io`] when the index cannot be read.
    pub fn local(&self, reference: &ModelRef) -> Result<Option<PathBuf>, ModelError> {
        Ok(match reference {
            ModelRef::Default => Some(self.settings.default_model_path()).filter(|p| p.is_file()),
            ModelRef::Path(path) => Some(path.clone()).filter(|p| p.is_file()),
            ModelRef::Name(name) => match self.named(name) {
                Ok((_, path)) => Some(path),
                Err(ModelError::UnknownName { .. } | ModelError::MissingFile { .. }) => None,
                Err(e) => return Err(e),
            },
            ModelRef::Url(url) => self.stored(url, None)?.map(|e| self.entry_path(&e)),
            ModelRef::HfFile { repo, file } => self.find_hf(repo, file)?,
            ModelRef::HfQuant { repo, quant } => self.find_hf_quant(repo, quant.as_deref())?,
        })
    }

    /// Every model in the store, by name; the default model is adopted into the index the
    /// first time it is seen.
    ///
    /// # Errors
    ///
    /// [`ModelError::Index`] or [`ModelError::Io`] when the index cannot be read or written.
    pub fn list(&self) -> Result<Vec<Listed>, ModelError> {
        self.adopt_default()?;
        Ok(self
            .index
            .read()?
            .models
            .into_iter()
            .map(|entry| {
                let path = self.entry_path(&entry);
                Listed {
                    header: GgufHeader::read(&path).ok(),
                    is_default: entry.file == Path::new(DEFAULT_MODEL_FILE),
                    path,
                    entry,
                }
            })
            .collect())
    }

    /// Removes `name` from the store, and its file when no other name uses it and the store
    /// owns it (a file in the Hugging Face cache is left alone).
    ///
    /// # Errors
    ///
    /// [`ModelError::UnknownName`], or an I/O error.
    pub fn remove(&self, name: &str) -> Result<Entry, ModelError> {
        self.adopt_default()?;
        let (entry, shared) = self.index.update(|index| {
            let pos = index
                .models
                .iter()
                .position(|e| e.name == name)
                .ok_or_else(|| ModelError::UnknownName {
                    name: name.to_owned(),
                })?;
            let entry = index.models.remove(pos);
            let shared = index.models.iter().any(|e| e.file == entry.file);
            Ok((entry, shared))
        })?;
        if !shared && entry.file.is_relative() {
            let files = std::iter::once(&entry.file).chain(entry.shards.iter().map(|s| &s.file));
            for file in files {
                let path = self.settings.models_dir().join(file);
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(ModelError::io(path, e))
                    }
                    _ => {}
                }
            }
            if !entry.shards.is_empty() {
                // A split model's own folder, empty now.
                if let Some(dir) = self.entry_path(&entry).parent() {
                    let _ = std::fs::remove_dir(dir);
                }
            }
        }
        Ok(entry)
    }

    pub(crate) fn entry_path(&self, entry: &Entry) -> PathBuf {
        self.settings.models_dir().join(&entry.file)
    }

    /// The entry named `name` and its file, which must exist.
    pub(crate) fn named(&self, name: &str) -> Result<(Entry, PathBuf), ModelError> {
        self.adopt_default()?;
        let entry =
            self.index
                .read()?
                .by_name(name)
                .cloned()
                .ok_or_else(|| ModelError::UnknownName {
                    name: name.to_owned(),
                })?;
        let path = self.entry_path(&entry);
        if !path.exists() {
            return Err(ModelError::MissingFile {
                name: name.to_owned(),
                path,
            });
        }
        Ok((entry, path))
    }

    /// A stored entry from `source` whose file exists (and whose hash is `sha256`, when given).
    pub(crate) fn stored(
        &self,
        source: &str,
        sha256: Option<&str>,
    ) -> Result<Option<Entry>, ModelError> {
        Ok(self
            .index
            .read()?
            .by_source(source)
            .find(|e| {
                sha256.is_none_or(|h| h.eq_ignore_ascii_case(&e.sha256))
                    && self.entry_path(e).exists()
            })
            .cloned())
    }

    /// A Hugging Face file already on disk: in the hub cache, or pulled into the store.
    fn find_hf(&self, repo: &HfRepo, file: &str) -> Result<Option<PathBuf>, ModelError> {
        if let Some(path) = self.hf_cached(repo, file) {
            return Ok(Some(path));
        }
        let source = hf_source(repo, file);
        Ok(self.stored(&source, None)?.map(|e| self.entry_path(&e)))
    }

    /// The file of `quant` from `repo` already on disk, without asking the hub.
    fn find_hf_quant(
        &self,
        repo: &HfRepo,
        quant: Option<&str>,
    ) -> Result<Option<PathBuf>, ModelError> {
        if let Some(cache) = &self.settings.hf_cache {
            if let Ok(file) = pick_file(repo, quant, &cached_files(cache, repo)) {
                return Ok(cached_file(cache, repo, &file));
            }
        }
        let prefix = hf_source(repo, "");
        let index = self.index.read()?;
        let files: Vec<String> = index
            .models
            .iter()
            .filter_map(|e| e.source.strip_prefix(&prefix).map(str::to_owned))
            .collect();
        match pick_file(repo, quant, &files) {
            Ok(file) => self.find_hf(repo, &file),
            Err(_) => Ok(None),
        }
    }

    pub(crate) fn hf_cached(&self, repo: &HfRepo, file: &str) -> Option<PathBuf> {
        cached_file(self.settings.hf_cache.as_deref()?, repo, file)
    }

    /// Adds the default model (placed by `scripts/fetch-model`) to the index once.
    pub(crate) fn adopt_default(&self) -> Result<(), ModelError> {
        let path = self.settings.default_model_path();
        let listed = |index: &crate::index::Index| {
            index
                .models
                .iter()
                .any(|e| e.file == Path::new(DEFAULT_MODEL_FILE))
        };
        if !path.is_file() || listed(&self.index.read()?) {
            return Ok(());
        }
        let sha256 = sha256_file(&path)?;
        let size = std::fs::metadata(&path)
            .map_err(|e| ModelError::io(&path, e))?
            .len();
        let source = if sha256 == DEFAULT_MODEL_SHA256 {
            DEFAULT_MODEL_SOURCE.to_owned()
        } else {
            format!("{} (not the expected default model)", path.display())
        };
        self.index.update(|index| {
            if !listed(index) {
                let name = index.free_name(stem(DEFAULT_MODEL_FILE), &sha256);
                index.models.push(Entry {
                    name,
                    file: PathBuf::from(DEFAULT_MODEL_FILE),
                    source,
                    size,
                    sha256,
                    shards: Vec::new(),
                });
            }
            Ok(())
        })
    }
}

/// `hf:owner/repo/file`, the source recorded for a Hugging Face file.
pub(crate) fn hf_source(repo: &HfRepo, file: &str) -> String {
    format!("hf:{}/{file}", repo.id())
}

/// A file name without its directory and `.gguf`.
pub(crate) fn stem(file: &str) -> &str {
    let name = file.rsplit(['/', '\\']).next().unwrap_or(file);
    if crate::reference::has_gguf_ext(name) {
        &name[..name.len() - 5]
    } else {
        name
    }
}

pub(crate) fn check_gguf(path: &Path) -> Result<GgufHeader, ModelError> {
    GgufHeader::read(path).map_err(|cause| ModelError::Gguf {
        path: path.to_path_buf(),
        cause,
    })
}
