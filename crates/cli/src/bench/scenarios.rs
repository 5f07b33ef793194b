//! (b)–(e): the server scenarios, run the same way against wick and llama-server.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::client::{median, Client, Percentiles, Streamed};
use super::prompts;
use super::server::{Launch, Side};

/// (b) One concurrency level on one server: the median over the runs of each figure.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Load {
    pub(crate) clients: usize,
    pub(crate) ttft: Percentiles,
    pub(crate) per_token: Percentiles,
    pub(crate) tokens_per_second: f64,
    pub(crate) completion_tokens: u64,
    /// How many runs the medians are of.
    pub(crate) runs: usize,
}

impl Load {
    /// Each figure's median over `runs` (all of one concurrency level; at least one).
    pub(crate) fn median_of(runs: &[Load]) -> Load {
        let of = |f: fn(&Load) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        Load {
            clients: runs.first().map_or(0, |l| l.clients),
            ttft: Percentiles {
                p50_ms: of(|l| l.ttft.p50_ms),
                p99_ms: of(|l| l.ttft.p99_ms),
            },
            per_token: Percentiles {
                p50_ms: of(|l| l.per_token.p50_ms),
                p99_ms: of(|l| l.per_token.p99_ms),
            },
            tokens_per_second: of(|l| l.tokens_per_second),
            completion_tokens: of(|l| l.completion_tokens as f64).round() as u64,
            runs: runs.len(),
        }
    }
}

/// What (b) runs on each server.
#[derive(Debug, Clone)]
pub(crate) struct LoadTest {
    /// Concurrent clients, one level after another.
    pub(crate) levels: Vec<usize>,
    /// Requests each client sends, one after another.
    pub(crate) rounds: usize,
    /// Times every level is run; the medians are reported.
    pub(crate) runs: usize,
    pub(crate) max_tokens: u32,
}

/// (b) Every level `test.runs` times on one server: each client streams `test.rounds`
/// requests, all after the shared system prompt, each with a question no other asks.
pub(crate) async fn load(launch: &Launch, side: Side, test: &LoadTest) -> Result<Vec<Load>> {
    let server = launch.start(side).await?;
    // One request first, so neither side's first-request costs land in the measurement.
    server
        .client
        .stream("/v1/chat/completions", prompts::chat("Hello!", 8))
        .await?;
    let mut runs: Vec<Vec<Load>> = vec![Vec::new(); test.levels.len()];
    let mut sent = 0;
    for _ in 0..test.runs {
        for (level, &clients) in test.levels.iter().enumerate() {
            runs[level].push(load_level(&server.client, clients, sent, test).await?);
            sent += test.rounds;
        }
    }
    server.stop().await;
    Ok(runs.iter().map(|r| Load::median_of(r)).collect())
}

/// One run of one level; `first` numbers the requests, so no question repeats a former one.
async fn load_level(
    client: &Client,
    clients: usize,
    first: usize,
    test: &LoadTest,
) -> Result<Load> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let http = client.clone();
        let (rounds, max_tokens) = (test.rounds, test.max_tokens);
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for round in 0..rounds {
                let question = prompts::client_question(c, first + round);
                let mut body = prompts::chat(&question, max_tokens);
                // Every answer runs to `max_tokens` on both sides (llama-server's `ignore_eos`,
                // which both honour): the two sides' floats differ, so their greedy answers
                // end at different lengths, and the throughput would measure the answers.
                body["ignore_eos"] = Value::Bool(true);
                seen.push(http.stream("/v1/chat/completions", body).await?);
            }
            anyhow::Ok(seen)
        }));
    }
    let mut all: Vec<Streamed> = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let wall = started.elapsed().as_secs_f64();
    let ttfts: Vec<Duration> = all.iter().map(|s| s.ttft).collect();
    let gaps: Vec<Duration> = all.iter().flat_map(|s| s.gaps.iter().copied()).collect();
    let tokens: u64 = all.iter().map(|s| s.completion_tokens).sum();
    #[allow(clippy::cast_precision_loss)]
    Ok(Load {
        clients,
        ttft: Percentiles::of(&ttfts),
        per_token: Percentiles::of(&gaps),
        tokens_per_second: tokens as f64 / wall,
        completion_tokens: tokens,
        runs: 1,
    })
}

/// (c) Time to first token of a request sharing a long prefix, on a fresh server and right
/// after a restart of one that answered a request with the same prefix.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Restart {
    pub(crate) prefix_tokens: u64,
    /// The first request, on a server that never saw the prefix.
    pub(crate) cold_ms: f64,
    /// The second request (same prefix, another question), after a restart.
    pub(crate) after_restart_ms: f64,
    /// Prompt tokens the server reported as cached for the second request.
    pub(crate) cached_tokens: u64,
}

/// (c) for one prefix `prefix` (already cut to the wanted number of tokens).
pub(crate) async fn restart(launch: &Launch, side: Side, prefix: &str) -> Result<Restart> {
    let ask = |question: &str| {
        json!({
            "prompt": format!("{prefix}\n\nQuestion: {question}\nAnswer:"),
            "max_tokens": 4,
            "temperature": 0.0,
        })
    };
    let server = launch.start(side).await?;
    let cold = server
        .client
        .stream("/v1/completions", ask("what is the first record about?"))
        .await?;
    server.stop().await;
    let server = launch.start(side).await?;
    let warm = server
        .client
        .stream("/v1/completions", ask("which records mention a harbour?"))
        .await?;
    server.stop().await;
    Ok(Restart {
        prefix_tokens: cold.prompt_tokens,
        cold_ms: cold.ttft.as_secs_f64() * 1e3,
        after_restart_ms: warm.ttft.as_secs_f64() * 1e3,
        cached_tokens: warm.cached_tokens,
    })
}

/// (d) A multi-turn chat: the prompt tokens the server actually computed.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Conversation {
    pub(crate) turns: usize,
    /// Prompt tokens over all turns (what a server without any cache would compute).
    pub(crate) prompt_tokens: u64,
    /// Prompt tokens not served from the cache: `prompt_tokens - cached_tokens`, summed.
    pub(crate) processed_tokens: u64,
}

const QUESTIONS: [&str; 10] = [
    "Hi! What is a good name for a cat?",
    "Why is that a good name?",
    "What should I feed it?",
    "How often should it eat?",
    "What toys do cats like?",
    "How do I keep it from scratching the sofa?",
    "Should it go outside?",
    "How long do cats live?",
    "What are signs that a cat is ill?",
    "Thanks! Can you summarise your advice in one sentence?",
];

/// (d) on one server.
pub(crate) async fn conversation(
    launch: &Launch,
    side: Side,
    turns: usize,
    max_tokens: u32,
) -> Result<Conversation> {
    let server = launch.start(side).await?;
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut out = Conversation {
        turns,
        prompt_tokens: 0,
        processed_tokens: 0,
    };
    for question in QUESTIONS.iter().cycle().take(turns) {
        messages.push(json!({"role": "user", "content": question}));
        let body = json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0.0});
        let answer = server.client.post("/v1/chat/completions", &body).await?;
        let number = |p: &str| answer.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        let prompt = number("/usage/prompt_tokens");
        let cached = number("/usage/prompt_tokens_details/cached_tokens");
        out.prompt_tokens += prompt;
        out.processed_tokens += prompt.saturating_sub(cached);
        let content = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        messages.push(json!({"role": "assistant", "content": content}));
    }
    server.stop().await;
    Ok(out)
}

/// A ChatML template with Hermes-style tool calls (`<tool_call>` JSON), for (e).
pub(crate) const HERMES_TEMPLATE: &str = r#"{%- if tools %}<|im_start|>system
You are a helpful assistant with tools.

# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- for call in message.tool_calls %}
{%- if call.function is defined %}{% set call = call.function %}{% endif %}
<tool_call>
{"name": "{{ call.name }}", "arguments": {{ call.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"#;

/// (e) A streamed tool call with long arguments: the server's CPU time per generated token.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ToolStream {
    pub(crate) completion_tokens: u64,
    pub(crate) argument_bytes: u64,
    /// Server CPU time (user + system) per generated token, in milliseconds.
    pub(crate) cpu_ms_per_token: f64,
    pub(crate) wall_ms_per_token: f64,
}

/// (e) on one server: a forced call of a `write_file` tool whose `content` the schema requires
/// to be long (`minLength` 2,000, the most llama.cpp's grammars allow; the test model writes
/// on), streamed until `max_tokens` or the model closes it.
pub(crate) async fn tool_stream(
    launch: &Launch,
    side: Side,
    max_tokens: u32,
) -> Result<ToolStream> {
    let server = launch.start(side).await?;
    let body = json!({
        "messages": [{"role": "user", "content":
            "Call write_file to save numbers.txt with every number from 1 to 100000 in words."}],
        "tools": [{"type": "function", "function": {
            "name": "write_file",
            "description": "Write a text file.",
            "parameters": {"type": "object", "properties": {
                "path": {"type": "string", "maxLength": 64},
                "content": {"type": "string", "minLength": 2000}},
                "required": ["path", "content"]}}}],
        "tool_choice": "required",
        "max_tokens": max_tokens,
        "temperature": 0.0,
    });
    let cpu_before = server.cpu_time();
    let started = Instant::now();
    let streamed = server.client.stream("/v1/chat/completions", body).await?;
    let wall = started.elapsed();
    let cpu = server
        .cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before))
        .context("the server's CPU time is not readable on this system (needs /proc)")?;
    server.stop().await;
    #[allow(clippy::cast_precision_loss)]
    let tokens = streamed.completion_tokens.max(1) as f64;
    Ok(ToolStream {
        completion_tokens: streamed.completion_tokens,
        argument_bytes: streamed.argument_bytes,
        cpu_ms_per_token: cpu.as_secs_f64() * 1e3 / tokens,
        wall_ms_per_token: wall.as_secs_f64() * 1e3 / tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(ttft: f64, tps: f64, tokens: u64) -> Load {
        Load {
            clients: 4,
            ttft: Percentiles {
                p50_ms: ttft,
                p99_ms: ttft * 2.0,
            },
            per_token: Percentiles {
                p50_ms: 5.0,
                p99_ms: 9.0,
            },
            tokens_per_second: tps,
            completion_tokens: tokens,
            runs: 1,
        }
    }

    #[test]
    fn a_level_reports_each_figures_median_over_the_runs() {
        let m = Load::median_of(&[
            load(30.0, 90.0, 128),
            load(10.0, 120.0, 120),
            load(20.0, 60.0, 124),
        ]);
        assert_eq!((m.clients, m.runs, m.completion_tokens), (4, 3, 124));
        assert!((m.ttft.p50_ms - 20.0).abs() < 1e-12 && (m.ttft.p99_ms - 40.0).abs() < 1e-12);
        assert!((m.tokens_per_second - 90.0).abs() < 1e-12);
        let one = Load::median_of(&[load(7.0, 1.0, 3)]);
        assert!((one.ttft.p50_ms - 7.0).abs() < 1e-12 && one.runs == 1);
    }
}
