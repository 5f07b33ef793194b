//! `wick run` and `wick --help` through the real binary, on the real model.

use std::io::Read;
use std::process::{Command, Stdio};
use wick_testutil::{model_path as model, MODEL_SHA256};

fn wick() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wick"))
}

#[test]
fn run_answers_a_question_with_the_real_model() {
    let out = wick()
        .args(["run", "--greedy", "-m"])
        .arg(model())
        // The model's own template with a plain system prompt (SmolLM2's default one makes its
        // greedy answer wander), and a question whose greedy answer wins by at least 1.4 nats
        // at every token up to "Paris": float noise cannot tip it.
        .args(["--threads", "2", "-s", "You are a helpful assistant."])
        .arg("Tell me the name of the capital of France.")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Paris"), "answer: {stdout:?}");
    assert!(
        !stdout.contains("<|im_end|>"),
        "end-of-turn token leaked: {stdout:?}"
    );
}

#[test]
fn run_is_deterministic_and_verbose_reports_timing() {
    let go = || {
        wick()
            .args([
                "run",
                "--verbose",
                "--seed",
                "7",
                "-n",
                "24",
                "--threads",
                "2",
                "-m",
            ])
            .arg(model())
            .arg("Name three fruits.")
            .output()
            .unwrap()
    };
    let (a, b) = (go(), go());
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout, "runs with one seed differ");
    let stderr = String::from_utf8_lossy(&a.stderr);
    assert!(stderr.contains("tokens/s"), "no timing on stderr: {stderr}");
    assert!(
        stderr.contains("prompt"),
        "no prompt size on stderr: {stderr}"
    );
}

#[test]
fn run_streams_tokens_as_they_are_generated() {
    let mut child = wick()
        .args(["run", "--raw", "-n", "200", "--threads", "1", "-m"])
        .arg(model())
        .arg("Once upon a time, in a land far away,")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    // The first byte arrived while the process is still generating the rest.
    assert!(
        child.try_wait().unwrap().is_none(),
        "wick printed nothing until it had finished"
    );
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        rest.len() > 100,
        "a 200-token story is longer than {} bytes",
        rest.len() + 1
    );
}

#[test]
fn run_reads_the_prompt_from_stdin() {
    let mut child = wick()
        .args(["run", "-n", "16", "--threads", "2", "-m"])
        .arg(model())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"Say hello.").unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

#[test]
fn bad_models_are_clear_errors() {
    let dir = std::env::temp_dir().join(format!("wick-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("notes.gguf");
    std::fs::write(&text, "just some text, definitely not a model file").unwrap();
    let truncated = dir.join("truncated.gguf");
    std::fs::write(&truncated, &std::fs::read(model()).unwrap()[..4096]).unwrap();
    for (path, expected) in [
        (dir.join("missing.gguf"), "cannot read it"),
        (text, "not a GGUF file"),
        (truncated, "truncated"),
    ] {
        let out = wick()
            .args(["run", "-m"])
            .arg(&path)
            .arg("hi")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} was accepted", path.display());
        assert!(
            stderr.contains(&*path.to_string_lossy()),
            "stderr: {stderr}"
        );
        assert!(stderr.contains(expected), "stderr: {stderr}");
    }
    let out = wick()
        .env("WICK_HOME", &dir)
        .args(["run", "hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(MODEL_SHA256) && stderr.contains("fetch-model"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_explains_every_flag() {
    let out = wick().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("run") && help.contains("Answer one prompt"),
        "{help}"
    );
    let out = wick().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--model",
        "--system",
        "--raw",
        "--max-tokens",
        "--temperature",
        "--greedy",
        "--cpu-level",
        "WICK_CPU_LEVEL",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "--seed",
        "--ctx-size",
        "--threads",
        "--gpu-layers",
        "--verbose",
    ] {
        assert!(
            help.contains(flag),
            "`wick run --help` does not explain {flag}"
        );
    }
}

#[test]
fn a_quantized_kv_cache_answers_and_bad_types_are_clear_errors() {
    let go = |threads: &str| {
        wick()
            // llama-server's spelling, one dash.
            .args(["run", "--greedy", "-n", "16", "-ctk", "q8_0"])
            .args(["--cache-type-v", "q8_0", "--threads", threads, "-m"])
            .arg(model())
            .arg("Name three fruits.")
            .output()
            .unwrap()
    };
    let (two, one) = (go("2"), go("1"));
    assert!(
        two.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&two.stderr)
    );
    assert!(!two.stdout.is_empty(), "no answer");
    // The deterministic kernels keep a quantized cache's answers independent of threads.
    assert_eq!(two.stdout, one.stdout, "one thread and two differ");

    let out = wick()
        .args(["run", "--cache-type-k", "q3_k", "-m"])
        .arg(model())
        .arg("hi")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a KV cache type") && stderr.contains("q8_0"),
        "{stderr}"
    );
}
