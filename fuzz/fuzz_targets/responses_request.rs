//! OpenAI Responses request bodies through the server's parsing, conversion of their input items
//! into the one chat request and its validation: any bytes give an answer or an OpenAI-shaped
//! error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = wick_server::check_request("/v1/responses", data) {
        // Every error has a status and a well-formed body.
        let _ = (e.status(), e.body());
    }
});
