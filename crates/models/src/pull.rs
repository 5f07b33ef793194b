//! [`ModelStore::pull`]: a model into the store, from any reference.
//!
//! Remote files download under a per-source lock into `tmp/`, are verified (size, SHA-256,
//! GGUF header) and renamed into `models/blobs/sha256-<hex>.gguf`; a second process waiting on
//! the lock finds the finished entry and downloads nothing. A Hugging Face file that the hub
//! cache already holds is recorded where it is, without a request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::download::{discard, sha256_file, Fetch};
use crate::error::ModelError;
use crate::hf::{is_sha256, list_files, pick_file, resolve_url, Sibling};
use crate::index::{Entry, Shard};
use crate::lock::FileLock;
use crate::reference::{is_name, HfRepo, ModelRef};
use crate::split::{self, SplitName};
use crate::store::{check_gguf, hf_source, stem, ModelStore};
use wick_types::hex;

/// Options of [`ModelStore::pull`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PullOptions {
    /// The name to give the model (`--as`); default: its file name without `.gguf`.
    pub name: Option<String>,
    /// The SHA-256 the content must have (`--sha256`); Hugging Face's LFS hash is used when
    /// this is not set.
    pub sha256: Option<String>,
    /// Told how each download goes (see [`PullProgress`]); nothing is told for a model the
    /// store already has or a local file.
    pub progress: Option<ProgressFn>,
}

/// How far one file's download is, as [`PullOptions::progress`] is told it: when the download
/// starts (`completed` is what a resumed download already had), each time another hundredth of
/// the file has arrived (another MiB when the size is unknown), and when it has all arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PullProgress {
    /// The file's name without `.gguf`.
    pub file: String,
    /// Bytes received so far.
    pub completed: u64,
    /// The file's size, when the server says.
    pub total: Option<u64>,
}

/// A callback for [`PullProgress`] reports; it runs on the downloading thread, so it should
/// only hand the report on (to a channel, a progress display).
#[derive(Clone)]
pub struct ProgressFn(Arc<dyn Fn(&PullProgress) + Send + Sync>);

impl ProgressFn {
    /// Wraps `f`.
    pub fn new(f: impl Fn(&PullProgress) + Send + Sync + 'static) -> Self {
        ProgressFn(Arc::new(f))
    }

    pub(crate) fn tell(&self, progress: &PullProgress) {
        (self.0)(progress);
    }
}

impl std::fmt::Debug for ProgressFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressFn")
    }
}

impl PullOptions {
    /// Names the model.
    #[must_use]
    pub fn with_name(mut self, name: Option<&str>) -> Self {
        self.name = name.map(str::to_owned);
        self
    }

    /// Pins the content's SHA-256.
    #[must_use]
    pub fn with_sha256(mut self, sha256: Option<&str>) -> Self {
        self.sha256 = sha256.map(str::to_owned);
        self
    }

    /// Reports each download's progress to `progress`.
    #[must_use]
    pub fn with_progress(mut self, progress: ProgressFn) -> Self {
        self.progress = Some(progress);
        self
    }

    fn validated(&self) -> Result<Self, ModelError> {
        if let Some(name) = self.name.as_deref().filter(|n| !is_name(n)) {
            return Err(ModelError::BadName {
                name: name.to_owned(),
            });
        }
        if let Some(pin) = self.sha256.as_deref().filter(|h| !is_sha256(h)) {
            return Err(ModelError::BadSha256 {
                input: pin.to_owned(),
            });
        }
        Ok(Self {
            name: self.name.clone(),
            sha256: self.sha256.as_deref().map(str::to_ascii_lowercase),
            progress: self.progress.clone(),
        })
    }
}

/// What [`ModelStore::pull`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Pulled {
    /// The model's entry in the store.
    pub entry: Entry,
    /// Its file.
    pub path: PathBuf,
    /// Whether it was downloaded now (`false`: the store or the hub cache had it).
    pub downloaded: bool,
}

/// What a remote file is and where it comes from.
struct Remote<'a> {
    source: String,
    url: String,
    bearer: Option<&'a str>,
    sha256: Option<String>,
    file_name: &'a str,
    /// From the Hugging Face hub (errors may suggest `HF_TOKEN`), not a plain URL.
    hugging_face: bool,
    /// A split model's shard hashes by file name, where the hub lists them.
    shard_pins: std::collections::HashMap<String, String>,
}

impl ModelStore {
    /// Puts the model that `reference` names into the store and records it in the index:
    /// downloads remote files (resuming a partial one, verifying the SHA-256), copies local
    /// ones, and gives a name to stored ones.
    ///
    /// # Errors
    ///
    /// [`ModelError`]: a bad name or pin, an unusable file, any download error, a name taken by
    /// another model.
    pub fn pull(&self, reference: &ModelRef, options: &PullOptions) -> Result<Pulled, ModelError> {
        let opts = options.validated()?;
        match reference {
            ModelRef::Default => {
                let path = self.settings.default_model_path();
                if !path.is_file() {
                    return Err(ModelError::NoDefaultModel {
                        path,
                        sha256: crate::DEFAULT_MODEL_SHA256,
                    });
                }
                self.pull_named(stem(crate::DEFAULT_MODEL_FILE), &opts)
            }
            ModelRef::Name(name) => self.pull_named(name, &opts),
            ModelRef::Path(path) => self.import(path, &opts),
            ModelRef::Url(url) => {
                let file_name = url
                    .rsplit('/')
                    .next()
                    .filter(|s| !s.is_empty())
                    .unwrap_or("model");
                let file_name = file_name.split(['?', '#']).next().unwrap_or(file_name);
                let remote = Remote {
                    source: url.clone(),
                    url: url.clone(),
                    bearer: None,
                    sha256: opts.sha256.clone(),
                    file_name,
                    hugging_face: false,
                    shard_pins: std::collections::HashMap::new(),
                };
                self.fetch(&remote, &opts)
            }
            ModelRef::HfFile { repo, file } => self.pull_hf(repo, file, None, &opts),
            ModelRef::HfQuant { repo, quant } => {
                if let Some(cache) = &self.settings.hf_cache {
                    let cached = crate::hf::cached_files(cache, repo);
                    if let Ok(file) = pick_file(repo, quant.as_deref(), &cached) {
                        return self.pull_hf(repo, &file, None, &opts);
                    }
                }
                let siblings = self.siblings(repo)?;
                let files: Vec<String> = siblings.iter().map(|s| s.file.clone()).collect();
                let file = pick_file(repo, quant.as_deref(), &files)?;
                let sibling = siblings.into_iter().find(|s| s.file == file);
                self.pull_hf(repo, &file, sibling, &opts)
            }
        }
    }

    fn siblings(&self, repo: &HfRepo) -> Result<Vec<Sibling>, ModelError> {
        list_files(
            self.downloader.client(),
            &self.settings.hf_endpoint,
            self.settings.hf_token.as_deref(),
            repo,
        )
    }

    /// A stored model, given another name when asked.
    fn pull_named(&self, name: &str, opts: &PullOptions) -> Result<Pulled, ModelError> {
        let (entry, path) = self.named(name)?;
        let entry = self.record(&entry, opts.name.as_deref(), &entry.name)?;
        Ok(Pulled {
            entry,
            path,
            downloaded: false,
        })
    }

    /// A local file, verified and copied into the store.
    fn import(&self, path: &Path, opts: &PullOptions) -> Result<Pulled, ModelError> {
        check_gguf(path)?;
        let source = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let source = source.display().to_string();
        let sha256 = sha256_file(path)?;
        check_pin(&source, opts.sha256.as_deref(), &sha256)?;
        let size = std::fs::metadata(path)
            .map_err(|e| ModelError::io(path, e))?
            .len();
        let part = self
            .settings
            .tmp_dir()
            .join(format!("{}.part", key(&source)));
        let blob = blob(&sha256);
        if !self.settings.models_dir().join(&blob).exists() {
            std::fs::create_dir_all(self.settings.tmp_dir())
                .map_err(|e| ModelError::io(self.settings.tmp_dir(), e))?;
            // A copy, not a link: the store's content must not change under it.
            std::fs::copy(path, &part).map_err(|e| {
                discard(&part);
                ModelError::io(path, e)
            })?;
            self.install(&part, &blob)?;
        }
        let entry = Entry {
            name: String::new(),
            file: blob,
            source,
            size,
            sha256,
            shards: Vec::new(),
        };
        let base = stem(&path.to_string_lossy()).to_owned();
        let entry = self.record(&entry, opts.name.as_deref(), &base)?;
        Ok(Pulled {
            path: self.entry_path(&entry),
            entry,
            downloaded: false,
        })
    }

    fn pull_hf(
        &self,
        repo: &HfRepo,
        file: &str,
        sibling: Option<Sibling>,
        opts: &PullOptions,
    ) -> Result<Pulled, ModelError> {
        let source = hf_source(repo, file);
        if let Some(path) = self.hf_cached(repo, file) {
            return self.adopt_external(&path, &source, opts);
        }
        let sibling = match sibling {
            Some(s) => s,
            None => self.sibling(repo, file)?,
        };
        // A split model: every shard's hash, as the hub lists them.
        let shard_pins = if SplitName::parse(file).is_some() {
            self.siblings(repo)?
                .into_iter()
                .filter_map(|s| Some((split::base(&s.file).to_owned(), s.sha256?)))
                .collect()
        } else {
            std::collections::HashMap::new()
        };
        let remote = Remote {
            source,
            url: resolve_url(&self.settings.hf_endpoint, repo, file)?,
            bearer: self.settings.hf_token.as_deref(),
            sha256: opts.sha256.clone().or(sibling.sha256),
            file_name: file,
            hugging_face: true,
            shard_pins,
        };
        self.fetch(&remote, opts)
    }

    /// `file`'s metadata from the API; a file the repository lacks is a 404 naming its files.
    fn sibling(&self, repo: &HfRepo, file: &str) -> Result<Sibling, ModelError> {
        let siblings = self.siblings(repo)?;
        let names: Vec<String> = siblings
            .iter()
            .map(|s| s.file.clone())
            .filter(|f| crate::reference::has_gguf_ext(f))
            .collect();
        siblings
            .into_iter()
            .find(|s| s.file == file)
            .ok_or_else(|| ModelError::Status {
                status: 404,
                url: resolve_url(&self.settings.hf_endpoint, repo, file).unwrap_or_default(),
                hint: format!(
                    ": {} has no file {file}; its GGUF files: {}",
                    repo.id(),
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            })
    }

    /// A Hugging Face cache file, hashed and recorded where it is.
    fn adopt_external(
        &self,
        path: &Path,
        source: &str,
        opts: &PullOptions,
    ) -> Result<Pulled, ModelError> {
        check_gguf(path)?;
        let sha256 = sha256_file(path)?;
        check_pin(source, opts.sha256.as_deref(), &sha256)?;
        let size = std::fs::metadata(path)
            .map_err(|e| ModelError::io(path, e))?
            .len();
        let entry = Entry {
            name: String::new(),
            file: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            source: source.to_owned(),
            size,
            sha256,
            shards: Vec::new(),
        };
        let base = stem(source).to_owned();
        let entry = self.record(&entry, opts.name.as_deref(), &base)?;
        Ok(Pulled {
            path: path.to_path_buf(),
            entry,
            downloaded: false,
        })
    }

    /// Downloads under the source's lock, unless the store has it (perhaps just finished by
    /// another process that held the lock).
    fn fetch(&self, remote: &Remote<'_>, opts: &PullOptions) -> Result<Pulled, ModelError> {
        let key = key(&remote.source);
        let tmp = self.settings.tmp_dir();
        let _lock = FileLock::acquire(&tmp.join(format!("{key}.lock")))?;
        if let Some(entry) = self.stored(&remote.source, remote.sha256.as_deref())? {
            let base = entry.name.clone();
            let entry = self.record(&entry, opts.name.as_deref(), &base)?;
            return Ok(Pulled {
                path: self.entry_path(&entry),
                entry,
                downloaded: false,
            });
        }
        if let Some(split) = SplitName::parse(split::base(remote.file_name)) {
            return self.fetch_split(remote, &split, &key, opts);
        }
        let part = tmp.join(format!("{key}.part"));
        let fetch = Fetch {
            url: &remote.url,
            bearer: remote.bearer,
            sha256: remote.sha256.as_deref(),
            label: stem(remote.file_name),
            hugging_face: remote.hugging_face,
            progress: opts.progress.as_ref(),
        };
        let done = self.downloader.download(&fetch, &part)?;
        if let Err(cause) = crate::GgufHeader::read(&part) {
            discard(&part);
            return Err(ModelError::Gguf {
                path: PathBuf::from(&remote.url),
                cause,
            });
        }
        let blob = blob(&done.sha256);
        self.install(&part, &blob)?;
        let entry = Entry {
            name: String::new(),
            file: blob,
            source: remote.source.clone(),
            size: done.size,
            sha256: done.sha256,
            shards: Vec::new(),
        };
        let entry = self.record(&entry, opts.name.as_deref(), stem(remote.file_name))?;
        Ok(Pulled {
            path: self.entry_path(&entry),
            entry,
            downloaded: true,
        })
    }

    /// Downloads every shard of a split model (under the caller's lock), each verified, into
    /// one folder under their own names, where llama.cpp finds them from the first.
    fn fetch_split(
        &self,
        remote: &Remote<'_>,
        split: &SplitName,
        key: &str,
        opts: &PullOptions,
    ) -> Result<Pulled, ModelError> {
        let first = split::base(remote.file_name);
        if split.index != 1 {
            return Err(ModelError::NotFirstShard {
                file: first.to_owned(),
                index: split.index,
                first: split::base(&split.shard(1)).to_owned(),
            });
        }
        let tmp = self.settings.tmp_dir();
        let mut parts = Vec::new();
        for index in 1..=split.count {
            let shard = split.shard(index);
            let name = split::base(&shard).to_owned();
            let url = split::shard_url(&remote.url, first, &name);
            let pin = if index == 1 {
                remote.sha256.clone()
            } else {
                remote.shard_pins.get(&name).cloned()
            };
            let part = tmp.join(format!("{key}-{index}.part"));
            let fetch = Fetch {
                url: &url,
                bearer: remote.bearer,
                sha256: pin.as_deref(),
                label: stem(&name),
                hugging_face: remote.hugging_face,
                progress: opts.progress.as_ref(),
            };
            let done = self.downloader.download(&fetch, &part)?;
            if let Err(cause) = crate::GgufHeader::read(&part) {
                discard(&part);
                return Err(ModelError::Gguf {
                    path: PathBuf::from(&url),
                    cause,
                });
            }
            parts.push((part, name, done));
        }
        let dir = PathBuf::from("split").join(&parts[0].2.sha256);
        let target = self.settings.models_dir().join(&dir);
        std::fs::create_dir_all(&target).map_err(|e| ModelError::io(&target, e))?;
        for (part, name, _) in &parts {
            let path = target.join(name);
            std::fs::rename(part, &path).map_err(|e| {
                discard(part);
                ModelError::io(&path, e)
            })?;
        }
        let entry = Entry {
            name: String::new(),
            file: dir.join(&parts[0].1),
            source: remote.source.clone(),
            size: parts.iter().map(|(_, _, done)| done.size).sum(),
            sha256: parts[0].2.sha256.clone(),
            shards: parts[1..]
                .iter()
                .map(|(_, name, done)| Shard {
                    file: dir.join(name),
                    size: done.size,
                    sha256: done.sha256.clone(),
                })
                .collect(),
        };
        let entry = self.record(&entry, opts.name.as_deref(), stem(&split.prefix))?;
        Ok(Pulled {
            path: self.entry_path(&entry),
            entry,
            downloaded: true,
        })
    }

    /// Moves a verified file into place (atomically), or drops it when the blob is there.
    fn install(&self, part: &Path, blob: &Path) -> Result<(), ModelError> {
        let target = self.settings.models_dir().join(blob);
        if target.exists() {
            discard(part);
            return Ok(());
        }
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        }
        std::fs::rename(part, &target).map_err(|e| {
            discard(part);
            ModelError::io(&target, e)
        })
    }

    /// Records `entry` as `name` (or a free name from `base`); an entry of that name for the
    /// same content is kept as it is.
    fn record(&self, entry: &Entry, name: Option<&str>, base: &str) -> Result<Entry, ModelError> {
        self.index.update(|index| {
            let name = match name {
                Some(name) => {
                    if let Some(other) = index.by_name(name).filter(|e| e.sha256 != entry.sha256) {
                        return Err(ModelError::NameTaken {
                            name: name.to_owned(),
                            sha256: other.sha256.clone(),
                        });
                    }
                    name.to_owned()
                }
                None if !entry.name.is_empty() => entry.name.clone(),
                None => index.free_name(&sanitize(base), &entry.sha256),
            };
            if let Some(existing) = index.by_name(&name) {
                return Ok(existing.clone());
            }
            let named = Entry {
                name,
                ..entry.clone()
            };
            index.models.push(named.clone());
            Ok(named)
        })
    }
}

fn check_pin(source: &str, pin: Option<&str>, actual: &str) -> Result<(), ModelError> {
    match pin {
        Some(expected) if expected != actual => Err(ModelError::HashMismatch {
            url: source.to_owned(),
            expected: expected.to_owned(),
            actual: actual.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// `blobs/sha256-<hex>.gguf`, relative to the models directory.
fn blob(sha256: &str) -> PathBuf {
    PathBuf::from("blobs").join(format!("sha256-{sha256}.gguf"))
}

/// A short, stable file name for a source's partial download and lock.
fn key(source: &str) -> String {
    hex(&Sha256::digest(source.as_bytes()))[..16].to_owned()
}

/// `base` made into a valid name.
fn sanitize(base: &str) -> String {
    let name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_start_matches(['.', '-']);
    if is_name(name) {
        name.to_owned()
    } else {
        "model".to_owned()
    }
}
