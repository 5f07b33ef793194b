//! `wick devices`: the devices this build of llama.cpp can run layers on.

use anyhow::Result;
use clap::Args;
use serde_json::json;
use wick_llama::DeviceInfo;

use crate::models::{aligned, human_size};

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
    let header = ["NAME", "KIND", "MEMORY", "FREE", "DESCRIPTION"].map(str::to_owned);
    let rows = devices.iter().map(|d| {
        [
            d.name.clone(),
            d.kind.to_owned(),
            human_size(d.total),
            human_size(d.free),
            d.description.clone(),
        ]
    });
    let rows: Vec<[String; 5]> = std::iter::once(header).chain(rows).collect();
    aligned(&rows, "   ")
}
