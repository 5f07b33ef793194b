//! Images on the real backend and model: `wick serve --mmproj` with wick-testutil's test
//! projector (a LLaVA-style vision tower of random weights whose output width is SmolLM2's 576:
//! no small vision model is on the package registries). An image changes the answer; the same
//! image gives the same answer warm, cold, concurrent and after a restart, its prompt reused
//! from the cache; two images give two answers; bad media are 400s naming the part; the
//! official openai, anthropic and ollama packages send images (`multimodal.py`).

mod serve_util;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::json;
use serve_util::{post_json, run_python_client, venv_python, Server};

/// The test projector and two images (a gradient and stripes) in `dir`.
fn fixtures(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let projector = dir.join("mmproj-test.gguf");
    std::fs::write(&projector, wick_testutil::vision_projector(576, 1)).unwrap();
    let a = dir.join("a.png");
    let gradient = |x: u32, y: u32| {
        [
            u8::try_from(x * 6).unwrap(),
            u8::try_from(y * 8).unwrap(),
            90,
        ]
    };
    std::fs::write(&a, wick_testutil::png(40, 30, gradient)).unwrap();
    let b = dir.join("b.png");
    let stripes = |x: u32, _| {
        if x % 4 < 2 {
            [250, 250, 250]
        } else {
            [10, 10, 10]
        }
    };
    std::fs::write(&b, wick_testutil::png(16, 16, stripes)).unwrap();
    (projector, a, b)
}

fn data_url(path: &Path) -> String {
    use base64::Engine as _;
    let bytes = std::fs::read(path).unwrap();
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

const QUESTION: &str = "Describe this picture.";

/// A greedy chat about `image` (none: the question alone): the answer and its cached tokens.
fn ask(server: &Server, image: Option<&str>) -> (String, u64, u64) {
    let mut content = vec![json!({"type": "text", "text": QUESTION})];
    if let Some(url) = image {
        content.push(json!({"type": "image_url", "image_url": {"url": url}}));
    }
    let (code, body) = post_json(
        server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": content}], "max_tokens": 12,
                "temperature": 0}),
    );
    assert_eq!(code, 200, "{body}");
    (
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        body["usage"]["prompt_tokens"].as_u64().unwrap(),
        body["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
    )
}

#[test]
fn an_image_changes_the_answer_the_same_image_gives_the_same_one_and_its_prefix_is_cached() {
    let dir = tempfile::tempdir().unwrap();
    let (projector, a, b) = fixtures(dir.path());
    let (a, b) = (data_url(&a), data_url(&b));
    let home = dir.path().join("home");
    let args = ["--mmproj", projector.to_str().unwrap(), "--parallel", "2"];
    let server = Server::start_in(&home, &args);

    let (cold, prompt_tokens, cached) = ask(&server, Some(&a));
    assert_eq!(cached, 0);
    let (warm, _, cached) = ask(&server, Some(&a));
    assert_eq!(warm, cold, "warm = cold");
    assert_eq!(
        cached, prompt_tokens,
        "the repeated image's prompt is reused whole"
    );
    let (plain, plain_tokens, _) = ask(&server, None);
    assert_eq!(
        prompt_tokens,
        plain_tokens + 4,
        "the test projector gives an image four positions"
    );
    assert_ne!(cold, plain, "the image changes the answer");
    let (other, _, cached) = ask(&server, Some(&b));
    assert_ne!(other, cold, "another image, another answer");
    assert!(
        cached < prompt_tokens - 4,
        "another image's positions are not reused: {cached}"
    );

    // Both images at once: each answer is its solo one.
    let both: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = [&a, &b]
            .into_iter()
            .map(|image| scope.spawn(|| ask(&server, Some(image)).0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(both, [cold.clone(), other.clone()]);

    // A later turn about the same image reuses the whole first turn.
    let (code, turn) = post_json(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": QUESTION},
                                         {"type": "image_url", "image_url": {"url": a}}]},
            {"role": "assistant", "content": cold},
            {"role": "user", "content": "And its colours?"}],
            "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(code, 200, "{turn}");
    assert!(
        turn["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > prompt_tokens,
        "{turn}"
    );
    drop(server);

    // After a restart the image's prefix comes back from the disk cache, with the same answer.
    let server = Server::start_in(&home, &args);
    let (restored, _, cached) = ask(&server, Some(&a));
    assert_eq!(restored, cold);
    assert!(cached > 4, "restored from disk: {cached}");
    drop(server);

    // A fresh home: the cold answer again (and the disk cache of another projector's
    // positions is never restored: the snapshot names the projector).
    let other_projector = dir.path().join("mmproj-other.gguf");
    std::fs::write(&other_projector, wick_testutil::vision_projector(576, 2)).unwrap();
    let server = Server::start_in(
        &home,
        &[
            "--mmproj",
            other_projector.to_str().unwrap(),
            "--parallel",
            "2",
        ],
    );
    let (elsewhere, _, cached) = ask(&server, Some(&a));
    assert!(
        cached <= plain_tokens,
        "another projector's image is not reused: {cached}"
    );
    assert_ne!(elsewhere, cold, "another projector, another answer");
}

#[test]
fn bad_media_and_a_model_without_a_projector_are_400s_that_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let (projector, a, _) = fixtures(dir.path());
    let server = Server::start(&["--mmproj", projector.to_str().unwrap()]);
    let image = |url: &str| {
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "Hi"},
            {"type": "image_url", "image_url": {"url": url}}]}], "max_tokens": 2})
    };
    let png = std::fs::read(&a).unwrap();
    let mut truncated = png[..60].to_vec();
    truncated.extend_from_slice(&[0; 8]);
    let mut huge = png[..16].to_vec();
    huge.extend_from_slice(&60_000u32.to_be_bytes());
    huge.extend_from_slice(&60_000u32.to_be_bytes());
    huge.extend_from_slice(&png[24..]);
    let encode = |bytes: &[u8]| {
        use base64::Engine as _;
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    };
    for (url, says) in [
        (encode(b"hello, not a picture"), "not image data"),
        (encode(&truncated), "could not be decoded"),
        (encode(&huge), "60000 × 60000"),
        ("https://example.org/cat.png".to_owned(), "does not fetch"),
        ("data:image/png;base64,@@@".to_owned(), "not valid base64"),
    ] {
        let (code, body) = post_json(&server, "/v1/chat/completions", &image(&url));
        assert_eq!(code, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says}: {body}");
    }
    // An audio part to a vision projector.
    let (code, body) = post_json(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZFZm10IA==", "format": "wav"}}]}]}),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("takes no audio"),
        "{body}"
    );
    // The server still answers.
    assert!(!ask(&server, Some(&data_url(&a))).0.is_empty());
    drop(server);

    // A model served without --mmproj refuses an image, naming the flag.
    let server = Server::start(&[]);
    let (code, body) = post_json(&server, "/v1/chat/completions", &image(&data_url(&a)));
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--mmproj"),
        "{body}"
    );

    // A file that is no projector for this model is a load error naming it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["run", "--greedy", "-n", "1", "-m"])
        .arg(wick_testutil::model_path())
        .arg("--mmproj")
        .arg(dir.path().join("a.png"))
        .arg("Hi")
        .env("WICK_HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("a.png"), "{message}");
    let narrow = dir.path().join("mmproj-narrow.gguf");
    std::fs::write(&narrow, wick_testutil::vision_projector(64, 1)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["run", "--greedy", "-n", "1", "-m"])
        .arg(wick_testutil::model_path())
        .arg("--mmproj")
        .arg(&narrow)
        .arg("Hi")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("embedding width (576)"), "{message}");
}

#[test]
fn the_official_sdks_send_images() {
    let python = venv_python(
        "WICK_OPENAI_PYTHON",
        "venv-openai",
        "ollama",
        "ollama==0.6.3",
    );
    let dir = tempfile::tempdir().unwrap();
    let (projector, a, b) = fixtures(dir.path());
    let server = Server::start(&["--mmproj", projector.to_str().unwrap()]);
    run_python_client(
        &python,
        "multimodal.py",
        &[OsStr::new(&server.base), a.as_os_str(), b.as_os_str()],
        &["OLLAMA_HOST"],
        "all multimodal client checks passed",
    );
}

#[test]
fn wick_run_image_and_the_chats_image_command_answer_as_the_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let (projector, a, _) = fixtures(dir.path());
    let model = wick_testutil::model_path();
    let wick = |args: &[&OsStr], stdin: &str| {
        use std::io::Write as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let common = [
        OsStr::new("-m"),
        model.as_os_str(),
        OsStr::new("--mmproj"),
        projector.as_os_str(),
        OsStr::new("--greedy"),
        OsStr::new("-n"),
        OsStr::new("12"),
    ];
    let mut run = vec![OsStr::new("run")];
    run.extend(common);
    run.extend([OsStr::new("--image"), a.as_os_str(), OsStr::new(QUESTION)]);
    let answered = wick(&run, "");
    let mut chat = vec![OsStr::new("chat")];
    chat.extend(common);
    let script = format!("/image {}\n{QUESTION}\n", a.display());
    assert_eq!(wick(&chat, &script), answered, "the chat's /image");

    let server = Server::start(&["--mmproj", projector.to_str().unwrap()]);
    let (content, code) = {
        let (code, body) = post_json(
            &server,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": data_url(&a)}}]}],
                "max_tokens": 12, "temperature": 0}),
        );
        (body["choices"][0]["message"]["content"].clone(), code)
    };
    assert_eq!(code, 200);
    assert_eq!(
        content.as_str().unwrap().trim(),
        answered,
        "wick run --image"
    );
    // The Responses API's input_image part: the same question, the same answer.
    let (code, body) = post_json(
        &server,
        "/v1/responses",
        &json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": QUESTION},
            {"type": "input_image", "image_url": data_url(&a)}]}],
            "max_output_tokens": 12, "temperature": 0}),
    );
    assert_eq!(code, 200, "{body}");
    let text = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "message")
        .map(|item| {
            item["content"][0]["text"]
                .as_str()
                .unwrap()
                .trim()
                .to_owned()
        });
    assert_eq!(text.as_deref(), Some(answered.as_str()), "{body}");
}

#[test]
fn llama_servers_completion_reads_multimodal_data() {
    let dir = tempfile::tempdir().unwrap();
    let (projector, a, b) = fixtures(dir.path());
    let server = Server::start(&["--mmproj", projector.to_str().unwrap()]);
    // llama-server's /completion with `multimodal_data`: the image where its marker stands.
    let b64 = |path: &Path| data_url(path).split_once(',').unwrap().1.to_owned();
    let complete = |image: &Path| {
        let (code, body) = post_json(
            &server,
            "/completion",
            &json!({"prompt": {"prompt_string": "<|im_start|>user\n<__media__>Describe it.<|im_end|>\n<|im_start|>assistant\n",
                               "multimodal_data": [b64(image)]},
                    "n_predict": 8, "temperature": 0}),
        );
        assert_eq!(code, 200, "{body}");
        body["content"].as_str().unwrap().to_owned()
    };
    assert_eq!(complete(&a), complete(&a));
    assert_ne!(complete(&a), complete(&b));
    let (code, body) = post_json(
        &server,
        "/completion",
        &json!({"prompt": {"prompt_string": "no marker", "multimodal_data": [b64(&a)]}, "n_predict": 2}),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("one marker each"),
        "{body}"
    );
}

#[test]
fn with_media_urls_the_server_fetches_images_by_url_within_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let (projector, a, _) = fixtures(dir.path());
    let hub = wick_testutil::FakeHub::start();
    let repo = "pictures/test";
    hub.add_file(repo, "a.png", std::fs::read(&a).unwrap());
    hub.add_file(repo, "big.png", vec![7; 400_000]);
    hub.add_file(repo, "slow.png", vec![7; 200_000]);
    hub.set_delay(repo, "slow.png", std::time::Duration::from_secs(2));
    let url = |file: &str| hub.file_url(repo, file);
    let chat = |image: &str| {
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": QUESTION},
            {"type": "image_url", "image_url": {"url": image}}]}],
            "max_tokens": 12, "temperature": 0})
    };

    // Off by default: a URL is a 400 that names the flag.
    let server = Server::start(&["--mmproj", projector.to_str().unwrap()]);
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat(&url("a.png")));
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--media-urls"),
        "{body}"
    );
    let (by_data, _, _) = ask(&server, Some(&data_url(&a)));
    drop(server);

    let server = Server::start(&[
        "--mmproj",
        projector.to_str().unwrap(),
        "--media-urls",
        "--media-url-timeout",
        "1",
        "--media-url-max-bytes",
        "300000",
    ]);
    // The fetched image answers as the same image sent as data, on each API.
    let (code, body) = post_json(&server, "/v1/chat/completions", &chat(&url("a.png")));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], by_data.as_str());
    let (code, body) = post_json(
        &server,
        "/v1/messages",
        &json!({"max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": url("a.png")}},
            {"type": "text", "text": QUESTION}]}]}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = post_json(
        &server,
        "/v1/responses",
        &json!({"max_output_tokens": 4, "input": [{"role": "user", "content": [
            {"type": "input_text", "text": QUESTION},
            {"type": "input_image", "image_url": url("a.png")}]}]}),
    );
    assert_eq!(code, 200, "{body}");
    // Each limit is a 400 naming the URL.
    for (file, says) in [
        ("missing.png", "answered 404"),
        ("big.png", "larger than 300000 bytes"),
        ("slow.png", "no answer within 1 s"),
    ] {
        let (code, body) = post_json(&server, "/v1/chat/completions", &chat(&url(file)));
        assert_eq!(code, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(says) && message.contains(file),
            "{file}: {body}"
        );
    }
}
