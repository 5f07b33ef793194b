//! The disk tier of the prompt cache, on the stub backend: restores across engines, equal
//! output, corrupt snapshots rejected, the byte budget kept.

use std::path::Path;
use std::sync::atomic::Ordering;

use wick_backend::{Backend, BackendConfig, StubBackend};
use wick_engine::{DiskCacheConfig, Engine, EngineConfig, Finished, GenEvent, GenerateRequest};
use wick_types::TokenId;

fn stub() -> StubBackend {
    StubBackend::new(
        &BackendConfig::new("stub")
            .with_n_seq_max(2)
            .with_n_ctx(1024),
    )
    .expect("stub")
}

fn engine(dir: Option<&Path>, budget: u64) -> Engine {
    let config = EngineConfig {
        disk_cache: dir.map(|d| DiskCacheConfig {
            dir: d.to_path_buf(),
            budget_bytes: budget,
            min_tokens: 8,
            model_id: "stub-model".into(),
        }),
        ..EngineConfig::default()
    };
    Engine::start(Box::new(stub()), config).expect("engine")
}

fn prompt(text: &str) -> Vec<TokenId> {
    stub().tokenize(text, false).expect("tokenize")
}

fn run(engine: &Engine, prompt: Vec<TokenId>) -> (String, Finished) {
    let request = GenerateRequest {
        prompt,
        max_tokens: Some(12),
        ..GenerateRequest::default()
    };
    let mut text = String::new();
    for event in engine.submit(request).expect("submit") {
        match event {
            GenEvent::Text(t) => text.push_str(&t),
            GenEvent::Done(done) => return (text, done),
            GenEvent::Error(e) => panic!("{e}"),
            GenEvent::TextWithLogprobs { .. } => panic!("no logprobs were asked for"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
        }
    }
    panic!("no Done")
}

fn snapshots(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).expect("cache dir") {
        for f in std::fs::read_dir(d.expect("entry").path()).expect("model dir") {
            let path = f.expect("file").path();
            if path.extension().is_some_and(|e| e == "kv") {
                out.push(path);
            }
        }
    }
    out
}

const BASE: &str =
    "A long system prompt that every request of this conversation shares word for word";

#[test]
fn a_new_engine_restores_the_prefix_from_disk_and_answers_as_a_cold_run() {
    let dir = tempfile::tempdir().expect("tmp");
    let first = engine(Some(dir.path()), 1 << 30);
    let (_, done) = run(&first, prompt(BASE));
    assert_eq!(done.usage.cached_tokens, 0);
    drop(first);
    assert_eq!(
        snapshots(dir.path()).len(),
        1,
        "the finished sequence was saved"
    );

    // A "restarted" engine on the same directory.
    let second = engine(Some(dir.path()), 1 << 30);
    let next = prompt(&format!("{BASE} and then a new question"));
    let (text, done) = run(&second, next.clone());
    let shared = prompt(BASE)
        .iter()
        .zip(&next)
        .take_while(|(a, b)| a == b)
        .count();
    assert_eq!(
        done.usage.cached_tokens as usize, shared,
        "every token the prompts share is restored"
    );
    let stats = second.cache_stats();
    assert_eq!(stats.hits_disk.load(Ordering::Relaxed), 1);
    assert_eq!(
        stats.restored_tokens.load(Ordering::Relaxed),
        u64::from(done.usage.cached_tokens)
    );
    assert!(stats.restored_bytes.load(Ordering::Relaxed) > 0);

    let (cold, done) = run(&engine(None, 0), next);
    assert_eq!(done.usage.cached_tokens, 0);
    assert_eq!(text, cold, "a restore changes nothing in the output");
}

#[test]
fn truncated_or_bit_flipped_snapshots_are_rejected_and_the_request_runs_cold() {
    for damage in ["truncate", "flip"] {
        let dir = tempfile::tempdir().expect("tmp");
        run(&engine(Some(dir.path()), 1 << 30), prompt(BASE));
        let file = snapshots(dir.path()).pop().expect("a snapshot");
        let mut bytes = std::fs::read(&file).expect("read");
        if damage == "truncate" {
            bytes.truncate(bytes.len() - 10);
        } else {
            let at = bytes.len() - 40;
            bytes[at] ^= 0x40;
        }
        std::fs::write(&file, &bytes).expect("write");

        let engine = engine(Some(dir.path()), 1 << 30);
        let next = prompt(&format!("{BASE} and more"));
        let (text, done) = run(&engine, next.clone());
        assert_eq!(
            done.usage.cached_tokens, 0,
            "{damage}: nothing was restored"
        );
        assert_eq!(
            engine.cache_stats().rejects.load(Ordering::Relaxed),
            1,
            "{damage}"
        );
        assert!(!file.exists(), "{damage}: the bad snapshot was removed");
        assert_eq!(text, run(&self::engine(None, 0), next).0, "{damage}");
    }
}

#[test]
fn the_byte_budget_holds_under_churn() {
    let dir = tempfile::tempdir().expect("tmp");
    // Measure one snapshot, then allow about three.
    run(&engine(Some(dir.path()), 1 << 30), prompt(BASE));
    let one = std::fs::metadata(&snapshots(dir.path())[0])
        .expect("meta")
        .len();
    let budget = one * 3 + one / 2;
    let engine = engine(Some(dir.path()), budget);
    for i in 0..12 {
        run(&engine, prompt(&format!("{i} {BASE} {i}")));
        let total: u64 = snapshots(dir.path())
            .iter()
            .map(|p| std::fs::metadata(p).expect("meta").len())
            .sum();
        assert!(total <= budget, "after {i}: {total} > {budget}");
    }
    assert!(engine.cache_stats().evictions.load(Ordering::Relaxed) >= 8);
}
