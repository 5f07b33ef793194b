//! `wick perplexity`: how well a model (in a kernel mode) predicts a text, llama-perplexity's
//! job, and with `--kl-divergence` how far its distributions are from a base's (llama.cpp's
//! fast kernels on the same model, or another model).
//!
//! The text is cut into chunks of `--ctx` tokens; each chunk is evaluated from an empty
//! context and only its second half is scored, so every scored token has at least half a
//! chunk before it (as llama-perplexity does).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use wick_backend::{log_softmax, Backend, BackendConfig, KernelMode};
use wick_llama::LlamaBackend;
use wick_types::{SeqId, TokenId};

/// The text `wick perplexity` reads without a FILE: Genesis in the King James Version (public
/// domain), about 50,000 tokens.
pub(crate) const DEFAULT_TEXT: &str = include_str!("../../../data/kjv-genesis.txt");

#[derive(Debug, Args)]
pub(crate) struct PerplexityArgs {
    /// The text to score [default: Genesis (King James Version, public domain), shipped with
    /// wick].
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,

    /// The model: a GGUF file or any model reference [default: the default model].
    #[arg(short, long, value_name = "REF")]
    model: Option<String>,

    /// Tokens per chunk (the second half of each is scored).
    #[arg(short = 'c', long, default_value_t = 512, value_name = "N")]
    ctx_size: u32,

    /// Score at most this many chunks [default: the whole text].
    #[arg(long, value_name = "N")]
    chunks: Option<usize>,

    /// The kernels of the model scored: `deterministic` (wick's, the default) or `fast`
    /// (llama.cpp's).
    #[arg(long, default_value = "deterministic", value_name = "MODE", value_parser = ["deterministic", "fast"])]
    kernels: String,

    /// Also compare every scored distribution with a base's: KL divergence (base ‖ model), the
    /// base's perplexity and how often both rank the same token first. The base is the same
    /// model on llama.cpp's fast kernels, or --base.
    #[arg(long)]
    kl_divergence: bool,

    /// The base of --kl-divergence: another model (an F16 or `Q8_0` file, say), on llama.cpp's
    /// fast kernels.
    #[arg(long, value_name = "REF", requires = "kl_divergence")]
    base: Option<String>,

    /// CPU threads [default: every core].
    #[arg(long, value_name = "N")]
    threads: Option<u32>,

    /// Print the result as JSON. Either form ends with a SHA-256 of every logit computed: two
    /// builds or machines printing the same one computed the same bits.
    #[arg(long)]
    json: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Scores {
    pub(crate) tokens_scored: usize,
    pub(crate) chunks: usize,
    pub(crate) perplexity: f64,
    /// The standard error of the mean negative log-likelihood, carried to the perplexity.
    pub(crate) perplexity_error: f64,
    pub(crate) base_perplexity: Option<f64>,
    pub(crate) kl_divergence: Option<f64>,
    pub(crate) top1_agreement: Option<f64>,
    /// SHA-256 of the bits of every logit the model computed (each chunk's every row, in
    /// order, little-endian F32): two runs, builds or machines whose deterministic kernels
    /// agree print the same; one differing bit anywhere changes it.
    pub(crate) logits_sha256: String,
}

pub(crate) fn run(args: &PerplexityArgs) -> Result<()> {
    if args.ctx_size < 16 {
        bail!(
            "--ctx-size must be at least 16 tokens, not {}",
            args.ctx_size
        );
    }
    let text = match &args.file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading {} (a UTF-8 text file)", path.display()))?,
        None => DEFAULT_TEXT.to_owned(),
    };
    let model = crate::run::resolve_model(args.model.as_deref())?;
    let mode = if args.kernels == "fast" {
        KernelMode::Fast
    } else {
        KernelMode::Deterministic
    };
    let mut scored = load(&model, args, mode)?;
    let tokens = scored
        .tokenize(&text, false)
        .context("tokenizing the text")?;
    let chunk = args.ctx_size as usize;
    let mut count = tokens.len() / chunk;
    if let Some(limit) = args.chunks {
        count = count.min(limit);
    }
    if count == 0 {
        bail!(
            "the text has {} tokens: at least one chunk of {chunk} is needed (lower --ctx-size)",
            tokens.len()
        );
    }
    let mut base = if args.kl_divergence {
        let path = match &args.base {
            Some(reference) => crate::run::resolve_model(Some(reference))?,
            None => model.clone(),
        };
        let base = load(&path, args, KernelMode::Fast)?;
        if base.info().n_vocab != scored.info().n_vocab {
            bail!(
                "the base has {} vocabulary entries, the model {}: they cannot be compared",
                base.info().n_vocab,
                scored.info().n_vocab
            );
        }
        Some(base)
    } else {
        None
    };
    let bar = ProgressBar::new(count as u64).with_style(
        ProgressStyle::with_template("scoring {bar:30} {pos}/{len} chunks {elapsed} {msg}")
            .expect("a valid template"),
    );
    let mut totals = Totals::default();
    for c in 0..count {
        let window = &tokens[c * chunk..(c + 1) * chunk];
        totals.chunk(
            &mut scored,
            base.as_mut().map(|b| b as &mut dyn Backend),
            window,
        )?;
        bar.inc(1);
        bar.set_message(format!("perplexity {:.4}", totals.perplexity()));
    }
    bar.finish_and_clear();
    print(&totals.scores(count, base.is_some()), args, &model)?;
    Ok(())
}

fn load(model: &Path, args: &PerplexityArgs, kernels: KernelMode) -> Result<LlamaBackend> {
    let config = BackendConfig::new(model)
        .with_n_ctx(args.ctx_size)
        .with_n_seq_max(1)
        .with_n_batch(args.ctx_size)
        .with_n_threads(args.threads)
        .with_kernels(kernels);
    LlamaBackend::load(&config).with_context(|| format!("loading {}", model.display()))
}

/// Running sums over the scored tokens.
#[derive(Debug, Default)]
struct Totals {
    /// Every logit the scored model computed ([`Scores::logits_sha256`]).
    logits: Sha256,
    /// One row of logits as bytes (kept between rows).
    row_bytes: Vec<u8>,
    n: usize,
    nll: f64,
    nll_squared: f64,
    base_nll: f64,
    kl: f64,
    agree: usize,
}

impl Totals {
    /// Scores the second half of `window` on `model`, beside `base` when given.
    fn chunk(
        &mut self,
        model: &mut dyn Backend,
        base: Option<&mut dyn Backend>,
        window: &[TokenId],
    ) -> Result<()> {
        let base_rows = match base {
            Some(base) => {
                let mut rows = Vec::new();
                scored_rows(base, window, |_| {}, |_, row| rows.push(row))?;
                Some(rows)
            }
            None => None,
        };
        let mut i = 0usize;
        let (logits, bytes) = (&mut self.logits, &mut self.row_bytes);
        // A row's bytes in one update: four bytes at a time cost SHA-256's buffering per float.
        let fingerprint = |row: &[f32]| {
            bytes.clear();
            bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
            logits.update(&*bytes);
        };
        scored_rows(model, window, fingerprint, |target, lp| {
            let nll = -f64::from(lp[target]);
            self.n += 1;
            self.nll += nll;
            self.nll_squared += nll * nll;
            if let Some(rows) = &base_rows {
                let b = &rows[i];
                self.base_nll -= f64::from(b[target]);
                self.kl += kl(b, &lp);
                self.agree += usize::from(argmax(b) == argmax(&lp));
            }
            i += 1;
        })
    }

    #[allow(clippy::cast_precision_loss)]
    fn perplexity(&self) -> f64 {
        (self.nll / self.n.max(1) as f64).exp()
    }

    #[allow(clippy::cast_precision_loss)]
    fn scores(&self, chunks: usize, with_base: bool) -> Scores {
        let n = self.n.max(1) as f64;
        let mean = self.nll / n;
        // The standard error of the mean NLL, carried through exp (as llama-perplexity).
        let variance = (self.nll_squared / n - mean * mean).max(0.0);
        let error = (variance / (n - 1.0).max(1.0)).sqrt();
        let perplexity = mean.exp();
        Scores {
            tokens_scored: self.n,
            chunks,
            perplexity,
            perplexity_error: perplexity * error,
            base_perplexity: with_base.then(|| (self.base_nll / n).exp()),
            kl_divergence: with_base.then(|| self.kl / n),
            top1_agreement: with_base.then(|| self.agree as f64 / n),
            logits_sha256: wick_types::hex(&self.logits.clone().finalize()),
        }
    }
}

/// Evaluates `window` on `model` from an empty sequence, hands `every` each row of logits
/// and `f` each scored position's target token and log-probabilities, in order: row `j` is
/// the distribution of token `j + 1`, and the rows from the first half's last one on are
/// scored (every scored token has at least half a chunk before it). The targets are in the
/// vocabulary: `logits` checked them.
fn scored_rows(
    model: &mut dyn Backend,
    window: &[TokenId],
    mut every: impl FnMut(&[f32]),
    mut f: impl FnMut(usize, Vec<f32>),
) -> Result<()> {
    let from = window.len() / 2 - 1;
    let mut j = 0usize;
    model.seq_rm(SeqId(0))?;
    model.logits(SeqId(0), window, &mut |logits| {
        every(logits);
        if j >= from && j + 1 < window.len() {
            f(window[j + 1].0 as usize, log_softmax(logits));
        }
        j += 1;
    })?;
    Ok(())
}

/// KL(p ‖ q) from log-probabilities.
fn kl(p: &[f32], q: &[f32]) -> f64 {
    p.iter()
        .zip(q)
        .filter(|(lp, _)| lp.is_finite())
        .map(|(&lp, &lq)| f64::from(lp).exp() * (f64::from(lp) - f64::from(lq)))
        .sum::<f64>()
        .max(0.0)
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

fn print(scores: &Scores, args: &PerplexityArgs, model: &Path) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(scores)?);
        return Ok(());
    }
    println!(
        "{}: {} kernels, {} chunks of {} tokens, {} tokens scored",
        model.display(),
        args.kernels,
        scores.chunks,
        args.ctx_size,
        scores.tokens_scored
    );
    println!(
        "perplexity: {:.4} ± {:.4}",
        scores.perplexity, scores.perplexity_error
    );
    if let (Some(base), Some(kl), Some(top1)) = (
        scores.base_perplexity,
        scores.kl_divergence,
        scores.top1_agreement,
    ) {
        println!("base perplexity (llama.cpp's fast kernels): {base:.4}");
        println!(
            "perplexity against the base: {:+.3} %",
            (scores.perplexity / base - 1.0) * 100.0
        );
        println!("KL divergence (base ‖ model): {kl:.6} nats per token");
        println!("top-1 agreement: {:.2} %", top1 * 100.0);
    }
    println!("logits SHA-256: {}", scores.logits_sha256);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_sums_to_one_and_kl_of_a_row_with_itself_is_zero() {
        let row = log_softmax(&[1.0, 2.0, 3.0, -1.0]);
        let total: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!(kl(&row, &row).abs() < 1e-9);
        let other = log_softmax(&[3.0, 2.0, 1.0, -1.0]);
        assert!(kl(&row, &other) > 0.1);
        assert_eq!(argmax(&row), 2);
    }

    #[test]
    fn the_shipped_text_is_long_enough() {
        // About 50,000 tokens for a 49k-entry vocabulary; at least 20,000 words in any case.
        assert!(DEFAULT_TEXT.split_whitespace().count() > 20_000);
        assert!(DEFAULT_TEXT.starts_with("The First Book of Moses"));
    }
}
