//! LoRA adapters through `wick serve` on the real model (issue 17): `--lora FILE[:SCALE]`,
//! per-request `lora`, `GET`/`POST /lora-adapters`, requests under different adapters at once,
//! and a prompt cache that never hands one adapter's prefix to another.

mod serve_util;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use serve_util::{client, post_json, Server};

/// SmolLM2-135M: architecture `llama`, 30 layers of width 576.
fn write_adapter(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, wick_testutil::lora_adapter("llama", 30, 576, seed)).unwrap();
    path
}

/// Two adapters (different weights), loaded off: `--lora A:0 --lora B:0`.
fn server_with_adapters(dir: &Path) -> Server {
    let a = write_adapter(dir, "a.gguf", 1);
    let b = write_adapter(dir, "b.gguf", 2);
    Server::start(&[
        "--parallel",
        "4",
        "--lora",
        &format!("{}:0", a.display()),
        "--lora",
        &format!("{}:0", b.display()),
    ])
}

const PROMPT: &str = "Once upon a time, in a small village by the sea, there lived an old \
                      fisherman who every morning";

/// A greedy completion of `PROMPT` under `lora` (`None`: the server's defaults): the text and
/// how many prompt tokens came from the cache.
fn complete(server: &Server, lora: Option<Value>) -> (String, u64) {
    let mut body = json!({"prompt": PROMPT, "max_tokens": 16, "temperature": 0});
    if let Some(lora) = lora {
        body["lora"] = lora;
    }
    let (status, answer) = post_json(server, "/v1/completions", &body);
    assert_eq!(status, 200, "{answer}");
    (
        answer["choices"][0]["text"].as_str().unwrap().to_owned(),
        answer["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
    )
}

/// `GET /lora-adapters`.
fn adapters(server: &Server) -> Value {
    client()
        .get(server.url("/lora-adapters"))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

fn one(id: usize, scale: f64) -> Value {
    json!([{"id": id, "scale": scale}])
}

#[test]
fn adapters_are_listed_and_a_scale_picks_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_adapters(dir.path());
    let listed = adapters(&server);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["id"], 0);
    assert_eq!(listed[1]["id"], 1);
    assert!(listed[0]["path"].as_str().unwrap().ends_with("a.gguf"));
    assert_eq!(listed[0]["scale"], 0.0);

    let (base, _) = complete(&server, None);
    assert_eq!(
        complete(&server, Some(one(0, 0.0))).0,
        base,
        "scale 0 is the base model"
    );
    let (a, _) = complete(&server, Some(one(0, 8.0)));
    let (b, _) = complete(&server, Some(one(1, 8.0)));
    assert_ne!(a, base, "a strong adapter changes the greedy answer");
    assert_ne!(b, base);
    assert_ne!(a, b, "the two adapters differ");

    // POST sets the defaults a request without `lora` runs at; adapters left out are off.
    let (status, ok) = post_json(&server, "/lora-adapters", &one(0, 8.0));
    assert_eq!((status, &ok), (200, &json!({"success": true})));
    assert_eq!(complete(&server, None).0, a);
    let listed = adapters(&server);
    assert_eq!(listed[0]["scale"], 8.0);
    assert_eq!(listed[1]["scale"], 0.0);
    // A request's own list wins: here, nothing on.
    assert_eq!(complete(&server, Some(json!([]))).0, base);

    // Refusals name the field and change nothing.
    for bad in [
        json!({"id": 0}),
        json!([{"id": 7, "scale": 1.0}]),
        json!([{"id": -1, "scale": 1.0}]),
        json!([{"id": 0, "scale": "high"}]),
        // llama.cpp runs one adapter per request through llama-cpp-2.
        json!([{"id": 0, "scale": 1.0}, {"id": 1, "scale": 1.0}]),
    ] {
        let body = json!({"prompt": PROMPT, "max_tokens": 4, "lora": bad});
        let (status, err) = post_json(&server, "/v1/completions", &body);
        assert_eq!(status, 400, "{bad}: {err}");
        assert_eq!(err["error"]["param"], "lora", "{err}");
        let (status, _) = post_json(&server, "/lora-adapters", &bad);
        assert_eq!(status, 400, "{bad}");
    }
    assert_eq!(
        complete(&server, None).0,
        a,
        "the refused POSTs changed nothing"
    );

    // llama-server's native endpoint and chat take the same field.
    let (status, native) = post_json(
        &server,
        "/completion",
        &json!({"prompt": PROMPT, "n_predict": 16, "temperature": 0, "lora": one(1, 8.0)}),
    );
    assert_eq!(status, 200, "{native}");
    assert_eq!(native["content"], b.as_str());
    let chat = |lora: Value| {
        let body = json!({
            "messages": [{"role": "user", "content": "Tell me a story about the sea."}],
            "max_tokens": 12, "temperature": 0, "lora": lora,
        });
        let (status, answer) = post_json(&server, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{answer}");
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(chat(one(1, 8.0)), chat(json!([])));
}

#[test]
fn requests_under_different_adapters_at_once_each_get_their_solo_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_adapters(dir.path());
    let sets = [json!([]), one(0, 8.0), one(1, 8.0), one(0, 4.0)];
    let solo: Vec<String> = sets
        .iter()
        .map(|s| complete(&server, Some(s.clone())).0)
        .collect();
    for round in 0..2 {
        let together: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = sets
                .iter()
                .map(|s| scope.spawn(|| complete(&server, Some(s.clone())).0))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(together, solo, "round {round}");
    }
}

#[test]
fn a_prefix_computed_under_one_adapter_is_never_reused_under_another() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_adapters(dir.path());
    let (base, cached) = complete(&server, None);
    assert_eq!(cached, 0);
    let (warm_base, cached) = complete(&server, None);
    assert!(cached > 0, "the base prompt is reused under the base model");
    assert_eq!(warm_base, base);
    // The whole prompt is cached, but under no adapter: nothing of it may be reused.
    let (a, cached) = complete(&server, Some(one(0, 8.0)));
    assert_eq!(cached, 0, "a base prefix is not reused under an adapter");
    let (_, cached) = complete(&server, Some(one(0, 4.0)));
    assert_eq!(cached, 0, "nor one of another scale");
    let (again, cached) = complete(&server, Some(one(0, 8.0)));
    assert!(cached > 0, "the adapter's own prefix is reused");
    assert_eq!(again, a);
    // A fresh server computes the adapter's answer cold: the same text.
    let fresh = server_with_adapters(dir.path());
    let (cold, cached) = complete(&fresh, Some(one(0, 8.0)));
    assert_eq!(cached, 0);
    assert_eq!(cold, a, "warm or cold, the adapter's answer is the same");
}
