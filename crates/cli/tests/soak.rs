//! Issue 15's soak: 64 streaming clients for 30 s on the real model, a third of them hanging up
//! mid-stream, then SIGTERM. No errors but the documented 503s (queue full, shutting down),
//! every completed answer equal to the same request's answer alone, and the server's memory
//! flat after a warm-up.

mod serve_util;

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_util::{accumulate, client, sse_events, Server};

const CLIENTS: usize = 64;
const SOAK: Duration = Duration::from_secs(30);
const WARM_UP: Duration = Duration::from_secs(8);

const PROMPTS: &[&str] = &[
    "Name a fruit.",
    "What is the capital of France?",
    "Say hello in Spanish.",
    "Count to five.",
    "What color is the sky?",
    "Name a large animal.",
    "What is two plus two?",
    "Give me a word that rhymes with cat.",
];

fn body(prompt: &str) -> Value {
    json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 24,
           "temperature": 0, "stream": true})
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[derive(Default)]
struct Tally {
    completed: AtomicUsize,
    hung_up: AtomicUsize,
    busy: AtomicUsize,
    shutting_down: AtomicUsize,
}

/// One client: streams requests until `stop`; every third client hangs up after the first
/// chunk. Panics on anything but a documented outcome.
fn client_loop(server: &Server, n: usize, alone: &[String], stop: &AtomicBool, tally: &Tally) {
    let http = client();
    let mut k = n;
    while !stop.load(Ordering::SeqCst) {
        let p = k % PROMPTS.len();
        k += 1;
        let Ok(r) = http
            .post(server.url("/v1/chat/completions"))
            .json(&body(PROMPTS[p]))
            .send()
        else {
            // The listener is closed once the shutdown began.
            assert!(
                stop.load(Ordering::SeqCst),
                "client {n}: connection refused"
            );
            return;
        };
        let status = r.status().as_u16();
        if status == 503 {
            let error: Value = r.json().unwrap();
            match error["error"]["code"].as_str() {
                Some("busy") => tally.busy.fetch_add(1, Ordering::SeqCst),
                Some("server_shutting_down") => tally.shutting_down.fetch_add(1, Ordering::SeqCst),
                _ => panic!("client {n}: undocumented 503 {error}"),
            };
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        assert_eq!(status, 200, "client {n}");
        if n.is_multiple_of(3) {
            let mut reader = BufReader::new(r);
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            tally.hung_up.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        let text = r.text().unwrap();
        if text.contains("server_shutting_down") {
            tally.shutting_down.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let (content, finish) = accumulate(&sse_events(&text));
        assert!(!finish.is_null(), "client {n}: no finish_reason in {text}");
        assert_eq!(content, alone[p], "client {n}: {:?} under load", PROMPTS[p]);
        tally.completed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn soak_64_streaming_clients_a_third_hanging_up_then_sigterm() {
    let t0 = Instant::now();
    let mut server = Server::start(&["--parallel", "4", "--queue-size", "64"]);
    let alone: Vec<String> = PROMPTS
        .iter()
        .map(|p| {
            let text = client()
                .post(server.url("/v1/chat/completions"))
                .json(&body(p))
                .send()
                .unwrap()
                .text()
                .unwrap();
            accumulate(&sse_events(&text)).0
        })
        .collect();
    eprintln!("soak: solo answers after {:?}", t0.elapsed());
    let stop = AtomicBool::new(false);
    let tally = Tally::default();
    let pid = server.pid();
    let (warm, end) = std::thread::scope(|s| {
        for n in 0..CLIENTS {
            let (server, alone, stop, tally) = (&server, &alone, &stop, &tally);
            s.spawn(move || client_loop(server, n, alone, stop, tally));
        }
        let started = Instant::now();
        std::thread::sleep(WARM_UP);
        let warm = rss_kib(pid);
        std::thread::sleep(SOAK.saturating_sub(started.elapsed()));
        let end = rss_kib(pid);
        stop.store(true, Ordering::SeqCst);
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        eprintln!("soak: SIGTERM after {:?}", t0.elapsed());
        (warm, end)
    });
    eprintln!("soak: clients done after {:?}", t0.elapsed());
    assert!(
        server.wait().success(),
        "the server exits cleanly on SIGTERM"
    );
    let completed = tally.completed.load(Ordering::SeqCst);
    eprintln!(
        "soak: {completed} answers completed, {} hung up, {} busy, {} shutting down; \
         RSS {warm} KiB after warm-up, {end} KiB at the end",
        tally.hung_up.load(Ordering::SeqCst),
        tally.busy.load(Ordering::SeqCst),
        tally.shutting_down.load(Ordering::SeqCst),
    );
    assert!(completed > 0, "answers completed under load");
    assert!(
        end * 10 <= warm * 11,
        "RSS grew more than 10 %: {warm} KiB → {end} KiB"
    );
}
