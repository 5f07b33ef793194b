//! The disk tier of the prompt cache: KV snapshots (`kv_pack`) of finished sequences, found
//! again by their token prefix — in this process or after a restart — and restored with
//! `kv_unpack` instead of a prefill.
//!
//! Files live in `<dir>/<key>/`, where the key is a hash of the model file's identity and the
//! context layout; each file is named by the hash of its tokens. Every write is a temp file,
//! fsync, then an atomic rename. A snapshot that fails its checks when restored (truncated,
//! bit-flipped, made for another layout) is removed and the request goes on cold. A byte
//! budget is kept by removing the least recently used files.
//!
//! Several processes (server replicas, on one machine or many through a shared volume) may use
//! one directory at once, with no lock between them:
//! - a snapshot appears whole or not at all (rename), so a reader never sees a partial one, and
//!   two writers of the same prefix each rename a whole file (the last one stays);
//! - a temp file names its writer's host and process (`.NAME.kv.HOST.PID.tmp`), so one is
//!   removed as left behind only when its writer, on this host, has exited (or it is an hour
//!   old): another machine's write in progress is never taken for debris;
//! - a snapshot another process evicted between this one's scan and its read is a miss, not
//!   a corrupt file: the request goes on without it (an open file stays readable after its
//!   removal, so a read that started completes);
//! - eviction counts a file another process removed first as gone, so two processes keeping
//!   the budget at once do not evict twice as much, and it keeps the newest snapshot it listed,
//!   so two processes evicting at once never leave none (writes in progress count in the
//!   budget; the writer evicts again once its file is in place);
//! - the directory is rescanned when its modification time changes, and also while that time
//!   is too recent to trust (a change within the same clock tick would keep it unchanged).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wick_types::{hex, TokenId};

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
    /// Buffers the engine is done with, back to the reader for its next read.
    spare: mpsc::Sender<Vec<u8>>,
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
        let (spare, spares) = mpsc::channel::<Vec<u8>>();
        {
            let stats = Arc::clone(&stats);
            let dir = dir.clone();
            std::thread::Builder::new()
                .name("wick-kv-reader".into())
                .spawn(move || {
                    let mut buffer = warm_buffer(&dir, KEEP_BUFFER);
                    for job in to_read {
                        // The largest buffer back from the engine, if any came back.
                        for back in spares.try_iter() {
                            if back.capacity() > buffer.capacity() && back.capacity() <= KEEP_BUFFER
                            {
                                buffer = back;
                            }
                        }
                        let bytes = load(&job.path, &stats, std::mem::take(&mut buffer));
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
            spare,
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
        // A time this recent may not change again for a change within the same tick (coarse
        // file system clocks, another machine's clock on a shared volume): scan again next
        // time rather than trust it.
        self.scanned = modified.filter(|m| {
            SystemTime::now()
                .duration_since(*m)
                .is_ok_and(|age| age > RACY_MTIME)
        });
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
            let file = match fs::File::open(entry.path()) {
                Ok(file) => file,
                // Evicted by another process since the listing: gone, not corrupt.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => {
                    self.reject(&entry.path());
                    continue;
                }
            };
            match wick_backend::snapshot::read_tokens(std::io::BufReader::new(file)) {
                Ok(tokens) => {
                    seen.insert(name, Entry { tokens });
                }
                Err(_) => self.reject(&entry.path()),
            }
        }
        self.entries = seen;
    }

    /// The snapshot sharing the longest prefix with `prompt` that `reuse` allows (at most
    /// `limit` tokens), if that prefix is longer than `better_than`.
    pub(crate) fn best(
        &mut self,
        prompt: &[TokenId],
        reuse: Reuse,
        limit: usize,
        better_than: usize,
    ) -> Option<(PathBuf, usize)> {
        self.refresh();
        self.entries
            .iter()
            .map(|(name, e)| (name, reuse.shared(&e.tokens, &[], prompt, limit)))
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

    /// Hands a snapshot's buffer back to the reader once it is restored: the next read fills
    /// it instead of faulting in fresh pages (about 30 ms of a 4,096-token restore's 37 ms
    /// read on the 2-core machine).
    pub(crate) fn recycle(&self, bytes: Vec<u8>) {
        let _ = self.spare.send(bytes);
    }

    /// Forgets a snapshot that another process removed (evicted) after this one listed it.
    pub(crate) fn forget(&mut self, path: &Path) {
        if let Some(name) = path.file_name() {
            self.entries.remove(&*name.to_string_lossy());
        }
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

/// The most bytes of read buffer the reader keeps between restores (and fills at start).
const KEEP_BUFFER: usize = 256 << 20;

/// Reads a snapshot into `buffer` (its old contents dropped, its pages reused) and marks it as
/// recently used.
fn load(path: &Path, stats: &CacheStats, mut buffer: Vec<u8>) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut file = fs::File::open(path)?;
    buffer.clear();
    file.read_to_end(&mut buffer)?;
    if let Ok(f) = fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
    CacheStats::add(&stats.restored_bytes, buffer.len() as u64);
    Ok(buffer)
}

/// A buffer as large as the largest snapshot in `dir` (none above `cap`), its pages already
/// touched: the reader makes it when it starts, so that the first restore after a restart
/// does not fault in a fresh buffer page by page.
fn warm_buffer(dir: &Path, cap: usize) -> Vec<u8> {
    let largest = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| is_snapshot(&e.path()))
        .filter_map(|e| e.metadata().ok())
        .filter_map(|m| usize::try_from(m.len()).ok())
        .filter(|&len| len <= cap)
        .max()
        .unwrap_or(0);
    let mut buffer = vec![1u8; largest];
    buffer.clear();
    buffer
}

/// Temp file, fsync, rename: a reader sees the whole snapshot or none.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(dir, name);
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

/// Where this process writes snapshot `name` before renaming it into place.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(
        ".{name}.{}.{}.tmp",
        host_name(),
        std::process::id()
    ))
}

/// Removes the least recently used snapshots until the directory fits the budget. Snapshots
/// being written count too (stale ones, left by a killed process, are removed first).
fn keep_budget(dir: &Path, budget: u64, stats: &CacheStats) {
    if let Some(listing) = Listing::of(dir) {
        listing.evict(budget, stats);
    }
}

/// What [`keep_budget`] saw in the directory: the bytes being written and the snapshots, each
/// with the modification time and length it had then.
struct Listing {
    writing: u64,
    files: Vec<(SystemTime, u64, PathBuf)>,
}

impl Listing {
    fn of(dir: &Path) -> Option<Self> {
        let entries = fs::read_dir(dir).ok()?;
        let mut listing = Listing {
            writing: 0,
            files: Vec::new(),
        };
        for e in entries.flatten() {
            let (path, Ok(meta)) = (e.path(), e.metadata()) else {
                continue;
            };
            if is_stale_temp(&path) {
                let _ = fs::remove_file(&path);
            } else if is_temp(&path) {
                listing.writing += meta.len();
            } else if is_snapshot(&path) {
                if let Ok(modified) = meta.modified() {
                    listing.files.push((modified, meta.len(), path));
                }
            }
        }
        Some(listing)
    }

    /// Removes the listed snapshots, least recently used first, until the listing's total fits
    /// `budget`; the newest listed snapshot stays unless it alone is over the budget.
    ///
    /// Two rules keep replicas evicting at once from leaving nothing. A snapshot that is no
    /// longer the file listed — another process renamed a new write of the same prompt over it
    /// since — is the newest now and stays: removing it by its name would drop that write. And
    /// the newest stays though writes in progress put the directory over: replica B, counting
    /// A's write in progress, would remove its only snapshot just as A, listing after its
    /// rename and before B's removal, removes its own as the older of the two (seen in
    /// `replicas.rs`, 1 run in 15–25). The newest snapshot overall is newer than every other
    /// listing's, so none removes it; a write in progress evicts again once it is renamed, so
    /// the budget holds again when the writes are done.
    fn evict(mut self, budget: u64, stats: &CacheStats) {
        let mut total: u64 = self.writing + self.files.iter().map(|f| f.1).sum::<u64>();
        self.files.sort();
        let keep_newest = self.files.last().is_some_and(|f| f.1 <= budget);
        let candidates = self.files.len() - usize::from(keep_newest);
        for (modified, len, path) in self.files.into_iter().take(candidates) {
            if total <= budget {
                break;
            }
            let replaced = fs::metadata(&path)
                .is_ok_and(|now| now.modified().ok() != Some(modified) || now.len() != len);
            if replaced {
                continue;
            }
            match fs::remove_file(&path) {
                Ok(()) => {
                    total -= len;
                    CacheStats::add(&stats.evictions, 1);
                }
                // Another process evicted it first: it is gone all the same.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
                Err(_) => {}
            }
        }
    }
}

/// Whether `path` is a snapshot (temp files start with a dot and end in `.tmp`).
fn is_snapshot(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "kv")
}

/// Whether `path` is a snapshot being written: `.NAME.kv.HOST.PID.tmp` (or, from before hosts
/// were named, `.NAME.kv.PID.tmp`).
pub fn is_temp(path: &Path) -> bool {
    temp_writer(path).is_some()
}

/// The writer of the temp file `path`: its host (`None` in the older form) and process.
fn temp_writer(path: &Path) -> Option<(Option<String>, u32)> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, pid) = rest.rsplit_once('.')?;
    let pid = pid.parse().ok()?;
    let host = rest.split_once(".kv.").map(|(_, host)| host.to_owned());
    Some((host, pid))
}

/// This machine's name as temp files carry it: letters, digits and `-` only (dots, which
/// separate the name's parts, become `-`).
fn host_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let raw = fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| fs::read_to_string("/etc/hostname"))
            .ok()
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let name: String = raw
            .trim()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        if name.is_empty() {
            "host".to_owned()
        } else {
            name
        }
    })
}

/// How recent a directory's modification time is too recent to mark a scan as up to date.
const RACY_MTIME: std::time::Duration = std::time::Duration::from_secs(2);

/// How old a temp file must be to count as left behind whatever its writer (a snapshot is
/// written in seconds; this covers a writer's process id being reused).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether the temp file `path` was left by a writer that is gone: its process no longer
/// runs, or it is over an hour old. A temp file another live process (a second server on the
/// same directory) is writing right now is never stale.
pub fn is_stale_temp(path: &Path) -> bool {
    let Some((host, pid)) = temp_writer(path) else {
        return false;
    };
    let old = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > STALE_AFTER);
    // Process ids say nothing about another machine's (or another container's) processes.
    let here = host.as_deref().is_none_or(|h| h == host_name());
    old || (here && pid != std::process::id() && !process_runs(pid))
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

/// The tokens `a` and `b` share, never ending inside an image ([`wick_types::common_prefix`]).
pub(crate) fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    wick_types::common_prefix(a, b)
}

/// Which prefixes of a held sequence (a slot's, a RAM entry's, a snapshot's) a new prompt
/// can start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Any: the backend cuts a sequence back for free (attention's KV cells).
    AnyPrefix,
    /// All of it, a length the backend checkpointed (a mark), or nothing: cutting a
    /// recurrent state back anywhere else evaluates what it keeps again
    /// ([`wick_backend::ModelInfo::recurrent`]), as costly as a prefill of it and, unlike
    /// one, not in chunks between other requests' steps.
    Whole,
}

impl Reuse {
    /// The reuse that `info`'s model allows.
    pub(crate) fn of(info: &wick_backend::ModelInfo) -> Self {
        if info.recurrent {
            Reuse::Whole
        } else {
            Reuse::AnyPrefix
        }
    }

    /// How many of `prompt`'s first tokens `held` gives, at most `limit`; `marks` are the
    /// lengths of `held` the backend checkpointed (none for a snapshot).
    pub(crate) fn shared(
        self,
        held: &[TokenId],
        marks: &[usize],
        prompt: &[TokenId],
        limit: usize,
    ) -> usize {
        let shared = common_prefix(held, prompt).min(limit);
        match self {
            Reuse::Whole if shared < held.len() => marks
                .iter()
                .copied()
                .filter(|&m| m <= shared)
                .max()
                .unwrap_or(0),
            _ => shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_is_refilled_in_place_and_the_warm_one_fits_the_largest_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (small, large) = (dir.path().join("a.kv"), dir.path().join("b.kv"));
        fs::write(&small, b"short").expect("write");
        fs::write(&large, vec![7u8; 5000]).expect("write");
        fs::write(dir.path().join("c.tmp"), vec![0u8; 9000]).expect("write");
        let warm = warm_buffer(dir.path(), 1 << 20);
        assert!(
            warm.capacity() >= 5000 && warm.is_empty(),
            "{}",
            warm.capacity()
        );
        let capped = warm_buffer(dir.path(), 100).capacity();
        assert!(
            (5..5000).contains(&capped),
            "the largest under the cap: {capped}"
        );
        let stats = CacheStats::default();
        let first = load(&large, &stats, warm).expect("load");
        assert_eq!(first, vec![7u8; 5000]);
        let at = first.as_ptr();
        let second = load(&small, &stats, first).expect("load");
        assert_eq!(second, b"short");
        assert_eq!(second.as_ptr(), at, "the same buffer");
        assert!(load(&dir.path().join("gone.kv"), &stats, Vec::new()).is_err());
    }

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
    fn issue_18_another_hosts_temp_files_are_judged_by_age_only() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let ours = dir
            .path()
            .join(format!(".aa.kv.{}.{dead}.tmp", host_name()));
        // A replica on another machine sharing the directory: its process ids are not ours.
        let theirs = dir.path().join(format!(".bb.kv.other-box.{dead}.tmp"));
        for path in [&ours, &theirs] {
            fs::write(path, b"partial").unwrap();
        }
        assert_eq!(
            temp_writer(&theirs),
            Some((Some("other-box".to_owned()), dead))
        );
        assert!(is_stale_temp(&ours));
        assert!(!is_stale_temp(&theirs));
        assert_eq!(remove_stale_temp_files(dir.path()).0, 1);
        assert!(!ours.exists() && theirs.exists());
    }

    #[test]
    fn issue_18_a_temp_file_names_this_host_and_process() {
        let host = host_name();
        assert!(!host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        let dir = tempfile::tempdir().unwrap();
        let tmp = temp_path(dir.path(), "cc.kv");
        assert!(is_temp(&tmp) && !is_snapshot(&tmp));
        assert_eq!(
            temp_writer(&tmp),
            Some((Some(host.to_owned()), std::process::id()))
        );
        fs::write(&tmp, b"partial").unwrap();
        assert!(!is_stale_temp(&tmp), "this process is writing it");
        write_atomically(dir.path(), "cc.kv", b"snapshot").unwrap();
        assert!(!tmp.exists() && dir.path().join("cc.kv").exists());
    }

    #[test]
    fn issue_15_files_being_written_count_in_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let [live, old, new] = a_write_and_two_snapshots(dir.path());
        let stats = CacheStats::default();
        // 1800 bytes in all against a budget of 1300: the older snapshot goes (the two
        // snapshots alone would fit), the live write stays.
        keep_budget(dir.path(), 1300, &stats);
        assert!(!old.exists() && new.exists() && live.exists());
        assert_eq!(stats.evictions.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// 600 bytes each: this process's write in progress (`.bb.kv.PID.tmp`), a snapshot a
    /// minute old (`cc.kv`) and one half a minute old (`dd.kv`).
    fn a_write_and_two_snapshots(dir: &Path) -> [PathBuf; 3] {
        let live = dir.join(format!(".bb.kv.{}.tmp", std::process::id()));
        let (old, new) = (dir.join("cc.kv"), dir.join("dd.kv"));
        for (path, age) in [(&live, 0), (&old, 60), (&new, 30)] {
            fs::write(path, vec![0u8; 600]).unwrap();
            set_age(path, age);
        }
        [live, old, new]
    }

    /// Sets `path`'s modification time `seconds` back.
    fn set_age(path: &Path, seconds: u64) {
        let then = SystemTime::now() - std::time::Duration::from_secs(seconds);
        fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(then)
            .unwrap();
    }

    #[test]
    fn issue_18_the_newest_snapshot_stays_while_another_write_is_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let [live, old, new] = a_write_and_two_snapshots(dir.path());
        let stats = CacheStats::default();
        // 1800 bytes against 1000: the older goes; the newest stays though the write in
        // progress keeps the directory over (its writer evicts once it renames).
        keep_budget(dir.path(), 1000, &stats);
        assert!(!old.exists() && new.exists() && live.exists());
        // Its writer renames it and keeps the budget: now the newest, it stays; `dd.kv` goes.
        fs::rename(&live, dir.path().join("bb.kv")).unwrap();
        keep_budget(dir.path(), 1000, &stats);
        assert!(!new.exists() && dir.path().join("bb.kv").exists());
        assert_eq!(stats.evictions.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn issue_18_a_snapshot_over_the_whole_budget_goes_though_it_is_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("cc.kv");
        fs::write(&big, vec![0u8; 1200]).unwrap();
        let stats = CacheStats::default();
        keep_budget(dir.path(), 1000, &stats);
        assert!(!big.exists());
    }

    #[test]
    fn issue_18_a_snapshot_written_again_after_the_listing_is_not_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let (old, shared) = (dir.path().join("aa.kv"), dir.path().join("bb.kv"));
        fs::write(&old, vec![0u8; 600]).unwrap();
        fs::write(&shared, vec![0u8; 600]).unwrap();
        let listing = Listing::of(dir.path()).unwrap();
        // Another replica renames its write of the same prompt over `bb.kv` (a new file, a
        // later time) before this one evicts.
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_atomically(dir.path(), "bb.kv", &[1u8; 600]).unwrap();
        let stats = CacheStats::default();
        // 1200 bytes listed against a budget of 100: the first snapshot goes; the second, no
        // longer the file listed, stays.
        listing.evict(100, &stats);
        assert!(!old.exists());
        assert_eq!(fs::read(&shared).unwrap(), vec![1u8; 600]);
        assert_eq!(stats.evictions.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
