//! `wick cache ls` / `wick cache clear`: the prompt cache's KV snapshots on disk.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::models::human_size;

/// Arguments of `wick cache`.
#[derive(Debug, Args)]
pub(crate) struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// List the snapshots: one line per model and context layout, with its files, size,
    /// the longest cached prefix and when it was last used.
    Ls,
    /// Remove every snapshot (the cache fills again as requests finish), and what a killed
    /// server left half-written (files another running server is writing stay).
    Clear,
}

pub(crate) fn run(args: &CacheArgs) -> Result<()> {
    let dir = wick_models::wick_home().join("kv");
    match args.command {
        CacheCommand::Ls => ls(&dir),
        CacheCommand::Clear => clear(&dir),
    }
}

/// The snapshots of one model and layout.
struct Group {
    key: String,
    files: usize,
    bytes: u64,
    longest: usize,
    newest: Option<std::time::SystemTime>,
    /// Snapshots being written, or left half-written by a killed process: files and bytes.
    unfinished: (usize, u64),
}

fn groups(dir: &Path) -> Result<Vec<Group>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let mut group = Group {
            key: entry.file_name().to_string_lossy().into_owned(),
            files: 0,
            bytes: 0,
            longest: 0,
            newest: None,
            unfinished: (0, 0),
        };
        for file in temp_files(&path)? {
            group.unfinished.0 += 1;
            group.unfinished.1 += std::fs::metadata(&file).map_or(0, |m| m.len());
        }
        for file in snapshots(&path)? {
            let meta = std::fs::metadata(&file)?;
            group.files += 1;
            group.bytes += meta.len();
            group.newest = group.newest.max(meta.modified().ok());
            if let Ok(f) = std::fs::File::open(&file) {
                if let Ok(tokens) = wick_backend::snapshot::read_tokens(std::io::BufReader::new(f))
                {
                    group.longest = group.longest.max(tokens.len());
                }
            }
        }
        if group.files > 0 || group.unfinished.0 > 0 {
            out.push(group);
        }
    }
    out.sort_by_key(|g| std::cmp::Reverse(g.newest));
    Ok(out)
}

fn snapshots(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "kv"))
        .collect())
}

fn temp_files(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| wick_engine::is_temp(p))
        .collect())
}

fn ls(dir: &Path) -> Result<()> {
    let groups = groups(dir)?;
    let mut out = std::io::stdout().lock();
    if groups.is_empty() {
        writeln!(out, "no prompt-cache snapshots in {}", dir.display())?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<34} {:>6} {:>10} {:>8}  LAST USED",
        "MODEL+LAYOUT", "FILES", "SIZE", "TOKENS"
    )?;
    for g in &groups {
        let age = g
            .newest
            .and_then(|t| t.elapsed().ok())
            .map_or_else(|| "-".to_owned(), |d| format!("{}s ago", d.as_secs()));
        writeln!(
            out,
            "{:<34} {:>6} {:>10} {:>8}  {age}",
            g.key,
            g.files,
            human_size(g.bytes),
            g.longest
        )?;
    }
    let total: u64 = groups.iter().map(|g| g.bytes + g.unfinished.1).sum();
    let (unfinished, unfinished_bytes) = groups
        .iter()
        .fold((0, 0), |(n, b), g| (n + g.unfinished.0, b + g.unfinished.1));
    if unfinished > 0 {
        writeln!(
            out,
            "{unfinished} snapshots half-written or being written ({})",
            human_size(unfinished_bytes)
        )?;
    }
    writeln!(out, "total {} in {}", human_size(total), dir.display())?;
    Ok(())
}

fn clear(dir: &Path) -> Result<()> {
    let mut files = 0;
    let mut bytes = 0;
    let mut stale = (0, 0);
    for g in groups(dir)? {
        let path = dir.join(&g.key);
        for file in snapshots(&path)? {
            bytes += std::fs::metadata(&file).map_or(0, |m| m.len());
            std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
            files += 1;
        }
        let (n, b) = wick_engine::remove_stale_temp_files(&path);
        stale = (stale.0 + n, stale.1 + b);
        // Empty now, unless a server is writing into it: then it stays.
        let _ = std::fs::remove_dir(&path);
    }
    let stale_note = if stale.0 > 0 {
        format!(
            " and {} half-written by a killed process ({})",
            stale.0,
            human_size(stale.1)
        )
    } else {
        String::new()
    };
    outln!(
        "removed {files} snapshots ({}){stale_note}",
        human_size(bytes)
    )?;
    Ok(())
}
