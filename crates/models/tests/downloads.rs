//! Downloads against a fake Hugging Face hub on 127.0.0.1: verification, resume, errors, the
//! lock and the hub cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

use wick_models::{ModelError, ModelRef, ModelStore, PullOptions, Settings};
use wick_testutil::{synthetic_gguf, FakeHub, FAKE_COMMIT};

const REPO: &str = "acme/tiny-GGUF";
const FILE: &str = "tiny-Q4_K_M.gguf";
const SIZE: usize = 3 << 20;

struct Fixture {
    hub: FakeHub,
    home: tempfile::TempDir,
    sha256: String,
}

fn fixture() -> Fixture {
    let hub = FakeHub::start();
    let sha256 = hub.add_file(REPO, FILE, synthetic_gguf(SIZE, "llama", 15, 1));
    hub.add_file(REPO, "tiny-Q8_0.gguf", synthetic_gguf(SIZE, "llama", 7, 2));
    hub.add_file(REPO, "README.md", b"# tiny".to_vec());
    Fixture {
        hub,
        home: tempfile::tempdir().unwrap(),
        sha256,
    }
}

impl Fixture {
    fn settings(&self) -> Settings {
        Settings::new(self.home.path()).with_hf_endpoint(self.hub.endpoint())
    }

    fn store(&self) -> ModelStore {
        ModelStore::new(self.settings()).unwrap()
    }

    /// Every file under `$WICK_HOME` except locks and the index.
    fn files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        walk(self.home.path(), &mut out);
        out.retain(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !name.ends_with(".lock") && name != "index.json"
        });
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    wick_testutil::hex(&sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

fn r(text: &str) -> ModelRef {
    text.parse().unwrap()
}

fn hf_file() -> ModelRef {
    r(&format!("hf:{REPO}/{FILE}"))
}

#[test]
fn a_download_completes_and_verifies() {
    let f = fixture();
    let pulled = f.store().pull(&hf_file(), &PullOptions::default()).unwrap();
    assert!(pulled.downloaded);
    assert_eq!(pulled.entry.sha256, f.sha256);
    assert_eq!(pulled.entry.size, SIZE as u64);
    assert_eq!(pulled.entry.name, "tiny-Q4_K_M");
    assert_eq!(pulled.entry.source, format!("hf:{REPO}/{FILE}"));
    assert_eq!(sha256_of(&pulled.path), f.sha256);
    assert!(pulled.path.starts_with(f.home.path().join("models/blobs")));
    assert_eq!(f.files(), vec![pulled.path.clone()], "no partial file left");
    // The API gave the pin, the resolve route redirected to the file.
    assert_eq!(f.hub.count("/api/models/acme/tiny-GGUF"), 1);
    assert_eq!(f.hub.count(&format!("/{REPO}/resolve/main/{FILE}")), 1);
    assert_eq!(f.hub.count("/files/"), 1);
    // Resolving again needs no request.
    let before = f.hub.requests().len();
    assert_eq!(f.store().resolve(&hf_file()).unwrap(), pulled.path);
    assert_eq!(f.store().resolve(&r("tiny-Q4_K_M")).unwrap(), pulled.path);
    assert_eq!(
        f.store().resolve(&r(&format!("{REPO}:q4_k_m"))).unwrap(),
        pulled.path
    );
    assert_eq!(f.hub.requests().len(), before);
}

#[test]
fn a_dropped_connection_is_resumed_within_one_pull() {
    let f = fixture();
    f.hub.drop_once_at(REPO, FILE, 1_234_567);
    let pulled = f.store().pull(&hf_file(), &PullOptions::default()).unwrap();
    assert_eq!(sha256_of(&pulled.path), f.sha256);
    let gets: Vec<_> = f
        .hub
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/files/"))
        .collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].range, None);
    assert_eq!(gets[1].range.as_deref(), Some("bytes=1234567-"));
}

#[test]
fn an_interrupted_pull_leaves_a_partial_file_that_the_next_pull_resumes() {
    let f = fixture();
    f.hub.drop_once_at(REPO, FILE, 2_000_000);
    let mut settings = f.settings();
    settings.retries = 0;
    let err = ModelStore::new(settings)
        .unwrap()
        .pull(&hf_file(), &PullOptions::default())
        .unwrap_err();
    assert!(err.is_resumable(), "{err}");
    assert!(err.to_string().contains("resume"), "{err}");
    let partial = f.files();
    assert_eq!(
        partial.len(),
        2,
        "the partial file and its ETag: {partial:?}"
    );
    assert!(partial
        .iter()
        .all(|p| p.starts_with(f.home.path().join("tmp"))));
    let part = partial
        .iter()
        .find(|p| p.extension().unwrap() == "part")
        .unwrap();
    assert_eq!(std::fs::metadata(part).unwrap().len(), 2_000_000);
    assert!(
        f.store().list().unwrap().is_empty(),
        "nothing stored that looks whole"
    );

    let pulled = f.store().pull(&hf_file(), &PullOptions::default()).unwrap();
    assert_eq!(sha256_of(&pulled.path), f.sha256);
    let last = f
        .hub
        .requests()
        .into_iter()
        .rfind(|r| r.path.starts_with("/files/"))
        .unwrap();
    assert_eq!(last.range.as_deref(), Some("bytes=2000000-"));
    assert_eq!(f.files(), vec![pulled.path]);
}

#[test]
fn a_wrong_hash_is_an_error_and_leaves_no_file() {
    let f = fixture();
    let wrong = "0".repeat(64);
    let err = f
        .store()
        .pull(
            &hf_file(),
            &PullOptions::default().with_sha256(Some(&wrong)),
        )
        .unwrap_err();
    assert!(matches!(err, ModelError::HashMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&wrong) && msg.contains(&f.sha256), "{msg}");
    assert!(f.files().is_empty(), "left behind: {:?}", f.files());
    assert!(f.store().list().unwrap().is_empty());
    // A plain URL with a pin goes the same way.
    let url = r(&f.hub.file_url(REPO, FILE));
    let err = f
        .store()
        .pull(&url, &PullOptions::default().with_sha256(Some(&wrong)))
        .unwrap_err();
    assert!(matches!(err, ModelError::HashMismatch { .. }), "{err}");
    assert!(f.files().is_empty(), "left behind: {:?}", f.files());
}

#[test]
fn missing_repositories_files_and_urls_are_404_errors() {
    let f = fixture();
    let err = f
        .store()
        .pull(&r("hf:acme/nothing/x.gguf"), &PullOptions::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ModelError::Status { status: 404, .. }),
        "{msg}"
    );
    assert!(msg.contains("/api/models/acme/nothing"), "{msg}");
    let err = f
        .store()
        .pull(
            &r(&format!("hf:{REPO}/missing.gguf")),
            &PullOptions::default(),
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("404") && msg.contains("its GGUF files: tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"),
        "{msg}"
    );
    let url = format!("{}/files/acme/tiny-GGUF/gone.gguf", f.hub.endpoint());
    let err = f
        .store()
        .pull(&r(&url), &PullOptions::default())
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!("HTTP 404 from {url}")),
        "{err}"
    );
    // A plain URL is not Hugging Face's: no token hint (issue 15).
    assert!(!err.to_string().contains("HF_TOKEN"), "{err}");
    assert!(f.files().is_empty());
}

#[test]
fn private_repositories_need_the_right_token() {
    let f = fixture();
    f.hub.set_token(REPO, "secret");
    let err = f
        .store()
        .pull(&hf_file(), &PullOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::Unauthorized {
                status: 401,
                token_sent: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("set HF_TOKEN"), "{err}");
    let wrong = ModelStore::new(f.settings().with_hf_token(Some("guess"))).unwrap();
    let err = wrong.pull(&hf_file(), &PullOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::Unauthorized {
                status: 401,
                token_sent: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(f.files().is_empty());
    let right = ModelStore::new(f.settings().with_hf_token(Some("secret"))).unwrap();
    let pulled = right.pull(&hf_file(), &PullOptions::default()).unwrap();
    assert_eq!(pulled.entry.sha256, f.sha256);
    let resolve = f
        .hub
        .requests()
        .into_iter()
        .rfind(|r| r.path.contains("/resolve/"))
        .unwrap();
    assert_eq!(resolve.authorization.as_deref(), Some("Bearer secret"));
}

#[test]
fn a_body_under_one_megabyte_is_refused() {
    let f = fixture();
    f.hub
        .add_file(REPO, "small.gguf", synthetic_gguf(100_000, "llama", 15, 0));
    let err = f
        .store()
        .pull(
            &r(&format!("hf:{REPO}/small.gguf")),
            &PullOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(err, ModelError::TooSmall { min: 1_000_000, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("too small"), "{err}");
    assert!(f.files().is_empty());
}

#[test]
fn a_big_body_that_is_not_gguf_is_refused() {
    let f = fixture();
    f.hub.add_file(REPO, "page.gguf", b"<html>".repeat(400_000));
    let err = f
        .store()
        .pull(&r(&format!("hf:{REPO}/page.gguf")), &PullOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("not a GGUF file"), "{err}");
    assert!(f.files().is_empty());
}

#[test]
fn two_concurrent_pulls_download_once() {
    let f = fixture();
    f.hub.set_delay(REPO, FILE, Duration::from_millis(5));
    let pulls: Vec<_> = (0..2)
        .map(|_| {
            let store = f.store();
            std::thread::spawn(move || store.pull(&hf_file(), &PullOptions::default()).unwrap())
        })
        .collect();
    let results: Vec<_> = pulls.into_iter().map(|p| p.join().unwrap()).collect();
    assert_eq!(f.hub.count("/files/"), 1, "{:?}", f.hub.requests());
    assert_eq!(results.iter().filter(|p| p.downloaded).count(), 1);
    assert_eq!(results[0].path, results[1].path);
    assert_eq!(sha256_of(&results[0].path), f.sha256);
    assert_eq!(f.store().list().unwrap().len(), 1);
}

#[test]
fn the_hub_cache_is_used_without_any_request() {
    let f = fixture();
    let cache = tempfile::tempdir().unwrap();
    let root = cache.path().join("models--acme--tiny-GGUF");
    let bytes = synthetic_gguf(SIZE, "llama", 15, 1);
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::create_dir_all(root.join("snapshots").join(FAKE_COMMIT)).unwrap();
    std::fs::write(root.join("blobs").join(&f.sha256), &bytes).unwrap();
    std::fs::write(root.join("refs/main"), FAKE_COMMIT).unwrap();
    let link = root.join("snapshots").join(FAKE_COMMIT).join(FILE);
    std::os::unix::fs::symlink(root.join("blobs").join(&f.sha256), &link).unwrap();

    let store = ModelStore::new(f.settings().with_hf_cache(Some(cache.path()))).unwrap();
    assert_eq!(store.resolve(&hf_file()).unwrap(), link);
    assert_eq!(store.resolve(&r(REPO)).unwrap(), link, "Q4_K_M by default");
    let pulled = store
        .pull(&r(&format!("{REPO}:Q4_K_M")), &PullOptions::default())
        .unwrap();
    assert!(!pulled.downloaded);
    assert_eq!(pulled.entry.sha256, f.sha256, "hashed, not trusted");
    assert!(f.hub.requests().is_empty(), "{:?}", f.hub.requests());
    // The store records the cache file where it is; removing the name leaves it there.
    assert_eq!(pulled.entry.file, link);
    store.remove("tiny-Q4_K_M").unwrap();
    assert!(link.exists());
    assert!(f.files().is_empty());
}

#[test]
fn a_quantization_is_picked_through_the_api() {
    let f = fixture();
    let pulled = f
        .store()
        .pull(&r(&format!("{REPO}:Q8_0")), &PullOptions::default())
        .unwrap();
    assert_eq!(pulled.entry.source, format!("hf:{REPO}/tiny-Q8_0.gguf"));
    let header = wick_models::GgufHeader::read(&pulled.path).unwrap();
    assert_eq!(header.quantization().as_deref(), Some("Q8_0"));
    let err = f
        .store()
        .pull(&r(&format!("{REPO}:Q2_K")), &PullOptions::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("Q2_K") && msg.contains("tiny-Q4_K_M.gguf"),
        "{msg}"
    );
    f.hub.add_file(
        REPO,
        "other-Q4_K_M.gguf",
        synthetic_gguf(SIZE, "llama", 15, 9),
    );
    let err = f
        .store()
        .pull(&r(REPO), &PullOptions::default())
        .unwrap_err();
    assert!(matches!(err, ModelError::Ambiguous { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("other-Q4_K_M.gguf, tiny-Q4_K_M.gguf"),
        "{err}"
    );
}

#[test]
fn a_plain_url_downloads_once_and_names_and_removes() {
    let f = fixture();
    let url = r(&f.hub.file_url(REPO, FILE));
    let store = f.store();
    let pulled = store
        .pull(&url, &PullOptions::default().with_name(Some("mine")))
        .unwrap();
    assert_eq!(pulled.entry.name, "mine");
    assert_eq!(store.resolve(&url).unwrap(), pulled.path);
    assert_eq!(store.resolve(&r("mine")).unwrap(), pulled.path);
    assert_eq!(f.hub.count("/files/"), 1);
    // A second name for the same content shares the file.
    store
        .pull(&r("mine"), &PullOptions::default().with_name(Some("again")))
        .unwrap();
    let err = store
        .pull(
            &r(&format!("hf:{REPO}/tiny-Q8_0.gguf")),
            &PullOptions::default().with_name(Some("mine")),
        )
        .unwrap_err();
    assert!(matches!(err, ModelError::NameTaken { .. }), "{err}");
    store.remove("mine").unwrap();
    assert!(pulled.path.exists(), "still named `again`");
    store.remove("again").unwrap();
    assert!(!pulled.path.exists());
    let err = store.resolve(&r("again")).unwrap_err();
    assert!(err.to_string().contains("wick ls"), "{err}");
}

#[test]
fn a_file_that_changed_since_the_interruption_is_fetched_whole() {
    let f = fixture();
    f.hub.drop_once_at(REPO, FILE, 1_500_000);
    let mut settings = f.settings();
    settings.retries = 0;
    let store = ModelStore::new(settings).unwrap();
    assert!(store
        .pull(&hf_file(), &PullOptions::default())
        .unwrap_err()
        .is_resumable());
    // The repository now holds other bytes under the same name: the old ETag no longer
    // matches, so the server answers the ranged request with the whole new file.
    let new_sha = f
        .hub
        .add_file(REPO, FILE, synthetic_gguf(SIZE, "llama", 15, 42));
    assert_ne!(new_sha, f.sha256);
    let pulled = f.store().pull(&hf_file(), &PullOptions::default()).unwrap();
    assert_eq!(sha256_of(&pulled.path), new_sha);
    let last = f
        .hub
        .requests()
        .into_iter()
        .rfind(|r| r.path.starts_with("/files/"))
        .unwrap();
    assert_eq!(
        last.range.as_deref(),
        Some("bytes=1500000-"),
        "it tried to resume"
    );
    assert_eq!(f.files(), vec![pulled.path]);
}

#[test]
fn issue_15_a_partial_file_that_is_already_whole_is_not_fetched_again() {
    let f = fixture();
    f.hub.drop_once_at(REPO, FILE, 2_000_000);
    let mut settings = f.settings();
    settings.retries = 0;
    let interrupted = ModelStore::new(settings)
        .unwrap()
        .pull(&hf_file(), &PullOptions::default());
    assert!(interrupted.is_err());
    let part = f
        .files()
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "part"))
        .expect("a partial file");
    // The rest arrived some other way (a killed process that had written it all).
    std::fs::write(&part, synthetic_gguf(SIZE, "llama", 15, 1)).unwrap();
    let before = f.hub.count("/files/");
    let pulled = f.store().pull(&hf_file(), &PullOptions::default()).unwrap();
    assert_eq!(sha256_of(&pulled.path), f.sha256);
    assert_eq!(
        f.hub.count("/files/"),
        before + 1,
        "one request, answered 416"
    );
    let last = f
        .hub
        .requests()
        .into_iter()
        .rfind(|r| r.path.starts_with("/files/"))
        .unwrap();
    assert_eq!(
        last.range.as_deref(),
        Some(format!("bytes={SIZE}-").as_str())
    );
}

#[test]
fn issue_15_a_stalled_server_is_an_error_not_a_hang() {
    let f = fixture();
    f.hub.set_delay(REPO, FILE, Duration::from_secs(5));
    let mut settings = f.settings();
    settings.retries = 0;
    settings.read_timeout = Duration::from_millis(300);
    let err = ModelStore::new(settings)
        .unwrap()
        .pull(&hf_file(), &PullOptions::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("timed out") || msg.contains("timeout"),
        "{msg}"
    );
}
