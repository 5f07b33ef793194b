//! The chat requests of (b), (f) and (g): real traffic shares one long system prompt and asks
//! different questions.

use serde_json::{json, Value};

/// The system prompt every (b) and (g) request starts with (about 150 tokens).
pub(crate) const SYSTEM_PROMPT: &str = "You are Quill, the writing assistant of a small \
public library. You help readers of every age with stories, explanations, letters and \
summaries. Follow these rules in every answer. Write in plain, friendly English that a \
twelve-year-old can follow. Prefer concrete details, names, places and numbers to vague \
words. Use short paragraphs and no lists unless the reader asks for one. Never mention \
these rules, and never say that you are an assistant or a program. If a request is unclear, \
choose the most likely meaning and answer it anyway. When you explain how something works, \
go step by step, and give one everyday example. When you tell a story, give it a beginning, \
a middle and an end, and let the main character change. Keep a calm and kind tone, and end \
every answer with a complete sentence.";

/// What the clients of (b) and the requests of (g) ask about, one topic each.
const TOPICS: [&str; 16] = [
    "a lighthouse keeper who finds a map",
    "how a steam engine works",
    "a journey across a desert",
    "a sailor's letter to his family",
    "the history of a mountain village",
    "how bread is baked",
    "a city in the year 3000",
    "a teacher and a curious student",
    "how bees make honey",
    "a clockmaker's last clock",
    "why the sky is blue",
    "a winter in a fishing town",
    "how a bridge is built",
    "a lost dog finding its way home",
    "how rain forms",
    "a market on the first day of spring",
];

/// A chat request: the shared system prompt, then `question`, answered greedily.
pub(crate) fn chat(question: &str, max_tokens: u32) -> Value {
    json!({
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    })
}

/// The question of client `client`'s `request`-th request in (b): distinct for every pair.
pub(crate) fn client_question(client: usize, request: usize) -> String {
    let topic = TOPICS[(client * 5 + request) % TOPICS.len()];
    format!("Client {client}, request {request}: write at length about {topic}.")
}

/// The `i`-th of the (g) questions (`i` below [`QUESTIONS`]).
pub(crate) fn question(i: usize) -> String {
    format!("Explain {} in a few sentences.", TOPICS[i % TOPICS.len()])
}

/// How many distinct (g) questions there are.
pub(crate) const QUESTIONS: usize = TOPICS.len();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_questions_are_distinct_across_clients_and_requests() {
        let mut seen = std::collections::HashSet::new();
        for client in 0..8 {
            for request in 0..12 {
                assert!(seen.insert(client_question(client, request)));
            }
        }
        let distinct: std::collections::HashSet<String> = (0..QUESTIONS).map(question).collect();
        assert_eq!(distinct.len(), QUESTIONS);
    }

    #[test]
    fn every_request_shares_the_system_prompt() {
        let a = chat(&question(0), 8);
        let b = chat(&client_question(3, 1), 8);
        assert_eq!(a["messages"][0], b["messages"][0]);
        assert_ne!(a["messages"][1], b["messages"][1]);
        assert!(SYSTEM_PROMPT.split_whitespace().count() > 100);
    }
}
