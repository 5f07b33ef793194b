//! Issue 15, `wick serve` as an attacker and an impatient operator meet it: slow clients,
//! DNS rebinding, cross-origin `text/plain` posts, CORS preflights with a key, and a SIGTERM
//! whose grace period runs out. A real process on the real model.

mod serve_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};
use serve_util::{client, Server};

/// A chat request that cannot end early: end-of-generation tokens are banned.
fn endless(stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": "Tell me a very long story."}],
           "max_tokens": 3000, "temperature": 0, "stream": stream,
           "logit_bias": {"0": -100, "1": -100, "2": -100}})
}

/// The port of `server`'s base URL.
fn addr(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_owned()
}

#[test]
fn slow_clients_are_dropped_and_others_are_served() {
    let server = Server::start(&["--header-timeout", "1", "--max-connections", "3"]);
    // Three connections that never finish their headers take every connection slot.
    let slow: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(addr(&server)).unwrap();
            s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            s
        })
        .collect();
    // A well-behaved client waits for a slot, and is served once the slow ones are gone.
    let health = server.url("/health");
    let waiting = std::thread::spawn(move || client().get(health).send().unwrap().status());
    // The server closes each slow connection once its header deadline passes.
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut rest = Vec::new();
        let closed = match s.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(closed, "a slow client's connection is closed");
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            !rest.contains(" 200 "),
            "a slow client is not answered: {rest}"
        );
    }
    assert_eq!(waiting.join().unwrap().as_u16(), 200);
}

#[test]
fn a_loopback_server_answers_only_to_loopback_host_names() {
    let server = Server::start(&["--allow-host", "wick.internal"]);
    let get = |host: &str| {
        client()
            .get(server.url("/v1/models"))
            .header("host", host)
            .send()
            .unwrap()
    };
    for ok in ["localhost", "127.0.0.1:8080", "wick.internal:80"] {
        assert_eq!(get(ok).status().as_u16(), 200, "{ok}");
    }
    let r = get("attacker.example:8080");
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
}

#[test]
fn a_text_plain_post_is_refused_with_415_before_anything_runs() {
    let server = Server::start(&[]);
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let r = client()
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "text/plain;charset=UTF-8")
        .header("origin", "http://attacker.example")
        .body(body.to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let error: Value = r.json().unwrap();
    assert_eq!(error["error"]["code"], "unsupported_media_type", "{error}");
    let metrics = server.metrics_when(|_| true);
    assert!(
        metrics.contains("wick_completion_tokens_total 0"),
        "nothing was generated: {metrics}"
    );
}

#[test]
fn a_cors_preflight_with_a_key_lists_authorization_and_401s_say_bearer() {
    let server = Server::start(&["--api-key", "sekrit", "--cors-origin", "http://app.example"]);
    let r = client()
        .request(reqwest::Method::OPTIONS, server.url("/v1/chat/completions"))
        .header("origin", "http://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let allowed = r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
    assert_ne!(allowed.trim(), "*");
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://app.example"
    );

    let r = client().get(server.url("/v1/models")).send().unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    // The scheme is case-insensitive.
    let r = client()
        .get(server.url("/v1/models"))
        .header("authorization", "bearer sekrit")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[test]
fn sigterm_past_the_grace_period_ends_streams_with_an_error_and_done_and_queued_get_503() {
    let mut server = Server::start(&["--shutdown-timeout", "1", "--parallel", "1"]);
    let r = client()
        .post(server.url("/v1/chat/completions"))
        .json(&endless(true))
        .send()
        .unwrap();
    let mut live = BufReader::new(r);
    let mut first = String::new();
    live.read_line(&mut first).unwrap();
    assert!(first.starts_with("data: "), "{first}");
    // A second request waits for the only sequence.
    let queued_url = server.url("/v1/chat/completions");
    let queued = std::thread::spawn(move || {
        let r = client()
            .post(queued_url)
            .json(&endless(false))
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap())
    });
    let metrics = server.metrics_when(|m| m.contains("wick_queue_depth 1"));
    assert!(metrics.contains("wick_queue_depth 1"), "{metrics}");

    let killed = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = String::new();
    live.read_to_string(&mut rest).unwrap();
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    let frames: Vec<&str> = rest.split_terminator("\n\n").collect();
    let error = frames
        .iter()
        .rev()
        .nth(1)
        .and_then(|e| e.strip_prefix("data: "))
        .and_then(|e| serde_json::from_str::<Value>(e).ok())
        .expect("an error event before [DONE]");
    assert_eq!(error["error"]["code"], "server_shutting_down", "{error}");

    let (status, body) = queued.join().unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "server_shutting_down", "{body}");
    assert!(server.wait().success());
}
