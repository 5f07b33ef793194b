//! The chat page `wick serve` serves at `/`, in a real browser (headless Chromium through
//! Selenium, installed by `scripts/test`) against the real model (issue 19): an answer streams
//! in with its numbers, a follow-up reuses the cache, the stop button frees the sequence,
//! conversations survive a reload and can be deleted, model output holding HTML shows as text,
//! and with `--api-key` the page asks for the key.

mod serve_util;

use serve_util::{client, run_python_client, venv_python, Server};

fn browser_python() -> std::path::PathBuf {
    venv_python(
        "WICK_BROWSER_PYTHON",
        "venv-browser",
        "selenium",
        "selenium==4.50.0",
    )
}

/// Where the browser test leaves its screenshots: `$WICK_UI_SCREENSHOTS` (how the ones in
/// docs/ were made), else nowhere.
fn screenshots() -> String {
    std::env::var("WICK_UI_SCREENSHOTS").unwrap_or_default()
}

#[test]
fn the_chat_page_streams_stops_remembers_and_shows_html_as_text() {
    let server = Server::start(&["--parallel", "2"]);
    let shots = screenshots();
    run_python_client(
        &browser_python(),
        "web_ui_client.py",
        &[server.base.as_ref(), "".as_ref(), shots.as_ref()],
        &[],
        "done",
    );
}

#[test]
fn with_an_api_key_the_page_asks_for_it() {
    let server = Server::start(&["--api-key", "page-secret"]);
    // The page itself needs no key; the API still does.
    let page = client()
        .get(server.url("/"))
        .header("Accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(page.text().unwrap().contains("/ui/app.js"));
    let models = client().get(server.url("/v1/models")).send().unwrap();
    assert_eq!(models.status(), 401);
    run_python_client(
        &browser_python(),
        "web_ui_client.py",
        &[server.base.as_ref(), "page-secret".as_ref(), "".as_ref()],
        &[],
        "done",
    );
}

#[test]
fn ollama_clients_still_get_their_probe_answer_and_no_ui_turns_the_page_off() {
    let server = Server::start(&[]);
    let probe = client()
        .get(server.url("/"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(probe, "Ollama is running");
    let off = Server::start(&["--no-ui"]);
    let page = client()
        .get(off.url("/"))
        .header("Accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(page.text().unwrap(), "Ollama is running");
    let asset = client().get(off.url("/ui/app.js")).send().unwrap();
    assert_eq!(asset.status(), 404);
}

#[test]
fn the_chat_page_sends_pictures_from_the_file_picker_and_a_drop() {
    let dir = tempfile::tempdir().unwrap();
    let projector = dir.path().join("mmproj-test.gguf");
    std::fs::write(&projector, wick_testutil::vision_projector(576, 1)).unwrap();
    let a = dir.path().join("a.png");
    std::fs::write(
        &a,
        wick_testutil::png(40, 30, |x, y| {
            [
                u8::try_from(x * 6).unwrap(),
                u8::try_from(y * 8).unwrap(),
                90,
            ]
        }),
    )
    .unwrap();
    let b = dir.path().join("b.png");
    std::fs::write(
        &b,
        wick_testutil::png(16, 16, |x, _| {
            if x % 4 < 2 {
                [250, 250, 250]
            } else {
                [10, 10, 10]
            }
        }),
    )
    .unwrap();
    let server = Server::start(&["--mmproj", projector.to_str().unwrap()]);
    run_python_client(
        &browser_python(),
        "web_ui_images.py",
        &[server.base.as_ref(), a.as_os_str(), b.as_os_str()],
        &[],
        "done",
    );
}
