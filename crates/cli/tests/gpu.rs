//! wick built with one of llama.cpp's GPU backends, on the real model, with every layer
//! offloaded and with half: where each layer and its KV cache live, `--gpu-layers auto`, a
//! greedy answer and its log-probabilities against the CPU build's, the prompt cache (reuse, a
//! disk snapshot saved from device memory and restored after a restart, never mixed with a CPU
//! snapshot), concurrent streams, speculative decoding and a LoRA adapter with offloaded
//! layers, `wick devices` and `--device`, and a context too large for the device refused by name.
//!
//! `scripts/test` runs it on the Vulkan build (`scripts/build-gpu vulkan`) on lavapipe, Mesa's
//! Vulkan on the CPU, which llama.cpp's own CI tests its Vulkan backend on; `scripts/gpu-check`
//! runs it on a real GPU with the CUDA build (`WICK_GPU=cuda`). The build is `$WICK_VULKAN_BIN`
//! (or `$WICK_CUDA_BIN`) when set, else this test runs `scripts/build-gpu` (minutes the first
//! time; cached after). lavapipe compiles its pipelines on first use and computes slowly, so
//! every request here is a handful of tokens.
//!
//! The tests take turns on the device ([`turn`]): two Vulkan contexts at once on lavapipe (Mesa
//! 22.3, Debian 12's) once ended in a SIGSEGV inside Mesa.

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};
use serve_util::{client, get_json, post_json, Server};

/// The GPU build under test and how its device is reached.
struct Gpu {
    /// `vulkan` or `cuda`.
    kind: &'static str,
    binary: PathBuf,
    /// ggml's name for the first device (`Vulkan0`, `CUDA0`) and its prefix.
    device: &'static str,
    prefix: &'static str,
    /// Environment the binary runs with: lavapipe is a CPU-type device, which llama.cpp's
    /// Vulkan backend skips unless `GGML_VK_VISIBLE_DEVICES` names it.
    env: &'static [(&'static str, &'static str)],
}

impl Gpu {
    /// Whether the device is lavapipe (Vulkan on the CPU, 2 GiB of "device" memory).
    fn lavapipe(&self) -> bool {
        self.kind == "vulkan"
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command.envs(self.env.iter().copied());
        command
    }
}

/// This test's turn on the device: one test at a time (see the module's note).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it leaves it poisoned; the next one still runs.
    DEVICE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The GPU build (`$WICK_GPU`: `vulkan`, the default, or `cuda`), built once.
fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let kind = match std::env::var("WICK_GPU").as_deref() {
            Ok("cuda") => "cuda",
            Ok("vulkan") | Err(_) => "vulkan",
            Ok(other) => panic!("WICK_GPU is vulkan or cuda, not {other}"),
        };
        let variable = format!("WICK_{}_BIN", kind.to_uppercase());
        let binary = std::env::var_os(&variable)
            .map_or_else(|| serve_util::built_by("build-gpu", &[kind]), PathBuf::from);
        if kind == "cuda" {
            Gpu {
                kind,
                binary,
                device: "CUDA0",
                prefix: "CUDA",
                env: &[],
            }
        } else {
            Gpu {
                kind,
                binary,
                device: "Vulkan0",
                prefix: "Vulkan",
                env: &[("GGML_VK_VISIBLE_DEVICES", "0")],
            }
        }
    })
}

/// `wick serve` of the GPU build with `extra` flags, in `home`.
fn serve_on_gpu(home: &Path, extra: &[&str]) -> Server {
    let gpu = gpu();
    let model = wick_testutil::model_path();
    let mut args = vec!["-m", model.to_str().unwrap(), "--ctx-size", "256"];
    args.extend_from_slice(extra);
    let env: Vec<(&str, &std::ffi::OsStr)> = gpu
        .env
        .iter()
        .map(|(k, v)| (*k, std::ffi::OsStr::new(v)))
        .collect();
    Server::start_binary_in(&gpu.binary, home, &args, &env)
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
fn offloaded_layers_run_on_the_gpu_close_to_the_cpu_and_keep_their_own_prompt_cache() {
    let _turn = turn();
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
        let server = serve_on_gpu(home.path(), &["--gpu-layers", layers]);
        let models = get_json(&server, "/v1/models");
        let meta = &models["data"][0]["meta"];
        let placement = meta["placement"].as_array().unwrap();
        let on_vulkan: u64 = placement
            .iter()
            .filter(|p| p["device"].as_str().unwrap().starts_with(gpu().prefix))
            .map(|p| p["n_layers"].as_u64().unwrap())
            .sum();
        // The output layer counts as one of `--gpu-layers` (llama.cpp's rule): 15 offloads the
        // output layer and the last 14 repeating ones.
        let expected = if layers == "999" { 30 } else { 14 };
        assert_eq!(on_vulkan, expected, "{placement:?}");
        assert!(
            placement
                .iter()
                .any(|p| p["output"] == true && p["device"] == gpu().device),
            "{placement:?}"
        );
        assert!(
            !gpu().lavapipe()
                || placement
                    .iter()
                    .any(|p| p["description"].as_str().unwrap().contains("llvmpipe")),
            "lavapipe runs the offloaded layers: {placement:?}"
        );
        assert_eq!(
            meta["deterministic"], false,
            "GPU layers are not bit-deterministic"
        );
        // The layers left on the CPU still run the deterministic kernels; the GPU's do not.
        for span in placement {
            assert_eq!(
                span["deterministic"],
                span["device"] == "CPU",
                "{placement:?}"
            );
        }
        if layers == "15" {
            assert!(meta["cpu_kernels"]["level"].is_string(), "{meta}");
        }

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
    let _turn = turn();
    let home = tempfile::tempdir().unwrap();
    // Long enough to be saved to disk (64 tokens at least).
    let system = "You answer questions about geography in one short sentence. ".repeat(8);
    let ask = json!({"messages": [{"role": "system", "content": system},
                                  {"role": "user", "content": "Name a river."}],
                     "max_tokens": 2, "temperature": 0});
    {
        let server = serve_on_gpu(home.path(), &["--gpu-layers", "999"]);
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
    let server = serve_on_gpu(home.path(), &["--gpu-layers", "999"]);
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
fn wick_devices_lists_the_gpu_and_device_picks_it_or_names_what_exists() {
    let _turn = turn();
    let gpu = gpu();
    let devices = |command: &mut Command| {
        let out = command.args(["devices", "--json"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let listed = devices(&mut gpu.command());
    let device = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == gpu.device)
        .unwrap_or_else(|| panic!("{} is listed: {listed}", gpu.device));
    assert!(
        !gpu.lavapipe() || device["description"].as_str().unwrap().contains("llvmpipe"),
        "{device}"
    );
    assert!(device["total"].as_u64().unwrap() > 0, "{device}");
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["kind"] == "cpu"),
        "{listed}"
    );
    if gpu.lavapipe() {
        // Without the variable, llama.cpp's Vulkan backend leaves the CPU-type device out.
        let mut hidden = Command::new(&gpu.binary);
        hidden.env_remove("GGML_VK_VISIBLE_DEVICES");
        assert!(devices(&mut hidden)
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["name"] != gpu.device));
    }

    // `--device` names a device that exists: the answer comes; one that does not: an error
    // naming the ones there are.
    let model = wick_testutil::model_path();
    let run = |device: &str| {
        gpu.command()
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
            .output()
            .unwrap()
    };
    let ok = run(gpu.device);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let missing = format!("{}7", gpu.prefix);
    let bad = run(&missing);
    assert!(!bad.status.success());
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(
        message.contains(&missing) && message.contains(gpu.device),
        "{message}"
    );
}

/// Layers (the output layer not counted) a placement puts on the GPU.
fn layers_on_gpu(models: &Value) -> u64 {
    models["data"][0]["meta"]["placement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["device"].as_str().unwrap().starts_with(gpu().prefix))
        .map(|p| p["n_layers"].as_u64().unwrap())
        .sum()
}

#[test]
fn gpu_layers_auto_fits_the_free_memory_and_a_context_that_cannot_fit_is_refused_by_name() {
    let _turn = turn();
    let home = tempfile::tempdir().unwrap();
    // Everything fits (lavapipe has 2 GiB) with the default 1 GiB left free: every layer goes,
    // and each layer's KV cache with it (256 tokens × 4 sequences × 23,040 bytes).
    let server = serve_on_gpu(home.path(), &["--gpu-layers", "auto"]);
    let models = get_json(&server, "/v1/models");
    assert_eq!(layers_on_gpu(&models), 30, "{models}");
    let placement = &models["data"][0]["meta"]["placement"][0];
    assert_eq!(placement["kv_cache"]["device"], gpu().device, "{placement}");
    assert_eq!(
        placement["kv_cache"]["bytes"],
        256 * 4 * 23_040,
        "{placement}"
    );
    drop(server);

    // Asked to leave all but 150 MiB free, llama.cpp's fit keeps some layers on the CPU.
    let listed = gpu()
        .command()
        .args(["devices", "--json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let free = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == gpu().device)
        .unwrap()["free"]
        .as_u64()
        .unwrap();
    let target = ((free >> 20) - 150).to_string();
    let server = serve_on_gpu(
        home.path(),
        &["--gpu-layers", "auto", "--fit-target", &target],
    );
    let models = get_json(&server, "/v1/models");
    let split = layers_on_gpu(&models);
    assert!(split > 0 && split < 30, "{split} layers fitted: {models}");
    let (text, _) = greedy(&server, PROMPT);
    assert!(!text.is_empty());
    drop(server);

    // A KV cache larger than the device's free memory (on lavapipe's 2 GiB: 8,192 tokens ×
    // 16 sequences, 2.8 GiB) is refused before llama.cpp allocates, naming the device, what
    // was asked and what is free.
    let per_sequence = 8192 * 23_040;
    let Some(sequences) = [16u64, 64, 256]
        .into_iter()
        .find(|n| n * per_sequence > free)
    else {
        eprintln!(
            "{} has {free} bytes free: more than 256 sequences of this model's KV cache ask",
            gpu().device
        );
        return;
    };
    let model = wick_testutil::model_path();
    let out = gpu()
        .command()
        .args(["serve", "--port", "0", "-m", model.to_str().unwrap()])
        .args(["--gpu-layers", "999", "-c", "8192", "--parallel"])
        .arg(sequences.to_string())
        .env("WICK_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    #[allow(clippy::cast_precision_loss)] // a figure for a message
    let asked = format!(
        "{:.1} GiB on {}",
        (sequences * per_sequence) as f64 / f64::from(1u32 << 30),
        gpu().device
    );
    assert!(
        message.contains(&format!("8192 tokens × {sequences} sequences"))
            && message.contains(&asked)
            && message.contains("free")
            && message.contains("--gpu-layers auto"),
        "{message}"
    );
}

#[test]
fn speculation_and_a_lora_adapter_run_with_offloaded_layers() {
    let _turn = turn();
    let home = tempfile::tempdir().unwrap();
    // Prompt lookup drafts from a repeated list, every layer offloaded.
    let server = serve_on_gpu(home.path(), &["--gpu-layers", "999"]);
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

    // A LoRA adapter on a model with half its layers offloaded moves the first token's
    // log-probabilities (at scale 8). The adapter is set when the server starts: on lavapipe,
    // switching adapters between requests crashes inside lavapipe's own worker thread (glibc
    // reports a corrupted heap in a `free` called from libvulkan_lvp.so, Mesa 22.3.6), with
    // the CPU's kernels or not, with every layer offloaded or half; the CPU build switches
    // them in tests/lora.rs.
    let adapter = home.path().join("adapter.gguf");
    std::fs::write(&adapter, wick_testutil::lora_adapter("llama", 30, 576, 7)).unwrap();
    let first = |extra: &[&str]| {
        let mut args = vec!["--gpu-layers", "15"];
        args.extend_from_slice(extra);
        let server = serve_on_gpu(home.path(), &args);
        let (code, body) = post_json(
            &server,
            "/v1/completions",
            &json!({"prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 5}),
        );
        assert_eq!(code, 200, "{body}");
        body["choices"][0]["logprobs"]["token_logprobs"][0]
            .as_f64()
            .unwrap()
    };
    let with_lora = first(&["--lora", &format!("{}:8", adapter.display())]);
    let base = first(&[]);
    assert!(
        (base - with_lora).abs() > 1e-3,
        "the adapter changed nothing: {base} and {with_lora}"
    );
}
