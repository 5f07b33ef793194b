//! Models loaded on demand, on the stub backend: one load for a burst, a failed load's error to
//! every waiting request, idle unloads, `max_loaded` switching without a failed request,
//! pinning, Ollama's `keep_alive`, llama-server's `/models/load` and `/models/unload`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::post_json;
use serde_json::{json, Value};
use wick::{BackendConfig, Llm, StubBackend};
use wick_server::{router, AppState, KeepAlive, ModelSpec, ModelStatus, PoolConfig, ServerConfig};

/// A loader of a stub model that counts its loads, takes `delay` and fails when `fail`.
fn stub_spec(id: &str, loads: &Arc<AtomicUsize>, delay: Duration, fail: bool) -> ModelSpec {
    let loads = loads.clone();
    ModelSpec {
        id: id.to_owned(),
        aliases: vec![format!("{id}-alias")],
        tags: vec!["test".to_owned()],
        path: None,
        bytes: 100,
        pinned: false,
        keep_alive: None,
        load: Arc::new(move || {
            loads.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(delay);
            if fail {
                return Err("the file is not a GGUF model".to_owned());
            }
            let backend = StubBackend::new(&BackendConfig::new("stub").with_n_ctx(256))
                .map_err(|e| e.to_string())?;
            Llm::from_backend(Box::new(backend), Llm::builder().max_new_tokens(4))
                .map_err(|e| e.to_string())
        }),
    }
}

fn state_with(models: PoolConfig, specs: Vec<ModelSpec>) -> AppState {
    let state = AppState::new(ServerConfig {
        models,
        router: true,
        ..ServerConfig::default()
    });
    for spec in specs {
        state.add_model_spec(spec);
    }
    state.set_ready();
    state
}

fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
}

fn status_of(state: &AppState, id: &str) -> ModelStatus {
    state
        .listings()
        .into_iter()
        .find(|m| m.id == id)
        .expect("listed")
        .status
}

/// Polls until `id` reaches `want` (bounded: 10 s); the last status seen.
async fn wait_status(state: &AppState, id: &str, want: &ModelStatus) -> ModelStatus {
    let mut last = status_of(state, id);
    for _ in 0..200 {
        if &last == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = status_of(state, id);
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_requests_loads_the_model_once_and_all_are_answered() {
    let loads = Arc::new(AtomicUsize::new(0));
    let spec = stub_spec("a", &loads, Duration::from_millis(300), false);
    let state = state_with(PoolConfig::default(), vec![spec]);
    assert_eq!(status_of(&state, "a"), ModelStatus::Unloaded);
    let app = router(state.clone());
    let requests = (0..8).map(|i| {
        let app = app.clone();
        // Some by id, some by alias.
        let name = if i % 2 == 0 { "a" } else { "a-alias" };
        tokio::spawn(async move { post_json(app, "/v1/chat/completions", &chat(name)).await })
    });
    for request in requests.collect::<Vec<_>>() {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["model"], "a");
    }
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(status_of(&state, "a"), ModelStatus::Loaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_is_every_waiting_requests_error_and_the_next_request_tries_again() {
    let loads = Arc::new(AtomicUsize::new(0));
    let spec = stub_spec("broken", &loads, Duration::from_millis(200), true);
    let state = state_with(PoolConfig::default(), vec![spec]);
    let app = router(state.clone());
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(
                async move { post_json(app, "/v1/chat/completions", &chat("broken")).await },
            )
        })
        .collect();
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_eq!(body["error"]["code"], "model_load_failed");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("`broken`"), "{message}");
        assert!(message.contains("not a GGUF model"), "{message}");
    }
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(
        status_of(&state, "broken"),
        ModelStatus::Failed("the file is not a GGUF model".into())
    );
    let (_, listed) = get_json(&app, "/v1/models").await;
    assert_eq!(listed["data"][0]["status"]["value"], "failed");
    assert_eq!(
        listed["data"][0]["status"]["reason"],
        "the file is not a GGUF model"
    );
    // Ollama's routes say it in their shape too.
    let (status, body) = post_json(
        app.clone(),
        "/api/chat",
        &json!({"model": "broken", "stream": false, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body["error"].as_str().unwrap().contains("not a GGUF model"),
        "{body}"
    );
    assert_eq!(loads.load(Ordering::SeqCst), 2);
}

async fn get_json(app: &axum::Router, path: &str) -> (StatusCode, Value) {
    let (status, _, text) =
        common::send(app.clone(), Request::get(path).body(Body::empty()).unwrap()).await;
    (status, common::json_of(&text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_model_unloads_after_its_keep_alive_and_loads_again_when_asked() {
    let loads = Arc::new(AtomicUsize::new(0));
    let spec = stub_spec("a", &loads, Duration::ZERO, false);
    let config = PoolConfig {
        keep_alive: KeepAlive::For(Duration::from_millis(100)),
        ..PoolConfig::default()
    };
    let state = state_with(config, vec![spec]);
    let app = router(state.clone());
    let (status, _) = post_json(app.clone(), "/v1/chat/completions", &chat("a")).await;
    assert_eq!(status, StatusCode::OK);
    let seen = wait_status(&state, "a", &ModelStatus::Unloaded).await;
    assert_eq!(seen, ModelStatus::Unloaded);
    let (status, _) = post_json(app, "/v1/chat/completions", &chat("a")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(loads.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_model_at_a_time_switches_back_and_forth_without_a_failed_request() {
    let loads = Arc::new(AtomicUsize::new(0));
    let specs = vec![
        stub_spec("a", &loads, Duration::from_millis(20), false),
        stub_spec("b", &loads, Duration::from_millis(20), false),
    ];
    let config = PoolConfig {
        max_loaded: Some(1),
        ..PoolConfig::default()
    };
    let state = state_with(config, specs);
    let app = router(state.clone());
    // Interleaved and concurrent: each waits for the other model to go idle.
    let requests: Vec<_> = (0..12)
        .map(|i| {
            let app = app.clone();
            let name = if i % 2 == 0 { "a" } else { "b" };
            tokio::spawn(async move {
                (
                    name,
                    post_json(app, "/v1/chat/completions", &chat(name)).await,
                )
            })
        })
        .collect();
    for request in requests {
        let (name, (status, body)) = request.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["model"], name);
    }
    let loaded = state.listings().iter().filter(|m| m.llm.is_some()).count();
    assert_eq!(loaded, 1);
    assert!(loads.load(Ordering::SeqCst) >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_with_a_request_in_flight_is_never_unloaded_for_room() {
    let loads = Arc::new(AtomicUsize::new(0));
    let specs = vec![
        stub_spec("a", &loads, Duration::ZERO, false),
        stub_spec("b", &loads, Duration::ZERO, false),
    ];
    let config = PoolConfig {
        max_loaded: Some(1),
        ..PoolConfig::default()
    };
    let state = state_with(config, specs);
    let held = state.model(Some("a")).await.unwrap();
    let app = router(state.clone());
    let waiting =
        tokio::spawn(async move { post_json(app, "/v1/chat/completions", &chat("b")).await });
    // While `a` is held, `b` waits for room: it neither fails nor evicts `a`.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished());
    assert_eq!(status_of(&state, "a"), ModelStatus::Loaded);
    assert_eq!(status_of(&state, "b"), ModelStatus::Loading);
    drop(held);
    let (status, body) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(status_of(&state, "a"), ModelStatus::Unloaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_model_stays_and_a_load_that_can_never_fit_says_why() {
    let loads = Arc::new(AtomicUsize::new(0));
    let mut pinned = stub_spec("a", &loads, Duration::ZERO, false);
    pinned.pinned = true;
    let specs = vec![pinned, stub_spec("b", &loads, Duration::ZERO, false)];
    let config = PoolConfig {
        max_loaded: Some(1),
        keep_alive: KeepAlive::For(Duration::ZERO),
        ..PoolConfig::default()
    };
    let state = state_with(config, specs);
    let app = router(state.clone());
    let (status, _) = post_json(app.clone(), "/v1/chat/completions", &chat("a")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = post_json(app, "/v1/chat/completions", &chat("b")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--max-loaded 1"), "{message}");
    assert!(message.contains("pinned"), "{message}");
    // Keep-alive zero, yet pinned: still loaded.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_of(&state, "a"), ModelStatus::Loaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_unloads_the_least_recently_used_and_refuses_what_never_fits() {
    let loads = Arc::new(AtomicUsize::new(0));
    let mut huge = stub_spec("huge", &loads, Duration::ZERO, false);
    huge.bytes = 1000;
    let specs = vec![
        stub_spec("a", &loads, Duration::ZERO, false),
        stub_spec("b", &loads, Duration::ZERO, false),
        stub_spec("c", &loads, Duration::ZERO, false),
        huge,
    ];
    // Room for two of the 100-byte models.
    let config = PoolConfig {
        memory: Some(250),
        ..PoolConfig::default()
    };
    let state = state_with(config, specs);
    let app = router(state.clone());
    for name in ["a", "b", "a", "c"] {
        let (status, body) = post_json(app.clone(), "/v1/chat/completions", &chat(name)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // `b` was used least recently when `c` needed room.
    assert_eq!(status_of(&state, "a"), ModelStatus::Loaded);
    assert_eq!(status_of(&state, "b"), ModelStatus::Unloaded);
    assert_eq!(status_of(&state, "c"), ModelStatus::Loaded);
    let (status, body) = post_json(app, "/v1/chat/completions", &chat("huge")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("memory budget"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollamas_keep_alive_loads_keeps_and_unloads() {
    let loads = Arc::new(AtomicUsize::new(0));
    let state = state_with(
        PoolConfig::default(),
        vec![stub_spec("a", &loads, Duration::ZERO, false)],
    );
    let app = router(state.clone());
    // An empty prompt loads; `-1` keeps it forever.
    let (status, body) = post_json(
        app.clone(),
        "/api/generate",
        &json!({"model": "a", "prompt": "", "keep_alive": -1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["done_reason"], "load");
    let listed = state.listings();
    assert_eq!(listed[0].status, ModelStatus::Loaded);
    assert_eq!(listed[0].expires_at, None);
    let (_, ps) = get_json(&app, "/api/ps").await;
    assert_eq!(ps["models"][0]["name"], "a");
    assert!(ps["models"][0]["expires_at"]
        .as_str()
        .unwrap()
        .starts_with("21"));
    // A duration sets when it expires.
    let (status, _) = post_json(
        app.clone(),
        "/api/chat",
        &json!({"model": "a", "stream": false, "keep_alive": "10m",
                "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let expires = state.listings()[0].expires_at.expect("expires");
    let left = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        left > Duration::from_secs(500) && left <= Duration::from_secs(600),
        "{left:?}"
    );
    // An empty prompt with `0` unloads.
    let (status, body) = post_json(
        app.clone(),
        "/api/generate",
        &json!({"model": "a", "keep_alive": 0}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["done_reason"], "unload");
    assert_eq!(
        wait_status(&state, "a", &ModelStatus::Unloaded).await,
        ModelStatus::Unloaded
    );
    let (_, ps) = get_json(&app, "/api/ps").await;
    assert_eq!(ps["models"], json!([]));
    // A bad value is a 400 naming the field.
    let (status, body) = post_json(
        app,
        "/api/generate",
        &json!({"model": "a", "prompt": "x", "keep_alive": "soon"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("keep_alive"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_servers_load_and_unload_routes_and_autoload_off() {
    let loads = Arc::new(AtomicUsize::new(0));
    let config = PoolConfig {
        autoload: false,
        max_loaded: Some(2),
        ..PoolConfig::default()
    };
    let state = state_with(
        config,
        vec![stub_spec("org/a", &loads, Duration::ZERO, false)],
    );
    let app = router(state.clone());
    let (status, props) = get_json(&app, "/props").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(props["role"], "router");
    assert_eq!(props["max_instances"], 2);
    assert_eq!(props["models_autoload"], false);
    // Not loaded, and requests do not load: a 400 that says how.
    let (status, body) = post_json(app.clone(), "/v1/chat/completions", &chat("org/a")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "model_not_loaded");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/models/load"));
    let (status, body) = post_json(app.clone(), "/models/load", &json!({"model": "org/a"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"success": true}));
    assert_eq!(
        wait_status(&state, "org/a", &ModelStatus::Loaded).await,
        ModelStatus::Loaded
    );
    // One model's properties, with whether its answers are bit-deterministic.
    let (status, props) = get_json(&app, "/props?model=org/a").await;
    assert_eq!(status, StatusCode::OK, "{props}");
    assert!(props["deterministic"].is_boolean(), "{props}");
    // A name with a slash works on every route: a model's own route too.
    let (status, body) = post_json(app.clone(), "/v1/chat/completions", &chat("org/a")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, one) = get_json(&app, "/v1/models/org/a").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["id"], "org/a");
    assert_eq!(one["status"]["value"], "loaded");
    assert_eq!(one["aliases"], json!(["org/a-alias"]));
    assert_eq!(one["tags"], json!(["test"]));
    let (status, _) = post_json(app.clone(), "/models/unload", &json!({"model": "org/a"})).await;
    assert_eq!(status, StatusCode::OK);
    // At once when idle; a request still ending on the engine is waited for.
    assert_eq!(
        wait_status(&state, "org/a", &ModelStatus::Unloaded).await,
        ModelStatus::Unloaded
    );
    let (status, body) = post_json(app.clone(), "/models/load", &json!({"model": "nope"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = post_json(app, "/models/load", &json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_starts_while_its_model_loads_and_a_failed_load_ends_it_cleanly() {
    let loads = Arc::new(AtomicUsize::new(0));
    let specs = vec![
        stub_spec("a", &loads, Duration::from_millis(200), false),
        stub_spec("broken", &loads, Duration::from_millis(200), true),
    ];
    let state = state_with(PoolConfig::default(), specs);
    let app = router(state.clone());
    let mut streamed = chat("a");
    streamed["stream"] = json!(true);
    let (status, headers, body) = common::send(
        app.clone(),
        common::post("/v1/chat/completions", streamed.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(body.contains("chat.completion.chunk"), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    // A load that fails after the stream began: its error event, then [DONE].
    streamed["model"] = json!("broken");
    let (status, _, body) = common::send(
        app.clone(),
        common::post("/v1/chat/completions", streamed.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<&str> = body
        .split_terminator("\n\n")
        .filter(|e| !e.starts_with(':'))
        .collect();
    assert_eq!(events.len(), 2, "{body}");
    let error: Value = serde_json::from_str(&events[0]["data: ".len()..]).unwrap();
    assert_eq!(error["error"]["code"], "model_load_failed");
    assert_eq!(events[1], "data: [DONE]");
    // An unknown model is still a 404 before any stream.
    streamed["model"] = json!("nope");
    let (status, _, _) = common::send(
        app,
        common::post("/v1/chat/completions", streamed.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
