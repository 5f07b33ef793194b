//! `wick chat` through the real binary: on the real model with piped input, and with `--url`
//! against a small OpenAI-style server on 127.0.0.1 that streams server-sent events.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use wick_testutil::model_path as model;

fn wick() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wick"));
    command.env_remove("WICK_API_KEY");
    command
}

/// Runs `wick chat ARGS` with `input` on standard input.
fn chat(command: &mut Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn local(input: &str) -> Output {
    chat(
        wick()
            // A plain system prompt: SmolLM2's default one makes its greedy answers wander.
            .args([
                "chat",
                "--greedy",
                "--threads",
                "2",
                "-n",
                "32",
                "-s",
                "You are a helpful assistant.",
            ])
            .arg("-m")
            .arg(model()),
        input,
    )
}

#[test]
fn local_chat_answers_and_acknowledges_commands() {
    let out = local(
        "Tell me the name of the capital of France.\n/system You are a helpful pirate.\nSay hello.\n\
         /reset\n/help\n/nonsense\n/system\n",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(stdout.contains("Paris"), "stdout: {stdout}");
    assert!(!stdout.contains("<|im_end|>"), "stdout: {stdout}");
    for status in [
        "(system prompt set, conversation reset)",
        "(conversation reset)",
        "(unknown command /nonsense",
        "(system prompt removed, conversation reset)",
    ] {
        assert!(stderr.contains(status), "no {status:?} in stderr: {stderr}");
    }
    assert!(
        stdout.contains("/system TEXT") && stdout.contains("/exit"),
        "/help did not list the commands: {stdout}"
    );
}

#[test]
fn reset_starts_the_conversation_over() {
    // Greedy decoding: the same conversation gets the same answer, so after /reset the
    // question is answered exactly as the first time.
    let question = "Name a large animal.";
    let out = local(&format!("{question}\n/reset\n{question}\n"));
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let (first, second) = stdout.split_at(stdout.len() / 2);
    assert!(!first.trim().is_empty(), "no answer: {stdout:?}");
    assert_eq!(first, second, "the reset conversation answered differently");
}

#[test]
fn exit_ends_the_chat_and_later_lines_are_not_read() {
    let script = "Hi!\n/exit\n";
    let ended = local(script);
    let with_more = local(&format!("{script}What is 2+2?\nAnd 3+3?\n"));
    assert!(ended.status.success() && with_more.status.success());
    assert!(!text(&ended.stdout).trim().is_empty());
    assert_eq!(
        text(&ended.stdout),
        text(&with_more.stdout),
        "lines after /exit were answered"
    );
}

#[test]
fn a_bad_model_is_a_clear_error() {
    let missing = std::env::temp_dir().join("wick-chat-test-missing.gguf");
    let out = chat(wick().args(["chat", "-m"]).arg(&missing), "Hi\n");
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&*missing.to_string_lossy()) && stderr.contains("cannot read it"),
        "stderr: {stderr}"
    );
}

#[test]
fn help_explains_modes_flags_and_commands() {
    let out = wick().args(["chat", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for needle in [
        "--model",
        "--system",
        "--url",
        "--api-key",
        "WICK_API_KEY",
        "--max-tokens",
        "--temperature",
        "--greedy",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "--seed",
        "--ctx-size",
        "--threads",
        "--gpu-layers",
        "/reset",
        "/system TEXT",
        "/exit",
        "/help",
        "Ctrl-C",
        "[reasoning]",
        "chat_history",
    ] {
        assert!(help.contains(needle), "`wick chat --help` lacks {needle}");
    }
    let top = text(&wick().arg("--help").output().unwrap().stdout);
    assert!(top.contains("chat"), "{top}");
}

/// A request the fake server received.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// A one-thread HTTP/1.1 server on 127.0.0.1 that records each request and answers it with
/// `respond(request, number of earlier chat requests, connection)`, then closes the connection.
struct FakeServer {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeServer {
    fn start(respond: impl Fn(&Request, usize, &mut TcpStream) + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let request = read_request(&mut stream);
                let chats = {
                    let mut seen = seen.lock().unwrap();
                    let chats = seen
                        .iter()
                        .filter(|r: &&Request| r.method == "POST")
                        .count();
                    seen.push(request.clone());
                    chats
                };
                respond(&request, chats, &mut stream);
            }
        });
        FakeServer { url, requests }
    }

    /// A server that answers with `respond(request, number of earlier chat requests)`.
    fn replying(respond: impl Fn(&Request, usize) -> String + Send + 'static) -> Self {
        FakeServer::start(move |request, chats, stream| {
            let _ = stream.write_all(respond(request, chats).as_bytes());
        })
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn chats(&self) -> Vec<Request> {
        let chats: Vec<Request> = self
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .collect();
        for r in &chats {
            assert_eq!(r.path, "/v1/chat/completions");
            assert_eq!(r.body["stream"], json!(true), "{}", r.body);
        }
        chats
    }
}

fn read_request(stream: &mut TcpStream) -> Request {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap().to_owned();
    let path = parts.next().unwrap().to_owned();
    let (mut length, mut authorization) = (0, None);
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap(),
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Request {
        method,
        path,
        authorization,
        body,
    }
}

fn sse_chunk(delta: &Value) -> String {
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}],
    });
    format!("data: {chunk}\n\n")
}

const SSE_HEADERS: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                           Cache-Control: no-cache\r\nConnection: close\r\n\r\n";

/// A streamed answer: reasoning, then `You said: <last message>` in two chunks, then `[DONE]`.
fn echo_stream(request: &Request) -> String {
    let said = request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let deltas = [
        json!({"role": "assistant", "content": ""}),
        json!({"reasoning_content": "Thinking it over."}),
        json!({"content": "You said: "}),
        json!({"content": said}),
    ];
    let mut body = SSE_HEADERS.to_owned();
    for delta in &deltas {
        body.push_str(&sse_chunk(delta));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

fn json_response(status: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

fn messages(request: &Request) -> Vec<(String, String)> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(r, c)| ((*r).to_owned(), (*c).to_owned()))
        .collect()
}

#[test]
fn remote_chat_streams_the_answer_and_sends_the_conversation() {
    let server = FakeServer::replying(|request, _| {
        if request.method == "GET" {
            json_response(
                "200 OK",
                &json!({"object": "list", "data": [{"id": "fake-model"}]}),
            )
        } else {
            echo_stream(request)
        }
    });
    let out = chat(
        wick()
            .args(["chat", "--api-key", "sk-test", "-n", "64", "--url"])
            .arg(format!("{}/v1/", server.url)),
        "Hello\nHow are you?\n/reset\n/system Be brief.\nBye\n/exit\nNever sent\n",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stderr: {stderr}");
    assert_eq!(
        stdout,
        "[reasoning] Thinking it over.\nYou said: Hello\n\
         [reasoning] Thinking it over.\nYou said: How are you?\n\
         [reasoning] Thinking it over.\nYou said: Bye\n"
    );
    assert!(stderr.contains("(conversation reset)"), "{stderr}");

    let requests = server.requests();
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/v1/models")
    );
    let chats = server.chats();
    assert_eq!(chats.len(), 3, "{chats:?}");
    for r in &chats {
        assert_eq!(r.authorization.as_deref(), Some("Bearer sk-test"));
        assert_eq!(r.body["model"], "fake-model");
        assert_eq!(r.body["max_tokens"], 64);
    }
    assert_eq!(messages(&chats[0]), pairs(&[("user", "Hello")]));
    // The reasoning is not part of the assistant message sent back.
    assert_eq!(
        messages(&chats[1]),
        pairs(&[
            ("user", "Hello"),
            ("assistant", "You said: Hello"),
            ("user", "How are you?"),
        ])
    );
    assert_eq!(
        messages(&chats[2]),
        pairs(&[("system", "Be brief."), ("user", "Bye")])
    );
}

#[test]
fn remote_errors_print_the_server_message_and_the_chat_goes_on() {
    let server = FakeServer::replying(|request, chats| {
        if chats == 0 {
            let error = json!({"error": {"message": "Incorrect API key provided: sk-wrong",
                                         "type": "invalid_request_error", "code": "invalid_api_key"}});
            json_response("401 Unauthorized", &error)
        } else {
            echo_stream(request)
        }
    });
    let out = chat(
        wick()
            .env("WICK_API_KEY", "sk-wrong")
            .args(["chat", "--model", "my-model", "-s", "Be kind.", "--url"])
            .arg(&server.url),
        "First\nSecond\n",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // The chat went on, and the exit status says a turn failed (issue 15).
    assert!(!out.status.success(), "stderr: {stderr}");
    assert!(stderr.contains("1 of 2 turns failed"), "stderr: {stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("Incorrect API key provided: sk-wrong"),
        "stderr: {stderr}"
    );
    assert!(stdout.contains("You said: Second"), "stdout: {stdout}");
    assert!(!stdout.contains("First"), "stdout: {stdout}");

    let chats = server.chats();
    assert_eq!(server.requests().len(), 2, "--model given: no model lookup");
    for r in &chats {
        assert_eq!(r.authorization.as_deref(), Some("Bearer sk-wrong"));
        assert_eq!(r.body["model"], "my-model");
    }
    // The failed turn was taken back.
    assert_eq!(
        messages(&chats[1]),
        pairs(&[("system", "Be kind."), ("user", "Second")])
    );
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = chat(wick().args(["chat", "--url", &url]), "Hi\n");
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot reach the server") && stderr.contains(&url),
        "stderr: {stderr}"
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_answer_and_the_chat_goes_on() {
    // The first answer never ends on its own: only Ctrl-C (closing the connection) stops it.
    let server = FakeServer::start(|request, chats, stream| {
        if chats > 0 {
            let _ = stream.write_all(echo_stream(request).as_bytes());
            return;
        }
        let mut sent = stream
            .write_all(SSE_HEADERS.as_bytes())
            .and_then(|()| stream.write_all(sse_chunk(&json!({"content": "Partial"})).as_bytes()));
        while sent.is_ok() {
            std::thread::sleep(std::time::Duration::from_millis(10));
            sent = stream.write_all(sse_chunk(&json!({"content": " tick"})).as_bytes());
        }
    });
    let mut child = wick()
        .args(["chat", "--model", "m", "--url", &server.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"Tell me a story\n").unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 7];
    stdout.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"Partial");
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    stdin.write_all(b"Again\n/exit\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(stderr.contains("(answer stopped)"), "stderr: {stderr}");
    assert!(rest.ends_with("You said: Again\n"), "stdout: {rest}");

    let chats = server.chats();
    assert_eq!(chats.len(), 2);
    // What was shown of the stopped answer stays in the conversation.
    let sent = messages(&chats[1]);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[1].0, "assistant");
    assert!(sent[1].1.starts_with("Partial"), "{sent:?}");
    assert_eq!(sent[2], ("user".to_owned(), "Again".to_owned()));
}

#[test]
fn lines_pasted_or_typed_ahead_together_are_each_answered_on_a_terminal() {
    let server = FakeServer::replying(|request, _| {
        if request.method == "GET" {
            json_response(
                "200 OK",
                &json!({"object": "list", "data": [{"id": "fake-model"}]}),
            )
        } else {
            echo_stream(request)
        }
    });
    let script = wick_testutil::crate_path(env!("CARGO_MANIFEST_DIR"), "tests/chat_pty.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_wick"))
        .arg(&server.url)
        .args(["first line", "second line", "third line"])
        .output()
        .expect("python3 runs the pseudo-terminal driver");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}\n{}", text(&out.stderr));
    let asked: Vec<String> = server
        .chats()
        .iter()
        .map(|r| messages(r).last().unwrap().1.clone())
        .collect();
    assert_eq!(
        asked,
        ["first line", "second line", "third line"],
        "every line is a turn, none dropped: {shown}"
    );
}
