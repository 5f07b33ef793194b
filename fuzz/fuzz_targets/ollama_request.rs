//! Ollama chat and generate request bodies through the server's parsing, conversion into the
//! one chat request and its validation: any bytes give an answer or an Ollama-shaped error,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    let path = if route % 2 == 0 {
        "/api/chat"
    } else {
        "/api/generate"
    };
    if let Err(e) = wick_server::check_request(path, body) {
        // Every error has a status and a well-formed body.
        let _ = (e.status(), e.body());
    }
});
