//! `wick bench` through the real binary, against the real llama.cpp tools on the real model.
//!
//! The first run builds llama-bench and llama-server from llama-cpp-python's source
//! distribution into the cache directory (about 10 minutes on 2 cores); later runs reuse them.
//! Nothing here asserts a speed: only that both sides were measured and reported.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_measures_both_sides_and_writes_the_table_json_and_chart() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args([
            "bench",
            "--quick",
            "--only",
            "a,d,f,g,h",
            "--threads",
            "2",
            "-m",
        ])
        .arg(wick_testutil::model_path())
        .arg("-o")
        .arg(out_dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    // Both versions are named.
    assert!(stdout.contains("llama-cpp-sys-2 0.1."), "{stdout}");
    assert!(stdout.contains("llama-cpp-python 0.3."), "{stdout}");

    let md = std::fs::read_to_string(out_dir.path().join("bench.md")).unwrap();
    assert_eq!(
        md.trim(),
        stdout.trim(),
        "the printed table is the markdown file"
    );
    let line = |row: &str| {
        md.lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("{row}: {md}"))
    };
    for row in [
        "| (a) pp512 |",
        "| (a) tg128 |",
        "| (a) pp512 (fast kernels) |",
        "| (a) tg128 (fast kernels) |",
        "| (d) 10-turn chat: prompt tokens computed |",
        "| (f) JSON-schema answer: ms per token",
        "| (f) unconstrained answer: ms per token |",
        "| (h) edit task: generation, speculation on |",
        "| (h) edit task: speculation on over off |",
        "| (h) free text: generation, speculation on |",
        "| (h) free text: speculation on over off |",
    ] {
        let line = line(row);
        assert!(line.trim_end().ends_with("× |"), "a ratio: {line}");
    }
    for row in [
        "| (g) warm answers differing from cold |",
        "| (g) 8 at once: answers differing from cold |",
    ] {
        let line = line(row);
        assert!(line.matches(" / 16 |").count() == 2, "two counts: {line}");
        assert!(line.trim_end().ends_with("| – |"), "no ratio: {line}");
    }

    let json: Value =
        serde_json::from_slice(&std::fs::read(out_dir.path().join("bench.json")).unwrap()).unwrap();
    for side in 0..2 {
        for test in ["pp", "tg"] {
            let rate = json["kernel"][side][test]["mean"].as_f64().unwrap();
            assert!(rate > 0.0, "{json}");
        }
        let chat = &json["conversation"][side];
        let (sent, computed) = (
            chat["prompt_tokens"].as_u64().unwrap(),
            chat["processed_tokens"].as_u64().unwrap(),
        );
        assert!(computed > 0 && computed <= sent, "{chat}");
    }
    // Both servers saw the same conversation up to their own answers; wick's cache must
    // have spared it some of the prompt.
    let wick = &json["conversation"][0];
    assert!(
        wick["processed_tokens"].as_u64() < wick["prompt_tokens"].as_u64(),
        "{wick}"
    );
    for side in 0..2 {
        let schema = &json["schema"][side];
        for key in ["constrained_ms_per_token", "unconstrained_ms_per_token"] {
            assert!(schema[key].as_f64().unwrap() > 0.0, "{schema}");
        }
        let determinism = &json["determinism"][side];
        assert_eq!(determinism["requests"], 16, "{determinism}");
        for key in ["warm_differ", "concurrent_differ"] {
            assert!(determinism[key].as_u64().unwrap() <= 16, "{determinism}");
        }
    }
    check_speculation(&json);
    // wick held its answer to the schema.
    assert_eq!(json["schema"][0]["follows_schema"], true, "{json}");
    // Kernels its backend calls batch-invariant (the default mode) answer warm and
    // concurrent requests exactly as cold ones.
    if json["kernel_invariant"][0] == true {
        let wick = &json["determinism"][0];
        assert_eq!(
            (&wick["warm_differ"], &wick["concurrent_differ"]),
            (&Value::from(0), &Value::from(0)),
            "{wick}"
        );
    }
    let png = std::fs::read(out_dir.path().join("bench.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

/// (h): drafting never changes wick's greedy answer, and the edit task (a module given back)
/// gives prompt lookup something to draft.
fn check_speculation(json: &Value) {
    for task in ["edit", "free"] {
        let wick = &json["speculation"][0][task];
        assert_eq!(wick["same_answer"], true, "{wick}");
        assert!(wick["on_tps"].as_f64().unwrap() > 0.0, "{wick}");
    }
    let edit = &json["speculation"][0]["edit"];
    assert!(edit["drafted"].as_u64().unwrap() > 0, "{edit}");
    assert!(
        edit["accepted"].as_u64() <= edit["drafted"].as_u64(),
        "{edit}"
    );
}

#[test]
fn bench_refuses_unknown_parts() {
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["bench", "--only", "a,z"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--only takes letters a to h"), "{stderr}");
}
