//! The results: one table of both sides and their ratio (terminal and markdown), JSON, and a
//! PNG chart.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;

use super::determinism::Determinism;
use super::kernel::Kernel;
use super::scenarios::{Conversation, Load, Restart, ToolStream};
use super::schema::SchemaOutput;
use super::spec::{Speculation, Task};

/// Everything one `wick bench` run measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Report {
    pub(crate) wick_version: String,
    pub(crate) wick_llama_cpp: String,
    pub(crate) llama_cpp_tools: String,
    pub(crate) model: String,
    pub(crate) threads: u32,
    /// Layers both sides offloaded to the GPU.
    pub(crate) gpu_layers: u32,
    pub(crate) quick: bool,
    /// wick in its default kernel mode at the first model's best level listed, and the
    /// llama-bench built for that level (`--llama-per-level`), else the native one.
    pub(crate) kernel: Option<[Kernel; 2]>,
    /// wick with the fast kernels.
    pub(crate) kernel_fast: Option<Kernel>,
    /// Whether wick's backend called its kernels batch-invariant: default mode, fast mode.
    pub(crate) kernel_invariant: Option<[bool; 2]>,
    /// (a) per model: wick's deterministic kernels at each CPU level, its fast kernels and
    /// llama-bench, measured in this run.
    pub(crate) kernel_models: Vec<ModelKernel>,
    pub(crate) load: Option<[Vec<Load>; 2]>,
    pub(crate) restart: Option<[Vec<Restart>; 2]>,
    pub(crate) conversation: Option<[Conversation; 2]>,
    pub(crate) tool_stream: Option<[ToolStream; 2]>,
    pub(crate) schema: Option<[SchemaOutput; 2]>,
    pub(crate) determinism: Option<[Determinism; 2]>,
    /// (g) on wick serve with the fast kernels, when it ran.
    pub(crate) determinism_fast: Option<Determinism>,
    pub(crate) speculation: Option<[Speculation; 2]>,
}

/// (a) on one model.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct ModelKernel {
    /// The model file's stem.
    pub(crate) model: String,
    /// wick's deterministic kernels at each CPU level measured, plainest first.
    pub(crate) levels: Vec<(String, Kernel)>,
    /// wick's fast kernels.
    pub(crate) fast: Kernel,
    /// llama-bench (native).
    pub(crate) llama: Kernel,
    /// llama-bench built for a level below the machine's own (`--llama-per-level`), per such
    /// level: what that level's rows are compared with.
    pub(crate) llama_at_levels: Vec<(String, Kernel)>,
}

impl ModelKernel {
    /// The llama-bench built for `level`, when `--llama-per-level` built one.
    pub(crate) fn llama_built_for(&self, level: &str) -> Option<&Kernel> {
        self.llama_at_levels
            .iter()
            .find_map(|(at, k)| (at == level).then_some(k))
    }
}

/// One table row: what, wick, llama.cpp, and which way is better.
struct Row {
    what: String,
    wick: f64,
    llama: f64,
    unit: &'static str,
    higher_is_better: bool,
    /// A count out of this many: printed as `3 / 16`, with no ratio.
    count_of: Option<usize>,
}

impl Row {
    fn new(
        what: impl Into<String>,
        wick: f64,
        llama: f64,
        unit: &'static str,
        higher: bool,
    ) -> Self {
        Row {
            what: what.into(),
            wick,
            llama,
            unit,
            higher_is_better: higher,
            count_of: None,
        }
    }

    /// `wick` and `llama` answers out of `of` (fewer is better; no ratio).
    #[allow(clippy::cast_precision_loss)]
    fn count(what: impl Into<String>, wick: usize, llama: usize, of: usize) -> Self {
        Row {
            count_of: Some(of),
            ..Row::new(what, wick as f64, llama as f64, "answers", false)
        }
    }

    /// The cell of one side's value.
    fn cell(&self, value: f64) -> String {
        match self.count_of {
            Some(of) => format!("{value:.0} / {of}"),
            None => number(value),
        }
    }

    /// wick's advantage: above 1 means wick is better, whichever way the metric goes.
    fn ratio(&self) -> Option<f64> {
        if self.count_of.is_some() {
            return None;
        }
        let (better, worse) = if self.higher_is_better {
            (self.wick, self.llama)
        } else {
            (self.llama, self.wick)
        };
        (worse > 0.0).then(|| better / worse)
    }
}

impl Report {
    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        self.kernel_rows(&mut rows);
        if let Some([w, l]) = &self.load {
            for (w, l) in w.iter().zip(l) {
                load_rows(&mut rows, w, l);
            }
        }
        if let Some([w, l]) = &self.restart {
            for (w, l) in w.iter().zip(l) {
                let n = w.prefix_tokens;
                rows.push(Row::new(
                    format!("(c) {n}-token prefix: TTFT after restart"),
                    w.after_restart_ms,
                    l.after_restart_ms,
                    "ms",
                    false,
                ));
                rows.push(Row::new(
                    format!("(c) {n}-token prefix: TTFT cold"),
                    w.cold_ms,
                    l.cold_ms,
                    "ms",
                    false,
                ));
            }
        }
        if let Some([w, l]) = &self.conversation {
            #[allow(clippy::cast_precision_loss)]
            rows.push(Row::new(
                format!("(d) {}-turn chat: prompt tokens computed", w.turns),
                w.processed_tokens as f64,
                l.processed_tokens as f64,
                "tokens",
                false,
            ));
        }
        if let Some([w, l]) = &self.tool_stream {
            let what = if w.argument_bytes > 0 && l.argument_bytes == 0 {
                "(e) streamed tool call: server CPU per token \
                 (llama-server made no call: not like for like)"
            } else {
                "(e) streamed tool call: server CPU per token"
            };
            rows.push(Row::new(
                what,
                w.cpu_ms_per_token,
                l.cpu_ms_per_token,
                "ms",
                false,
            ));
        }
        self.serving_rows(&mut rows);
        rows
    }

    /// (a): wick's default kernels (the headline), then its fast ones, beside llama-bench.
    fn kernel_rows(&self, rows: &mut Vec<Row>) {
        let Some([w, l]) = &self.kernel else {
            return;
        };
        rows.push(Row::new("(a) pp512", w.pp.mean, l.pp.mean, "tok/s", true));
        rows.push(Row::new("(a) tg128", w.tg.mean, l.tg.mean, "tok/s", true));
        if let Some(f) = &self.kernel_fast {
            // The fast kernels are the native llama.cpp's: beside the native llama-bench.
            let l = self.kernel_models.first().map_or(l, |m| &m.llama);
            let (pp, tg) = ("(a) pp512 (fast kernels)", "(a) tg128 (fast kernels)");
            rows.push(Row::new(pp, f.pp.mean, l.pp.mean, "tok/s", true));
            rows.push(Row::new(tg, f.tg.mean, l.tg.mean, "tok/s", true));
        }
        // Every model at every level, when more than the headline was measured.
        let headline_only = self.kernel_models.len() == 1
            && self.kernel_models[0].levels.len() == 1
            && self.kernel_models[0].llama_at_levels.is_empty();
        if headline_only {
            return;
        }
        for m in &self.kernel_models {
            let l = &m.llama;
            for (level, w) in &m.levels {
                let (l, against) = m.llama_built_for(level).map_or((l, String::new()), |k| {
                    (k, format!(" (llama-bench built for {level})"))
                });
                let (pp, tg) = (
                    format!("(a) pp512 {} at {level}{against}", m.model),
                    format!("(a) tg128 {} at {level}{against}", m.model),
                );
                rows.push(Row::new(pp, w.pp.mean, l.pp.mean, "tok/s", true));
                rows.push(Row::new(tg, w.tg.mean, l.tg.mean, "tok/s", true));
            }
            let (pp, tg) = (
                format!("(a) pp512 {} fast kernels", m.model),
                format!("(a) tg128 {} fast kernels", m.model),
            );
            rows.push(Row::new(pp, m.fast.pp.mean, l.pp.mean, "tok/s", true));
            rows.push(Row::new(tg, m.fast.tg.mean, l.tg.mean, "tok/s", true));
        }
    }

    /// The headline's level, when its llama-bench was one built for that level (a level below
    /// this machine's own under `--llama-per-level`) rather than the native one.
    fn headline_level_built_for(&self) -> Option<&str> {
        let m = self.kernel_models.first()?;
        let (level, _) = m.levels.last()?;
        m.llama_built_for(level).map(|_| level.as_str())
    }

    /// (f) and (g).
    fn serving_rows(&self, rows: &mut Vec<Row>) {
        if let Some([w, l]) = &self.schema {
            let what = match (w.follows_schema, l.follows_schema) {
                (true, true) => "(f) JSON-schema answer: ms per token".to_owned(),
                (wick, _) => format!(
                    "(f) JSON-schema answer: ms per token ({} not JSON of the schema: \
                     not like for like)",
                    if wick {
                        "llama-server's answer"
                    } else {
                        "wick's answer"
                    }
                ),
            };
            let (wc, lc) = (w.constrained_ms_per_token, l.constrained_ms_per_token);
            rows.push(Row::new(what, wc, lc, "ms", false));
            let (wu, lu) = (w.unconstrained_ms_per_token, l.unconstrained_ms_per_token);
            rows.push(Row::new(
                "(f) unconstrained answer: ms per token",
                wu,
                lu,
                "ms",
                false,
            ));
        }
        if let Some([w, l]) = &self.determinism {
            determinism_rows(rows, w, l, "");
            if let Some(f) = &self.determinism_fast {
                determinism_rows(rows, f, l, " (wick fast kernels)");
            }
        }
        if let Some([w, l]) = &self.speculation {
            for (name, w, l) in [
                ("edit task", &w.edit, &l.edit),
                ("free text", &w.free, &l.free),
            ] {
                rows.push(Row::new(
                    format!("(h) {name}: generation, speculation on"),
                    w.on_tps,
                    l.on_tps,
                    "tok/s",
                    true,
                ));
                rows.push(Row::new(
                    format!("(h) {name}: speculation on over off"),
                    w.speedup().unwrap_or(0.0),
                    l.speedup().unwrap_or(0.0),
                    "×",
                    true,
                ));
            }
        }
    }

    /// The table as GitHub markdown, with the setup above it.
    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# wick bench{}\n",
            if self.quick { " (--quick)" } else { "" }
        );
        let _ = writeln!(out, "- model: `{}`, {} threads", self.model, self.threads);
        if self.gpu_layers > 0 {
            let _ = writeln!(
                out,
                "- {} layers offloaded to the GPU on both sides",
                self.gpu_layers
            );
        }
        let _ = writeln!(
            out,
            "- wick {} linking {}",
            self.wick_version, self.wick_llama_cpp
        );
        let _ = writeln!(out, "- against {}", self.llama_cpp_tools);
        let _ = writeln!(out, "- ratio: wick's advantage (above 1: wick better)\n");
        let _ = writeln!(out, "| measurement | wick | llama.cpp | unit | ratio |");
        let _ = writeln!(out, "|---|---:|---:|---|---:|");
        for row in self.rows() {
            let ratio = row
                .ratio()
                .map_or_else(|| "–".to_owned(), |r| format!("{r:.2}×"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {ratio} |",
                row.what,
                row.cell(row.wick),
                row.cell(row.llama),
                row.unit
            );
        }
        out.push_str(&self.details());
        out
    }

    /// Facts behind the rows that a ratio hides.
    fn details(&self) -> String {
        let mut out = String::new();
        if let Some([default, fast]) = self.kernel_invariant {
            let yes = |b: bool| {
                if b {
                    "batch-invariant"
                } else {
                    "not batch-invariant"
                }
            };
            let _ = writeln!(
                out,
                "\n(a) wick's kernels: deterministic (the default, in the headline rows) {}; \
                 fast {}.",
                yes(default),
                yes(fast)
            );
        }
        if let Some(level) = self.headline_level_built_for() {
            let _ = writeln!(
                out,
                "\n(a) the headline rows: wick at {level} beside llama-bench built for {level}."
            );
        }
        if let Some([w, _]) = &self.load {
            if let Some(first) = w.first() {
                let _ = writeln!(
                    out,
                    "\n(b) every client asks its own question after a shared system prompt; \
                     every answer runs to max_tokens on both sides (ignore_eos), so both \
                     generate the same tokens; medians of {} run(s).",
                    first.runs
                );
            }
        }
        if let Some([w, l]) = &self.restart {
            out.push_str("\n(c) prompt tokens served from cache after the restart:");
            for (w, l) in w.iter().zip(l) {
                let _ = write!(
                    out,
                    " {}-token prefix: wick {}, llama.cpp {};",
                    w.prefix_tokens, w.cached_tokens, l.cached_tokens
                );
            }
            out.push('\n');
        }
        if let Some([w, l]) = &self.conversation {
            let _ = writeln!(
                out,
                "\n(d) prompt tokens sent over all turns: wick {}, llama.cpp {}.",
                w.prompt_tokens, l.prompt_tokens
            );
        }
        if let Some([w, l]) = &self.tool_stream {
            let _ = writeln!(
                out,
                "\n(e) wick: {} tokens, {} argument bytes, {:.2} ms wall per token; llama.cpp: {} tokens, {} argument bytes, {:.2} ms wall per token.",
                w.completion_tokens, w.argument_bytes, w.wall_ms_per_token,
                l.completion_tokens, l.argument_bytes, l.wall_ms_per_token
            );
        }
        out.push_str(&self.serving_details());
        out
    }

    /// What (f) and (g) rows leave out.
    fn serving_details(&self) -> String {
        let mut out = String::new();
        if let Some(sides) = &self.schema {
            out.push_str("\n(f) JSON-schema answer against unconstrained, per token:");
            for (name, s) in ["wick", "llama.cpp"].iter().zip(sides) {
                let overhead = s
                    .overhead()
                    .map_or_else(|| "–".to_owned(), |r| format!("{r:.2}×"));
                let _ = write!(
                    out,
                    " {name} {overhead} ({} against {} tokens, the answer {});",
                    s.constrained_tokens,
                    s.unconstrained_tokens,
                    if s.follows_schema {
                        "JSON of the schema"
                    } else {
                        "NOT JSON of the schema"
                    }
                );
            }
            let _ = writeln!(out, " medians of {} run(s).", sides[0].runs);
        }
        if let Some([w, _]) = &self.determinism {
            let _ = writeln!(
                out,
                "\n(g) {} distinct greedy requests (shared system prompt, {} tokens each); \
                 cold: each alone on a fresh server; warm: one server, after a request sharing \
                 the prefix; at once: {} concurrent requests on a fresh server.",
                w.requests, w.max_tokens, w.concurrency
            );
        }
        if let Some(sides) = &self.speculation {
            let _ = write!(
                out,
                "\n(h) greedy answers of up to {} tokens, medians of {} run(s), each side off \
                 and on in fresh processes:",
                sides[0].edit.tokens.max(sides[0].free.tokens),
                sides[0].runs
            );
            for (name, s) in ["wick", "llama.cpp"].iter().zip(sides) {
                let _ = write!(
                    out,
                    " {name} (`{}`): edit task {}, free text {};",
                    s.flags,
                    task_details(&s.edit),
                    task_details(&s.free)
                );
            }
            out.push('\n');
        }
        out
    }

    /// Writes `bench.md`, `bench.json` and `bench.png` into `dir`.
    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("bench.md"), self.markdown())?;
        std::fs::write(dir.join("bench.json"), serde_json::to_string_pretty(self)?)?;
        self.chart(&dir.join("bench.png"))
    }

    /// Tokens/s against concurrency, and time to first token against prefix length.
    fn chart(&self, path: &Path) -> Result<()> {
        register_font();
        let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(draw)?;
        let (left, right) = root.split_horizontally(600);
        if let Some([w, l]) = &self.load {
            #[allow(clippy::cast_precision_loss)]
            let series = |loads: &[Load]| -> Vec<(f64, f64)> {
                loads
                    .iter()
                    .map(|x| (x.clients as f64, x.tokens_per_second))
                    .collect()
            };
            plot(
                &left,
                "Throughput vs concurrent clients",
                "clients",
                "tokens/s",
                &[("wick", series(w), BLUE), ("llama-server", series(l), RED)],
            )?;
        }
        if let Some([w, l]) = &self.restart {
            #[allow(clippy::cast_precision_loss)]
            let series = |r: &[Restart], warm: bool| -> Vec<(f64, f64)> {
                r.iter()
                    .map(|x| {
                        (
                            x.prefix_tokens as f64,
                            if warm { x.after_restart_ms } else { x.cold_ms },
                        )
                    })
                    .collect()
            };
            plot(
                &right,
                "Time to first token after a restart",
                "prefix tokens",
                "ms",
                &[
                    ("wick (disk cache)", series(w, true), BLUE),
                    ("wick cold", series(w, false), CYAN),
                    ("llama-server", series(l, true), RED),
                ],
            )?;
        }
        root.present().map_err(draw)?;
        Ok(())
    }
}

/// (b) one concurrency level.
fn load_rows(rows: &mut Vec<Row>, w: &Load, l: &Load) {
    let n = w.clients;
    let ms = [
        ("TTFT p50", w.ttft.p50_ms, l.ttft.p50_ms),
        ("TTFT p99", w.ttft.p99_ms, l.ttft.p99_ms),
        ("per-token p50", w.per_token.p50_ms, l.per_token.p50_ms),
        ("per-token p99", w.per_token.p99_ms, l.per_token.p99_ms),
    ];
    for (what, w, l) in ms {
        rows.push(Row::new(
            format!("(b) {n} clients: {what}"),
            w,
            l,
            "ms",
            false,
        ));
    }
    rows.push(Row::new(
        format!("(b) {n} clients: throughput"),
        w.tokens_per_second,
        l.tokens_per_second,
        "tok/s",
        true,
    ));
}

/// (g) two counts of answers that differ from the cold solo ones.
/// Off and on tokens/s, the acceptance rate, and whether drafting changed the answer.
fn task_details(t: &Task) -> String {
    let acceptance = t.acceptance().map_or_else(
        || "none drafted".to_owned(),
        |a| {
            format!(
                "{:.0} % of {} drafted tokens accepted",
                a * 100.0,
                t.drafted
            )
        },
    );
    format!(
        "{:.1} → {:.1} tok/s, {acceptance}, {}",
        t.off_tps,
        t.on_tps,
        if t.same_answer {
            "same answer"
        } else {
            "ANSWER CHANGED"
        }
    )
}

fn determinism_rows(rows: &mut Vec<Row>, w: &Determinism, l: &Determinism, note: &str) {
    rows.push(Row::count(
        format!("(g) warm answers differing from cold{note}"),
        w.warm_differ,
        l.warm_differ,
        w.requests,
    ));
    rows.push(Row::count(
        format!(
            "(g) {} at once: answers differing from cold{note}",
            w.concurrency
        ),
        w.concurrent_differ,
        l.concurrent_differ,
        w.requests,
    ));
}

fn number(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn draw<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e:?}")
}

/// The chart's text is drawn with the `DejaVu` Sans font, embedded, so no system font is needed.
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

type Series = (&'static str, Vec<(f64, f64)>, RGBColor);

fn plot<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let points = series.iter().flat_map(|s| s.1.iter());
    let x_max = points.clone().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let y_max = points.map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(draw)?;
    for (name, data, color) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(data.iter().copied(), color.stroke_width(2)))
            .map_err(draw)?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(data.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(draw)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(draw)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::client::Percentiles;
    use crate::bench::kernel::Rate;

    /// A kernel measurement of `pp` and `tg` tokens per second, no spread.
    fn kernel(pp: f64, tg: f64) -> Kernel {
        let rate = |mean| Rate { mean, stddev: 0.0 };
        Kernel {
            pp: rate(pp),
            tg: rate(tg),
        }
    }

    fn sample() -> Report {
        let rate = |mean| Rate { mean, stddev: 0.0 };
        let load = |clients, tps| Load {
            clients,
            ttft: Percentiles {
                p50_ms: 10.0,
                p99_ms: 20.0,
            },
            per_token: Percentiles {
                p50_ms: 5.0,
                p99_ms: 9.0,
            },
            tokens_per_second: tps,
            completion_tokens: 100,
            runs: 3,
        };
        let restart = |n, warm| Restart {
            prefix_tokens: n,
            cold_ms: 400.0,
            after_restart_ms: warm,
            cached_tokens: 0,
        };
        Report {
            model: "m.gguf".into(),
            threads: 2,
            kernel: Some([
                Kernel {
                    pp: rate(1000.0),
                    tg: rate(100.0),
                },
                Kernel {
                    pp: rate(500.0),
                    tg: rate(200.0),
                },
            ]),
            load: Some([
                vec![load(1, 90.0), load(8, 300.0)],
                vec![load(1, 100.0), load(8, 250.0)],
            ]),
            restart: Some([
                vec![restart(512, 40.0), restart(2048, 50.0)],
                vec![restart(512, 400.0), restart(2048, 1600.0)],
            ]),
            ..Report::default()
        }
    }

    fn serving() -> Report {
        let schema = |held, free, follows| SchemaOutput {
            constrained_ms_per_token: held,
            unconstrained_ms_per_token: free,
            constrained_tokens: 150,
            unconstrained_tokens: 400,
            follows_schema: follows,
            runs: 3,
        };
        let determinism = |warm, concurrent| Determinism {
            requests: 16,
            max_tokens: 48,
            concurrency: 8,
            warm_differ: warm,
            concurrent_differ: concurrent,
        };
        let fast = Kernel {
            pp: Rate {
                mean: 2000.0,
                stddev: 0.0,
            },
            tg: Rate {
                mean: 150.0,
                stddev: 0.0,
            },
        };
        Report {
            kernel_fast: Some(fast),
            kernel_invariant: Some([true, false]),
            schema: Some([schema(12.0, 10.0, true), schema(30.0, 10.0, true)]),
            determinism: Some([determinism(0, 0), determinism(5, 9)]),
            determinism_fast: Some(determinism(2, 4)),
            speculation: Some([speculation(100.0, 160.0), speculation(100.0, 120.0)]),
            ..sample()
        }
    }

    fn speculation(off: f64, on: f64) -> Speculation {
        let task = Task {
            off_tps: off,
            on_tps: on,
            drafted: 100,
            accepted: 45,
            tokens: 300,
            same_answer: true,
        };
        Speculation {
            edit: task.clone(),
            free: Task {
                same_answer: false,
                drafted: 0,
                ..task
            },
            flags: "--spec ngram".to_owned(),
            runs: 3,
        }
    }

    #[test]
    fn speculation_rows_compare_rates_and_speedups_and_details_give_acceptance() {
        let md = serving().markdown();
        assert!(
            md.contains("| (h) edit task: speculation on over off | 1.60 | 1.20 | × | 1.33× |"),
            "{md}"
        );
        assert!(
            md.contains(
                "edit task 100.0 → 160.0 tok/s, 45 % of 100 drafted tokens accepted, same answer"
            ),
            "{md}"
        );
        assert!(
            md.contains("free text 100.0 → 160.0 tok/s, none drafted, ANSWER CHANGED"),
            "{md}"
        );
    }

    #[test]
    fn ratios_say_which_side_is_better_either_way() {
        let rows = sample().rows();
        let pp = rows.iter().find(|r| r.what == "(a) pp512").unwrap();
        assert!((pp.ratio().unwrap() - 2.0).abs() < 1e-12);
        let tg = rows.iter().find(|r| r.what == "(a) tg128").unwrap();
        assert!((tg.ratio().unwrap() - 0.5).abs() < 1e-12);
        let warm = rows
            .iter()
            .find(|r| r.what == "(c) 2048-token prefix: TTFT after restart")
            .unwrap();
        assert!((warm.ratio().unwrap() - 32.0).abs() < 1e-12);
    }

    #[test]
    fn markdown_has_a_row_per_measurement() {
        let md = sample().markdown();
        assert!(
            md.contains("| (a) pp512 | 1000 | 500 | tok/s | 2.00× |"),
            "{md}"
        );
        assert!(
            md.contains("| (b) 8 clients: throughput | 300 | 250 | tok/s | 1.20× |"),
            "{md}"
        );
        assert_eq!(md.matches("\n| (").count(), 2 + 2 * 5 + 2 * 2);
        assert!(md.contains("medians of 3 run(s)"), "{md}");
    }

    #[test]
    fn a_level_with_its_own_llama_bench_is_compared_with_it_and_says_so() {
        let mut report = sample();
        report.kernel_models.push(ModelKernel {
            model: "m".into(),
            levels: vec![
                ("avx2".into(), kernel(800.0, 80.0)),
                ("avx512".into(), kernel(1000.0, 100.0)),
            ],
            fast: kernel(500.0, 50.0),
            llama: kernel(500.0, 50.0),
            llama_at_levels: vec![("avx2".into(), kernel(400.0, 20.0))],
        });
        let md = report.markdown();
        // The capped level against the llama-bench built for it, named in the row.
        assert!(
            md.contains(
                "| (a) pp512 m at avx2 (llama-bench built for avx2) | 800 | 400 | tok/s | 2.00× |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| (a) tg128 m at avx2 (llama-bench built for avx2) | 80.00 | 20.00 | tok/s | 4.00× |"
            ),
            "{md}"
        );
        // The machine's own level against the native one.
        assert!(
            md.contains("| (a) pp512 m at avx512 | 1000 | 500 | tok/s | 2.00× |"),
            "{md}"
        );
        assert!(
            md.contains("| (a) pp512 m fast kernels | 500 | 500 | tok/s | 1.00× |"),
            "{md}"
        );
    }

    #[test]
    fn a_headline_below_the_machine_s_level_stands_beside_its_own_llama_bench() {
        let mut report = sample();
        // `--cpu-levels avx2 --llama-per-level` on a machine above AVX2: the headline is wick
        // at avx2 beside llama-bench built for avx2 (what `kernels` puts in `kernel`); the
        // fast kernels (the native llama.cpp's) beside the native llama-bench.
        report.kernel = Some([kernel(800.0, 80.0), kernel(400.0, 20.0)]);
        report.kernel_fast = Some(kernel(450.0, 45.0));
        report.kernel_models.push(ModelKernel {
            model: "m".into(),
            levels: vec![("avx2".into(), kernel(800.0, 80.0))],
            fast: kernel(450.0, 45.0),
            llama: kernel(500.0, 50.0),
            llama_at_levels: vec![("avx2".into(), kernel(400.0, 20.0))],
        });
        let md = report.markdown();
        assert!(
            md.contains("| (a) pp512 | 800 | 400 | tok/s | 2.00× |"),
            "{md}"
        );
        assert!(
            md.contains("| (a) pp512 (fast kernels) | 450 | 500 | tok/s | 0.90× |"),
            "{md}"
        );
        assert!(
            md.contains("(a) the headline rows: wick at avx2 beside llama-bench built for avx2."),
            "{md}"
        );
        // At the machine's own level nothing is added.
        let md = sample().markdown();
        assert!(!md.contains("the headline rows: wick at"), "{md}");
    }

    #[test]
    fn both_kernel_modes_stand_beside_llama_bench() {
        let md = serving().markdown();
        assert!(
            md.contains("| (a) pp512 | 1000 | 500 | tok/s | 2.00× |"),
            "{md}"
        );
        assert!(
            md.contains("| (a) pp512 (fast kernels) | 2000 | 500 | tok/s | 4.00× |"),
            "{md}"
        );
        assert!(
            md.contains("| (a) tg128 (fast kernels) | 150 | 200 | tok/s | 0.75× |"),
            "{md}"
        );
        assert!(
            md.contains("deterministic (the default, in the headline rows) batch-invariant; fast not batch-invariant"),
            "{md}"
        );
    }

    #[test]
    fn schema_rows_give_both_times_and_flag_an_answer_off_the_schema() {
        let md = serving().markdown();
        assert!(
            md.contains("| (f) JSON-schema answer: ms per token | 12.00 | 30.00 | ms | 2.50× |"),
            "{md}"
        );
        assert!(
            md.contains("| (f) unconstrained answer: ms per token | 10.00 | 10.00 | ms | 1.00× |"),
            "{md}"
        );
        assert!(md.contains("wick 1.20× (150 against 400 tokens"), "{md}");
        assert!(md.contains("llama.cpp 3.00×"), "{md}");
        let mut off = serving();
        if let Some([_, l]) = &mut off.schema {
            l.follows_schema = false;
        }
        assert!(
            off.markdown().contains(
                "| (f) JSON-schema answer: ms per token (llama-server's answer not JSON of the \
                 schema: not like for like) |"
            ),
            "{}",
            off.markdown()
        );
    }

    #[test]
    fn determinism_rows_are_counts_without_a_ratio() {
        let md = serving().markdown();
        for row in [
            "| (g) warm answers differing from cold | 0 / 16 | 5 / 16 | answers | – |",
            "| (g) 8 at once: answers differing from cold | 0 / 16 | 9 / 16 | answers | – |",
            "| (g) warm answers differing from cold (wick fast kernels) | 2 / 16 | 5 / 16 | answers | – |",
            "| (g) 8 at once: answers differing from cold (wick fast kernels) | 4 / 16 | 9 / 16 | answers | – |",
        ] {
            assert!(md.contains(row), "{row}\n{md}");
        }
        let json = serde_json::to_value(serving()).unwrap();
        assert_eq!(json["determinism"][1]["concurrent_differ"], 9);
        assert_eq!(json["schema"][0]["follows_schema"], true);
        assert_eq!(json["kernel_fast"]["pp"]["mean"], 2000.0);
    }

    #[test]
    fn writes_markdown_json_and_a_png() {
        let dir = tempfile::tempdir().unwrap();
        sample().write(dir.path()).unwrap();
        let png = std::fs::read(dir.path().join("bench.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("bench.json")).unwrap()).unwrap();
        assert!((json["kernel"][0]["pp"]["mean"].as_f64().unwrap() - 1000.0).abs() < 1e-9);
    }
}
