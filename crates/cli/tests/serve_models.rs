//! `wick serve` of many models on the real model: without -m it serves the store (the default
//! model, loaded at start) and `--models-dir` (here the test model requantized to `Q8_0` under
//! two names, and a broken file), each loaded on its first request. Shown: the listings with
//! states, one load for a burst of 8 concurrent requests, idle unloads, `--max-loaded 1`
//! switching back and forth with no failed request, a failed load's error to every waiting
//! request, the prompt cache restored from disk after an unload and reload, `wick ps` and
//! `wick stop`, and the official `ollama` client's `ps`, `chat` with `keep_alive` and
//! `generate` unloading.

mod serve_util;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use serve_util::{
    client, get_json, post_json, requantized, run_python_client, venv_python, Server,
};

/// The store's default model file name (`wick_models::DEFAULT_MODEL_FILE`).
const DEFAULT_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A `$WICK_HOME` whose store holds the test model as the default model, and a models
/// directory holding the `Q8_0` copy (as `smol-q8.gguf`) and, when `broken`, a file that is
/// not a model (`broken.gguf`).
struct Setup {
    home: tempfile::TempDir,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(broken: bool) -> Setup {
        let home = tempfile::tempdir().unwrap();
        let models = home.path().join("models");
        std::fs::create_dir_all(&models).unwrap();
        link(&wick_testutil::model_path(), &models.join(DEFAULT_FILE));
        let dir = tempfile::tempdir().unwrap();
        link(&requantized("Q8_0"), &dir.path().join("smol-q8.gguf"));
        if broken {
            std::fs::write(dir.path().join("broken.gguf"), b"GGUF but not really").unwrap();
        }
        Setup { home, dir }
    }

    fn serve(&self, extra: &[&str]) -> Server {
        self.serve_env(extra, &[])
    }

    fn serve_env(&self, extra: &[&str], envs: &[(&str, &OsStr)]) -> Server {
        let dir = self.dir.path().to_str().unwrap();
        let args: Vec<&str> = ["--models-dir", dir]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        Server::start_args_env_in(self.home.path(), &args, envs)
    }
}

fn link(from: &Path, to: &Path) {
    #[cfg(unix)]
    std::os::unix::fs::symlink(from, to).unwrap();
    #[cfg(not(unix))]
    std::fs::copy(from, to).unwrap();
}

fn models(server: &Server) -> Vec<Value> {
    get_json(server, "/v1/models")["data"]
        .as_array()
        .unwrap()
        .clone()
}

/// Chats with each of `names` at once (a thread each); each answer's status and body.
fn chat_at_once(server: &Server, names: &[&str]) -> Vec<(u16, Value)> {
    let answers: Vec<_> = names
        .iter()
        .map(|&name| {
            let url = server.url("/v1/chat/completions");
            let body = chat(name, "Hi");
            std::thread::spawn(move || {
                let r = client().post(url).json(&body).send().unwrap();
                (r.status().as_u16(), r.json::<Value>().unwrap())
            })
        })
        .collect();
    answers.into_iter().map(|a| a.join().unwrap()).collect()
}

fn status(server: &Server, id: &str) -> String {
    models(server)
        .into_iter()
        .find(|m| m["id"] == id)
        .map_or_else(
            || panic!("{id} is listed"),
            |m| m["status"]["value"].as_str().unwrap().to_owned(),
        )
}

/// Polls until `id` is `want` (bounded: 30 s, no timing assertion); the last status seen.
fn wait_status(server: &Server, id: &str, want: &str) -> String {
    let mut last = status(server, id);
    for _ in 0..300 {
        if last == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        last = status(server, id);
    }
    last
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "max_tokens": 4, "temperature": 0,
           "messages": [{"role": "user", "content": text}]})
}

fn loads(server: &Server, id: &str) -> u64 {
    let metrics = client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let line = format!("wick_model_loads_total{{model=\"{id}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn the_store_and_a_directory_load_on_first_request_once_for_a_burst_and_unload_when_idle() {
    let setup = Setup::new(false);
    let server = setup.serve(&["--keep-alive", "1s"]);
    let listed = models(&server);
    let ids: Vec<&str> = listed.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["SmolLM2-135M-Instruct.Q4_1", "smol-q8"], "{listed:?}");
    assert_eq!(listed[0]["aliases"], json!(["default"]));
    assert_eq!(listed[1]["status"]["value"], "unloaded");
    // The memory estimate: the file, and an F16 KV cache of 4,096 tokens for each of the 4
    // sequences and the embeddings' context, 23,040 bytes a token (30 layers × 3 KV heads ×
    // 64 values × a key and a value × 2 bytes).
    let file = std::fs::metadata(requantized("Q8_0")).unwrap().len();
    assert_eq!(
        listed[1]["size"],
        json!(file + 23_040 * 4096 * 5),
        "{listed:?}"
    );
    // Ollama's list shows every model, loaded or not, with its own quantization.
    let tags = get_json(&server, "/api/tags");
    let levels: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["details"]["quantization_level"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["Q4_1", "Q8_0"]);

    // Eight requests at once, by the file's name and by its id: one load.
    let names = ["smol-q8", "smol-q8.gguf"].repeat(4);
    for (code, body) in chat_at_once(&server, &names) {
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["model"], "smol-q8");
    }
    assert_eq!(loads(&server, "smol-q8"), 1);
    // Idle past its keep-alive, it is unloaded; the next request loads it again.
    assert_eq!(wait_status(&server, "smol-q8", "unloaded"), "unloaded");
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat("smol-q8", "Hi"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(loads(&server, "smol-q8"), 2);
}

#[test]
fn one_model_at_a_time_switches_back_and_forth_with_no_failed_request() {
    let setup = Setup::new(false);
    let server = setup.serve(&["--max-loaded", "1"]);
    for (code, body) in chat_at_once(&server, &["smol-q8", "default"].repeat(4)) {
        assert_eq!(code, 200, "{body}");
    }
    let loaded: Vec<Value> = models(&server)
        .into_iter()
        .filter(|m| m["status"]["value"] == "loaded")
        .collect();
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    // And back again, one after the other.
    for name in ["smol-q8", "default", "smol-q8"] {
        let (code, body) = post_json(&server, "/v1/chat/completions", &chat(name, "Hi"));
        assert_eq!(code, 200, "{body}");
    }
    assert_eq!(status(&server, "smol-q8"), "loaded");
    assert_eq!(status(&server, "SmolLM2-135M-Instruct.Q4_1"), "unloaded");
}

#[test]
fn a_pinned_model_stays_loaded_and_a_load_with_no_room_says_why() {
    let setup = Setup::new(false);
    let server = setup.serve(&["--max-loaded", "1", "--pin", "default", "--keep-alive", "0"]);
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat("default", "Hi"));
    assert_eq!(code, 200, "{body}");
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat("smol-q8", "Hi"));
    assert_eq!(code, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--max-loaded 1") && message.contains("pinned"),
        "{message}"
    );
    // Kept, though its keep-alive is zero.
    std::thread::sleep(Duration::from_millis(500));
    let listed = models(&server);
    assert_eq!(listed[0]["status"]["value"], "loaded");
    assert_eq!(listed[0]["pinned"], true);
    assert_eq!(listed[0]["expires_at"], Value::Null);
}

#[test]
fn a_failed_load_is_every_waiting_requests_error_and_is_listed_with_its_reason() {
    let setup = Setup::new(true);
    let server = setup.serve(&[]);
    for (code, body) in chat_at_once(&server, &["broken"; 4]) {
        assert_eq!(code, 500, "{body}");
        assert_eq!(body["error"]["code"], "model_load_failed");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("cannot load the model `broken`"),
            "{message}"
        );
    }
    let broken = models(&server)
        .into_iter()
        .find(|m| m["id"] == "broken")
        .unwrap();
    assert_eq!(broken["status"]["value"], "failed");
    assert!(!broken["status"]["reason"].as_str().unwrap().is_empty());
    // The other models are not hurt.
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat("smol-q8", "Hi"));
    assert_eq!(code, 200, "{body}");
}

#[test]
fn the_prompt_cache_comes_back_from_disk_after_an_unload_and_wick_ps_and_stop_show_it() {
    let setup = Setup::new(false);
    let server = setup.serve(&[]);
    let system = "You answer questions about geography, history and science in short, clear \
                  sentences for students, and you say so when you do not know. "
        .repeat(3);
    let ask = |question: &str| {
        json!({"model": "smol-q8", "max_tokens": 4, "temperature": 0,
               "messages": [{"role": "system", "content": system},
                            {"role": "user", "content": question}]})
    };
    let (code, first) = post_json(&server, "/v1/chat/completions", &ask("What is a river?"));
    assert_eq!(code, 200, "{first}");
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens > 64,
        "long enough to be saved: {prompt_tokens}"
    );

    let wick = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wick"))
            .args(args)
            .env("WICK_URL", &server.base)
            .env_remove("WICK_API_KEY")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "wick {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let ps = wick(&["ps"]);
    assert!(ps.starts_with("NAME"), "{ps}");
    assert!(
        ps.contains("smol-q8") && ps.contains("minutes from now"),
        "{ps}"
    );
    assert_eq!(wick(&["stop", "smol-q8"]).trim(), "unloaded smol-q8");
    assert_eq!(wait_status(&server, "smol-q8", "unloaded"), "unloaded");
    assert!(!wick(&["ps"]).contains("smol-q8"));
    assert!(wick(&["ps", "--all"]).contains("unloaded"));

    // Reloaded, the model restores the conversation's prefix from disk.
    let (code, again) = post_json(&server, "/v1/chat/completions", &ask("What is a lake?"));
    assert_eq!(code, 200, "{again}");
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= 64,
        "the system prompt's tokens come from the disk cache: {again}"
    );
    assert_eq!(loads(&server, "smol-q8"), 2);
    let metrics = server.metrics_when(|_| true);
    let disk_hits = metrics
        .lines()
        .find_map(|l| l.strip_prefix("wick_prompt_cache_hits_disk_total{model=\"smol-q8\"} "));
    assert_eq!(disk_hits, Some("1"), "{metrics}");

    // `wick stop` of an unknown model says so.
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["stop", "nope"])
        .env("WICK_URL", &server.base)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

#[test]
fn a_presets_models_get_their_settings_and_a_missing_one_is_pulled_only_when_allowed() {
    let hub = wick_testutil::FakeHub::start();
    let bytes = std::fs::read(wick_testutil::model_path()).unwrap();
    hub.add_file("HuggingFaceTB/smol-GGUF", "smol-Q4_1.gguf", bytes);
    let q8 = requantized("Q8_0");
    let home = tempfile::tempdir().unwrap();
    let preset = home.path().join("models.toml");
    std::fs::write(
        &preset,
        format!(
            "[defaults]\nctx-size = 1024\n\n\
             [models.eight]\nmodel = {:?}\naliases = [\"org/eight\"]\ntags = [\"small\"]\n\
             load-on-startup = true\nkeep-alive = \"-1\"\n\n\
             [models.remote]\nmodel = \"HuggingFaceTB/smol-GGUF:Q4_1\"\nctx-size = 512\n",
            q8.display().to_string()
        ),
    )
    .unwrap();
    let hf_cache = home.path().join("hf-cache");
    let envs = [
        ("HF_ENDPOINT", OsStr::new(hub.endpoint())),
        ("HF_HUB_CACHE", hf_cache.as_os_str()),
    ];
    let model = wick_testutil::model_path();
    let start = |extra: &[&str]| {
        let args: Vec<&str> = ["-m", model.to_str().unwrap()]
            .into_iter()
            .chain(["--models-preset", preset.to_str().unwrap()])
            .chain(extra.iter().copied())
            .collect();
        Server::start_args_env_in(home.path(), &args, &envs)
    };

    let server = start(&[]);
    let listed = models(&server);
    let eight = listed.iter().find(|m| m["id"] == "eight").unwrap();
    // Loaded at start, with the preset's context, names and tags, kept forever.
    assert_eq!(eight["status"]["value"], "loaded", "{eight}");
    assert_eq!(eight["context_window"], 1024);
    assert_eq!(eight["tags"], json!(["small"]));
    assert_eq!(eight["expires_at"], Value::Null);
    // A name with a slash, on a streamed answer.
    let body = client()
        .post(server.url("/v1/chat/completions"))
        .json(
            &json!({"model": "org/eight", "max_tokens": 4, "stream": true,
                      "messages": [{"role": "user", "content": "Hi"}]}),
        )
        .send()
        .unwrap()
        .text()
        .unwrap();
    let events = serve_util::sse_events(&body);
    assert!(events.len() > 1, "{body}");
    // Not on this machine, and not allowed to pull: the error says what to do.
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat("remote", "Hi"));
    assert_eq!(code, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("wick pull HuggingFaceTB/smol-GGUF:Q4_1"),
        "{message}"
    );
    assert!(message.contains("--pull-missing"), "{message}");
    assert_eq!(hub.count("/files/"), 0);
    drop(server);

    // With --pull-missing the first request downloads it (verified as `wick pull` does).
    let server = start(&["--pull-missing"]);
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat("remote", "Hi"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["model"], "remote");
    let remote = models(&server)
        .into_iter()
        .find(|m| m["id"] == "remote")
        .unwrap();
    assert_eq!(remote["context_window"], 512);
    assert_eq!(hub.count("/files/"), 1);
}

#[test]
fn a_model_pulled_while_serving_is_served_and_a_deleted_one_is_not() {
    let hub = wick_testutil::FakeHub::start();
    let bytes = std::fs::read(requantized("Q8_0")).unwrap();
    hub.add_file("HuggingFaceTB/smol-GGUF", "smol-Q8_0.gguf", bytes);
    let setup = Setup::new(false);
    let hf_cache = setup.home.path().join("hf-cache");
    let server = setup.serve_env(
        &[],
        &[
            ("HF_ENDPOINT", OsStr::new(hub.endpoint())),
            ("HF_HUB_CACHE", hf_cache.as_os_str()),
        ],
    );
    let (code, body) = post_json(
        &server,
        "/api/pull",
        &json!({"model": "HuggingFaceTB/smol-GGUF:Q8_0", "stream": false}),
    );
    assert_eq!(code, 200, "{body}");
    let ids: Vec<String> = models(&server)
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    let pulled = ids
        .iter()
        .find(|id| id.contains("smol-Q8_0"))
        .unwrap_or_else(|| panic!("the pulled model is served: {ids:?}"))
        .clone();
    assert_eq!(status(&server, &pulled), "unloaded");
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat(&pulled, "Hi"));
    assert_eq!(code, 200, "{body}");
    // Deleted from the store, it is no longer served.
    let r = client()
        .delete(server.url("/api/delete"))
        .json(&json!({"model": pulled}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(models(&server).iter().all(|m| m["id"] != pulled.as_str()));
    let (code, _) = post_json(&server, "/v1/chat/completions", &chat(&pulled, "Hi"));
    assert_eq!(code, 404);
}

#[test]
fn the_ollama_python_package_lists_keeps_and_unloads_models() {
    let python = venv_python(
        "WICK_OPENAI_PYTHON",
        "venv-openai",
        "ollama",
        "ollama==0.6.3",
    );
    let setup = Setup::new(false);
    let server = setup.serve(&[]);
    run_python_client(
        &python,
        "ollama_models_client.py",
        &[OsStr::new(&server.base), OsStr::new("smol-q8")],
        &["OLLAMA_HOST"],
        "all ollama model checks passed",
    );
}
