//! (a) Prompt processing and generation speed: wick's backend vs `llama-bench`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use wick_backend::{Backend, BackendConfig, KernelMode};
use wick_llama::LlamaBackend;
use wick_types::{SeqId, TokenId};

/// Tokens per second of one test (`pp512`, `tg128`), mean and standard deviation over runs.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Rate {
    pub(crate) mean: f64,
    pub(crate) stddev: f64,
}

impl Rate {
    fn of(samples: &[f64]) -> Self {
        #[allow(clippy::cast_precision_loss)]
        let n = samples.len().max(1) as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n;
        Rate {
            mean,
            stddev: var.sqrt(),
        }
    }
}

/// pp and tg rates of one side.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Kernel {
    pub(crate) pp: Rate,
    pub(crate) tg: Rate,
}

/// What both sides measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelTest {
    pub(crate) n_prompt: usize,
    pub(crate) n_gen: usize,
    pub(crate) repetitions: usize,
    pub(crate) threads: u32,
    /// Layers offloaded to the GPU on both sides.
    pub(crate) gpu_layers: u32,
}

/// Token ids spread over the vocabulary, like llama-bench's random prompt.
fn prompt_tokens(n: usize, n_vocab: u32) -> Vec<TokenId> {
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            #[allow(clippy::cast_possible_truncation)]
            TokenId((state % u64::from(n_vocab)) as u32)
        })
        .collect()
}

/// wick's backend with `kernels`: `prefill` of `n_prompt` tokens into a cleared sequence, and
/// `n_gen` greedy `decode_one` calls after one token; one warm-up run of each first. Also
/// says whether the backend reported those kernels batch-invariant.
pub(crate) fn wick(model: &Path, test: KernelTest, kernels: KernelMode) -> Result<(Kernel, bool)> {
    let n_ctx = u32::try_from(test.n_prompt.max(test.n_gen + 1) + 64)?;
    let config = BackendConfig::new(model)
        .with_n_ctx(n_ctx)
        .with_n_seq_max(1)
        .with_n_batch(512)
        .with_n_threads(Some(test.threads))
        .with_n_gpu_layers(test.gpu_layers)
        .with_kernels(kernels);
    let mut backend = LlamaBackend::load(&config)?;
    let deterministic = backend.info().deterministic;
    let seq = SeqId(0);
    let prompt = prompt_tokens(test.n_prompt, backend.info().n_vocab);
    let mut pp = Vec::new();
    let mut tg = Vec::new();
    for run in 0..=test.repetitions {
        backend.seq_rm(seq)?;
        let started = Instant::now();
        backend.prefill(seq, &prompt)?;
        let seconds = started.elapsed().as_secs_f64();
        if run > 0 {
            #[allow(clippy::cast_precision_loss)]
            pp.push(test.n_prompt as f64 / seconds);
        }
    }
    for run in 0..=test.repetitions {
        backend.seq_rm(seq)?;
        backend.prefill(seq, &prompt[..1])?;
        let started = Instant::now();
        for _ in 0..test.n_gen {
            // The token drawn does not matter, only that each step decodes one.
            backend.decode_one(seq, None)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        if run > 0 {
            #[allow(clippy::cast_precision_loss)]
            tg.push(test.n_gen as f64 / seconds);
        }
    }
    let kernel = Kernel {
        pp: Rate::of(&pp),
        tg: Rate::of(&tg),
    };
    Ok((kernel, deterministic))
}

/// `llama-bench -o json` on the same model, threads and batch size; also returns its build.
pub(crate) fn llama_bench(tool: &Path, model: &Path, test: KernelTest) -> Result<(Kernel, String)> {
    let output = Command::new(tool)
        .arg("-m")
        .arg(model)
        .args(["-t", &test.threads.to_string()])
        .args(["-p", &test.n_prompt.to_string()])
        .args(["-n", &test.n_gen.to_string()])
        .args(["-b", "512", "-ub", "512"])
        .args(["-ngl", &test.gpu_layers.to_string()])
        .args(["-r", &test.repetitions.to_string()])
        .args(["-o", "json"])
        .output()
        .with_context(|| format!("running {}", tool.display()))?;
    if !output.status.success() {
        bail!(
            "llama-bench failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let rows: Vec<Value> =
        serde_json::from_slice(&output.stdout).context("llama-bench's JSON output")?;
    parse_llama_bench(&rows)
}

fn parse_llama_bench(rows: &[Value]) -> Result<(Kernel, String)> {
    let mut kernel = Kernel::default();
    let mut build = String::new();
    for row in rows {
        let number = |key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        let rate = Rate {
            mean: number("avg_ts"),
            stddev: number("stddev_ts"),
        };
        if number("n_prompt") > 0.0 && number("n_gen") == 0.0 {
            kernel.pp = rate;
        } else if number("n_gen") > 0.0 && number("n_prompt") == 0.0 {
            kernel.tg = rate;
        }
        // Built outside git (from the sdist), llama.cpp knows no commit: say nothing then.
        let commit = row
            .get("build_commit")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        let number = row.get("build_number").and_then(Value::as_i64).unwrap_or(0);
        if commit != "unknown" {
            build = format!("build {number} ({commit})");
        }
    }
    if kernel.pp.mean == 0.0 || kernel.tg.mean == 0.0 {
        bail!("llama-bench gave no pp/tg rows: {rows:?}");
    }
    Ok((kernel, build))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_llama_bench_json() {
        let rows = vec![
            json!({"n_prompt": 512, "n_gen": 0, "avg_ts": 900.5, "stddev_ts": 3.0,
                   "build_commit": "0c1e570", "build_number": 1}),
            json!({"n_prompt": 0, "n_gen": 128, "avg_ts": 80.25, "stddev_ts": 0.5,
                   "build_commit": "0c1e570", "build_number": 1}),
        ];
        let (kernel, build) = parse_llama_bench(&rows).unwrap();
        assert!((kernel.pp.mean - 900.5).abs() < 1e-9 && (kernel.tg.mean - 80.25).abs() < 1e-9);
        assert_eq!(build, "build 1 (0c1e570)");
        assert!(parse_llama_bench(&[]).is_err());
        let unknown = [
            json!({"n_prompt": 512, "n_gen": 0, "avg_ts": 1.0, "build_commit": "unknown"}),
            json!({"n_prompt": 0, "n_gen": 128, "avg_ts": 1.0, "build_commit": "unknown"}),
        ];
        assert_eq!(parse_llama_bench(&unknown).unwrap().1, "");
    }

    #[test]
    fn rate_mean_and_spread() {
        let r = Rate::of(&[1.0, 3.0]);
        assert!((r.mean - 2.0).abs() < 1e-12 && (r.stddev - 1.0).abs() < 1e-12);
    }

    #[test]
    fn prompt_ids_stay_in_the_vocabulary() {
        let ids = prompt_tokens(1000, 49_152);
        assert!(ids.iter().all(|t| t.0 < 49_152));
        assert!(ids.windows(2).any(|w| w[0] != w[1]));
    }
}
