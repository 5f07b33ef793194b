//! Prometheus metrics: requests, tokens, cache reuse, queue, live sequences, latencies.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds of the latency histograms, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            let n = count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
        }
        let total = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {total}");
    }
}

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: AtomicU64,
    errors: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    live_streams: Arc<AtomicU64>,
    ttft: Histogram,
    per_token: Histogram,
}

/// Counts one open generation while it lives.
#[derive(Debug)]
pub(crate) struct LiveGuard(Arc<AtomicU64>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn live(&self) -> LiveGuard {
        self.live_streams.fetch_add(1, Ordering::Relaxed);
        LiveGuard(Arc::clone(&self.live_streams))
    }

    pub(crate) fn usage(&self, usage: &wick::Usage) {
        let add = |c: &AtomicU64, n: u32| c.fetch_add(u64::from(n), Ordering::Relaxed);
        add(&self.prompt_tokens, usage.prompt_tokens);
        add(&self.completion_tokens, usage.completion_tokens);
        add(&self.cached_tokens, usage.cached_tokens);
    }

    pub(crate) fn first_token(&self, d: Duration) {
        self.ttft.observe(d);
    }

    pub(crate) fn token(&self, d: Duration) {
        self.per_token.observe(d);
    }

    /// The Prometheus text exposition; `inflight` is requests generating or queued.
    pub(crate) fn render(&self, inflight: usize, parallel: usize) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, c: &AtomicU64| {
            let n = c.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {n}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, n: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {n}");
        };
        counter(
            &mut out,
            "wick_requests_total",
            "HTTP requests received.",
            &self.requests,
        );
        counter(
            &mut out,
            "wick_request_errors_total",
            "Requests answered with an error.",
            &self.errors,
        );
        counter(
            &mut out,
            "wick_prompt_tokens_total",
            "Prompt tokens processed.",
            &self.prompt_tokens,
        );
        counter(
            &mut out,
            "wick_completion_tokens_total",
            "Tokens generated.",
            &self.completion_tokens,
        );
        counter(
            &mut out,
            "wick_prompt_tokens_cached_total",
            "Prompt tokens reused from the cache.",
            &self.cached_tokens,
        );
        let queued = inflight.saturating_sub(parallel);
        gauge(
            &mut out,
            "wick_queue_depth",
            "Requests waiting for a sequence.",
            queued as u64,
        );
        gauge(
            &mut out,
            "wick_live_sequences",
            "Requests generating now.",
            inflight.min(parallel) as u64,
        );
        gauge(
            &mut out,
            "wick_open_streams",
            "Generations the server is reading now.",
            self.live_streams.load(Ordering::Relaxed),
        );
        self.ttft.render(
            "wick_time_to_first_token_seconds",
            "Time from request to first token.",
            &mut out,
        );
        self.per_token.render(
            "wick_time_per_output_token_seconds",
            "Time between generated tokens.",
            &mut out,
        );
        out
    }
}

/// The prompt cache's counters, one labelled series per served model.
pub(crate) fn render_cache(out: &mut String, models: &[(&str, &wick::CacheStats)]) {
    type Pick = fn(&wick::CacheStats) -> &AtomicU64;
    let rows: [(&str, &str, Pick); 10] = [
        (
            "wick_prompt_cache_hits_ram_total",
            "Requests that reused a prefix held in RAM.",
            |s| &s.hits_ram,
        ),
        (
            "wick_prompt_cache_hits_disk_total",
            "Requests that restored a prefix from disk.",
            |s| &s.hits_disk,
        ),
        (
            "wick_prompt_cache_misses_total",
            "Requests that reused no prefix.",
            |s| &s.misses,
        ),
        (
            "wick_prompt_cache_restored_tokens_total",
            "Prompt tokens restored from disk.",
            |s| &s.restored_tokens,
        ),
        (
            "wick_prompt_cache_restored_bytes_total",
            "Snapshot bytes read from disk.",
            |s| &s.restored_bytes,
        ),
        (
            "wick_prompt_cache_saved_total",
            "KV snapshots written to disk.",
            |s| &s.saved,
        ),
        (
            "wick_prompt_cache_evictions_total",
            "KV snapshots removed to keep the size budget.",
            |s| &s.evictions,
        ),
        (
            "wick_prompt_cache_rejects_total",
            "KV snapshots found corrupt or foreign and removed.",
            |s| &s.rejects,
        ),
        (
            "wick_spec_drafted_tokens_total",
            "Tokens proposed by speculative decoding (prompt lookup) and verified.",
            |s| &s.spec_drafted,
        ),
        (
            "wick_spec_accepted_tokens_total",
            "Drafted tokens the model accepted.",
            |s| &s.spec_accepted,
        ),
    ];
    for (name, help, pick) in rows {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (model, stats) in models {
            let model = model.replace('\\', "\\\\").replace('"', "\\\"");
            let n = pick(stats).load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{model=\"{model}\"}} {n}");
        }
    }
}

/// Per served model: whether it is loaded, and how many times it was loaded (models loaded on
/// demand load again after an unload).
pub(crate) fn render_models(out: &mut String, models: &[crate::Listing]) {
    let _ = writeln!(
        out,
        "# HELP wick_model_loaded Whether the model is loaded (1) or not (0).\n\
         # TYPE wick_model_loaded gauge"
    );
    for m in models {
        let model = m.id.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "wick_model_loaded{{model=\"{model}\"}} {}",
            u8::from(m.llm.is_some())
        );
    }
    let _ = writeln!(
        out,
        "# HELP wick_model_loads_total Loads of the model since the server started.\n\
         # TYPE wick_model_loads_total counter"
    );
    for m in models {
        let model = m.id.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "wick_model_loads_total{{model=\"{model}\"}} {}",
            m.loads
        );
    }
}
