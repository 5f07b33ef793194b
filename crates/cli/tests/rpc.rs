//! A model across machines, on one (loopback): `wick rpc-worker` runs llama.cpp's RPC server and
//! `wick serve --rpc` computes every layer on it (issue 18).

mod serve_util;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use serve_util::{client, free_port, post_json, Server};

/// A `wick rpc-worker` process, killed when dropped.
struct Worker {
    child: Child,
    endpoint: String,
}

impl Worker {
    /// Starts a worker on a free loopback port and waits until it accepts connections.
    fn start() -> Worker {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_wick"))
            .args(["rpc-worker", "--threads", "2", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("wick rpc-worker starts");
        let endpoint = format!("127.0.0.1:{port}");
        // Bounded polling (no timing assertion): the greeting succeeds once it listens.
        for _ in 0..300 {
            if wick::probe_rpc_worker(&endpoint).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        wick::probe_rpc_worker(&endpoint).expect("the worker answers the RPC handshake");
        Worker { child, endpoint }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A greedy chat answer, with its log-probabilities.
fn answer(server: &Server) -> Value {
    let body = json!({
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
        "max_tokens": 24,
        "temperature": 0,
        "logprobs": true
    });
    let (status, out) = post_json(server, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{out}");
    out
}

fn model_meta(server: &Server) -> Value {
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    models["data"][0]["meta"].clone()
}

#[test]
fn issue_18_serving_through_an_rpc_worker_gives_the_local_answer() {
    let local = Server::start(&[]);
    let cold = answer(&local);
    let local_meta = model_meta(&local);
    drop(local);
    assert_eq!(local_meta["placement"][0]["device"], "CPU", "{local_meta}");
    assert_eq!(local_meta["placement"][0]["n_layers"], 30, "{local_meta}");

    let worker = Worker::start();
    let remote = Server::start(&["--rpc", &worker.endpoint]);
    let meta = model_meta(&remote);
    // Every layer on the worker: its 30 repeating layers and the output layer, and the KV
    // cache with them (768 bytes a token a layer × 4,096 tokens × 4 sequences × 30 layers).
    assert_eq!(
        meta["placement"],
        json!([{"device": "RPC0", "description": worker.endpoint, "first_layer": 0,
                "n_layers": 30, "output": true,
                "kv_cache": {"device": "RPC0", "bytes": 768 * 4096 * 4 * 30},
                "deterministic": false}]),
        "{meta}"
    );
    assert!(meta["build"].as_str().unwrap().contains(" rpc "), "{meta}");
    assert_eq!(
        meta["deterministic"], false,
        "offloaded layers never claim it"
    );
    let through = answer(&remote);
    let text = |v: &Value| v["choices"][0]["message"]["content"].clone();
    assert!(text(&cold).as_str().unwrap().contains("Paris"), "{cold}");
    assert_eq!(text(&through), text(&cold), "{through}\n{cold}");
    // The worker computes with the same reference kernels as the local run: the same floats.
    assert!(
        cold["choices"][0]["logprobs"]["content"]
            .as_array()
            .is_some_and(|c| c.len() > 3),
        "{cold}"
    );
    assert_eq!(
        through["choices"][0]["logprobs"], cold["choices"][0]["logprobs"],
        "bit-identical log-probabilities"
    );
}

/// `wick serve` with `args`; its exit status and stderr (it must exit by itself).
fn serve_failing(args: &[&str]) -> (std::process::ExitStatus, String) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .env("WICK_HOME", home.path())
        .args(["serve", "--port", "0", "-m"])
        .arg(wick_testutil::model_path())
        .args(args)
        .stdout(Stdio::null())
        .output()
        .expect("wick serve runs");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn issue_18_an_unreachable_worker_or_another_protocol_fails_clearly() {
    let nobody = format!("127.0.0.1:{}", free_port());
    let (status, stderr) = serve_failing(&["--rpc", &nobody]);
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("RPC worker {nobody}"))
            && stderr.contains("cannot connect")
            && stderr.contains("wick rpc-worker"),
        "{stderr}"
    );

    // Something that answers the greeting as a worker of protocol 6.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let old = listener.local_addr().unwrap().to_string();
    let fake = std::thread::spawn(move || -> std::io::Result<u8> {
        let (mut stream, _) = listener.accept()?;
        let mut hello = [0u8; 1 + 8 + 24];
        stream.read_exact(&mut hello)?;
        stream.write_all(&28u64.to_le_bytes())?;
        stream.write_all(&[6, 1, 0, 0])?;
        stream.write_all(&[0; 24])?;
        Ok(hello[0])
    });
    let (status, stderr) = serve_failing(&["--rpc", &old]);
    // Had the server not connected, this connection ends the fake's wait.
    let _ = std::net::TcpStream::connect(&old);
    assert_eq!(fake.join().unwrap().unwrap(), 14, "the RPC HELLO command");
    assert!(!status.success());
    assert!(
        stderr.contains("speaks RPC protocol 6.1.0") && stderr.contains("same wick"),
        "{stderr}"
    );

    let (status, stderr) = serve_failing(&["--rpc", "no-port-here"]);
    assert!(!status.success());
    assert!(stderr.contains("HOST:PORT"), "{stderr}");
}

#[test]
fn issue_18_a_worker_binds_loopback_unless_allowed_and_stops_on_sigterm() {
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["rpc-worker", "--host", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--allow-remote") && stderr.contains("no authentication"),
        "{stderr}"
    );

    let mut worker = Worker::start();
    let killed = Command::new("kill")
        .args(["-TERM", &worker.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = worker.child.wait().unwrap();
    assert!(status.success(), "SIGTERM stops it cleanly: {status}");
}
