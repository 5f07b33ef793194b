//! Issue 15, the command line as a new user meets it: `wick run` answers as the server does,
//! a closed pipe ends quietly, a failed chat turn fails the exit status, and every command
//! takes a model reference. The real binary on the real model.

mod serve_util;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use serve_util::{client, Server};
use wick_testutil::model_path as model;

fn wick() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wick"))
}

#[test]
fn run_answers_exactly_as_the_server_does() {
    let question = "What is the capital of France?";
    let server = Server::start(&[]);
    let body = json!({"messages": [{"role": "user", "content": question}],
                      "temperature": 0, "max_tokens": 32});
    let r: Value = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let answer = r["choices"][0]["message"]["content"].as_str().unwrap();
    let out = wick()
        .args(["run", "-t", "0", "-n", "32", "--threads", "2", "-m"])
        .arg(model())
        .arg(question)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = String::from_utf8(out.stdout).unwrap();
    assert_eq!(ran.strip_suffix('\n').unwrap_or(&ran), answer);
}

/// Starts `wick ARGS`, reads a few bytes of its output and closes the pipe.
fn read_a_little_then_close(args: &[&str]) -> std::process::Output {
    let mut child = wick()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut some = [0u8; 8];
    stdout.read_exact(&mut some).unwrap();
    drop(stdout);
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("request.json");
    let long = "word ".repeat(2000);
    std::fs::write(
        &request,
        json!({"messages": [{"role": "user", "content": long}], "add_generation_prompt": true})
            .to_string(),
    )
    .unwrap();
    let model = model().to_string_lossy().into_owned();
    let request = request.to_string_lossy().into_owned();
    for args in [
        vec!["tokenize", "-m", &model, "--request", &request],
        vec![
            "run",
            "--raw",
            "-n",
            "400",
            "--threads",
            "2",
            "-m",
            &model,
            "Once upon a time",
        ],
    ] {
        let out = read_a_little_then_close(&args);
        assert!(
            out.status.success(),
            "{args:?}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_failed_chat_turn_fails_the_exit_status() {
    let server = Server::start(&["--strict-model-names"]);
    let mut child = wick()
        .args(["chat", "--url", &server.base, "-m", "no-such-model"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no-such-model"), "{stderr}");
}

#[test]
fn tokenize_and_template_render_take_model_references() {
    let home = tempfile::tempdir().unwrap();
    let pulled = wick()
        .env("WICK_HOME", home.path())
        .arg("pull")
        .arg(model())
        .args(["--as", "smol"])
        .output()
        .unwrap();
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    let request = home.path().join("request.json");
    std::fs::write(
        &request,
        json!({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})
            .to_string(),
    )
    .unwrap();
    for args in [["tokenize", "-m"], ["template", "render"]] {
        let mut command = wick();
        command.env("WICK_HOME", home.path()).args(args);
        if args[0] == "template" {
            command.arg("--model");
        }
        let out = command
            .arg("smol")
            .arg("--request")
            .arg(&request)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("im_start"));
    }
}

#[test]
fn verbose_logs_have_no_colour_off_a_terminal() {
    let out = wick()
        .args(["run", "--verbose", "-n", "2", "--threads", "2", "-m"])
        .arg(model())
        .arg("Hi")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains('\u{1b}'), "ANSI escapes in {stderr:?}");
}

#[test]
fn cache_clear_removes_what_a_killed_server_left_half_written() {
    let home = tempfile::tempdir().unwrap();
    let group = home.path().join("kv/0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&group).unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let left = group.join(format!(".aa.kv.{dead}.tmp"));
    let writing = group.join(format!(".bb.kv.{}.tmp", std::process::id()));
    std::fs::write(&left, vec![0u8; 4096]).unwrap();
    std::fs::write(&writing, vec![0u8; 16]).unwrap();
    let listed = wick()
        .env("WICK_HOME", home.path())
        .args(["cache", "ls"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("2 snapshots half-written"), "{listed}");
    let cleared = wick()
        .env("WICK_HOME", home.path())
        .args(["cache", "clear"])
        .output()
        .unwrap();
    assert!(cleared.status.success());
    let said = String::from_utf8_lossy(&cleared.stdout);
    assert!(
        said.contains("1 half-written by a killed process"),
        "{said}"
    );
    assert!(!left.exists(), "the leftover is gone");
    assert!(writing.exists(), "a live writer's file stays");
}
