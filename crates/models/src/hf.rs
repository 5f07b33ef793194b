//! Hugging Face: the model-info API, the resolve URLs, picking a file by quantization, and the
//! standard hub cache (`models--owner--repo/{refs,snapshots}`) that other tools fill.

use std::path::{Path, PathBuf};

use reqwest::blocking::Client;
use reqwest::header::AUTHORIZATION;
use reqwest::Url;

use crate::download::{status_error, transport, Fetch};
use crate::error::ModelError;
use crate::reference::{has_gguf_ext, HfRepo, DEFAULT_QUANT};

/// One file of a repository, as the API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sibling {
    pub(crate) file: String,
    pub(crate) size: Option<u64>,
    /// The LFS SHA-256 (the content's hash, for files kept in LFS as models are).
    pub(crate) sha256: Option<String>,
}

fn url_with(endpoint: &str, segments: &[&str]) -> Result<Url, ModelError> {
    let bad = |reason: String| ModelError::Api {
        url: endpoint.to_owned(),
        reason,
    };
    let mut url =
        Url::parse(endpoint).map_err(|e| bad(format!("HF_ENDPOINT is not a URL: {e}")))?;
    url.path_segments_mut()
        .map_err(|()| bad("HF_ENDPOINT cannot have a path".to_owned()))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

/// `{endpoint}/api/models/{owner}/{repo}/revision/{rev}?blobs=true`.
pub(crate) fn api_url(endpoint: &str, repo: &HfRepo) -> Result<String, ModelError> {
    let mut url = url_with(
        endpoint,
        &[
            "api",
            "models",
            &repo.owner,
            &repo.name,
            "revision",
            &repo.revision,
        ],
    )?;
    url.set_query(Some("blobs=true"));
    Ok(url.to_string())
}

/// `{endpoint}/{owner}/{repo}/resolve/{rev}/{file}`.
pub(crate) fn resolve_url(endpoint: &str, repo: &HfRepo, file: &str) -> Result<String, ModelError> {
    let mut segments = vec![repo.owner.as_str(), &repo.name, "resolve", &repo.revision];
    segments.extend(file.split('/'));
    Ok(url_with(endpoint, &segments)?.to_string())
}

/// The repository's files, from the model-info API.
pub(crate) fn list_files(
    client: &Client,
    endpoint: &str,
    token: Option<&str>,
    repo: &HfRepo,
) -> Result<Vec<Sibling>, ModelError> {
    let url = api_url(endpoint, repo)?;
    let mut request = client.get(&url);
    if let Some(token) = token {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = request
        .send()
        .map_err(|e| transport(&url, &e.without_url(), false))?;
    if !response.status().is_success() {
        let fetch = Fetch {
            url: &url,
            bearer: token,
            sha256: None,
            label: "",
            hugging_face: true,
            progress: None,
        };
        return Err(status_error(&fetch, response.status()));
    }
    let body = response
        .text()
        .map_err(|e| transport(&url, &e.without_url(), false))?;
    parse_siblings(&url, &body)
}

fn parse_siblings(url: &str, body: &str) -> Result<Vec<Sibling>, ModelError> {
    let api = |reason: &str| ModelError::Api {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| api(&format!("not JSON ({e})")))?;
    let siblings = json
        .get("siblings")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| api("no `siblings` list"))?;
    Ok(siblings
        .iter()
        .filter_map(|s| {
            let file = s.get("rfilename")?.as_str()?.to_owned();
            let lfs = s.get("lfs");
            let size = s
                .get("size")
                .or_else(|| lfs?.get("size"))
                .and_then(serde_json::Value::as_u64);
            let sha256 = lfs
                .and_then(|l| l.get("sha256").or_else(|| l.get("oid")))
                .and_then(serde_json::Value::as_str)
                .map(|h| h.trim_start_matches("sha256:").to_ascii_lowercase())
                .filter(|h| is_sha256(h));
            Some(Sibling { file, size, sha256 })
        })
        .collect())
}

/// Whether `text` is 64 lower- or upper-case hex digits.
pub(crate) fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit())
}

/// Whether `file`'s name carries the quantization tag `quant` (case-insensitive, as a whole
/// token: `Q4_K` does not match `Q4_K_M`).
pub(crate) fn matches_quant(file: &str, quant: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file).to_ascii_uppercase();
    let quant = quant.to_ascii_uppercase();
    name.match_indices(&quant).any(|(i, _)| {
        let before = name[..i].chars().next_back();
        let after = name[i + quant.len()..].chars().next();
        before.is_none_or(|c| !c.is_ascii_alphanumeric())
            && after.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
    })
}

/// Picks the one GGUF file of `quant` (default [`DEFAULT_QUANT`]) among `files`.
pub(crate) fn pick_file(
    repo: &HfRepo,
    quant: Option<&str>,
    files: &[String],
) -> Result<String, ModelError> {
    let models: Vec<String> = files
        .iter()
        .filter(|f| has_gguf_ext(f) && !f.to_ascii_lowercase().contains("mmproj"))
        .cloned()
        .collect();
    let tag = quant.unwrap_or(DEFAULT_QUANT);
    let mut matching: Vec<String> = models
        .iter()
        .filter(|f| matches_quant(f, tag))
        .cloned()
        .collect();
    // A split model: its first shard stands for the whole.
    if matching.len() > 1 && matching.iter().all(|f| f.contains("-of-")) {
        matching.retain(|f| f.contains("-00001-of-"));
    }
    match matching.len() {
        1 => Ok(matching.remove(0)),
        0 if quant.is_none() && models.len() == 1 => Ok(models[0].clone()),
        0 => Err(ModelError::NoMatch {
            repo: repo.id(),
            quant: tag.to_owned(),
            candidates: models,
        }),
        _ => Err(ModelError::Ambiguous {
            repo: repo.id(),
            quant: tag.to_owned(),
            candidates: matching,
        }),
    }
}

/// The snapshot directory of `repo` in the hub cache, through `refs/{rev}`.
fn snapshot_dir(cache: &Path, repo: &HfRepo) -> Option<PathBuf> {
    let dir = cache.join(format!("models--{}--{}", repo.owner, repo.name));
    let commit =
        if repo.revision.len() == 40 && repo.revision.chars().all(|c| c.is_ascii_hexdigit()) {
            repo.revision.clone()
        } else {
            std::fs::read_to_string(dir.join("refs").join(&repo.revision))
                .ok()?
                .trim()
                .to_owned()
        };
    if commit.is_empty() || commit.contains(['/', '\\']) || commit.starts_with('.') {
        return None;
    }
    Some(dir.join("snapshots").join(commit))
}

/// `file` of `repo` in the hub cache, when another tool downloaded it.
pub(crate) fn cached_file(cache: &Path, repo: &HfRepo, file: &str) -> Option<PathBuf> {
    let path = snapshot_dir(cache, repo)?.join(file);
    // Snapshots hold symlinks into blobs/; metadata follows them (a dangling link is no file).
    std::fs::metadata(&path).ok()?.is_file().then_some(path)
}

/// The GGUF files of `repo` in the hub cache (paths relative to the snapshot).
pub(crate) fn cached_files(cache: &Path, repo: &HfRepo) -> Vec<String> {
    let Some(root) = snapshot_dir(cache, repo) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(&root) {
                let rel = rel.to_string_lossy().replace('\\', "/");
                if has_gguf_ext(&rel) && path.is_file() {
                    found.push(rel);
                }
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> HfRepo {
        HfRepo::new("own", "rep").unwrap()
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn quant_tags_match_whole_tokens() {
        assert!(matches_quant("m-Q4_K_M.gguf", "q4_k_m"));
        assert!(matches_quant("dir/m.Q8_0.gguf", "Q8_0"));
        assert!(!matches_quant("m-Q4_K_M.gguf", "Q4_K"));
        assert!(!matches_quant("m-IQ4_XS.gguf", "Q4_XS"));
        assert!(matches_quant("Q6_K.gguf", "Q6_K"));
    }

    #[test]
    fn picks_one_file_or_lists_candidates() {
        let all = files(&[
            "m-Q4_K_M.gguf",
            "m-Q8_0.gguf",
            "mmproj-Q8_0.gguf",
            "README.md",
        ]);
        assert_eq!(pick_file(&repo(), None, &all).unwrap(), "m-Q4_K_M.gguf");
        assert_eq!(
            pick_file(&repo(), Some("q8_0"), &all).unwrap(),
            "m-Q8_0.gguf"
        );
        let err = pick_file(&repo(), Some("Q2_K"), &all)
            .unwrap_err()
            .to_string();
        assert!(err.contains("m-Q4_K_M.gguf, m-Q8_0.gguf"), "{err}");
        assert!(!err.contains("mmproj"), "{err}");
        let two = files(&["a-Q4_K_M.gguf", "b-Q4_K_M.gguf"]);
        let err = pick_file(&repo(), None, &two).unwrap_err();
        assert!(matches!(err, ModelError::Ambiguous { .. }), "{err}");
        assert!(
            err.to_string().contains("a-Q4_K_M.gguf, b-Q4_K_M.gguf"),
            "{err}"
        );
        let only = files(&["model-f16.gguf"]);
        assert_eq!(pick_file(&repo(), None, &only).unwrap(), "model-f16.gguf");
        let split = files(&[
            "m-Q4_K_M-00002-of-00002.gguf",
            "m-Q4_K_M-00001-of-00002.gguf",
        ]);
        assert_eq!(
            pick_file(&repo(), None, &split).unwrap(),
            "m-Q4_K_M-00001-of-00002.gguf"
        );
    }

    #[test]
    fn siblings_take_the_lfs_sha256_or_oid() {
        let sha = "ab".repeat(32);
        let body = format!(
            r#"{{"siblings":[{{"rfilename":"a.gguf","size":5,"lfs":{{"sha256":"{sha}"}}}},
            {{"rfilename":"b.gguf","lfs":{{"oid":"sha256:{sha}","size":7}}}},
            {{"rfilename":"README.md"}}]}}"#
        );
        let s = parse_siblings("u", &body).unwrap();
        assert_eq!(
            s[0],
            Sibling {
                file: "a.gguf".into(),
                size: Some(5),
                sha256: Some(sha.clone())
            }
        );
        assert_eq!(
            s[1],
            Sibling {
                file: "b.gguf".into(),
                size: Some(7),
                sha256: Some(sha)
            }
        );
        assert_eq!(s[2].sha256, None);
        assert!(parse_siblings("u", "<html>").is_err());
    }

    #[test]
    fn urls_are_built_under_the_endpoint() {
        let r = repo();
        assert_eq!(
            api_url("http://127.0.0.1:9/", &r).unwrap(),
            "http://127.0.0.1:9/api/models/own/rep/revision/main?blobs=true"
        );
        assert_eq!(
            resolve_url("http://h/mirror", &r, "sub/m q.gguf").unwrap(),
            "http://h/mirror/own/rep/resolve/main/sub/m%20q.gguf"
        );
    }

    #[test]
    fn finds_files_in_the_hub_cache_layout() {
        let cache = tempfile::tempdir().unwrap();
        let root = cache.path().join("models--own--rep");
        let snap = root.join("snapshots/abc123");
        std::fs::create_dir_all(snap.join("sub")).unwrap();
        std::fs::create_dir_all(root.join("refs")).unwrap();
        std::fs::write(root.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(snap.join("m-Q4_K_M.gguf"), b"x").unwrap();
        std::fs::write(snap.join("sub/n-Q8_0.gguf"), b"x").unwrap();
        assert_eq!(
            cached_file(cache.path(), &repo(), "m-Q4_K_M.gguf"),
            Some(snap.join("m-Q4_K_M.gguf"))
        );
        assert_eq!(cached_file(cache.path(), &repo(), "other.gguf"), None);
        assert_eq!(
            cached_files(cache.path(), &repo()),
            files(&["m-Q4_K_M.gguf", "sub/n-Q8_0.gguf"])
        );
        let other = HfRepo::new("own", "missing").unwrap();
        assert!(cached_files(cache.path(), &other).is_empty());
    }
}
