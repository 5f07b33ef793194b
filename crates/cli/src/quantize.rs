//! `wick quantize`: a model converted to another weight type by llama.cpp's own
//! `llama-quantize` (built on demand with `wick bench`'s tools), for trying wick's kernels on
//! every type from one model.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::bench::tools;

/// The types `llama-quantize` writes that wick's tests and benchmarks use (its own names; it
/// takes others too).
const KNOWN: &[&str] = &[
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K_M",
    "Q4_K_M",
    "Q4_K_S",
    "Q5_K_M",
    "Q5_K_S",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
    "F16",
    "BF16",
    "F32",
    "MXFP4_MOE",
];

#[derive(Debug, Args)]
pub(crate) struct QuantizeArgs {
    /// The model to convert: a GGUF file or any model reference [default: the default model].
    #[arg(short, long, value_name = "REF")]
    model: Option<String>,

    /// The weight type to write, as llama-quantize names it (`Q4_0`, `Q4_K_M`, `Q6_K`,
    /// `IQ4_XS`, `F16`, …). A quantized model is requantized (`--allow-requantize`): fine for trying
    /// kernels and speeds, lossy for quality.
    #[arg(short = 't', long = "type", value_name = "TYPE")]
    kind: String,

    /// Where the new GGUF goes [default: `<model stem>.<TYPE>.gguf` in the current
    /// directory]. An existing file is kept as it is unless --force.
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Write the file even when it exists.
    #[arg(long)]
    force: bool,

    /// Write the tensors whose names contain NAME in TYPE instead (llama-quantize's
    /// `--tensor-type NAME=TYPE`, repeatable): `ffn_down=q2_k` puts a type into a model whose
    /// other rows it does not fit.
    #[arg(long = "tensor-type", value_name = "NAME=TYPE")]
    tensor_types: Vec<String>,

    /// llama-cpp-python source distribution whose vendored llama.cpp provides llama-quantize
    /// (built once into the cache directory, with `wick bench`'s tools).
    #[arg(long, default_value = tools::DEFAULT_LLAMA_CPP_PYTHON, value_name = "VERSION")]
    llama_cpp_python: String,
}

pub(crate) fn run(args: &QuantizeArgs) -> Result<()> {
    let kind = args.kind.trim().to_ascii_uppercase();
    if !KNOWN.contains(&kind.as_str()) {
        bail!(
            "unknown weight type {:?}: expected one of {}",
            args.kind,
            KNOWN.join(", ")
        );
    }
    let model = crate::run::resolve_model(args.model.as_deref())?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out(&model, &kind));
    if out.is_file() && !args.force {
        eprintln!(
            "wick quantize: {} exists (--force writes it again)",
            out.display()
        );
        println!("{}", out.display());
        return Ok(());
    }
    let tools = tools::ensure(&wick_models::wick_home(), &args.llama_cpp_python, None)?;
    // Written beside its destination, then renamed: an interrupted run leaves no half file.
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let partial = tempfile::Builder::new()
        .prefix(".wick-quantize")
        .suffix(".gguf")
        .tempfile_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    eprintln!(
        "wick quantize: {} -> {} ({kind})",
        model.display(),
        out.display()
    );
    if let Some(bad) = args.tensor_types.iter().find(|t| {
        !t.split_once('=')
            .is_some_and(|(name, kind)| !name.is_empty() && !kind.is_empty())
    }) {
        bail!("--tensor-type takes NAME=TYPE (ffn_down=q2_k, say), not {bad:?}");
    }
    let output = Command::new(&tools.llama_quantize)
        .arg("--allow-requantize")
        .args(
            args.tensor_types
                .iter()
                .flat_map(|t| ["--tensor-type", t.as_str()]),
        )
        .arg(&model)
        .arg(partial.path())
        .arg(&kind)
        .output()
        .with_context(|| format!("running {}", tools.llama_quantize.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        bail!(
            "llama-quantize failed ({}):\n{}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    partial
        .persist(&out)
        .with_context(|| format!("writing {}", out.display()))?;
    println!("{}", out.display());
    Ok(())
}

/// `<stem>.<TYPE>.gguf` in the current directory, the stem without its own type suffix
/// (`SmolLM2-135M-Instruct.Q4_1.gguf` → `SmolLM2-135M-Instruct.Q6_K.gguf`).
fn default_out(model: &Path, kind: &str) -> PathBuf {
    let stem = model
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let base = match stem.rsplit_once('.') {
        Some((base, suffix)) if KNOWN.iter().any(|k| k.eq_ignore_ascii_case(suffix)) => base,
        _ => stem.as_str(),
    };
    PathBuf::from(format!("{base}.{kind}.gguf"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_name_swaps_the_type_suffix() {
        assert_eq!(
            default_out(Path::new("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), "Q6_K"),
            PathBuf::from("SmolLM2-135M-Instruct.Q6_K.gguf")
        );
        assert_eq!(
            default_out(Path::new("llama-3.2-1b.gguf"), "Q8_0"),
            PathBuf::from("llama-3.2-1b.Q8_0.gguf")
        );
    }
}
