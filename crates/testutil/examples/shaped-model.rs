//! Writes a dense `llama` model of Llama 3.2 1B's shape (random BF16 weights, the test model's
//! tokenizer: `wick_testutil::shaped_model`), for measuring wick against llama.cpp on the
//! shapes of the models people download (`docs/bench.md`):
//!
//! ```text
//! cargo run --release -p wick-testutil --example shaped-model -- llama-1b.BF16.gguf
//! wick quantize -m llama-1b.BF16.gguf -t Q4_K_M -o llama-1b.Q4_K_M.gguf
//! wick bench --quick --only a -m llama-1b.Q4_K_M.gguf
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out] = args.as_slice() else {
        eprintln!("usage: shaped-model OUT.gguf  (a 2.1 GB BF16 model of Llama 3.2 1B's shape)");
        return ExitCode::from(2);
    };
    let test_model = wick_testutil::model_path();
    let bytes = match std::fs::read(&test_model) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("shaped-model: reading {}: {e}", test_model.display());
            return ExitCode::FAILURE;
        }
    };
    let model = wick_testutil::shaped_model(&bytes, wick_testutil::LLAMA_1B, 1);
    if let Err(e) = std::fs::write(out, &model) {
        eprintln!("shaped-model: writing {out}: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!("shaped-model: wrote {out} ({} bytes)", model.len());
    ExitCode::SUCCESS
}
