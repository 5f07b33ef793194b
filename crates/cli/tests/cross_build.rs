//! The same logits on every x86-64 machine (issue 30): this machine's native build (at its best
//! CPU level) against a build for `x86-64-v3` — AVX2 without AVX-512 or VNNI, ggml included,
//! the build an AVX2-only machine makes — at its best level (`avx2`) and at `scalar`, on the
//! test model, the test model in every weight type with a wick kernel, 512-wide models with
//! every matrix in `Q4_K` (with `Q6_K`) or `IQ4_XS`, a mixture of experts
//! (also with `MXFP4` experts), a layer-norm model, Gemma-2- and Gemma-3-style models and
//! Qwen-2-, Qwen-3- (dense and a mixture of experts), Phi-3-, gpt-oss-, SmolLM-3-, Granite-,
//! Mistral-3-, OLMo-2-, EXAONE-4-, Cohere-2-, DeepSeek-2- and LFM2-style models. `wick
//! perplexity --json` prints a SHA-256 of every logit it computed; one differing bit anywhere
//! changes it.
//!
//! Because of it, replicas on such machines share prompt-cache snapshots: the x86-64-v3 build
//! restores what the native build saved, and answers from it with the same bits.
//!
//! The second build is `$WICK_X86_64_V3_BIN` when set (`scripts/test` builds it first), else
//! this test runs `scripts/build-x86-64-v3` (minutes the first time; cached after).
#![cfg(target_arch = "x86_64")]

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use serve_util::{get_json, metric, post_json, Server};

/// The x86-64-v3 build.
fn v3_build() -> PathBuf {
    std::env::var_os("WICK_X86_64_V3_BIN").map_or_else(
        || serve_util::built_by("build-x86-64-v3", &[]),
        PathBuf::from,
    )
}

/// `wick perplexity --json` of `binary` on `model` (one 64-token chunk) at `level` (`None`:
/// the build's best).
fn scores(binary: &Path, model: &Path, level: Option<&str>) -> Value {
    let mut command = Command::new(binary);
    command
        .args(["perplexity", "--json", "--chunks", "1", "--ctx-size", "64"])
        .args(["--threads", "2", "-m"])
        .arg(model)
        .env_remove("WICK_CPU_LEVEL");
    if let Some(level) = level {
        command.args(["--cpu-level", level]);
    }
    let out = command.output().expect("wick perplexity runs");
    assert!(
        out.status.success(),
        "{} perplexity -m {}: {}",
        binary.display(),
        model.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn the_native_and_the_x86_64_v3_build_compute_the_same_logits() {
    let v3 = v3_build();
    let native = PathBuf::from(env!("CARGO_BIN_EXE_wick"));
    let mut models = vec![(
        "Q4_1 (the test model)".to_owned(),
        wick_testutil::model_path(),
    )];
    for kind in [
        "Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL",
        "IQ4_XS", "F16", "BF16", "F32",
    ] {
        models.push((kind.to_owned(), serve_util::requantized(kind)));
    }
    // Every matrix in one super-block type, attention included (the test model's rows hold
    // them only in `ffn_down`).
    for kind in ["Q4_K_M", "IQ4_XS"] {
        models.push((
            format!("a 512-wide model in {kind}"),
            serve_util::shaped_in(kind),
        ));
    }
    models.push((
        "a mixture of experts".to_owned(),
        serve_util::mixture_of_experts(),
    ));
    models.push((
        "a mixture of MXFP4 experts".to_owned(),
        serve_util::mixture_of_experts_in("MXFP4_MOE"),
    ));
    models.push((
        "a layer-norm model".to_owned(),
        serve_util::layer_norm_model(),
    ));
    models.push((
        "a Gemma-2-style model".to_owned(),
        serve_util::gemma2_model(),
    ));
    models.push((
        "a Gemma-3-style model".to_owned(),
        serve_util::gemma3_model(),
    ));
    models.push(("a Qwen-2-style model".to_owned(), serve_util::qwen2_model()));
    models.push(("a Qwen-3-style model".to_owned(), serve_util::qwen3_model()));
    models.push((
        "a Qwen-3-style mixture of experts".to_owned(),
        serve_util::qwen3moe_model(),
    ));
    models.push(("a Phi-3-style model".to_owned(), serve_util::phi3_model()));
    models.push((
        "a gpt-oss-style model".to_owned(),
        serve_util::gpt_oss_model(),
    ));
    for arch in serve_util::OTHER_ARCHITECTURES {
        models.push((
            format!("a {arch}-style model"),
            serve_util::as_architecture(arch),
        ));
    }
    let mut differ = Vec::new();
    for (name, model) in &models {
        let reference = scores(&native, model, None);
        let fingerprint = reference["logits_sha256"].as_str().expect("a fingerprint");
        assert_eq!(fingerprint.len(), 64, "{reference}");
        for level in [None, Some("scalar")] {
            let other = scores(&v3, model, level);
            if other["logits_sha256"] != reference["logits_sha256"] {
                differ.push(format!(
                    "{name}: native {} (perplexity {}), x86-64-v3 at {} {} (perplexity {})",
                    reference["logits_sha256"],
                    reference["perplexity"],
                    level.unwrap_or("its best level"),
                    other["logits_sha256"],
                    other["perplexity"]
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "logits differ between the builds:\n{}",
        differ.join("\n")
    );
}

/// A chat whose prompt is long enough to be saved (over 64 tokens), asking for greedy
/// log-probabilities: equal answers are equal bits.
fn long_chat() -> Value {
    json!({
        "messages": [
            {"role": "system", "content": "You are a careful assistant who answers briefly. ".repeat(12)},
            {"role": "user", "content": "Name three colours of the rainbow."}
        ],
        "max_tokens": 12,
        "temperature": 0,
        "logprobs": true,
        "top_logprobs": 3
    })
}

/// `binary serve` on the test model with its prompt cache in `kv`; `meta` says the model
/// computes the same bits on every x86-64-v3 machine.
fn serve(binary: &Path, kv: &Path) -> (Server, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("a temporary WICK_HOME");
    let model = wick_testutil::model_path();
    let args = [
        "-m",
        model.to_str().expect("a UTF-8 path"),
        "--kv-cache-dir",
        kv.to_str().expect("a UTF-8 path"),
    ];
    let server = Server::start_binary_in(binary, home.path(), &args, &[]);
    let meta = &get_json(&server, "/v1/models")["data"][0]["meta"];
    assert_eq!(
        meta["cpu_kernels"]["same_bits_on"],
        "x86-64-v3",
        "{}: {meta}",
        binary.display()
    );
    (server, home)
}

/// `long_chat` on `server`: the answer and how many prompt tokens came from the cache.
fn answer(server: &Server) -> (Value, u64) {
    let (status, out) = post_json(server, "/v1/chat/completions", &long_chat());
    assert_eq!(status, 200, "{out}");
    let cached = out["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached tokens");
    (out, cached)
}

/// Replicas on an AVX-512 machine and on an AVX2-only one share one prompt cache (issue 30):
/// what the native build saved, the x86-64-v3 build restores (the snapshot's fingerprint
/// names the level both compute the same bits on, not each build's instruction sets), and its
/// answer from the snapshot — log-probabilities included — is its own cold answer and the
/// native build's.
#[test]
fn the_x86_64_v3_build_restores_the_native_build_s_snapshots() {
    let v3 = v3_build();
    let native = PathBuf::from(env!("CARGO_BIN_EXE_wick"));
    let shared = tempfile::tempdir().expect("a prompt-cache directory");

    let (server, _home) = serve(&native, shared.path());
    let (cold, cached) = answer(&server);
    assert_eq!(cached, 0, "{cold}");
    let metrics = server.metrics_when(|m| metric(m, "wick_prompt_cache_saved_total") >= 1);
    assert!(
        metric(&metrics, "wick_prompt_cache_saved_total") >= 1,
        "the native build saved a snapshot: {metrics}"
    );
    drop(server);

    let (server, _home) = serve(&v3, shared.path());
    let (warm, cached) = answer(&server);
    let prompt = warm["usage"]["prompt_tokens"]
        .as_u64()
        .expect("prompt tokens");
    assert!(prompt > 64, "long enough to be saved: {prompt}");
    assert_eq!(
        cached, prompt,
        "the x86-64-v3 build restored the prompt: {warm}"
    );
    let metrics = server.metrics_when(|_| true);
    assert_eq!(
        metric(&metrics, "wick_prompt_cache_hits_disk_total"),
        1,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "wick_prompt_cache_rejects_total"),
        0,
        "{metrics}"
    );
    drop(server);

    let own_cache = tempfile::tempdir().expect("a prompt-cache directory");
    let (server, _home) = serve(&v3, own_cache.path());
    let (own, cached) = answer(&server);
    assert_eq!(cached, 0, "{own}");
    assert_eq!(
        warm["choices"], own["choices"],
        "from the snapshot and cold"
    );
    assert_eq!(warm["choices"], cold["choices"], "the two builds");
}
