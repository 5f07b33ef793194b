//! wick built with llama.cpp's Vulkan backend (`scripts/build-gpu vulkan`), run on lavapipe
//! (Mesa's Vulkan implementation on the CPU, which llama.cpp's own CI tests its Vulkan backend
//! on), on the real model, with every layer offloaded and with half: where each layer runs, a
//! greedy answer and its log-probabilities against the CPU build's, the prompt cache (reuse, a
//! disk snapshot saved from device memory and restored after a restart, never mixed with a CPU
//! snapshot), concurrent streams, and speculative decoding with offloaded layers.
//!
//! The GPU build is `$WICK_VULKAN_BIN` when set (`scripts/test` builds it first), else this test
//! runs `scripts/build-gpu vulkan` (minutes the first time; cached after). lavapipe compiles its
//! pipelines on first use and computes slowly, so every request here is a handful of tokens.

mod serve_util;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};
use serve_util::{client, get_json, post_json, Server};

/// The Vulkan build of wick, built once.
fn vulkan_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(bin) = std::env::var_os("WICK_VULKAN_BIN") {
                return PathBuf::from(bin);
            }
            let root = wick_testutil::crate_path(env!("CARGO_MANIFEST_DIR"), "../..");
            let out = Command::new("bash")
                .arg(root.join("scripts/build-gpu"))
                .arg("vulkan")
                .output()
                .expect("bash runs scripts/build-gpu");
            assert!(
                out.status.success(),
                "scripts/build-gpu vulkan failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8(out.stdout).unwrap();
            PathBuf::from(stdout.lines().last().expect("the binary's path").trim())
        })
        .clone()
}

/// `wick serve` of the Vulkan build on lavapipe with `extra` flags, in `home`.
fn serve_on_lavapipe(home: &std::path::Path, extra: &[&str]) -> Server {
    let binary = vulkan_binary();
    let model = wick_testutil::model_path();
    let mut args = vec!["-m", model.to_str().unwrap(), "--ctx-size", "256"];
    args.extend_from_slice(extra);
    // lavapipe is a CPU-type device, which llama.cpp's Vulkan backend skips unless named.
    Server::start_binary_in(
        &binary,
        home,
        &args,
        &[("GGML_VK_VISIBLE_DEVICES", std::ffi::OsStr::new("0"))],
    )
}

/// The first generated token's log-probabilities (`top_logprobs` of 5) and the greedy text
/// of a 4-token answer.
fn greedy(server: &Server, prompt: &str) -> (String, Vec<(String, f64)>) {
    let (code, body) = post_json(
        server,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 5}),
    );
    assert_eq!(code, 200, "{body}");
    let choice = &body["choices"][0];
    let top: Vec<(String, f64)> = choice["logprobs"]["top_logprobs"][0]
        .as_object()
        .expect("top_logprobs")
        .iter()
        .map(|(t, l)| (t.clone(), l.as_f64().unwrap()))
        .collect();
    (choice["text"].as_str().unwrap().to_owned(), top)
}

fn best(top: &[(String, f64)]) -> (String, f64, f64) {
    let mut sorted = top.to_vec();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    (sorted[0].0.clone(), sorted[0].1, sorted[0].1 - sorted[1].1)
}

const PROMPT: &str = "The capital of France is the city of";

#[test]
fn offloaded_layers_run_on_lavapipe_close_to_the_cpu_and_keep_their_own_prompt_cache() {
    let home = tempfile::tempdir().unwrap();
    // The CPU build's answer, in the same home (its snapshots must not serve the GPU's).
    let cpu = Server::start_in(home.path(), &["--ctx-size", "256"]);
    let (cpu_text, cpu_top) = greedy(&cpu, PROMPT);
    let (cpu_token, cpu_logprob, margin) = best(&cpu_top);
    // The prompt is chosen so that its first token wins clearly: float differences between
    // devices cannot tip it (checked here, so a change of model or prompt cannot hide it).
    assert!(
        margin > 1.0,
        "the CPU's first token wins by {margin} nats only: {cpu_top:?}"
    );
    drop(cpu);

    for layers in ["999", "15"] {
        let server = serve_on_lavapipe(home.path(), &["--gpu-layers", layers]);
        let models = get_json(&server, "/v1/models");
        let meta = &models["data"][0]["meta"];
        let placement = meta["placement"].as_array().unwrap();
        let on_vulkan: u64 = placement
            .iter()
            .filter(|p| p["device"].as_str().unwrap().starts_with("Vulkan"))
            .map(|p| p["n_layers"].as_u64().unwrap())
            .sum();
        // The output layer counts as one of `--gpu-layers` (llama.cpp's rule): 15 offloads the
        // output layer and the last 14 repeating ones.
        let expected = if layers == "999" { 30 } else { 14 };
        assert_eq!(on_vulkan, expected, "{placement:?}");
        assert!(
            placement
                .iter()
                .any(|p| p["output"] == true && p["device"] == "Vulkan0"),
            "{placement:?}"
        );
        assert!(
            placement
                .iter()
                .any(|p| p["description"].as_str().unwrap().contains("llvmpipe")),
            "lavapipe runs the offloaded layers: {placement:?}"
        );
        assert_eq!(
            meta["deterministic"], false,
            "GPU layers are not bit-deterministic"
        );

        // The same first token, its log-probability close to the CPU's: the devices sum in
        // other orders (and lavapipe's matrix products convert to F16), so the floats differ
        // a little, never by a different answer.
        let (text, top) = greedy(&server, PROMPT);
        let (token, logprob, _) = best(&top);
        assert_eq!(token, cpu_token, "{top:?} against the CPU's {cpu_top:?}");
        assert!(
            (logprob - cpu_logprob).abs() < 0.1,
            "{layers} layers: {logprob} against the CPU's {cpu_logprob}"
        );
        assert!(!text.is_empty() && !cpu_text.is_empty());

        // The prompt cache: the same prompt again reuses what the device holds.
        let (code, again) = post_json(
            &server,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2,
                    "temperature": 0}),
        );
        assert_eq!(code, 200, "{again}");
        let (code, again) = post_json(
            &server,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2,
                    "temperature": 0}),
        );
        assert_eq!(code, 200, "{again}");
        let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        assert!(cached > 0, "{again}");
    }
}

#[test]
fn a_snapshot_saved_from_device_memory_is_restored_after_a_restart_and_streams_run_together() {
    let home = tempfile::tempdir().unwrap();
    // Long enough to be saved to disk (64 tokens at least).
    let system = "You answer questions about geography in one short sentence. ".repeat(8);
    let ask = json!({"messages": [{"role": "system", "content": system},
                                  {"role": "user", "content": "Name a river."}],
                     "max_tokens": 2, "temperature": 0});
    {
        let server = serve_on_lavapipe(home.path(), &["--gpu-layers", "999"]);
        let (code, first) = post_json(&server, "/v1/chat/completions", &ask);
        assert_eq!(code, 200, "{first}");
        assert!(first["usage"]["prompt_tokens"].as_u64().unwrap() > 64);
        // Two streams at once on the offloaded model.
        let streams: Vec<_> = ["Name a lake.", "Name a sea."]
            .into_iter()
            .map(|question| {
                let url = server.url("/v1/chat/completions");
                std::thread::spawn(move || {
                    client()
                        .post(url)
                        .json(&json!({"messages": [{"role": "user", "content": question}],
                                      "max_tokens": 3, "stream": true}))
                        .send()
                        .unwrap()
                        .text()
                        .unwrap()
                })
            })
            .collect();
        for stream in streams {
            let body = stream.join().unwrap();
            let events = serve_util::sse_events(&body);
            assert!(events.len() > 2, "{body}");
        }
    }
    // A restarted server restores the prefix from the snapshot its predecessor saved.
    let server = serve_on_lavapipe(home.path(), &["--gpu-layers", "999"]);
    let (code, again) = post_json(&server, "/v1/chat/completions", &ask);
    assert_eq!(code, 200, "{again}");
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 64, "restored from disk: {again}");
    drop(server);
    // The CPU build, in the same home, never restores the device's snapshot.
    let cpu = Server::start_in(home.path(), &["--ctx-size", "256"]);
    let (code, cold) = post_json(&cpu, "/v1/chat/completions", &ask);
    assert_eq!(code, 200, "{cold}");
    assert_eq!(
        cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "a CPU server restored a device snapshot: {cold}"
    );
}

#[test]
fn wick_devices_lists_lavapipe_and_device_picks_it_or_names_what_exists() {
    let binary = vulkan_binary();
    let devices = |visible: Option<&str>| {
        let mut command = Command::new(&binary);
        command.args(["devices", "--json"]);
        match visible {
            Some(v) => command.env("GGML_VK_VISIBLE_DEVICES", v),
            None => command.env_remove("GGML_VK_VISIBLE_DEVICES"),
        };
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let listed = devices(Some("0"));
    let vulkan = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "Vulkan0")
        .unwrap_or_else(|| panic!("lavapipe is listed: {listed}"));
    assert!(
        vulkan["description"].as_str().unwrap().contains("llvmpipe"),
        "{vulkan}"
    );
    assert!(vulkan["total"].as_u64().unwrap() > 0, "{vulkan}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["kind"] == "cpu"),
        "{listed}"
    );
    // Without the variable, llama.cpp's Vulkan backend leaves the CPU-type device out.
    assert!(devices(None)
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["name"] != "Vulkan0"));

    // `--device` names a device that exists: the answer comes; one that does not: an error
    // naming the ones there are.
    let model = wick_testutil::model_path();
    let run = |device: &str| {
        Command::new(&binary)
            .args([
                "run",
                "-m",
                model.to_str().unwrap(),
                "--greedy",
                "-n",
                "2",
                "-c",
                "128",
            ])
            .args(["--gpu-layers", "999", "--device", device, "Hi"])
            .env("GGML_VK_VISIBLE_DEVICES", "0")
            .output()
            .unwrap()
    };
    let ok = run("Vulkan0");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = run("Vulkan7");
    assert!(!bad.status.success());
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(
        message.contains("Vulkan7") && message.contains("Vulkan0"),
        "{message}"
    );
}

/// Layers (the output layer not counted) a placement puts on Vulkan devices.
fn layers_on_vulkan(models: &Value) -> u64 {
    models["data"][0]["meta"]["placement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["device"].as_str().unwrap().starts_with("Vulkan"))
        .map(|p| p["n_layers"].as_u64().unwrap())
        .sum()
}

#[test]
fn gpu_layers_auto_fits_the_free_memory_and_a_context_that_cannot_fit_is_refused_by_name() {
    let home = tempfile::tempdir().unwrap();
    // Everything fits lavapipe's 2 GiB with the default 1 GiB left free: every layer goes,
    // and each layer's KV cache with it (256 tokens × 4 sequences × 23,040 bytes).
    let server = serve_on_lavapipe(home.path(), &["--gpu-layers", "auto"]);
    let models = get_json(&server, "/v1/models");
    assert_eq!(layers_on_vulkan(&models), 30, "{models}");
    let placement = &models["data"][0]["meta"]["placement"][0];
    assert_eq!(placement["kv_cache"]["device"], "Vulkan0", "{placement}");
    assert_eq!(
        placement["kv_cache"]["bytes"],
        256 * 4 * 23_040,
        "{placement}"
    );
    drop(server);

    // Asked to leave all but 150 MiB free, llama.cpp's fit keeps some layers on the CPU.
    let listed = Command::new(vulkan_binary())
        .args(["devices", "--json"])
        .env("GGML_VK_VISIBLE_DEVICES", "0")
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let free_mib = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "Vulkan0")
        .unwrap()["free"]
        .as_u64()
        .unwrap()
        >> 20;
    let target = (free_mib - 150).to_string();
    let server = serve_on_lavapipe(
        home.path(),
        &["--gpu-layers", "auto", "--fit-target", &target],
    );
    let models = get_json(&server, "/v1/models");
    let split = layers_on_vulkan(&models);
    assert!(split > 0 && split < 30, "{split} layers fitted: {models}");
    let (text, _) = greedy(&server, PROMPT);
    assert!(!text.is_empty());
    drop(server);

    // 8,192 tokens × 16 sequences of KV cache (2.8 GiB) on a 2 GiB device: refused before
    // llama.cpp allocates, naming the device, what was asked and what is free.
    let model = wick_testutil::model_path();
    let out = Command::new(vulkan_binary())
        .args(["serve", "--port", "0", "-m", model.to_str().unwrap()])
        .args(["--gpu-layers", "999", "-c", "8192", "--parallel", "16"])
        .env("GGML_VK_VISIBLE_DEVICES", "0")
        .env("WICK_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains("8192 tokens × 16 sequences")
            && message.contains("2.8 GiB on Vulkan0")
            && message.contains("free")
            && message.contains("--gpu-layers auto"),
        "{message}"
    );
}

#[test]
fn speculation_and_a_lora_adapter_run_with_offloaded_layers() {
    let home = tempfile::tempdir().unwrap();
    // Prompt lookup drafts from a repeated list, every layer offloaded.
    let server = serve_on_lavapipe(home.path(), &["--gpu-layers", "999"]);
    let (code, body) = post_json(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content":
                    "Repeat this list exactly: apples, pears, plums, apples, pears, plums."}],
                "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!(code, 200, "{body}");
    let metrics = client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let drafted = serve_util::metric(&metrics, "wick_spec_drafted_tokens_total");
    let accepted = serve_util::metric(&metrics, "wick_spec_accepted_tokens_total");
    assert!(
        drafted > 0 && accepted > 0,
        "{drafted} drafted, {accepted} accepted"
    );
    drop(server);

    // A LoRA adapter on a model with half its layers offloaded: at scale 8 it moves the
    // first token's log-probabilities; at scale 0 the answer is the base model's.
    let adapter = home.path().join("adapter.gguf");
    std::fs::write(&adapter, wick_testutil::lora_adapter("llama", 30, 576, 7)).unwrap();
    let server = serve_on_lavapipe(
        home.path(),
        &[
            "--gpu-layers",
            "15",
            "--lora",
            &format!("{}:0", adapter.display()),
        ],
    );
    let first = |scale: f64| {
        let (code, body) = post_json(
            &server,
            "/v1/completions",
            &json!({"prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 5,
                    "lora": [{"id": 0, "scale": scale}]}),
        );
        assert_eq!(code, 200, "{body}");
        body["choices"][0]["logprobs"]["token_logprobs"][0]
            .as_f64()
            .unwrap()
    };
    let (base, again, with_lora) = (first(0.0), first(0.0), first(8.0));
    assert!((base - again).abs() < 1e-3, "{base} then {again}");
    assert!(
        (base - with_lora).abs() > 1e-3,
        "the adapter changed nothing: {base} and {with_lora}"
    );
}
