//! llama.cpp's own server tests (`tools/server/tests/unit` in the llama.cpp tree `wick bench`
//! unpacks) against `wick serve` on the real model: every test in
//! `scripts/llama-server-tests/passing-on-llama-server.txt` (the ones llama-server passes with
//! this model; lines commented out name a test where wick differs on purpose, and why) must pass.
//! `scripts/llama-server-tests/run` starts the suite with `wrap-wick` as its server binary,
//! which maps llama-server's flags to `wick serve`'s and its models to the test model.

use std::process::Command;

#[test]
fn llama_cpp_server_tests_that_pass_on_llama_server_pass_on_wick() {
    let root = wick_testutil::crate_path(env!("CARGO_MANIFEST_DIR"), "../..");
    let scripts = root.join("scripts/llama-server-tests");
    let list = scripts.join("passing-on-llama-server.txt");
    let expected = std::fs::read_to_string(&list)
        .expect("the list")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .count();
    assert!(expected > 100, "{expected} tests listed");
    let out_dir = tempfile::tempdir().expect("tmp");
    let out = Command::new("bash")
        .arg(scripts.join("run"))
        .arg("wick")
        .arg(out_dir.path())
        .arg("--list")
        .arg(&list)
        .env("WICK_BIN", env!("CARGO_BIN_EXE_wick"))
        .output()
        .expect("bash runs scripts/llama-server-tests/run");
    let log = std::fs::read_to_string(out_dir.path().join("pytest.log")).unwrap_or_default();
    // The failed tests first (pytest's summary lines), then the whole log.
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("FAILED ") || l.starts_with("ERROR "))
        .collect();
    assert!(
        out.status.success(),
        "{}\nfailed: {failed:#?}\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every listed test ran and passed: none skipped, none missing.
    let junit = std::fs::read_to_string(out_dir.path().join("junit.xml")).expect("junit.xml");
    let count = |attr: &str| -> usize {
        let key = format!(" {attr}=\"");
        let start = junit.find(&key).map(|i| i + key.len()).expect(attr);
        junit[start..]
            .split('"')
            .next()
            .and_then(|n| n.parse().ok())
            .expect(attr)
    };
    assert_eq!(count("tests"), expected, "{log}");
    assert_eq!(
        count("failures") + count("errors") + count("skipped"),
        0,
        "{log}"
    );
}
