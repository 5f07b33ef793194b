//! `wick devices`: the devices this build of llama.cpp can run layers on.

use std::fmt::Write as _;

use anyhow::Result;
use clap::Args;
use serde_json::json;
use wick_llama::DeviceInfo;

/// Arguments of `wick devices`.
#[derive(Debug, Args)]
pub(crate) struct DevicesArgs {
    /// Print JSON (`[{"name", "kind", "description", "total", "free"}]`, bytes).
    #[arg(long)]
    json: bool,
}

/// `wick devices`.
pub(crate) fn run(args: &DevicesArgs) -> Result<()> {
    let devices = wick_llama::devices()?;
    if args.json {
        let list: Vec<_> = devices
            .iter()
            .map(|d| {
                json!({"name": d.name, "kind": d.kind, "description": d.description,
                       "total": d.total, "free": d.free})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        print!("{}", table(&devices));
        if !devices.iter().any(|d| d.kind != "cpu") {
            eprintln!(
                "no GPU: this build runs on the CPU only (scripts/build-gpu vulkan|cuda builds \
                 one with a GPU backend; lavapipe, Vulkan on the CPU, shows with \
                 GGML_VK_VISIBLE_DEVICES=0)"
            );
        }
    }
    Ok(())
}

/// `NAME  KIND  MEMORY  FREE  DESCRIPTION` rows.
fn table(devices: &[DeviceInfo]) -> String {
    let gib = |b: u64| {
        #[allow(clippy::cast_precision_loss)]
        let x = b as f64 / f64::from(1u32 << 30);
        format!("{x:.1} GiB")
    };
    let rows: Vec<[String; 5]> = devices
        .iter()
        .map(|d| {
            [
                d.name.clone(),
                d.kind.to_owned(),
                gib(d.total),
                gib(d.free),
                d.description.clone(),
            ]
        })
        .collect();
    let header = ["NAME", "KIND", "MEMORY", "FREE", "DESCRIPTION"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("   ").trim_end());
    }
    out
}
