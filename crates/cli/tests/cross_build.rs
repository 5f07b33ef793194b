//! The same logits on every x86-64 machine (issue 30): this machine's native build (at its best
//! CPU level) against a build for `x86-64-v3` — AVX2 without AVX-512 or VNNI, ggml included,
//! the build an AVX2-only machine makes — at its best level (`avx2`) and at `scalar`, on the
//! test model, the test model in every weight type with a wick kernel, a mixture of experts, a
//! layer-norm model and a Gemma-2-style model. `wick perplexity --json` prints a SHA-256 of
//! every logit it computed; one differing bit anywhere changes it.
//!
//! The second build is `$WICK_X86_64_V3_BIN` when set (`scripts/test` builds it first), else
//! this test runs `scripts/build-x86-64-v3` (minutes the first time; cached after).
#![cfg(target_arch = "x86_64")]

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

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
    models.push((
        "a mixture of experts".to_owned(),
        serve_util::mixture_of_experts(),
    ));
    models.push((
        "a layer-norm model".to_owned(),
        serve_util::layer_norm_model(),
    ));
    models.push((
        "a Gemma-2-style model".to_owned(),
        serve_util::gemma2_model(),
    ));
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
