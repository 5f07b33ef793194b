//! What `wick serve` can load on demand: the models of the store and the GGUF files of
//! `--models-dir`; each model's memory estimate, and the default memory budget.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use wick::models::{GgufHeader, ModelStore};

/// A model found for serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The name it is served under.
    pub(crate) id: String,
    /// Other names it answers to.
    pub(crate) aliases: Vec<String>,
    /// Its GGUF file (the first shard of a split model).
    pub(crate) path: PathBuf,
}

/// Every model of the store, by its store name (`wick ls`); a file gone missing is skipped.
pub(crate) fn store_models(store: &ModelStore) -> Result<Vec<Found>> {
    let listed = store.list().context("reading the model store")?;
    Ok(listed
        .into_iter()
        .filter(|m| m.path.is_file())
        .map(|m| Found {
            id: m.entry.name.clone(),
            aliases: Vec::new(),
            path: m.path,
        })
        .collect())
}

/// Every model of `dir`: each `.gguf` file in it (served under its name without `.gguf`), and
/// each subdirectory holding GGUF files (served under the subdirectory's name: a split model's
/// shards, or a model beside its projector). Projectors (`mmproj*`) and the later shards of a
/// split model (`-00002-of-00003.gguf`) are not models of their own. Sorted by name.
pub(crate) fn dir_models(dir: &Path) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading --models-dir {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading --models-dir {}", dir.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if path.is_dir() {
            if let Some(first) = model_files(&path)?.into_iter().next() {
                found.push(Found {
                    id: name,
                    aliases: Vec::new(),
                    path: first,
                });
            }
        } else if is_model_file(&path) {
            found.push(Found {
                id: model_name(&name),
                aliases: vec![name],
                path,
            });
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

/// The model files of `dir` (not its subdirectories), sorted.
fn model_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| is_model_file(p))
        .collect();
    files.sort();
    Ok(files)
}

/// A `.gguf` file that is a model: not a projector, not a later shard.
fn is_model_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let lower = name.to_ascii_lowercase();
    path.is_file()
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        && !lower.starts_with("mmproj")
        && shard(&lower).is_none_or(|n| n == 1)
}

/// The shard number of `name-00002-of-00003.gguf`.
fn shard(name: &str) -> Option<u32> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, _total) = stem.rsplit_once("-of-")?;
    let (_, number) = rest.rsplit_once('-')?;
    number.parse().ok()
}

/// `Model-Q4_K_M.gguf` → `Model-Q4_K_M`; `Model-00001-of-00002.gguf` → `Model`.
fn model_name(file: &str) -> String {
    let stem = file
        .strip_suffix(".gguf")
        .or_else(|| file.strip_suffix(".GGUF"))
        .unwrap_or(file);
    if shard(&file.to_ascii_lowercase()).is_some() {
        if let Some((base, _)) = stem.rsplit_once("-of-") {
            if let Some((base, _)) = base.rsplit_once('-') {
                return base.to_owned();
            }
        }
    }
    stem.to_owned()
}

/// Bytes the model at `path` takes loaded with `context_tokens` of KV cache in all (its file
/// and an F16 cache; see [`GgufHeader::memory_estimate`]); its file size when the header
/// cannot be read.
pub(crate) fn estimate(path: &Path, context_tokens: u64) -> u64 {
    match GgufHeader::read(path) {
        Ok(header) => header.memory_estimate(context_tokens),
        Err(_) => std::fs::metadata(path).map_or(0, |m| m.len()),
    }
}

/// The memory this machine can spare now: `MemAvailable` of `/proc/meminfo` (Linux); `None`
/// where it cannot be read.
pub(crate) fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&text)
}

fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line
        .trim_start_matches("MemAvailable:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// `--memory`: `auto` (what the machine can spare at start), `none` (no budget), or a size:
/// bytes, or a number with `K`, `M`, `G` or `T` (powers of 1024; `GB`, `GiB` too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    Auto,
    Unlimited,
    Bytes(u64),
}

impl std::str::FromStr for Memory {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "auto" => return Ok(Memory::Auto),
            "none" | "unlimited" => return Ok(Memory::Unlimited),
            _ => {}
        }
        let upper = text.to_ascii_uppercase();
        let number_end = upper
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(upper.len());
        let (number, unit) = upper.split_at(number_end);
        let shift = match unit.trim() {
            "" | "B" => 0,
            "K" | "KB" | "KIB" => 10,
            "M" | "MB" | "MIB" => 20,
            "G" | "GB" | "GIB" => 30,
            "T" | "TB" | "TIB" => 40,
            _ => return Err(bad_memory(text)),
        };
        let value: f64 = number.parse().map_err(|_| bad_memory(text))?;
        let scaled = value * 2f64.powi(shift);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bytes = scaled as u64;
        if !scaled.is_finite() || bytes == 0 {
            return Err(bad_memory(text));
        }
        Ok(Memory::Bytes(bytes))
    }
}

fn bad_memory(text: &str) -> String {
    format!("`{text}` is not a memory size: give bytes (`8000000000`), a size (`8G`, `512M`), `auto` or `none`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_directory_lists_models_not_projectors_or_later_shards() {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "b-model.Q4_K_M.gguf",
            "a-model.gguf",
            "mmproj-a-model-f16.gguf",
            "big-00001-of-00002.gguf",
            "big-00002-of-00002.gguf",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(file), b"x").unwrap();
        }
        let vision = dir.path().join("vision");
        std::fs::create_dir(&vision).unwrap();
        std::fs::write(vision.join("mmproj-f16.gguf"), b"x").unwrap();
        std::fs::write(vision.join("model-q8_0.gguf"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let found = dir_models(dir.path()).unwrap();
        let ids: Vec<&str> = found.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["a-model", "b-model.Q4_K_M", "big", "vision"]);
        assert_eq!(found[2].path, dir.path().join("big-00001-of-00002.gguf"));
        assert_eq!(found[3].path, vision.join("model-q8_0.gguf"));
        assert_eq!(found[0].aliases, ["a-model.gguf"]);
    }

    #[test]
    fn memory_sizes_read_as_people_write_them() {
        assert_eq!("auto".parse(), Ok(Memory::Auto));
        assert_eq!("none".parse(), Ok(Memory::Unlimited));
        assert_eq!("1024".parse(), Ok(Memory::Bytes(1024)));
        assert_eq!("8G".parse(), Ok(Memory::Bytes(8 << 30)));
        assert_eq!("1.5GiB".parse(), Ok(Memory::Bytes(3 << 29)));
        assert_eq!("512m".parse(), Ok(Memory::Bytes(512 << 20)));
        assert_eq!("2T".parse(), Ok(Memory::Bytes(2 << 40)));
        for bad in ["", "0", "lots", "5X", "-1G"] {
            assert!(bad.parse::<Memory>().is_err(), "{bad}");
        }
    }

    #[test]
    fn available_memory_is_read_from_meminfo() {
        let text = "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(meminfo_available(text), Some(8_000_000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 1 kB\n"), None);
    }
}
