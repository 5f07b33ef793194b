//! Streaming, resumable, verified downloads into a partial file.
//!
//! One download writes `<part>` (and remembers the server's `ETag` in `<part>.etag`). After a
//! broken connection the partial file stays, and the next attempt asks for the rest with
//! `Range` + `If-Range`; the SHA-256 covers the whole file either way, so a resumed file is
//! verified like a fresh one. Every other failure deletes the partial file. The caller holds the
//! lock and renames the verified file into place.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use reqwest::blocking::{Client, Response};
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_RANGE, ETAG, IF_RANGE, RANGE};
use reqwest::StatusCode;
use sha2::{Digest, Sha256};
use wick_types::hex;

use crate::error::ModelError;
use crate::pull::{ProgressFn, PullProgress};

/// The least size a model may have, as the seed checks (1 MB).
pub const MIN_MODEL_BYTES: u64 = 1_000_000;

/// What to fetch.
#[derive(Debug, Clone)]
pub(crate) struct Fetch<'a> {
    pub(crate) url: &'a str,
    /// Sent as `Authorization: Bearer …` (the HTTP client drops it on a redirect to another host).
    pub(crate) bearer: Option<&'a str>,
    /// The expected SHA-256, lower-case hex.
    pub(crate) sha256: Option<&'a str>,
    /// Shown beside the progress bar.
    pub(crate) label: &'a str,
    /// A Hugging Face download (its errors may suggest `HF_TOKEN`), not a plain URL.
    pub(crate) hugging_face: bool,
    /// Told how the download goes.
    pub(crate) progress: Option<&'a ProgressFn>,
}

/// A finished, verified download (still at its partial path).
#[derive(Debug, Clone)]
pub(crate) struct Downloaded {
    pub(crate) sha256: String,
    pub(crate) size: u64,
}

/// The HTTP client and the download policy.
#[derive(Debug, Clone)]
pub(crate) struct Downloader {
    client: Client,
    progress: bool,
    retries: u32,
}

/// What one attempt's response means for the partial file.
struct Plan {
    /// Bytes of the partial file that the response continues.
    offset: u64,
    /// The whole file's size, when the server says.
    total: Option<u64>,
}

impl Downloader {
    /// `read_timeout`: the longest wait for the answer and for each read of the body (the
    /// blocking client applies its timeout to each), so a stalled server is an error, not a
    /// hang, and a long download is never cut for its length.
    pub(crate) fn new(
        progress: bool,
        retries: u32,
        read_timeout: Duration,
    ) -> Result<Self, ModelError> {
        let client = Client::builder()
            .user_agent(concat!("wick/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            .timeout(read_timeout)
            .build()
            .map_err(|e| transport("", &e, false))?;
        Ok(Self {
            client,
            progress,
            retries,
        })
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Downloads `fetch` into `part`, resuming what is there; retries broken connections.
    /// Deletes `part` on any failure but a broken connection.
    pub(crate) fn download(
        &self,
        fetch: &Fetch<'_>,
        part: &Path,
    ) -> Result<Downloaded, ModelError> {
        let mut attempt = 0;
        loop {
            match self.attempt(fetch, part) {
                Ok(done) => return Ok(done),
                Err(e) if e.is_resumable() && attempt < self.retries => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(100 * u64::from(attempt)));
                }
                Err(e) => {
                    if !e.is_resumable() {
                        discard(part);
                    }
                    return Err(e);
                }
            }
        }
    }

    fn attempt(&self, fetch: &Fetch<'_>, part: &Path) -> Result<Downloaded, ModelError> {
        let have = std::fs::metadata(part).map_or(0, |m| m.len());
        let etag_path = etag_path(part);
        let mut request = self.client.get(fetch.url);
        if let Some(token) = fetch.bearer {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if have > 0 {
            request = request.header(RANGE, format!("bytes={have}-"));
            if let Ok(etag) = std::fs::read_to_string(&etag_path) {
                request = request.header(IF_RANGE, etag.trim());
            }
        }
        let mut response = request
            .send()
            .map_err(|e| transport(fetch.url, &e.without_url(), have > 0))?;
        if response.status() == StatusCode::RANGE_NOT_SATISFIABLE && have > 0 {
            // Asked to resume past the end: the partial file may be whole already.
            let total = response
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes */"))
                .and_then(|t| t.trim().parse::<u64>().ok());
            if total == Some(have) {
                return finish_complete(fetch, part, have);
            }
        }
        let Some(plan) = plan(fetch, &response, have)? else {
            // The partial file does not fit what the server has: start again.
            discard(part);
            return self.attempt(fetch, part);
        };
        if plan.offset == 0 {
            match response.headers().get(ETAG).and_then(|v| v.to_str().ok()) {
                Some(etag) => write_file(&etag_path, etag.as_bytes())?,
                None => drop(std::fs::remove_file(&etag_path)),
            }
        }
        let mut file = open_part(part, plan.offset)?;
        let mut hasher = Sha256::new();
        if plan.offset > 0 {
            hash_prefix(part, plan.offset, &mut hasher)?;
        }
        let bar = self.bar(fetch.label, plan.total, plan.offset);
        let mut meter = Meter::start(fetch, &bar, plan.total, plan.offset);
        let received = copy(&mut response, &mut file, &mut hasher, &mut meter, part);
        if received.is_ok() {
            meter.finish();
        }
        bar.abandon();
        if !bar.is_hidden() {
            // The bar stays on screen; what is printed next starts on a line of its own.
            eprintln!();
        }
        let size = plan.offset + received?;
        file.sync_all().map_err(|e| ModelError::io(part, e))?;
        check_size(fetch.url, plan.total, size)?;
        let sha256 = hex(&hasher.finalize());
        if let Some(expected) = fetch.sha256 {
            if !expected.eq_ignore_ascii_case(&sha256) {
                return Err(ModelError::HashMismatch {
                    url: fetch.url.to_owned(),
                    expected: expected.to_owned(),
                    actual: sha256,
                });
            }
        }
        let _ = std::fs::remove_file(&etag_path);
        Ok(Downloaded { sha256, size })
    }

    fn bar(&self, label: &str, total: Option<u64>, done: u64) -> ProgressBar {
        let target = if self.progress {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(total, target);
        let template = if total.is_some() {
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}"
        } else {
            "{msg} {spinner} {bytes} {bytes_per_sec}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_owned());
        bar.set_position(done);
        bar.reset_eta();
        bar
    }
}

/// A partial file the server says is whole: hashed and checked like a finished download.
fn finish_complete(fetch: &Fetch<'_>, part: &Path, size: u64) -> Result<Downloaded, ModelError> {
    let mut hasher = Sha256::new();
    hash_prefix(part, size, &mut hasher)?;
    let sha256 = hex(&hasher.finalize());
    if let Some(expected) = fetch.sha256 {
        if !expected.eq_ignore_ascii_case(&sha256) {
            discard(part);
            return Err(ModelError::HashMismatch {
                url: fetch.url.to_owned(),
                expected: expected.to_owned(),
                actual: sha256,
            });
        }
    }
    let _ = std::fs::remove_file(etag_path(part));
    Ok(Downloaded { sha256, size })
}

/// Reads the status and the size headers; `None` when the partial file must be dropped.
fn plan(fetch: &Fetch<'_>, response: &Response, have: u64) -> Result<Option<Plan>, ModelError> {
    let status = response.status();
    let (offset, total) = match status {
        StatusCode::PARTIAL_CONTENT if have > 0 => match content_range(response.headers()) {
            Some((start, total)) if start == have => (have, total),
            _ => return Ok(None),
        },
        StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => return Ok(None),
        StatusCode::OK => (0, response.content_length()),
        _ => return Err(status_error(fetch, status)),
    };
    if let Some(size) = total.filter(|&t| t < MIN_MODEL_BYTES) {
        return Err(ModelError::TooSmall {
            url: fetch.url.to_owned(),
            size,
            min: MIN_MODEL_BYTES,
        });
    }
    Ok(Some(Plan { offset, total }))
}

/// `Content-Range: bytes START-END/TOTAL` → `(START, TOTAL)` (`TOTAL` may be `*`).
fn content_range(headers: &HeaderMap) -> Option<(u64, Option<u64>)> {
    let value = headers.get(CONTENT_RANGE)?.to_str().ok()?;
    let (range, total) = value.strip_prefix("bytes ")?.split_once('/')?;
    let start = range.split_once('-')?.0.trim().parse().ok()?;
    Some((start, total.trim().parse().ok()))
}

pub(crate) fn status_error(fetch: &Fetch<'_>, status: StatusCode) -> ModelError {
    let url = fetch.url.to_owned();
    match status.as_u16() {
        code @ (401 | 403) => ModelError::Unauthorized {
            status: code,
            url,
            token_sent: fetch.bearer.is_some(),
        },
        404 if fetch.hugging_face => ModelError::Status {
            status: 404,
            url,
            hint: ": not found (check the name; a private repository also needs HF_TOKEN)"
                .to_owned(),
        },
        404 => ModelError::Status {
            status: 404,
            url,
            hint: ": not found (check the URL)".to_owned(),
        },
        code => ModelError::Status {
            status: code,
            url,
            hint: String::new(),
        },
    }
}

/// A client error as [`ModelError::Transport`], its causes in the message.
pub(crate) fn transport(
    url: &str,
    e: &(dyn std::error::Error + 'static),
    partial: bool,
) -> ModelError {
    let mut reason = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !reason.contains(&text) {
            reason = format!("{reason}: {text}");
        }
        cause = c.source();
    }
    ModelError::Transport {
        url: url.to_owned(),
        reason,
        partial,
    }
}

fn check_size(url: &str, total: Option<u64>, size: u64) -> Result<(), ModelError> {
    match total {
        Some(total) if size < total => Err(ModelError::Transport {
            url: url.to_owned(),
            reason: format!("the connection closed after {size} of {total} bytes"),
            partial: true,
        }),
        Some(total) if size > total => Err(ModelError::SizeMismatch {
            url: url.to_owned(),
            expected: total,
            actual: size,
        }),
        None if size < MIN_MODEL_BYTES => Err(ModelError::TooSmall {
            url: url.to_owned(),
            size,
            min: MIN_MODEL_BYTES,
        }),
        _ => Ok(()),
    }
}

/// The progress bar and the caller's [`ProgressFn`], told as bytes arrive.
struct Meter<'a> {
    bar: &'a ProgressBar,
    report: Option<&'a ProgressFn>,
    url: &'a str,
    file: &'a str,
    total: Option<u64>,
    done: u64,
    /// The hundredth of `total` (or the MiB) last reported, and the bytes then.
    step: u64,
    told: u64,
}

impl<'a> Meter<'a> {
    fn start(fetch: &Fetch<'a>, bar: &'a ProgressBar, total: Option<u64>, done: u64) -> Self {
        let mut meter = Meter {
            bar,
            report: fetch.progress,
            url: fetch.url,
            file: fetch.label,
            total,
            done,
            step: 0,
            told: 0,
        };
        meter.step = meter.step_of(done);
        meter.tell();
        meter
    }

    fn step_of(&self, done: u64) -> u64 {
        match self.total {
            Some(total) if total > 0 => done.saturating_mul(100) / total,
            _ => done >> 20,
        }
    }

    fn inc(&mut self, n: u64) {
        self.bar.inc(n);
        self.done += n;
        let step = self.step_of(self.done);
        if step != self.step {
            self.step = step;
            self.tell();
        }
    }

    /// The last report: all of it arrived.
    fn finish(&mut self) {
        if self.told != self.done {
            self.tell();
        }
    }

    fn tell(&mut self) {
        self.told = self.done;
        if let Some(report) = self.report {
            report.tell(&PullProgress {
                file: self.file.to_owned(),
                completed: self.done,
                total: self.total,
            });
        }
    }
}

fn copy(
    response: &mut Response,
    file: &mut File,
    hasher: &mut Sha256,
    meter: &mut Meter<'_>,
    part: &Path,
) -> Result<u64, ModelError> {
    let url = meter.url;
    let mut buf = vec![0u8; 1 << 16];
    let mut received = 0u64;
    loop {
        let n = match response.read(&mut buf) {
            Ok(0) => return Ok(received),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Keep what arrived for the next attempt.
                let _ = file.sync_all();
                return Err(transport(url, &e, true));
            }
        };
        file.write_all(&buf[..n])
            .map_err(|e| ModelError::io(part, e))?;
        hasher.update(&buf[..n]);
        received += n as u64;
        meter.inc(n as u64);
    }
}

fn open_part(part: &Path, offset: u64) -> Result<File, ModelError> {
    if let Some(dir) = part.parent() {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
    }
    let mut options = OpenOptions::new();
    options.create(true).write(true);
    let file = options.open(part).map_err(|e| ModelError::io(part, e))?;
    file.set_len(offset).map_err(|e| ModelError::io(part, e))?;
    let mut file = file;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(offset))
        .map_err(|e| ModelError::io(part, e))?;
    Ok(file)
}

fn hash_prefix(part: &Path, len: u64, hasher: &mut Sha256) -> Result<(), ModelError> {
    let file = File::open(part).map_err(|e| ModelError::io(part, e))?;
    let mut reader = file.take(len);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf).map_err(|e| ModelError::io(part, e))?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
    }
}

/// The SHA-256 of a whole file, lower-case hex.
pub(crate) fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut hasher = Sha256::new();
    let len = std::fs::metadata(path)
        .map_err(|e| ModelError::io(path, e))?
        .len();
    hash_prefix(path, len, &mut hasher)?;
    Ok(hex(&hasher.finalize()))
}

fn etag_path(part: &Path) -> PathBuf {
    part.with_extension("etag")
}

/// Removes a partial file and its `ETag`.
pub(crate) fn discard(part: &Path) {
    let _ = std::fs::remove_file(part);
    let _ = std::fs::remove_file(etag_path(part));
}

/// Writes `bytes` to `path` through a temporary file and an atomic rename.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        ModelError::io(path, e)
    })
}
