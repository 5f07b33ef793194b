//! The load generator: streaming OpenAI requests, timed chunk by chunk, the same for both
//! servers.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Value};

/// What one streamed request saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Streamed {
    /// From sending the request to the first chunk carrying generated text.
    pub(crate) ttft: Duration,
    /// Gaps between consecutive chunks carrying generated text.
    pub(crate) gaps: Vec<Duration>,
    /// `usage.completion_tokens` (the number of text chunks when the server gave no usage).
    pub(crate) completion_tokens: u64,
    /// `usage.prompt_tokens`.
    pub(crate) prompt_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens`.
    pub(crate) cached_tokens: u64,
    /// Bytes of tool-call arguments streamed.
    pub(crate) argument_bytes: u64,
    /// Content and reasoning text streamed.
    pub(crate) text: String,
    /// From sending the request to the end of the stream.
    pub(crate) elapsed: Duration,
    /// Speculative tokens drafted and accepted, as llama-server's `timings` report them.
    pub(crate) draft_tokens: u64,
    pub(crate) draft_accepted: u64,
}

/// One server's base URL and an HTTP client for it.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    pub(crate) fn new(base: &str) -> Result<Self> {
        // A fresh connection per request: llama-server closes kept-alive connections after a
        // streamed answer without saying so, and a reused one then fails.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(1800))
            .build()?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    /// POSTs `body` (with `stream: true` and usage asked for) to `path` and times the chunks.
    pub(crate) async fn stream(&self, path: &str, mut body: Value) -> Result<Streamed> {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let started = Instant::now();
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {}{path}", self.base))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            bail!("POST {path}: {status}: {text}");
        }
        let mut out = Streamed::default();
        let mut last: Option<Instant> = None;
        let mut chunks = 0u64;
        let mut buffer = Vec::new();
        let mut bytes = response.bytes_stream();
        while let Some(piece) = bytes.next().await {
            buffer.extend_from_slice(&piece?);
            while let Some(end) = find_event_end(&buffer) {
                let event: Vec<u8> = buffer.drain(..end).collect();
                let now = Instant::now();
                for data in data_lines(&event) {
                    if data == "[DONE]" {
                        continue;
                    }
                    let value: Value = serde_json::from_str(data)
                        .with_context(|| format!("a chunk that is not JSON: {data}"))?;
                    if out.absorb(&value) {
                        chunks += 1;
                        match last {
                            None => out.ttft = now - started,
                            Some(previous) => out.gaps.push(now - previous),
                        }
                        last = Some(now);
                    }
                }
            }
        }
        out.elapsed = started.elapsed();
        if out.completion_tokens == 0 {
            out.completion_tokens = chunks;
        }
        Ok(out)
    }

    /// POSTs `body` without streaming and returns the JSON answer.
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {}{path}", self.base))?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("POST {path}: {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// GETs `path` and returns its body.
    pub(crate) async fn get_text(&self, path: &str) -> Result<String> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .with_context(|| format!("GET {}{path}", self.base))?;
        Ok(response.error_for_status()?.text().await?)
    }

    /// GETs `path` and returns the status code (0 when the server does not answer).
    pub(crate) async fn status(&self, path: &str) -> u16 {
        match self
            .http
            .get(format!("{}{path}", self.base))
            .timeout(Duration::from_secs(2))
            .send()
            .await
        {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        }
    }
}

impl Streamed {
    /// Wall milliseconds per generated token after the first one (`None` with fewer than two
    /// tokens).
    pub(crate) fn ms_per_token_after_first(&self) -> Option<f64> {
        let after = self.elapsed.saturating_sub(self.ttft).as_secs_f64() * 1e3;
        #[allow(clippy::cast_precision_loss)]
        (self.completion_tokens > 1).then(|| after / (self.completion_tokens - 1) as f64)
    }

    /// Takes in one chunk; true when it carried generated text or tool-call arguments.
    fn absorb(&mut self, chunk: &Value) -> bool {
        if let Some(timings) = chunk.get("timings") {
            let number = |key: &str| timings.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.draft_tokens = number("draft_n");
            self.draft_accepted = number("draft_n_accepted");
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let number = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
            self.completion_tokens = number(usage.get("completion_tokens"));
            self.prompt_tokens = number(usage.get("prompt_tokens"));
            self.cached_tokens = number(usage.pointer("/prompt_tokens_details/cached_tokens"));
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return false;
        };
        let mut generated = false;
        for key in ["/text", "/delta/content", "/delta/reasoning_content"] {
            if let Some(text) = choice.pointer(key).and_then(Value::as_str) {
                if !text.is_empty() {
                    self.text.push_str(text);
                    generated = true;
                }
            }
        }
        if let Some(calls) = choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
        {
            for call in calls {
                let name = call.pointer("/function/name").and_then(Value::as_str);
                let args = call.pointer("/function/arguments").and_then(Value::as_str);
                self.argument_bytes += args.map_or(0, |a| a.len() as u64);
                generated |=
                    name.is_some_and(|n| !n.is_empty()) || args.is_some_and(|a| !a.is_empty());
            }
        }
        generated
    }
}

/// The end (exclusive, separator included) of the first complete server-sent event.
fn find_event_end(buffer: &[u8]) -> Option<usize> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The `data:` payloads of one event.
fn data_lines(event: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(event)
        .unwrap_or("")
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
}

/// Latency percentiles over many samples.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Percentiles {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

impl Percentiles {
    /// Nearest-rank p50 and p99 of `samples` (zeros when there are none).
    pub(crate) fn of(samples: &[Duration]) -> Self {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let index = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index]
        };
        Percentiles {
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
        }
    }
}

/// The median of `samples` (the mean of the middle two for an even count; 0 when empty).
pub(crate) fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => f64::midpoint(sorted[n / 2 - 1], sorted[n / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_on_either_separator() {
        assert_eq!(find_event_end(b"data: 1\n\ndata: 2\n\n"), Some(9));
        assert_eq!(find_event_end(b"data: 1\r\n\r\n"), Some(11));
        assert_eq!(find_event_end(b"data: 1\n"), None);
        let lines: Vec<&str> = data_lines(b"event: x\ndata: {\"a\":1}\n\n").collect();
        assert_eq!(lines, ["{\"a\":1}"]);
    }

    #[test]
    fn counts_text_reasoning_and_arguments_but_not_role_chunks() {
        let mut s = Streamed::default();
        assert!(!s.absorb(&json!({"choices": [{"delta": {"role": "assistant"}}]})));
        assert!(s.absorb(&json!({"choices": [{"delta": {"content": "Hi"}}]})));
        assert!(s.absorb(&json!({"choices": [{"delta": {"reasoning_content": "hm"}}]})));
        assert!(s.absorb(&json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{\"a\""}}]}}]})));
        assert!(s.absorb(&json!({"choices": [{"text": "x", "index": 0}]})));
        assert!(
            !s.absorb(&json!({"choices": [], "usage": {"prompt_tokens": 7,
            "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3}}}))
        );
        assert_eq!(
            (s.prompt_tokens, s.completion_tokens, s.cached_tokens),
            (7, 4, 3)
        );
        assert_eq!(s.argument_bytes, 4);
        assert_eq!(s.text, "Hihmx");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = Percentiles::of(&samples);
        assert!((p.p50_ms - 50.0).abs() < 1e-9 && (p.p99_ms - 99.0).abs() < 1e-9);
        let one = Percentiles::of(&[Duration::from_millis(7)]);
        assert!((one.p50_ms - 7.0).abs() < 1e-9 && (one.p99_ms - 7.0).abs() < 1e-9);
        assert!(Percentiles::of(&[]).p50_ms.abs() < f64::EPSILON);
    }

    #[test]
    fn medians_of_odd_even_and_no_samples() {
        assert!((median(&[3.0, 1.0, 2.0]) - 2.0).abs() < 1e-12);
        assert!((median(&[4.0, 1.0, 3.0, 2.0]) - 2.5).abs() < 1e-12);
        assert!((median(&[7.0]) - 7.0).abs() < 1e-12);
        assert!(median(&[]).abs() < f64::EPSILON);
    }

    #[test]
    fn per_token_time_leaves_the_first_token_out() {
        let s = Streamed {
            ttft: Duration::from_millis(100),
            elapsed: Duration::from_millis(1100),
            completion_tokens: 11,
            ..Streamed::default()
        };
        assert!((s.ms_per_token_after_first().unwrap() - 100.0).abs() < 1e-9);
        let one = Streamed {
            completion_tokens: 1,
            ..s
        };
        assert_eq!(one.ms_per_token_after_first(), None);
    }
}
