//! A stand-in for the Hugging Face hub on 127.0.0.1, for download tests.
//!
//! Routes, as the hub answers them:
//! - `GET /api/models/{owner}/{repo}[/revision/{rev}]`: model info, `siblings` with `size` and
//!   `lfs.sha256`;
//! - `GET /{owner}/{repo}/resolve/{rev}/{file}`: `302` to the file route, with `ETag` and
//!   `X-Repo-Commit`;
//! - `GET /files/{owner}/{repo}/{file}`: the bytes, honouring `Range` (`206` + `Content-Range`,
//!   `416` past the end) and `If-Range`, with an `ETag`.
//!
//! A repository can be private (`401` unless `Authorization: Bearer TOKEN` matches), a file can
//! drop the connection once part-way through its body, or trickle out slowly. Every request is
//! logged so tests can count them.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::hex;

/// One request the hub received.
#[derive(Debug, Clone)]
pub struct Logged {
    /// `GET`, `HEAD`.
    pub method: String,
    /// The path, as sent.
    pub path: String,
    /// The `Range` header.
    pub range: Option<String>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
}

#[derive(Debug, Clone)]
struct HubFile {
    bytes: Arc<Vec<u8>>,
    sha256: String,
    drop_once_at: Option<u64>,
    delay: Option<Duration>,
}

#[derive(Debug, Default)]
struct Repo {
    token: Option<String>,
    files: BTreeMap<String, HubFile>,
}

#[derive(Debug, Default)]
struct State {
    repos: Mutex<BTreeMap<String, Repo>>,
    log: Mutex<Vec<Logged>>,
    dropped: Mutex<HashSet<String>>,
}

/// The fake hub; it serves until the test process ends.
#[derive(Debug, Clone)]
pub struct FakeHub {
    endpoint: String,
    state: Arc<State>,
}

/// The commit every repository of the fake hub is at.
pub const FAKE_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

impl FakeHub {
    /// Starts a hub on an ephemeral port of 127.0.0.1.
    ///
    /// # Panics
    ///
    /// When no port can be bound.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let endpoint = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let _ = handle(stream, &state);
                });
            }
        });
        Self { endpoint, state }
    }

    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Adds `file` to repository `repo` (`owner/name`); returns its SHA-256.
    pub fn add_file(&self, repo: &str, file: &str, bytes: Vec<u8>) -> String {
        let sha256 = hex(&Sha256::digest(&bytes));
        let entry = HubFile {
            bytes: Arc::new(bytes),
            sha256: sha256.clone(),
            drop_once_at: None,
            delay: None,
        };
        self.repos()
            .entry(repo.to_owned())
            .or_default()
            .files
            .insert(file.to_owned(), entry);
        sha256
    }

    /// Makes `repo` private: only `Authorization: Bearer {token}` gets in.
    pub fn set_token(&self, repo: &str, token: &str) {
        self.repos().entry(repo.to_owned()).or_default().token = Some(token.to_owned());
    }

    /// The first download of `file` breaks off after byte `at` of the file.
    pub fn drop_once_at(&self, repo: &str, file: &str, at: u64) {
        self.with_file(repo, file, |f| f.drop_once_at = Some(at));
    }

    /// Sends `file` in 64 KiB pieces with `delay` between them.
    pub fn set_delay(&self, repo: &str, file: &str, delay: Duration) {
        self.with_file(repo, file, |f| f.delay = Some(delay));
    }

    /// The direct URL of a file (no redirect, no auth).
    pub fn file_url(&self, repo: &str, file: &str) -> String {
        format!("{}/files/{repo}/{file}", self.endpoint)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many requests had a path starting with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.path.starts_with(prefix))
            .count()
    }

    fn repos(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Repo>> {
        self.state
            .repos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn with_file(&self, repo: &str, file: &str, f: impl FnOnce(&mut HubFile)) {
        let mut repos = self.repos();
        let entry = repos
            .get_mut(repo)
            .and_then(|r| r.files.get_mut(file))
            .unwrap_or_else(|| panic!("no file {repo}/{file} on the fake hub"));
        f(entry);
    }
}

struct Request {
    path: String,
    headers: BTreeMap<String, String>,
}

fn read_request(stream: &TcpStream) -> std::io::Result<(String, Request)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    Ok((method, Request { path, headers }))
}

fn handle(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let (method, req) = read_request(&stream)?;
    state
        .log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Logged {
            method,
            path: req.path.clone(),
            range: req.headers.get("range").cloned(),
            authorization: req.headers.get("authorization").cloned(),
        });
    let path = percent_decode(req.path.split('?').next().unwrap_or_default());
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", "models", owner, repo] | ["api", "models", owner, repo, "revision", _] => {
            api(&mut stream, state, &req, &format!("{owner}/{repo}"))
        }
        [owner, repo, "resolve", _rev, file @ ..] if !file.is_empty() => resolve(
            &mut stream,
            state,
            &req,
            &format!("{owner}/{repo}"),
            &file.join("/"),
        ),
        ["files", owner, repo, file @ ..] if !file.is_empty() => serve(
            &mut stream,
            state,
            &req,
            &format!("{owner}/{repo}"),
            &file.join("/"),
        ),
        _ => respond(&mut stream, "404 Not Found", &[], b"not found"),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    let _ = write!(head, "Content-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// Whether the repository is private; `None` (an error response sent) when it is missing or
/// the token does not fit.
fn authorize(stream: &mut TcpStream, state: &State, req: &Request, repo: &str) -> Option<bool> {
    let repos = state.repos.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(r) = repos.get(repo) else {
        let headers = [("X-Error-Code", "RepoNotFound".to_owned())];
        let _ = respond(stream, "404 Not Found", &headers, b"Repository not found");
        return None;
    };
    if let Some(token) = &r.token {
        if req.headers.get("authorization") != Some(&format!("Bearer {token}")) {
            let _ = respond(stream, "401 Unauthorized", &[], b"Invalid credentials");
            return None;
        }
    }
    Some(r.token.is_some())
}

fn api(stream: &mut TcpStream, state: &State, req: &Request, repo: &str) -> std::io::Result<()> {
    let Some(private) = authorize(stream, state, req, repo) else {
        return Ok(());
    };
    let repos = state.repos.lock().unwrap_or_else(PoisonError::into_inner);
    let siblings: Vec<serde_json::Value> = repos[repo]
        .files
        .iter()
        .map(|(name, f)| {
            serde_json::json!({
                "rfilename": name,
                "size": f.bytes.len(),
                "blobId": &f.sha256[..40],
                "lfs": { "sha256": f.sha256, "size": f.bytes.len(), "pointerSize": 134 },
            })
        })
        .collect();
    let body = serde_json::json!({
        "id": repo, "modelId": repo, "sha": FAKE_COMMIT, "private": private,
        "siblings": siblings,
    });
    let json = [("Content-Type", "application/json".to_owned())];
    respond(stream, "200 OK", &json, body.to_string().as_bytes())
}

fn resolve(
    stream: &mut TcpStream,
    state: &State,
    req: &Request,
    repo: &str,
    file: &str,
) -> std::io::Result<()> {
    if authorize(stream, state, req, repo).is_none() {
        return Ok(());
    }
    let found = state.repos.lock().unwrap_or_else(PoisonError::into_inner)[repo]
        .files
        .get(file)
        .cloned();
    let Some(f) = found else {
        let headers = [("X-Error-Code", "EntryNotFound".to_owned())];
        return respond(stream, "404 Not Found", &headers, b"Entry not found");
    };
    let host = req.headers.get("host").cloned().unwrap_or_default();
    let headers = [
        ("Location", format!("http://{host}/files/{repo}/{file}")),
        ("ETag", format!("\"{}\"", f.sha256)),
        ("X-Repo-Commit", FAKE_COMMIT.to_owned()),
        ("X-Linked-Size", f.bytes.len().to_string()),
    ];
    respond(stream, "302 Found", &headers, b"")
}

fn serve(
    stream: &mut TcpStream,
    state: &State,
    req: &Request,
    repo: &str,
    file: &str,
) -> std::io::Result<()> {
    let found = state
        .repos
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(repo)
        .and_then(|r| r.files.get(file).cloned());
    let Some(f) = found else {
        return respond(stream, "404 Not Found", &[], b"no such file");
    };
    let len = f.bytes.len() as u64;
    let etag = format!("\"{}\"", f.sha256);
    let if_range_ok = req.headers.get("if-range").is_none_or(|v| *v == etag);
    let start = req
        .headers
        .get("range")
        .filter(|_| if_range_ok)
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse::<u64>().ok());
    if start.is_some_and(|s| s >= len) {
        let headers = [("Content-Range", format!("bytes */{len}"))];
        return respond(stream, "416 Range Not Satisfiable", &headers, b"");
    }
    let from = start.unwrap_or(0);
    let mut head = format!(
        "HTTP/1.1 {}\r\nConnection: close\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\nContent-Length: {}\r\n",
        if start.is_some() { "206 Partial Content" } else { "200 OK" },
        len - from
    );
    if start.is_some() {
        let _ = write!(head, "Content-Range: bytes {from}-{}/{len}\r\n", len - 1);
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    let key = format!("{repo}/{file}");
    let mut end = len;
    if let Some(at) = f.drop_once_at.filter(|&at| at > from && at < len) {
        if state
            .dropped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key)
        {
            end = at;
        }
    }
    #[allow(clippy::cast_possible_truncation)]
    let body = &f.bytes[from as usize..end as usize];
    for chunk in body.chunks(64 << 10) {
        stream.write_all(chunk)?;
        if let Some(delay) = f.delay {
            std::thread::sleep(delay);
        }
    }
    stream.flush()?;
    // A cut-short body ends here: dropping the stream closes the connection mid-body.
    Ok(())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_pair = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (
            bytes[i],
            hex_pair.and_then(|h| u8::from_str_radix(h, 16).ok()),
        ) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
