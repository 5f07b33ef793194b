//! llama-server's telemetry beside each API's own fields: `timings` (how fast the prompt and
//! the answer went) and `prompt_progress` (how far a prompt is computed), typed.

use std::time::{Duration, Instant};

use serde::Serialize;
use wick::{PromptProgress, Usage};

use crate::AppState;

/// The telemetry a streamed request asked for, beyond its API's own fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// `prompt_progress` reports before the first token (`return_progress`).
    pub(crate) progress: bool,
    /// `timings` on each text chunk (`timings_per_token`).
    pub(crate) timings_per_token: bool,
}

/// llama-server's `timings`: the prompt tokens computed (not read from the cache) and the time
/// to the first token, then the generated tokens and the time after it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Timings {
    cache_n: u32,
    prompt_n: u32,
    prompt_ms: f64,
    prompt_per_token_ms: f64,
    prompt_per_second: f64,
    predicted_n: u32,
    predicted_ms: f64,
    predicted_per_token_ms: f64,
    predicted_per_second: f64,
}

impl Timings {
    /// `cached` and `prompt` (computed) tokens in `prompt_time`, then `predicted` tokens in
    /// `predicted_time`.
    fn new(
        cached: u32,
        prompt: u32,
        prompt_time: Duration,
        predicted: u32,
        predicted_time: Duration,
    ) -> Self {
        let prompt_ms = prompt_time.as_secs_f64() * 1000.0;
        let predicted_ms = predicted_time.as_secs_f64() * 1000.0;
        let per = |ms: f64, n: u32| if n == 0 { 0.0 } else { ms / f64::from(n) };
        let rate = |ms: f64, n: u32| {
            if ms <= 0.0 {
                0.0
            } else {
                f64::from(n) * 1000.0 / ms
            }
        };
        Timings {
            cache_n: cached,
            prompt_n: prompt,
            prompt_ms,
            prompt_per_token_ms: per(prompt_ms, prompt),
            prompt_per_second: rate(prompt_ms, prompt),
            predicted_n: predicted,
            predicted_ms,
            predicted_per_token_ms: per(predicted_ms, predicted),
            predicted_per_second: rate(predicted_ms, predicted),
        }
    }
}

/// llama-server's `prompt_progress`: `{total, cache, processed, time_ms}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Progress {
    total: u32,
    cache: u32,
    processed: u32,
    time_ms: u64,
}

/// An answer's clock: when it started, when its first token came, what the prompt cache held
/// and how many tokens came so far, for `timings`, for `prompt_progress` and `timings` sent
/// along a stream (`return_progress`, `timings_per_token`), and for the time-to-first-token
/// metric, recorded once, at the first token.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    started: Instant,
    first_at: Option<Instant>,
    prompt: u32,
    cached: u32,
    generated: u32,
}

impl Clock {
    /// A clock for an answer to a prompt of `prompt` tokens, started at `started`.
    fn new(started: Instant, prompt: u32) -> Self {
        Clock {
            started,
            first_at: None,
            prompt,
            cached: 0,
            generated: 0,
        }
    }

    /// The clock of an answer to a prompt of `prompt` tokens, started at `started`, whose first
    /// item just came: unless that item is a `progress` report, it is the first token.
    pub(crate) fn first_item(
        state: &AppState,
        started: Instant,
        prompt: u32,
        progress: bool,
    ) -> Self {
        let mut clock = Clock::new(started, prompt);
        if !progress {
            clock.answered(state, 0);
        }
        clock
    }

    /// Records a progress report; the `prompt_progress` to send for it.
    pub(crate) fn progress(&mut self, p: &PromptProgress) -> Progress {
        self.prompt = p.total;
        self.cached = p.cached;
        Progress {
            total: p.total,
            cache: p.cached,
            processed: p.processed,
            time_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Records an item of the answer (not a progress report) with `tokens` generated tokens
    /// (0 where they are not counted); the first one's time is the time to first token,
    /// recorded in `state`'s metrics once.
    pub(crate) fn answered(&mut self, state: &AppState, tokens: usize) {
        if let Some(ttft) = self.answer(tokens) {
            state.metrics().first_token(ttft);
        }
    }

    /// [`Clock::answered`] without the metrics: the time to first token, on the first item.
    fn answer(&mut self, tokens: usize) -> Option<Duration> {
        self.generated = self
            .generated
            .saturating_add(u32::try_from(tokens).unwrap_or(u32::MAX));
        if self.first_at.is_some() {
            return None;
        }
        let now = Instant::now();
        self.first_at = Some(now);
        Some(now - self.started)
    }

    /// The timings so far; with the answer's `usage`, its final counts.
    pub(crate) fn timings(&self, usage: Option<&Usage>) -> Timings {
        let first_at = self.first_at.unwrap_or_else(Instant::now);
        let (cached, prompt, generated) = match usage {
            Some(u) => (u.cached_tokens, u.prompt_tokens, u.completion_tokens),
            None => (self.cached, self.prompt, self.generated),
        };
        Timings::new(
            cached,
            prompt.saturating_sub(cached),
            first_at - self.started,
            generated,
            first_at.elapsed(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_divide_by_counts_and_never_by_zero() {
        let t = Timings::new(4, 10, Duration::from_millis(20), 0, Duration::ZERO);
        let v = serde_json::to_value(t).unwrap();
        assert_eq!(v["cache_n"], 4);
        assert_eq!(v["prompt_n"], 10);
        assert_eq!(v["prompt_per_token_ms"], 2.0);
        assert_eq!(v["prompt_per_second"], 500.0);
        assert_eq!(v["predicted_per_token_ms"], 0.0);
        assert_eq!(v["predicted_per_second"], 0.0);
    }

    #[test]
    fn a_clock_counts_tokens_and_reports_the_first_once() {
        let mut clock = Clock::new(Instant::now(), 12);
        let p = clock.progress(&PromptProgress {
            total: 12,
            cached: 5,
            processed: 5,
        });
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(
            (v["total"].clone(), v["cache"].clone()),
            (12.into(), 5.into())
        );
        assert_eq!(v["processed"], 5);
        assert!(clock.answer(1).is_some());
        assert!(clock.answer(2).is_none());
        let v = serde_json::to_value(clock.timings(None)).unwrap();
        assert_eq!(v["predicted_n"], 3);
        assert_eq!(v["prompt_n"], 7);
        assert_eq!(v["cache_n"], 5);
    }
}
