//! Request bodies through the server's parsing and validation (chat and text completions with
//! their prompt shapes, embedding inputs, the LoRA scales of `POST /lora-adapters`): any bytes give an answer or an OpenAI error, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    let path = match route % 4 {
        0 => "/v1/chat/completions",
        1 => "/v1/completions",
        2 => "/v1/embeddings",
        _ => "/lora-adapters",
    };
    if let Err(e) = wick_server::check_request(path, body) {
        // Every error has a status and a well-formed body.
        let _ = (e.status(), e.body());
    }
});
