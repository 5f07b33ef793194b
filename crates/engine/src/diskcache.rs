//! The disk tier of the prompt cache: KV snapshots (`kv_pack`) of finished sequences, found
//! again by their token prefix — in this process or after a restart — and restored with
//! `kv_unpack` instead of a prefill.
//!
//! Files live in `<dir>/<key>/`, where the key is a hash of the model file's identity and the
//! context layout; each file is named by the hash of its tokens. Every write is a temp file,
//! fsync, then an atomic rename. A snapshot that fails its checks when restored (truncated,
//! bit-flipped, made for another layout) is removed and the request goes on cold. A byte
//! budget is kept by removing the least recently used files.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wick_types::TokenId;

/// Where and how much to cache on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskCacheConfig {
    /// The cache root (wick uses `$WICK_HOME/kv`).
    pub dir: PathBuf,
    /// Most bytes kept for one model and layout; older snapshots are removed beyond it.
    pub budget_bytes: u64,
    /// Sequences shorter than this are not saved (a prefill of them is cheap).
    pub min_tokens: usize,
    /// The model's identity (the SHA-256 of its file).
    pub model_id: String,
}

/// Counters of the prompt cache, for metrics.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Requests that reused a prefix a sequence held (another or the same one).
    pub hits_ram: AtomicU64,
    /// Requests that restored a prefix from the RAM tier (sequence states parked in host
    /// memory).
    pub hits_host: AtomicU64,
    /// Sequence states parked in the RAM tier.
    pub host_parked: AtomicU64,
    /// Sequence states dropped from the RAM tier to keep its budget.
    pub host_evictions: AtomicU64,
    /// Bytes the RAM tier holds now.
    pub host_bytes: AtomicU64,
    /// Requests that restored a prefix from disk.
    pub hits_disk: AtomicU64,
    /// Requests that reused nothing.
    pub misses: AtomicU64,
    /// Prompt tokens restored from the RAM tier or from disk.
    pub restored_tokens: AtomicU64,
    /// Snapshot bytes read from disk for restores.
    pub restored_bytes: AtomicU64,
    /// Snapshots written.
    pub saved: AtomicU64,
    /// Snapshots removed to keep the budget.
    pub evictions: AtomicU64,
    /// Snapshots found corrupt or foreign, removed.
    pub rejects: AtomicU64,
    /// Tokens proposed by speculative decoding (prompt lookup) and verified.
    pub spec_drafted: AtomicU64,
    /// Of those, the tokens the model accepted.
    pub spec_accepted: AtomicU64,
}

impl CacheStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// One snapshot file.
#[derive(Debug, Clone)]
struct Entry {
    tokens: Vec<TokenId>,
}

/// The snapshots of one model and layout.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    min_tokens: usize,
    entries: HashMap<String, Entry>,
    /// The directory's modification time at the last scan: a scan is only needed when files
    /// were added or removed since (by this or another process).
    scanned: Option<SystemTime>,
    stats: Arc<CacheStats>,
    /// Snapshots handed to the writer thread and not yet written.
    in_flight: HashSet<String>,
    writer: mpsc::Sender<PendingWrite>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    /// Snapshots the writer thread has finished with: their tokens when written, `None` when
    /// the write failed.
    written: mpsc::Receiver<(String, Option<Vec<TokenId>>)>,
    /// Reads for the reader thread, and what it read.
    reads: mpsc::Sender<Read>,
    read: mpsc::Receiver<Loaded>,
}

/// A snapshot to read off the engine thread, for the request on `slot`.
#[derive(Debug)]
struct Read {
    slot: usize,
    path: PathBuf,
    len: usize,
}

/// A snapshot the reader thread read (or failed to).
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The slot whose request asked for it.
    pub(crate) slot: usize,
    /// The snapshot file.
    pub(crate) path: PathBuf,
    /// How many of its tokens the request shares.
    pub(crate) len: usize,
    /// Its bytes.
    pub(crate) bytes: std::io::Result<Vec<u8>>,
}

impl DiskCache {
    /// The cache for `config`, in a directory keyed by the model and `layout`.
    pub(crate) fn open(
        config: &DiskCacheConfig,
        layout: &str,
        stats: Arc<CacheStats>,
    ) -> std::io::Result<Self> {
        let key = hex(&Sha256::digest(format!("{}\n{layout}", config.model_id)))[..32].to_owned();
        let dir = config.dir.join(key);
        fs::create_dir_all(&dir)?;
        // What a process killed mid-write left behind.
        remove_stale_temp_files(&dir);
        let (writer, jobs) = mpsc::channel();
        let (done, written) = mpsc::channel();
        let writer_thread = {
            let (dir, budget, stats) = (dir.clone(), config.budget_bytes, Arc::clone(&stats));
            std::thread::Builder::new()
                .name("wick-kv-writer".into())
                .spawn(move || write_loop(&dir, budget, &stats, &jobs, &done))?
        };
        // The reader ends when the cache (its sender) is dropped.
        let (reads, to_read) = mpsc::channel::<Read>();
        let (loaded, read) = mpsc::channel();
        {
            let stats = Arc::clone(&stats);
            std::thread::Builder::new()
                .name("wick-kv-reader".into())
                .spawn(move || {
                    for job in to_read {
                        let bytes = load(&job.path, &stats);
                        let done = Loaded {
                            slot: job.slot,
                            path: job.path,
                            len: job.len,
                            bytes,
                        };
                        if loaded.send(done).is_err() {
                            return;
                        }
                    }
                })?;
        }
        let mut cache = DiskCache {
            dir,
            min_tokens: config.min_tokens.max(1),
            entries: HashMap::new(),
            scanned: None,
            stats,
            in_flight: HashSet::new(),
            writer,
            writer_thread: Some(writer_thread),
            written,
            reads,
            read,
        };
        cache.refresh();
        Ok(cache)
    }

    /// The file name to save `tokens` under, when they are worth saving: long enough, and
    /// neither on disk nor being written already.
    pub(crate) fn wants(&mut self, tokens: &[TokenId]) -> Option<String> {
        if tokens.len() < self.min_tokens {
            return None;
        }
        self.drain_written();
        let name = file_name(tokens);
        (!self.entries.contains_key(&name) && !self.in_flight.contains(&name)).then_some(name)
    }

    /// Picks up snapshots written since the last look (by this or another process) and
    /// forgets removed ones; does nothing when the directory has not changed.
    fn refresh(&mut self) {
        self.drain_written();
        let modified = fs::metadata(&self.dir).and_then(|m| m.modified()).ok();
        if modified.is_some() && modified == self.scanned {
            return;
        }
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        self.scanned = modified;
        let mut seen = HashMap::new();
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_snapshot(&entry.path()) {
                continue;
            }
            if let Some(known) = self.entries.remove(&name) {
                seen.insert(name, known);
                continue;
            }
            let tokens = fs::File::open(entry.path())
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    wick_backend::snapshot::read_tokens(std::io::BufReader::new(f))
                        .map_err(|e| e.to_string())
                });
            match tokens {
                Ok(tokens) => {
                    seen.insert(name, Entry { tokens });
                }
                Err(_) => self.reject(&entry.path()),
            }
        }
        self.entries = seen;
    }

    /// The snapshot sharing the longest prefix with `prompt` (at most `limit` tokens), if
    /// that prefix is longer than `better_than`.
    pub(crate) fn best(
        &mut self,
        prompt: &[TokenId],
        limit: usize,
        better_than: usize,
    ) -> Option<(PathBuf, usize)> {
        self.refresh();
        self.entries
            .iter()
            .map(|(name, e)| (name, common_prefix(&e.tokens, prompt).min(limit)))
            .filter(|&(_, len)| len > better_than)
            .max_by_key(|&(_, len)| len)
            .map(|(name, len)| (self.dir.join(name), len))
    }

    /// Has the reader thread read the snapshot at `path` (of which the request on `slot`
    /// shares `len` tokens); [`DiskCache::loaded`] hands it back. The engine thread never
    /// waits on the disk.
    /// Returns whether the read was handed over.
    pub(crate) fn load_async(&self, slot: usize, path: PathBuf, len: usize) -> bool {
        self.reads.send(Read { slot, path, len }).is_ok()
    }

    /// The snapshots read since the last call.
    pub(crate) fn loaded(&self) -> Vec<Loaded> {
        self.read.try_iter().collect()
    }

    /// Removes a snapshot that failed its checks.
    pub(crate) fn reject(&mut self, path: &Path) {
        let _ = fs::remove_file(path);
        if let Some(name) = path.file_name() {
            self.entries.remove(&*name.to_string_lossy());
        }
        CacheStats::add(&self.stats.rejects, 1);
    }

    /// Hands the snapshot of `tokens` to the writer thread (temp file, fsync, rename, then the
    /// budget), which runs `then` once the file is in place, or has failed to be. The engine
    /// thread only copies the KV; the disk work no longer stalls the other streams.
    /// `name` is the one [`DiskCache::wants`] gave for `tokens`.
    pub(crate) fn save(&mut self, name: String, tokens: &[TokenId], snapshot: Vec<u8>, then: Then) {
        self.in_flight.insert(name.clone());
        let write = PendingWrite {
            name,
            tokens: tokens.to_vec(),
            bytes: snapshot,
            then,
        };
        if let Err(mpsc::SendError(write)) = self.writer.send(write) {
            self.in_flight.remove(&write.name);
            (write.then)();
        }
    }

    /// Takes in the writes that have finished: a written snapshot is known at once, without
    /// reading its header back in the next scan.
    fn drain_written(&mut self) {
        while let Ok((name, tokens)) = self.written.try_recv() {
            self.in_flight.remove(&name);
            if let Some(tokens) = tokens {
                self.entries.insert(name, Entry { tokens });
            }
        }
    }
}

impl Drop for DiskCache {
    /// Waits for the snapshots still being written, so a shutdown loses none.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.writer, closed));
        if let Some(thread) = self.writer_thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the writer thread runs once a snapshot is written (the answer's final event).
pub(crate) type Then = Box<dyn FnOnce() + Send>;

/// One snapshot for the writer thread.
struct PendingWrite {
    name: String,
    tokens: Vec<TokenId>,
    bytes: Vec<u8>,
    then: Then,
}

/// The writer thread: writes each snapshot, keeps the budget, reports the name back.
fn write_loop(
    dir: &Path,
    budget: u64,
    stats: &CacheStats,
    jobs: &mpsc::Receiver<PendingWrite>,
    written: &mpsc::Sender<(String, Option<Vec<TokenId>>)>,
) {
    for write in jobs {
        let tokens = match write_atomically(dir, &write.name, &write.bytes) {
            Ok(()) => {
                CacheStats::add(&stats.saved, 1);
                keep_budget(dir, budget, stats);
                Some(write.tokens)
            }
            Err(e) => {
                tracing::warn!("prompt cache: cannot save a snapshot: {e}");
                None
            }
        };
        let _ = written.send((write.name, tokens));
        (write.then)();
    }
}

/// Reads a snapshot and marks it as recently used.
fn load(path: &Path, stats: &CacheStats) -> std::io::Result<Vec<u8>> {
    let bytes = fs::read(path)?;
    if let Ok(f) = fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
    CacheStats::add(&stats.restored_bytes, bytes.len() as u64);
    Ok(bytes)
}

/// Temp file, fsync, rename: a reader sees the whole snapshot or none.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes the least recently used snapshots until the directory fits the budget. Snapshots
/// being written count too (stale ones, left by a killed process, are removed first).
fn keep_budget(dir: &Path, budget: u64, stats: &CacheStats) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut writing = 0;
    let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let (path, Ok(meta)) = (e.path(), e.metadata()) else {
            continue;
        };
        if is_stale_temp(&path) {
            let _ = fs::remove_file(&path);
        } else if is_temp(&path) {
            writing += meta.len();
        } else if is_snapshot(&path) {
            if let Ok(modified) = meta.modified() {
                files.push((modified, meta.len(), path));
            }
        }
    }
    let mut total: u64 = writing + files.iter().map(|f| f.1).sum::<u64>();
    files.sort();
    for (_, len, path) in files {
        if total <= budget {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            total -= len;
            CacheStats::add(&stats.evictions, 1);
        }
    }
}

/// Whether `path` is a snapshot (temp files start with a dot and end in `.tmp`).
fn is_snapshot(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "kv")
}

/// Whether `path` is a snapshot being written: `.NAME.kv.PID.tmp`.
pub fn is_temp(path: &Path) -> bool {
    temp_writer(path).is_some()
}

/// The process writing the temp file `path`.
fn temp_writer(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    rest.rsplit_once('.')?.1.parse().ok()
}

/// How old a temp file must be to count as left behind whatever its writer (a snapshot is
/// written in seconds; this covers a writer's process id being reused).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether the temp file `path` was left by a writer that is gone: its process no longer
/// runs, or it is over an hour old. A temp file another live process (a second server on the
/// same directory) is writing right now is never stale.
pub fn is_stale_temp(path: &Path) -> bool {
    let Some(pid) = temp_writer(path) else {
        return false;
    };
    let old = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > STALE_AFTER);
    old || (pid != std::process::id() && !process_runs(pid))
}

/// Whether a process with this id runs (Linux: `/proc/PID`; elsewhere assumed, so only age
/// makes a temp file stale).
fn process_runs(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

/// Removes the stale temp files in `dir`; how many and their bytes.
pub fn remove_stale_temp_files(dir: &Path) -> (usize, u64) {
    let Ok(entries) = fs::read_dir(dir) else {
        return (0, 0);
    };
    let (mut files, mut bytes) = (0, 0);
    for path in entries.flatten().map(|e| e.path()) {
        if is_stale_temp(&path) {
            let len = fs::metadata(&path).map_or(0, |m| m.len());
            if fs::remove_file(&path).is_ok() {
                files += 1;
                bytes += len;
            }
        }
    }
    (files, bytes)
}

fn file_name(tokens: &[TokenId]) -> String {
    let mut h = Sha256::new();
    for t in tokens {
        h.update(t.0.to_le_bytes());
    }
    format!("{}.kv", &hex(&h.finalize())[..40])
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub(crate) fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id of a process that has exited.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        pid
    }

    #[test]
    fn issue_15_temp_files_of_dead_writers_are_stale_and_live_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(format!(".aa.kv.{}.tmp", dead_pid()));
        let live = dir
            .path()
            .join(format!(".bb.kv.{}.tmp", std::process::id()));
        let snapshot = dir.path().join("cc.kv");
        for (path, len) in [(&dead, 100), (&live, 10), (&snapshot, 1000)] {
            fs::write(path, vec![0u8; len]).unwrap();
        }
        assert!(is_temp(&dead) && is_temp(&live) && !is_temp(&snapshot));
        assert!(is_stale_temp(&dead));
        assert!(!is_stale_temp(&live));
        assert_eq!(remove_stale_temp_files(dir.path()), (1, 100));
        assert!(!dead.exists() && live.exists() && snapshot.exists());
    }

    #[test]
    fn issue_15_files_being_written_count_in_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir
            .path()
            .join(format!(".bb.kv.{}.tmp", std::process::id()));
        let snapshot = dir.path().join("cc.kv");
        fs::write(&live, vec![0u8; 600]).unwrap();
        fs::write(&snapshot, vec![0u8; 600]).unwrap();
        let stats = CacheStats::default();
        // 1200 bytes in all against a budget of 1000: the snapshot goes, the live write stays.
        keep_budget(dir.path(), 1000, &stats);
        assert!(!snapshot.exists() && live.exists());
        assert_eq!(stats.evictions.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
