//! (g) Determinism: the same greedy requests answered cold and alone, warm (after a request
//! sharing their prefix) and several at once; how many answers differ from the cold ones.

use anyhow::{Context, Result};
use serde_json::Value;

use super::client::Client;
use super::prompts;
use super::server::{Launch, Side};

/// (g) on one server.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Determinism {
    /// Distinct requests, all after the shared system prompt.
    pub(crate) requests: usize,
    /// `max_tokens` of each (greedy) request.
    pub(crate) max_tokens: u32,
    /// Requests sent at once in the concurrent run.
    pub(crate) concurrency: usize,
    /// Warm answers (on one process, each after a request sharing its prefix) that differ
    /// from the cold solo answer.
    pub(crate) warm_differ: usize,
    /// Concurrent answers that differ from the cold solo answer.
    pub(crate) concurrent_differ: usize,
}

/// What (g) sends to each server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeterminismTest {
    pub(crate) requests: usize,
    pub(crate) max_tokens: u32,
    pub(crate) concurrency: usize,
}

/// How many of `answers` differ from the cold answer at the same index (a missing answer
/// counts as differing).
pub(crate) fn count_differing(cold: &[String], answers: &[String]) -> usize {
    cold.iter()
        .enumerate()
        .filter(|&(i, c)| answers.get(i) != Some(c))
        .count()
}

/// (g) on one server. `launch(name)` starts a fresh process with its own empty cache
/// directory: one per cold answer (nothing cached, nothing beside it), one for the warm run
/// and one for the concurrent run.
pub(crate) async fn determinism(
    launch: &impl Fn(&str) -> Launch,
    side: Side,
    test: DeterminismTest,
) -> Result<Determinism> {
    let body = |i: usize| prompts::chat(&prompts::question(i), test.max_tokens);
    let mut cold = Vec::with_capacity(test.requests);
    for i in 0..test.requests {
        let server = launch(&format!("cold-{i}")).start(side).await?;
        cold.push(answer(&server.client, body(i)).await?);
        server.stop().await;
    }

    let server = launch("warm").start(side).await?;
    // The same system prompt and another question: every request below finds its prefix
    // cached, by this one or the request before it.
    let primer = prompts::chat("Say hello to a new reader.", test.max_tokens);
    answer(&server.client, primer).await?;
    let mut warm = Vec::with_capacity(test.requests);
    for i in 0..test.requests {
        warm.push(answer(&server.client, body(i)).await?);
    }
    server.stop().await;

    let server = launch("concurrent").start(side).await?;
    let mut concurrent = Vec::with_capacity(test.requests);
    let indices: Vec<usize> = (0..test.requests).collect();
    for wave in indices.chunks(test.concurrency.max(1)) {
        let tasks: Vec<_> = wave
            .iter()
            .map(|&i| {
                let client = server.client.clone();
                let request = body(i);
                tokio::spawn(async move { answer(&client, request).await })
            })
            .collect();
        for task in tasks {
            concurrent.push(task.await??);
        }
    }
    server.stop().await;

    Ok(Determinism {
        requests: test.requests,
        max_tokens: test.max_tokens,
        concurrency: test.concurrency,
        warm_differ: count_differing(&cold, &warm),
        concurrent_differ: count_differing(&cold, &concurrent),
    })
}

/// The text of a non-streamed chat answer.
async fn answer(client: &Client, body: Value) -> Result<String> {
    let reply = client.post("/v1/chat/completions", &body).await?;
    reply
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("an answer without content: {reply}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(all: &[&str]) -> Vec<String> {
        all.iter().map(|&s| s.to_owned()).collect()
    }

    #[test]
    fn counts_answers_that_differ_from_the_cold_ones() {
        let cold = texts(&["a", "b", "c", "d"]);
        assert_eq!(count_differing(&cold, &cold), 0);
        assert_eq!(count_differing(&cold, &texts(&["a", "B", "c", "d "])), 2);
        // A missing answer differs; an extra one is not counted.
        assert_eq!(count_differing(&cold, &texts(&["a", "b"])), 2);
        assert_eq!(
            count_differing(&cold, &texts(&["a", "b", "c", "d", "e"])),
            0
        );
    }
}
