//! `wick pull`, `wick ls`, `wick rm`: the model store.

use std::io::Write;

use anyhow::Result;
use clap::Args;
use wick_models::{Listed, ModelRef, ModelStore, PullOptions, Settings};

/// Arguments of `wick pull`.
#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    /// The model: a GGUF file, an http(s):// URL, hf:owner/repo/file.gguf, owner/repo[:QUANT]
    /// (`Q4_K_M` by default) or a name from `wick ls`.
    #[arg(value_name = "REF")]
    reference: String,

    /// The name to keep it under [default: its file name without .gguf].
    #[arg(long = "as", value_name = "NAME")]
    name: Option<String>,

    /// The SHA-256 its content must have (Hugging Face's own hash is checked anyway).
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
}

/// Arguments of `wick rm`.
#[derive(Debug, Args)]
pub(crate) struct RmArgs {
    /// The name of the model, as `wick ls` shows it.
    #[arg(value_name = "NAME")]
    name: String,
}

fn store() -> Result<ModelStore> {
    Ok(ModelStore::new(Settings::from_env())?)
}

pub(crate) fn pull(args: &PullArgs) -> Result<()> {
    let reference: ModelRef = args.reference.parse()?;
    let options = PullOptions::default()
        .with_name(args.name.as_deref())
        .with_sha256(args.sha256.as_deref());
    let pulled = store()?.pull(&reference, &options)?;
    let e = &pulled.entry;
    outln!(
        "{} {} ({}, sha256 {}) at {}",
        if pulled.downloaded { "pulled" } else { "have" },
        e.name,
        human_size(e.size),
        e.sha256,
        pulled.path.display()
    )?;
    Ok(())
}

pub(crate) fn ls() -> Result<()> {
    let models = store()?.list()?;
    let mut out = std::io::stdout().lock();
    out.write_all(table(&models).as_bytes())?;
    if models.is_empty() {
        eprintln!("no models yet: `wick pull REF` adds one");
    }
    Ok(())
}

pub(crate) fn rm(args: &RmArgs) -> Result<()> {
    let entry = store()?.remove(&args.name)?;
    outln!("removed {} (sha256 {})", entry.name, entry.sha256)?;
    Ok(())
}

/// The `wick ls` table: NAME, SIZE, QUANT, ARCH, SOURCE, aligned.
fn table(models: &[Listed]) -> String {
    let mut rows = vec![["NAME", "SIZE", "QUANT", "ARCH", "SOURCE"].map(str::to_owned)];
    for m in models {
        let header = m.header.as_ref();
        let unreadable = || if m.path.exists() { "?" } else { "missing" }.to_owned();
        rows.push([
            m.entry.name.clone(),
            human_size(m.entry.size),
            header
                .and_then(wick_models::GgufHeader::quantization)
                .unwrap_or_else(unreadable),
            header
                .and_then(|h| h.architecture().map(str::to_owned))
                .unwrap_or_else(unreadable),
            m.entry.source.clone(),
        ]);
    }
    aligned(&rows, "  ")
}

/// `rows` as text, one line each, every column but the last padded to its widest cell and
/// the columns joined by `gap`.
pub(crate) fn aligned<R: AsRef<[String]>>(rows: &[R], gap: &str) -> String {
    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.as_ref().get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let row = row.as_ref();
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i + 1 == row.len() {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        text.push_str(cells.join(gap).trim_end());
        text.push('\n');
    }
    text
}

/// `1536` → `1.5 KiB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    #[allow(clippy::cast_precision_loss)]
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_human() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(3 << 20), "3.0 MiB");
        assert_eq!(human_size(5 << 30), "5.0 GiB");
    }

    #[test]
    fn an_empty_table_has_its_header() {
        assert_eq!(table(&[]), "NAME  SIZE  QUANT  ARCH  SOURCE\n");
    }
}
