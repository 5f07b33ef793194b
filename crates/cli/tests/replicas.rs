//! More traffic than one server: replicas sharing one prompt-cache directory (issue 18). Two
//! `wick serve` processes on one `--kv-cache-dir`: what one computed, the other restores, and
//! both keep its byte budget while serving.

mod serve_util;

use std::path::Path;

use serde_json::{json, Value};
use serve_util::{client, metric, post_json, Server};

/// A chat whose long system prompt (well over the 64 tokens worth saving) all `i` share.
fn chat(i: usize) -> Value {
    json!({
        "messages": [
            {"role": "system", "content": "You are a careful assistant who answers briefly. ".repeat(12)},
            {"role": "user", "content": format!("Name colour number {i} of the rainbow.")}
        ],
        "max_tokens": 8,
        "temperature": 0
    })
}

fn metrics(server: &Server) -> String {
    client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

/// Bytes of the snapshots under `dir` (every model's directory).
fn snapshot_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .flat_map(|model| std::fs::read_dir(model.path()).unwrap().flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "kv"))
        .map(|f| f.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// Waits (up to a minute) until both replicas' writers are done: a server answers before its
/// writer thread has saved the answer's snapshot (and kept the budget), so the directory is
/// only final once neither `wick_prompt_cache_saved_total` nor the files under `dir` (`.tmp`
/// ones being written) have changed for a while.
fn settled(dir: &Path, servers: [&Server; 2]) {
    let state = || {
        let saved: Vec<u64> = servers
            .iter()
            .map(|s| metric(&metrics(s), "wick_prompt_cache_saved_total"))
            .collect();
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .flat_map(|model| std::fs::read_dir(model.path()).unwrap().flatten())
            .map(|f| f.file_name())
            .collect();
        files.sort();
        (saved, files)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = state();
    let mut quiet = 0;
    while quiet < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writers never settled"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = state();
        let writing = now.1.iter().any(|f| f.to_string_lossy().ends_with(".tmp"));
        quiet = if now == last && !writing {
            quiet + 1
        } else {
            0
        };
        last = now;
    }
}

#[test]
fn issue_18_two_replicas_share_one_prompt_cache_directory() {
    let kv = tempfile::tempdir().unwrap();
    let dir = kv.path().to_str().unwrap();
    // Room for two or three snapshots of these chats (about 23 KB a token).
    let budget = 6_000_000u64;
    // One thread each: two servers computing at once on a 2-core machine do not oversubscribe.
    let flags = [
        "--threads",
        "1",
        "--kv-cache-dir",
        dir,
        "--kv-cache-size",
        &budget.to_string(),
    ];
    let a = Server::start(&flags);
    let b = Server::start(&flags);

    // A computes the prompt; B restores all of it from A's snapshot and answers the same.
    let (status, cold) = post_json(&a, "/v1/chat/completions", &chat(0));
    assert_eq!(status, 200, "{cold}");
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let prompt = cold["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 64, "long enough to be saved: {prompt}");
    let (status, warm) = post_json(&b, "/v1/chat/completions", &chat(0));
    assert_eq!(status, 200, "{warm}");
    assert_eq!(
        warm["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        Some(prompt),
        "B restored A's prefix: {warm}"
    );
    assert_eq!(
        warm["choices"][0]["message"]["content"],
        cold["choices"][0]["message"]["content"]
    );
    assert_eq!(metric(&metrics(&b), "wick_prompt_cache_hits_disk_total"), 1);

    // Both serve at once, each chat on both, while the directory is over its budget: every
    // write past the second evicts, and restores race the other replica's evictions.
    let ask = |server: &Server, order: Vec<usize>| -> Vec<(usize, Value)> {
        order
            .into_iter()
            .map(|i| {
                let (status, out) = post_json(server, "/v1/chat/completions", &chat(i));
                assert_eq!(status, 200, "{out}");
                (i, out["choices"][0]["message"]["content"].clone())
            })
            .collect()
    };
    let (from_a, from_b) = std::thread::scope(|s| {
        let on_a = s.spawn(|| ask(&a, (1..7).collect()));
        let on_b = s.spawn(|| ask(&b, (1..7).rev().collect()));
        (on_a.join().unwrap(), on_b.join().unwrap())
    });
    for (i, text) in &from_a {
        let (_, other) = from_b.iter().find(|(j, _)| j == i).unwrap();
        assert_eq!(text, other, "chat {i}: the same answer on both replicas");
        assert!(!text.as_str().unwrap().is_empty(), "chat {i}");
    }
    for server in [&a, &b] {
        let m = metrics(server);
        assert!(
            metric(&m, "wick_prompt_cache_evictions_total") >= 1,
            "each replica evicts: {m}"
        );
        assert_eq!(
            metric(&m, "wick_prompt_cache_rejects_total"),
            0,
            "no snapshot found corrupt: {m}"
        );
    }
    settled(kv.path(), [&a, &b]);
    let kept = snapshot_bytes(kv.path());
    assert!(
        kept > 0 && kept <= budget,
        "{kept} bytes of snapshots kept, budget {budget}"
    );
}
