//! `wick perplexity` through the real binary on the real model and the shipped text.

use std::process::Command;

use serde_json::Value;

fn perplexity(extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["perplexity", "--threads", "2", "--ctx-size", "128", "-m"])
        .arg(wick_testutil::model_path())
        .args(extra)
        .output()
        .expect("wick perplexity runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn perplexity_and_kl_divergence_against_the_fast_kernels() {
    let (ok, stdout, stderr) = perplexity(&["--chunks", "3", "--kl-divergence", "--json"]);
    assert!(ok, "{stderr}");
    let scores: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(scores["chunks"], 3);
    // The second half of each 128-token chunk.
    assert_eq!(scores["tokens_scored"], 3 * 64);
    let ppl = scores["perplexity"].as_f64().unwrap();
    let base = scores["base_perplexity"].as_f64().unwrap();
    assert!(ppl > 1.0 && ppl < 100.0, "{scores}");
    assert!(base > 1.0 && base < 100.0, "{scores}");
    let kl = scores["kl_divergence"].as_f64().unwrap();
    assert!(
        (0.0..0.1).contains(&kl),
        "two kernels of one model are close: {scores}"
    );
    let top1 = scores["top1_agreement"].as_f64().unwrap();
    assert!(top1 > 0.5 && top1 <= 1.0, "{scores}");

    // The deterministic kernels score the same text to the same bits every time.
    let (ok, again, stderr) = perplexity(&["--chunks", "3", "--json"]);
    assert!(ok, "{stderr}");
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["perplexity"], scores["perplexity"]);
    let fingerprint = scores["logits_sha256"].as_str().unwrap();
    assert!(
        fingerprint.len() == 64 && fingerprint.chars().all(|c| c.is_ascii_hexdigit()),
        "{scores}"
    );
    assert_eq!(again["logits_sha256"], scores["logits_sha256"]);
    // Fewer chunks: other logits, another fingerprint.
    let (ok, one, stderr) = perplexity(&["--chunks", "1", "--json"]);
    assert!(ok, "{stderr}");
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_ne!(one["logits_sha256"], scores["logits_sha256"]);

    // The plain report names what it measured.
    let (ok, text, stderr) = perplexity(&["--chunks", "1", "--kl-divergence"]);
    assert!(ok, "{stderr}");
    for needle in [
        "perplexity:",
        "KL divergence",
        "top-1 agreement",
        "base perplexity",
        "logits SHA-256: ",
    ] {
        assert!(text.contains(needle), "{text}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Too short to score.").unwrap();
    let (ok, _, stderr) = perplexity(&[short.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("at least one chunk"), "{stderr}");
    let (ok, _, stderr) = perplexity(&["/no/such/file.txt"]);
    assert!(!ok);
    assert!(stderr.contains("/no/such/file.txt"), "{stderr}");
    let (ok, _, stderr) = perplexity(&["--base", "x"]);
    assert!(!ok, "--base needs --kl-divergence");
    assert!(stderr.contains("--kl-divergence"), "{stderr}");
}
