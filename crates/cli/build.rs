//! Records which llama-cpp-sys-2 (and so which llama.cpp) the binary links, for `wick bench`.

fn main() {
    // Read when the script runs, not when it was compiled: a build script compiled for a clone
    // at another path may be reused for this one.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let lock = std::path::Path::new(&manifest_dir).join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let version = text
        .split("[[package]]")
        .find(|p| p.contains("name = \"llama-cpp-sys-2\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .map_or("unknown", |v| v.trim_matches('"'));
    println!("cargo:rustc-env=WICK_LLAMA_CPP_SYS_VERSION={version}");
}
