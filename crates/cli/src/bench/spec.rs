//! (h) Speculative decoding: generation tokens/s of greedy answers with drafting off and on,
//! on an edit task (the prompt holds a code block to give back with one change: the answer
//! repeats its input) and on free text, for wick serve (`--spec ngram`, prompt lookup) and for
//! llama-server (`--spec-type ngram-mod`, its own lookup, with its defaults: the fastest of its
//! `ngram-*` kinds on the edit task here), each off and on in fresh processes.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::client::median;
use super::server::{Launch, Running, Side};

/// One task on one server: medians over the runs.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Task {
    /// Generation tokens/s (after the first token) without drafting.
    pub(crate) off_tps: f64,
    /// The same with drafting.
    pub(crate) on_tps: f64,
    /// Tokens drafted and accepted over the runs with drafting (0 when the server says not).
    pub(crate) drafted: u64,
    pub(crate) accepted: u64,
    /// Generated tokens of one answer (the last run's, drafting on).
    pub(crate) tokens: u64,
    /// Whether every answer with drafting was the answer without it, text for text.
    pub(crate) same_answer: bool,
}

impl Task {
    /// On over off: what drafting gains (above 1) or costs.
    pub(crate) fn speedup(&self) -> Option<f64> {
        (self.off_tps > 0.0).then(|| self.on_tps / self.off_tps)
    }

    /// Accepted over drafted tokens.
    #[allow(clippy::cast_precision_loss)] // token counts
    pub(crate) fn acceptance(&self) -> Option<f64> {
        (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64)
    }
}

/// (h) on one server.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Speculation {
    pub(crate) edit: Task,
    pub(crate) free: Task,
    /// The flags that turned drafting on.
    pub(crate) flags: String,
    pub(crate) runs: usize,
}

/// A ~300-token Python module: the edit task asks for it back with one name changed.
const CODE: &str = r#"from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 1

    def subtotal(self) -> float:
        return self.price * self.quantity


@dataclass
class Order:
    customer: str
    items: list[Item] = field(default_factory=list)
    discount: float = 0.0

    def add(self, name: str, price: float, quantity: int = 1) -> None:
        if price < 0:
            raise ValueError("a price cannot be negative")
        if quantity <= 0:
            raise ValueError("a quantity must be positive")
        self.items.append(Item(name, price, quantity))

    def total_price(self) -> float:
        total = sum(item.subtotal() for item in self.items)
        return round(total * (1.0 - self.discount), 2)

    def summary(self) -> str:
        lines = [f"Order for {self.customer}:"]
        for item in self.items:
            lines.append(f"  {item.quantity} x {item.name} at {item.price:.2f}")
        lines.append(f"Total: {self.total_price():.2f}")
        return "\n".join(lines)
"#;

fn edit_request(max_tokens: u32) -> Value {
    json!({
        "messages": [{"role": "user", "content": format!(
            "Here is a Python module:\n\n```python\n{CODE}```\n\nRename the method \
             `total_price` to `order_total` everywhere and give back the whole module, \
             unchanged otherwise, in one code block."
        )}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    })
}

fn free_request(max_tokens: u32) -> Value {
    json!({
        "messages": [{"role": "user", "content":
            "Write a short story about a lighthouse keeper who finds an old map."}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    })
}

/// The flags that turn drafting on for `side`. llama-server's `ngram-mod` drafts 48 to 64
/// tokens after a 24-token match; on the edit task it beat `ngram-simple` (a 12-token match
/// drafted nothing; with 4 tokens and drafts of 8, 1.20× against 1.44×), `ngram-map-k` and
/// `ngram-cache`.
pub(crate) fn flags(side: Side) -> Vec<String> {
    let flags: &[&str] = match side {
        Side::Wick => &["--spec", "ngram", "--spec-max", "8"],
        Side::LlamaCpp => &["--spec-type", "ngram-mod"],
    };
    flags.iter().map(|f| (*f).to_owned()).collect()
}

/// The flags that turn wick's drafting off (`wick serve` drafts by prompt lookup by default;
/// llama-server drafts only when asked).
pub(crate) fn off_flags() -> Vec<String> {
    vec!["--spec".to_owned(), "off".to_owned()]
}

/// (h) on one side: a fresh server without drafting, then one with it (`on`), each running
/// every task `runs` times after a warm-up.
pub(crate) async fn speculation(
    off: &Launch,
    on: &Launch,
    side: Side,
    runs: usize,
    max_tokens: u32,
) -> Result<Speculation> {
    let tasks = [edit_request(max_tokens), free_request(max_tokens)];
    let plain = measure(off, side, &tasks, runs).await?;
    let drafted = measure(on, side, &tasks, runs).await?;
    let task = |i: usize| {
        let (p, d) = (&plain[i], &drafted[i]);
        Task {
            off_tps: p.tps,
            on_tps: d.tps,
            drafted: d.drafted,
            accepted: d.accepted,
            tokens: d.tokens,
            same_answer: p.texts.iter().chain(&d.texts).all(|t| *t == p.texts[0]),
        }
    };
    Ok(Speculation {
        edit: task(0),
        free: task(1),
        flags: flags(side).join(" "),
        runs,
    })
}

/// One task on one server.
struct Measured {
    tps: f64,
    drafted: u64,
    accepted: u64,
    tokens: u64,
    texts: Vec<String>,
}

async fn measure(
    launch: &Launch,
    side: Side,
    tasks: &[Value],
    runs: usize,
) -> Result<Vec<Measured>> {
    let server = launch.start(side).await?;
    let chat = "/v1/chat/completions";
    server.client.stream(chat, free_request(8)).await?;
    let mut out = Vec::new();
    for task in tasks {
        let before = drafts(&server).await;
        let (mut rates, mut texts) = (Vec::new(), Vec::new());
        let (mut drafted, mut accepted, mut tokens) = (0, 0, 0);
        for _ in 0..runs {
            let answer = server.client.stream(chat, task.clone()).await?;
            let Some(ms) = answer.ms_per_token_after_first() else {
                bail!("an answer of under two tokens: {:?}", answer.text);
            };
            rates.push(1000.0 / ms);
            drafted += answer.draft_tokens;
            accepted += answer.draft_accepted;
            tokens = answer.completion_tokens;
            texts.push(answer.text);
        }
        // wick counts drafts in /metrics rather than in each answer.
        if let (Some(b), Some(a)) = (before, drafts(&server).await) {
            drafted = a.0 - b.0;
            accepted = a.1 - b.1;
        }
        out.push(Measured {
            tps: median(&rates),
            drafted,
            accepted,
            tokens,
            texts,
        });
    }
    server.stop().await;
    Ok(out)
}

/// wick's drafted and accepted token counters (`None` for llama-server, whose answers carry
/// theirs).
async fn drafts(server: &Running) -> Option<(u64, u64)> {
    if server.side != Side::Wick {
        return None;
    }
    let text = server.client.get_text("/metrics").await.ok()?;
    let counter = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    Some((
        counter("wick_spec_drafted_tokens_total")?,
        counter("wick_spec_accepted_tokens_total")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edit_task_holds_the_code_and_both_tasks_are_greedy() {
        let edit = edit_request(400);
        let prompt = edit["messages"][0]["content"].as_str().unwrap();
        assert!(prompt.contains(CODE));
        assert!(prompt.contains("order_total"));
        for request in [edit, free_request(400)] {
            assert_eq!(request["temperature"], 0.0, "only greedy answers speculate");
            assert_eq!(request["max_tokens"], 400);
        }
    }

    #[test]
    fn each_side_turns_on_its_own_prompt_lookup() {
        assert_eq!(flags(Side::Wick), ["--spec", "ngram", "--spec-max", "8"]);
        assert_eq!(flags(Side::LlamaCpp), ["--spec-type", "ngram-mod"]);
        assert_eq!(off_flags(), ["--spec", "off"]);
    }

    #[test]
    fn speedup_and_acceptance_are_ratios_or_nothing() {
        let task = Task {
            off_tps: 100.0,
            on_tps: 150.0,
            drafted: 40,
            accepted: 30,
            ..Task::default()
        };
        assert!((task.speedup().unwrap() - 1.5).abs() < 1e-12);
        assert!((task.acceptance().unwrap() - 0.75).abs() < 1e-12);
        assert_eq!(Task::default().speedup(), None);
        assert_eq!(Task::default().acceptance(), None);
    }
}
