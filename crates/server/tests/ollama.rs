//! The Ollama routes over the stub backend, driven with `oneshot`: chat and generate shapes,
//! NDJSON streaming (every line parses, the last says `done: true` with counts and
//! durations), streamed = whole, stream on by default, `format`, `options` and `num_ctx`,
//! embeddings, the model routes, and errors in Ollama's shape (`{"error": "…"}`).

mod common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use common::{post_json, send, stub_state};
use serde_json::{json, Value};
use tower::ServiceExt;
use wick_server::{router, AppState, ServerConfig};

fn state_with(config: ServerConfig, n_ctx: u32, max_new_tokens: u32) -> AppState {
    stub_state(config, n_ctx, max_new_tokens, &[])
}

fn app() -> Router {
    router(state_with(ServerConfig::default(), 512, 24))
}

fn request(method: Method, path: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn get_json(app: Router, path: &str) -> (StatusCode, Value) {
    let req = Request::get(path).body(Body::empty()).unwrap();
    let (status, _, text) = send(app, req).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn chat_body(extra: &Value) -> Value {
    let mut body = json!({
        "model": "stub",
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "options": {"temperature": 0, "seed": 1, "num_predict": 24},
        "stream": false,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Asserts an Ollama error body: `{"error": "<non-empty>"}` and nothing else.
fn assert_ollama_error(body: &Value) -> &str {
    let object = body.as_object().expect("an object");
    assert_eq!(object.len(), 1, "{body}");
    let message = body["error"].as_str().expect("error is a string");
    assert!(!message.is_empty(), "{body}");
    message
}

/// The NDJSON lines of a stream, each parsed; every line but the last says `done: false`.
fn lines(text: &str) -> Vec<Value> {
    assert!(text.ends_with('\n'), "{text:?}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let (last, rest) = lines.split_last().expect("at least one line");
    assert_eq!(last["done"], true, "{text}");
    for line in rest {
        assert_eq!(line["done"], false, "{text}");
    }
    lines
}

fn assert_stats(last: &Value) {
    assert!(
        ["stop", "length"].contains(&last["done_reason"].as_str().unwrap()),
        "{last}"
    );
    for field in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(last[field].is_u64(), "{field}: {last}");
    }
    assert!(last["prompt_eval_count"].as_u64().unwrap() > 0, "{last}");
    assert!(last["eval_count"].as_u64().unwrap() > 0, "{last}");
    assert!(last["total_duration"].as_u64().unwrap() > 0, "{last}");
    let created = last["created_at"].as_str().unwrap();
    assert!(
        created.len() == 27 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "{created}"
    );
}

#[tokio::test]
async fn a_chat_is_an_ollama_message_with_counts_and_durations() {
    let (status, body) = post_json(app(), "/api/chat", &chat_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model"], "stub");
    assert_eq!(body["done"], true);
    assert_eq!(body["message"]["role"], "assistant");
    assert!(!body["message"]["content"].as_str().unwrap().is_empty());
    assert!(body["message"].get("tool_calls").is_none(), "{body}");
    assert_stats(&body);
    assert!(body["eval_count"].as_u64().unwrap() <= 24, "{body}");
}

#[tokio::test]
async fn a_chat_streams_ndjson_by_default_and_equals_the_whole_answer() {
    let app = app();
    let (status, whole) = post_json(app.clone(), "/api/chat", &chat_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let mut body = chat_body(&json!({}));
    body.as_object_mut().unwrap().remove("stream");
    let (status, headers, text) = send(app, request(Method::POST, "/api/chat", &body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(headers[header::CONTENT_TYPE], "application/x-ndjson");
    let lines = lines(&text);
    assert!(lines.len() > 2, "{text}");
    let mut content = String::new();
    for line in &lines {
        assert_eq!(line["model"], "stub");
        assert_eq!(line["message"]["role"], "assistant");
        content.push_str(line["message"]["content"].as_str().unwrap());
    }
    assert_eq!(content, whole["message"]["content"].as_str().unwrap());
    let last = lines.last().unwrap();
    assert_stats(last);
    assert_eq!(last["message"]["content"], "");
    assert_eq!(last["done_reason"], whole["done_reason"]);
    assert_eq!(last["eval_count"], whole["eval_count"]);
}

#[tokio::test]
async fn generate_answers_whole_and_streamed_alike_raw_or_templated() {
    let app = app();
    for extra in [
        json!({"system": "Be brief."}),
        json!({"raw": true, "prompt": "<|im_start|>user\nHi<|im_end|>\n"}),
    ] {
        let mut body = json!({"model": "stub", "prompt": "Tell me about the sea.",
                              "options": {"temperature": 0, "num_predict": 16}});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, headers, text) =
            send(app.clone(), request(Method::POST, "/api/generate", &body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/x-ndjson");
        let lines = lines(&text);
        let streamed: String = lines
            .iter()
            .map(|l| l["response"].as_str().unwrap())
            .collect();
        assert_stats(lines.last().unwrap());
        body["stream"] = json!(false);
        let (status, whole) = post_json(app.clone(), "/api/generate", &body).await;
        assert_eq!(status, StatusCode::OK, "{whole}");
        assert_eq!(whole["done"], true);
        assert!(whole.get("message").is_none(), "{whole}");
        assert_eq!(whole["response"].as_str().unwrap(), streamed, "{extra}");
        assert_eq!(whole["eval_count"], lines.last().unwrap()["eval_count"]);
        assert!(whole["eval_count"].as_u64().unwrap() <= 16, "{whole}");
        assert_stats(&whole);
    }
}

#[tokio::test]
async fn an_empty_prompt_or_no_messages_only_loads_the_model() {
    let (status, body) = post_json(app(), "/api/generate", &json!({"model": "stub"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["done"], true);
    assert_eq!(body["response"], "");
    assert_eq!(body["done_reason"], "load");
    let (status, body) = post_json(
        app(),
        "/api/chat",
        &json!({"model": "stub", "messages": []}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["done_reason"], "load");
    assert_eq!(body["message"]["content"], "");
}

#[tokio::test]
async fn format_reaches_the_grammar_a_schema_holds_the_answer_to() {
    // The stub's grammars are enums of strings; the real model's test checks `"json"`.
    let schema = json!({"enum": ["a", "b"]});
    let body = chat_body(&json!({"format": schema, "options": {"num_predict": 20}}));
    let (status, body) = post_json(app(), "/api/chat", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let content = body["message"]["content"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(content).unwrap();
    assert!(parsed == "a" || parsed == "b", "{content}");
    // `"json"` is the `{"type": "object"}` grammar, which the stub refuses as a grammar.
    let body = chat_body(&json!({"format": "json"}));
    let (status, body) = post_json(app(), "/api/chat", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(assert_ollama_error(&body).contains("grammar"), "{body}");
}

#[tokio::test]
async fn tools_and_a_tool_round_trip_in_history_are_taken() {
    let body = chat_body(&json!({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "think": false,
        "keep_alive": "5m",
    }));
    let (status, body) = post_json(app(), "/api/chat", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["done"], true);
    if let Some(calls) = body["message"].get("tool_calls") {
        for call in calls.as_array().unwrap() {
            assert!(call["function"]["arguments"].is_object(), "{body}");
        }
    }
}

#[tokio::test]
async fn options_beyond_the_context_and_out_of_range_are_ollama_400s() {
    let cases = [
        (json!({"options": {"num_ctx": 100_000}}), "num_ctx"),
        (json!({"options": {"temperature": -1}}), "temperature"),
        (json!({"options": {"num_predict": 0}}), "num_predict"),
        (json!({"format": "yaml"}), "format"),
        (json!({"think": "maybe"}), "think"),
        (
            json!({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}),
            "no projector",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi", "images": [7]}]}),
            "images[0] must be a base64 string",
        ),
        (json!({"options": {"temperature": "hot"}}), "temperature"),
    ];
    for (extra, word) in cases {
        let (status, body) = post_json(app(), "/api/chat", &chat_body(&extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        let message = assert_ollama_error(&body);
        assert!(message.contains(word), "{extra}: {message}");
    }
    // num_ctx within the server's context, and unknown options, are accepted.
    let body = chat_body(&json!({"options": {"num_ctx": 512, "mirostat": 1, "num_gpu": 99}}));
    let (status, body) = post_json(app(), "/api/chat", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn generate_refuses_what_wick_cannot_do_with_a_reason() {
    for (extra, word) in [
        (json!({"suffix": "return x"}), "fill-in-the-middle"),
        (json!({"template": "{{ .Prompt }}"}), "template"),
        (json!({"context": [1, 2, 3]}), "context"),
        (json!({"images": ["aGk="]}), "no projector"),
        (json!({"images": ["aGk="], "raw": true}), "takes no images"),
    ] {
        let mut body = json!({"model": "stub", "prompt": "def f(x):", "stream": false});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, body) = post_json(app(), "/api/generate", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        let message = assert_ollama_error(&body);
        assert!(message.contains(word), "{extra}: {message}");
    }
}

#[tokio::test]
async fn errors_on_api_routes_take_ollamas_shape() {
    // An unknown model: 404, said as Ollama says it.
    let (status, body) = post_json(
        router(state_with(
            ServerConfig {
                strict_model_names: true,
                ..ServerConfig::default()
            },
            512,
            24,
        )),
        "/api/chat",
        &chat_body(&json!({"model": "llama3:8b"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let message = assert_ollama_error(&body);
    assert!(
        message.starts_with("model \"llama3:8b\" not found"),
        "{message}"
    );
    // The `:latest` tag may be added to a served name.
    let (status, body) = post_json(
        app(),
        "/api/chat",
        &chat_body(&json!({"model": "stub:latest"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Not JSON, no route, a wrong method, a wrong key: all `{"error"}`.
    let req = Request::post("/api/chat")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    let (status, _, text) = send(app(), req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_ollama_error(&serde_json::from_str(&text).unwrap());
    let (status, body) = get_json(app(), "/api/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_ollama_error(&body);
    let (status, body) = get_json(app(), "/api/chat").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_ollama_error(&body);
    let keyed = router(state_with(
        ServerConfig {
            api_key: Some("k".into()),
            ..ServerConfig::default()
        },
        512,
        24,
    ));
    let (status, body) = get_json(keyed, "/api/tags").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_ollama_error(&body);
    // Before the models are loaded: 503.
    let loading = router(AppState::new(ServerConfig::default()));
    let (status, body) = post_json(loading, "/api/chat", &chat_body(&json!({}))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_ollama_error(&body);
}

#[tokio::test]
async fn embed_and_embeddings_return_vectors() {
    let (status, body) = post_json(
        app(),
        "/api/embed",
        &json!({"model": "stub", "input": ["the sea", "the sky"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model"], "stub");
    let vectors = body["embeddings"].as_array().unwrap();
    assert_eq!(vectors.len(), 2);
    assert!(!vectors[0].as_array().unwrap().is_empty());
    assert_ne!(vectors[0], vectors[1]);
    assert!(body["prompt_eval_count"].as_u64().unwrap() > 0);
    assert!(body["total_duration"].is_u64());
    let (status, one) = post_json(
        app(),
        "/api/embed",
        &json!({"model": "stub", "input": "the sea"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["embeddings"][0], vectors[0]);
    let (status, legacy) = post_json(
        app(),
        "/api/embeddings",
        &json!({"model": "stub", "prompt": "the sea"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{legacy}");
    assert_eq!(legacy["embedding"], vectors[0]);
    let (status, body) = post_json(
        app(),
        "/api/embed",
        &json!({"model": "stub", "input": "x", "dimensions": 8}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_ollama_error(&body);
}

#[tokio::test]
async fn tags_ps_show_and_version_describe_the_served_model() {
    let (status, tags) = get_json(app(), "/api/tags").await;
    assert_eq!(status, StatusCode::OK, "{tags}");
    let model = &tags["models"][0];
    assert_eq!(model["name"], "stub");
    assert_eq!(model["model"], "stub");
    assert!(model["size"].as_u64().unwrap() > 0, "{model}");
    assert_eq!(model["details"]["format"], "gguf");
    assert_eq!(model["details"]["family"], "stub");
    assert!(model["modified_at"].as_str().unwrap().ends_with('Z'));

    let (status, ps) = get_json(app(), "/api/ps").await;
    assert_eq!(status, StatusCode::OK, "{ps}");
    let model = &ps["models"][0];
    assert_eq!(model["name"], "stub");
    assert_eq!(model["context_length"], 512);
    assert_eq!(model["size_vram"], 0);
    assert!(model["expires_at"].as_str().unwrap().ends_with('Z'));

    let (status, show) = post_json(app(), "/api/show", &json!({"model": "stub"})).await;
    assert_eq!(status, StatusCode::OK, "{show}");
    assert_eq!(show["model_info"]["general.architecture"], "stub");
    assert!(show["model_info"]["stub.context_length"].is_u64(), "{show}");
    assert!(show["template"].as_str().unwrap().contains("message"));
    assert_eq!(show["details"]["format"], "gguf");
    assert_eq!(show["capabilities"][0], "completion");
    assert!(show["modelfile"].as_str().unwrap().contains("FROM"));
    assert_eq!(show["parameters"], "num_ctx 512");
    let strict = router(state_with(
        ServerConfig {
            strict_model_names: true,
            ..ServerConfig::default()
        },
        512,
        24,
    ));
    let (status, body) = post_json(strict, "/api/show", &json!({"model": "nope"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_ollama_error(&body);

    let (status, version) = get_json(app(), "/api/version").await;
    assert_eq!(status, StatusCode::OK);
    assert!(version["version"].as_str().is_some_and(|v| !v.is_empty()));
    for method in [Method::GET, Method::HEAD] {
        let req = Request::builder()
            .method(method.clone())
            .uri("/")
            .body(Body::empty())
            .unwrap();
        let (status, _, text) = send(app(), req).await;
        assert_eq!(status, StatusCode::OK, "{method}");
        if method == Method::GET {
            assert_eq!(text, "Ollama is running");
        }
    }
}

#[tokio::test]
async fn a_streamed_pull_reports_the_download_as_it_goes() {
    let home = tempfile::tempdir().unwrap();
    let state = state_with(ServerConfig::default(), 512, 24);
    let store = wick::models::ModelStore::new(wick::models::Settings::new(home.path())).unwrap();
    state.set_model_store(store);
    let app = router(state);
    // A download server on 127.0.0.1, sending the file in pieces.
    let hub = wick_testutil::FakeHub::start();
    let bytes = wick_testutil::synthetic_gguf(4 << 20, "llama", 15, 0);
    let size = bytes.len() as u64;
    hub.add_file("org/tiny", "tiny.gguf", bytes);
    let url = hub.file_url("org/tiny", "tiny.gguf");

    let (status, _, text) = send(
        app.clone(),
        request(Method::POST, "/api/pull", &json!({"model": url})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let digest_at = lines
        .iter()
        .position(|l| l.get("digest").is_some())
        .expect("a digest line");
    let progress: Vec<&Value> = lines[..digest_at]
        .iter()
        .filter(|l| l.get("completed").is_some())
        .collect();
    // At the start, each hundredth, the end: the bytes so far out of the file's size.
    assert!(progress.len() > 10, "{text}");
    assert_eq!(progress[0]["completed"], 0, "{text}");
    assert_eq!(progress[0]["status"], "pulling tiny");
    let completed: Vec<u64> = progress
        .iter()
        .map(|l| l["completed"].as_u64().unwrap())
        .collect();
    assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");
    assert!(progress.iter().all(|l| l["total"] == size), "{text}");
    assert_eq!(*completed.last().unwrap(), size);
    assert_eq!(lines[digest_at]["total"], size);
    assert_eq!(lines.last().unwrap()["status"], "success", "{text}");
}

#[tokio::test]
async fn pull_and_delete_go_through_the_model_store() {
    let home = tempfile::tempdir().unwrap();
    let state = state_with(ServerConfig::default(), 512, 24);
    let store = wick::models::ModelStore::new(wick::models::Settings::new(home.path())).unwrap();
    state.set_model_store(store);
    let app = router(state);
    let file = home.path().join("tiny.gguf");
    std::fs::write(
        &file,
        wick_testutil::synthetic_gguf(2 << 20, "llama", 15, 0),
    )
    .unwrap();
    let path = file.to_str().unwrap();

    let (status, headers, text) = send(
        app.clone(),
        request(Method::POST, "/api/pull", &json!({"model": path})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(headers[header::CONTENT_TYPE], "application/x-ndjson");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["status"], "success", "{text}");
    let with_digest = lines.iter().find(|l| l.get("digest").is_some()).unwrap();
    assert!(with_digest["digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(with_digest["total"], with_digest["completed"]);

    // A bad reference fails before the stream; a missing file fails inside it.
    let (status, body) = post_json(app.clone(), "/api/pull", &json!({"model": "what?"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_ollama_error(&body);
    let missing = home.path().join("missing.gguf");
    let (status, _, text) = send(
        app.clone(),
        request(
            Method::POST,
            "/api/pull",
            &json!({"model": missing.to_str().unwrap()}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_ollama_error(&last);

    let (status, _, text) = send(
        app.clone(),
        request(Method::DELETE, "/api/delete", &json!({"model": "tiny"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, _, text) = send(
        app,
        request(Method::DELETE, "/api/delete", &json!({"model": "tiny"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert_ollama_error(&serde_json::from_str(&text).unwrap());
}

#[tokio::test]
async fn a_stream_cut_by_shutdown_ends_with_an_error_line() {
    let state = state_with(ServerConfig::default(), 512, 400);
    let body = chat_body(&json!({"stream": true, "options": {"num_predict": 400}}));
    let response = router(state.clone())
        .oneshot(request(Method::POST, "/api/chat", &body))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    state.cancel_all();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let message = assert_ollama_error(&last);
    assert!(message.contains("shutting down"), "{message}");
}
