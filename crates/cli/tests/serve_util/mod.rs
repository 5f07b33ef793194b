//! A `wick serve` process on the real model, on a free port, killed when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A running server.
pub(crate) struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// The server's own `$WICK_HOME` (its prompt cache), unless the test gave one.
    home: Option<tempfile::TempDir>,
    /// Where the server's stderr goes: printed (its end) when a test fails with it running.
    log: tempfile::NamedTempFile,
}

impl Server {
    /// Starts `wick serve` on the test model with `extra` flags and waits until it is ready;
    /// its `$WICK_HOME` (and so its disk prompt cache) is a fresh temporary directory.
    pub(crate) fn start(extra: &[&str]) -> Server {
        let home = tempfile::tempdir().expect("a temporary WICK_HOME");
        let mut server = Server::start_in(home.path(), extra);
        server.home = Some(home);
        server
    }

    /// [`Server::start`] with `home` as `$WICK_HOME`.
    pub(crate) fn start_in(home: &std::path::Path, extra: &[&str]) -> Server {
        Server::start_model_in(home, &wick_testutil::model_path(), extra)
    }

    /// [`Server::start`] on `model` instead of the test model.
    pub(crate) fn start_model(model: &std::path::Path, extra: &[&str]) -> Server {
        let home = tempfile::tempdir().expect("a temporary WICK_HOME");
        let mut server = Server::start_model_in(home.path(), model, extra);
        server.home = Some(home);
        server
    }

    /// [`Server::start_model`] with `home` as `$WICK_HOME`.
    pub(crate) fn start_model_in(
        home: &std::path::Path,
        model: &std::path::Path,
        extra: &[&str],
    ) -> Server {
        let model = model.to_str().expect("a UTF-8 model path");
        let args: Vec<&str> = ["-m", model]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        Server::start_args_in(home, &args)
    }

    /// `wick serve` with `args` only (no -m: the store's models) and `home` as `$WICK_HOME`.
    pub(crate) fn start_args_in(home: &std::path::Path, args: &[&str]) -> Server {
        Server::start_args_env_in(home, args, &[])
    }

    /// [`Server::start_args_in`] with more environment variables.
    pub(crate) fn start_args_env_in(
        home: &std::path::Path,
        args: &[&str],
        envs: &[(&str, &std::ffi::OsStr)],
    ) -> Server {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_wick"));
        Server::start_binary_in(binary, home, args, envs)
    }

    /// `binary serve` (another build of wick) with `args` and `envs`, in `home`.
    pub(crate) fn start_binary_in(
        binary: &std::path::Path,
        home: &std::path::Path,
        args: &[&str],
        envs: &[(&str, &std::ffi::OsStr)],
    ) -> Server {
        // Two threads unless the test says (servers side by side may want one each).
        let threads: &[&str] = if args.contains(&"--threads") {
            &[]
        } else {
            &["--threads", "2"]
        };
        let log = tempfile::NamedTempFile::new().expect("a file for the server's stderr");
        let mut child = Command::new(binary)
            .env("WICK_HOME", home)
            .envs(envs.iter().map(|&(k, v)| (k, v)))
            .args(["serve", "--port", "0"])
            .args(threads)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(log.reopen().expect("the stderr file reopens"))
            .spawn()
            .expect("wick serve starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut base = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            // With several `--host`s, the first address printed.
            if let Some(rest) = line
                .split("listening on ")
                .nth(1)
                .filter(|_| base.is_none())
            {
                base = Some(rest.split_whitespace().next().unwrap().to_owned());
            }
            if line.contains("ready") {
                break;
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            base: base.expect("the server printed its address"),
            home: None,
            log,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `/metrics` once `ready` holds for it, or after 30 s (bounded polling, no timing
    /// assertion: the caller asserts on what it gets).
    pub(crate) fn metrics_when(&self, ready: impl Fn(&str) -> bool) -> String {
        let mut metrics = String::new();
        for _ in 0..300 {
            metrics = client()
                .get(self.url("/metrics"))
                .send()
                .unwrap()
                .text()
                .unwrap();
            if ready(&metrics) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        metrics
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit; its exit status.
    pub(crate) fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A test failing with the server up: whether the server had died, and how, and the
        // end of what it printed (a crash in CI is otherwise silent).
        if std::thread::panicking() {
            let status = self.child.try_wait().ok().flatten();
            let log = std::fs::read(self.log.path()).unwrap_or_default();
            let log = String::from_utf8_lossy(&log);
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            eprintln!(
                "the server at {} {}; the end of its stderr:\n{tail}",
                self.base,
                status.map_or_else(
                    || "was still running".to_owned(),
                    |s| format!("had exited: {s}")
                ),
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking HTTP client with no overall timeout (answers stream for a while).
pub(crate) fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
}

/// The `data:` payloads of an SSE body, checking every frame's shape; ends with `[DONE]`.
/// Comment frames (`: keep-alive`, sent while a request waits on a busy machine) carry no
/// event, as SSE clients read them.
pub(crate) fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "no [DONE] at the end: {body:?}"
    );
    body.split_terminator("\n\n")
        .filter(|e| !e.starts_with(':'))
        .map(|e| {
            assert!(
                e.starts_with("data: ") && !e.contains('\n'),
                "bad frame {e:?}"
            );
            e["data: ".len()..].to_owned()
        })
        .collect()
}

/// The content a streamed chat accumulates to, and its finish reason.
pub(crate) fn accumulate(events: &[String]) -> (String, Value) {
    let mut content = String::new();
    let mut finish = Value::Null;
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        if let Some(choice) = chunk["choices"].get(0) {
            content.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            if !choice["finish_reason"].is_null() {
                finish = choice["finish_reason"].clone();
            }
        }
    }
    (content, finish)
}

/// The test model requantized to `kind` by `wick quantize` (llama.cpp's llama-quantize), made
/// once into `$WICK_HOME/test-models`. The `Q2_K` and `Q3_K_M` mixes hold no tensor of their
/// type in a model this narrow: their `ffn_down` is asked for.
pub(crate) fn requantized(kind: &str) -> std::path::PathBuf {
    let dir = wick_home().join("test-models");
    let (name, extra): (String, &[&str]) = match kind {
        "Q2_K" => (
            format!("{kind}-ffn_down"),
            &["--tensor-type", "ffn_down=q2_k"],
        ),
        "Q3_K_M" => (
            format!("{kind}-ffn_down"),
            &["--tensor-type", "ffn_down=q3_k"],
        ),
        _ => (kind.to_string(), &[]),
    };
    let out = dir.join(format!("SmolLM2-135M-Instruct.{name}.gguf"));
    quantized_once(&wick_testutil::model_path(), kind, extra, out)
}

/// [`mixture_of_experts`]'s model requantized to `kind` (`MXFP4_MOE`: the experts in `MXFP4`,
/// gpt-oss's type, the rest in `Q8_0`), made once into `$WICK_HOME/test-models`.
pub(crate) fn mixture_of_experts_in(kind: &str) -> std::path::PathBuf {
    let out = wick_home()
        .join("test-models")
        .join(format!("SmolLM2-135M-Instruct.MoE-4x2.{kind}.gguf"));
    quantized_once(&mixture_of_experts(), kind, &[], out)
}

/// [`shaped_in`]'s shape.
pub(crate) const SHAPED: wick_testutil::Shape = wick_testutil::Shape {
    width: 512,
    feed_forward: 1536,
    layers: 4,
    heads: 8,
    kv_heads: 2,
};

/// A small dense `llama` whose widths hold the 256-value super-blocks (512 wide, a 1536-wide
/// network, 4 layers, 8 query heads of 64 sharing 2; random weights and the test model's
/// tokenizer: [`wick_testutil::shaped_model`]), requantized to `kind`: its every matrix in
/// the type named, where the test model's 576-wide rows put only `ffn_down` in it. Made once
/// into `$WICK_HOME/test-models`.
pub(crate) fn shaped_in(kind: &str) -> std::path::PathBuf {
    let source = made_once("shaped-512x4.BF16.gguf", |test_model| {
        wick_testutil::shaped_model(test_model, SHAPED, 5)
    });
    let out = wick_home()
        .join("test-models")
        .join(format!("shaped-512x4.{kind}.gguf"));
    quantized_once(&source, kind, &[], out)
}

/// `model` converted to `kind` by `wick quantize` (with `extra` flags) into `out`, unless
/// `out` is there.
fn quantized_once(
    model: &std::path::Path,
    kind: &str,
    extra: &[&str],
    out: std::path::PathBuf,
) -> std::path::PathBuf {
    if out.is_file() {
        return out;
    }
    let result = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["quantize", "-t", kind])
        .args(extra)
        .arg("-m")
        .arg(model)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("wick quantize runs");
    assert!(
        result.status.success(),
        "wick quantize -t {kind}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(out.is_file(), "{} was written", out.display());
    out
}

/// The test model as a mixture of four experts, two used per token
/// ([`wick_testutil::mixture_of_experts`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn mixture_of_experts() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.MoE-4x2.gguf", |dense| {
        wick_testutil::mixture_of_experts(dense, 4, 2, 7)
    })
}

/// The test model as a `starcoder2` model (layer norms, GELU, biases:
/// [`wick_testutil::layer_norm_model`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn layer_norm_model() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.starcoder2.gguf", |dense| {
        wick_testutil::layer_norm_model(dense, 11)
    })
}

/// The test model as a `gemma2` model (soft caps, `GEGLU`, post-norms, a sliding window of 4
/// tokens on every other layer: [`wick_testutil::gemma2_model`]), made once into
/// `$WICK_HOME/test-models`.
pub(crate) fn gemma2_model() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.gemma2-swa4.gguf", |dense| {
        wick_testutil::gemma2_model(dense, 4)
    })
}

/// The test model as a `gemma3` model (head norms, no soft caps, five layers in six on a
/// sliding window of 4 tokens: [`wick_testutil::gemma3_model`]), made once into
/// `$WICK_HOME/test-models`.
pub(crate) fn gemma3_model() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.gemma3-swa4.gguf", |dense| {
        wick_testutil::gemma3_model(dense, 4, 23)
    })
}

/// The test model as a `qwen2` model (biased queries, keys and values:
/// [`wick_testutil::qwen2_model`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn qwen2_model() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.qwen2.gguf", |dense| {
        wick_testutil::qwen2_model(dense, 13)
    })
}

/// The test model as a `qwen3` model (queries and keys normed per head:
/// [`wick_testutil::qwen3_model`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn qwen3_model() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.qwen3.gguf", |dense| {
        wick_testutil::qwen3_model(dense, 17)
    })
}

/// [`mixture_of_experts`]'s model as a `qwen3moe` model (head norms, the experts' own width:
/// [`wick_testutil::qwen3moe_model`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn qwen3moe_model() -> std::path::PathBuf {
    made_once(
        "SmolLM2-135M-Instruct.Q4_1.MoE-4x2.qwen3moe.gguf",
        |dense| {
            wick_testutil::qwen3moe_model(&wick_testutil::mixture_of_experts(dense, 4, 2, 7), 29)
        },
    )
}

/// The test model as a `phi3` model (fused attention and network matrices, rotary factors:
/// [`wick_testutil::phi3_model`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn phi3_model() -> std::path::PathBuf {
    made_once("SmolLM2-135M-Instruct.Q4_1.phi3.gguf", |dense| {
        wick_testutil::phi3_model(dense, 19)
    })
}

/// [`mixture_of_experts_in`]`("MXFP4_MOE")` as a `gpt-oss` model (attention sinks, biased
/// experts, a sliding window of 4 tokens on every other layer:
/// [`wick_testutil::gpt_oss_model`]), made once into `$WICK_HOME/test-models`.
pub(crate) fn gpt_oss_model() -> std::path::PathBuf {
    wick_testutil::made_once(
        &mixture_of_experts_in("MXFP4_MOE"),
        "SmolLM2-135M-Instruct.MoE-4x2.MXFP4_MOE.gpt-oss-swa4.gguf",
        |moe| wick_testutil::gpt_oss_model(moe, 4, 31),
    )
}

/// The architectures [`as_architecture`] rewrites the test model as.
pub(crate) const OTHER_ARCHITECTURES: [&str; 8] = [
    "smollm3",
    "granite",
    "mistral3",
    "olmo2",
    "exaone4",
    "cohere2",
    "deepseek2",
    "lfm2",
];

/// The test model as a model of `arch`: `smollm3`, `granite`, `mistral3`, `olmo2` (with a
/// sliding window of 4 tokens), `exaone4`, `cohere2` (a window of 4 tokens) or `deepseek2`
/// (multi-head latent attention) —
/// [`wick_testutil`]'s rewrites of it —, or `lfm2` (short convolutions with a recurrent state
/// beside attention), made once into `$WICK_HOME/test-models`.
pub(crate) fn as_architecture(arch: &str) -> std::path::PathBuf {
    let make: fn(&[u8]) -> Vec<u8> = match arch {
        "smollm3" => wick_testutil::smollm3_model,
        "granite" => wick_testutil::granite_model,
        "mistral3" => wick_testutil::mistral3_model,
        "olmo2" => |dense| wick_testutil::olmo2_model(dense, 4, 37),
        "exaone4" => |dense| wick_testutil::exaone4_model(dense, 41),
        "cohere2" => |dense| wick_testutil::cohere2_model(dense, 4),
        "deepseek2" => |dense| wick_testutil::deepseek2_model(dense, 43),
        "lfm2" => |dense| wick_testutil::lfm2_model(dense, 47),
        other => panic!("no rewrite of the test model as {other}"),
    };
    made_once(&format!("SmolLM2-135M-Instruct.Q4_1.{arch}.gguf"), make)
}

/// `$WICK_HOME/test-models/name`, made once by `make` from the test model's bytes.
fn made_once(name: &str, make: impl FnOnce(&[u8]) -> Vec<u8>) -> std::path::PathBuf {
    wick_testutil::made_once(&wick_testutil::model_path(), name, make)
}

pub(crate) use wick_testutil::wick_home;

/// The python of a client-test virtual environment: `$var` when set (`scripts/common.sh`
/// exports it), else `$WICK_HOME/<venv>/bin/python`. When `module` does not import there, the
/// venv is created and `package` installed; the test fails if it still does not import.
pub(crate) fn venv_python(
    var: &str,
    venv: &str,
    module: &str,
    package: &str,
) -> std::path::PathBuf {
    let python = std::env::var_os(var).map_or_else(
        || wick_home().join(venv).join("bin/python"),
        std::path::PathBuf::from,
    );
    let imports = |python: &std::path::Path| {
        Command::new(python)
            .args(["-c", &format!("import {module}")])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !imports(&python) {
        if !python.exists() {
            let dir = python
                .parent()
                .and_then(std::path::Path::parent)
                .expect("the python is VENV/bin/python");
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(dir)
                .status();
            assert!(
                made.is_ok_and(|s| s.success()),
                "cannot create a venv at {}",
                dir.display()
            );
        }
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", package])
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "cannot pip install {package}"
        );
    }
    assert!(
        imports(&python),
        "no {module} package in {}",
        python.display()
    );
    python
}

/// Runs `python tests/<script> ARGS…` (without the environment variables `unset`) and asserts
/// that it succeeded and printed `done`.
pub(crate) fn run_python_client(
    python: &std::path::Path,
    script: &str,
    args: &[&std::ffi::OsStr],
    unset: &[&str],
    done: &str,
) {
    let path = wick_testutil::crate_path(env!("CARGO_MANIFEST_DIR"), "tests").join(script);
    let mut command = Command::new(python);
    command.arg(&path).args(args);
    for var in unset {
        command.env_remove(var);
    }
    let out = command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {} (scripts/test installs it): {e}",
            python.display()
        )
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed\n{stdout}\n{stderr}");
    assert!(stdout.contains(done), "{stdout}");
}

/// Another build of wick, made by `scripts/SCRIPT ARGS` (which prints the binary's path as its
/// last line; minutes the first time, cached after).
pub(crate) fn built_by(script: &str, args: &[&str]) -> std::path::PathBuf {
    let root = wick_testutil::crate_path(env!("CARGO_MANIFEST_DIR"), "../..");
    let out = Command::new("bash")
        .arg(root.join("scripts").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("bash runs scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script} {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    std::path::PathBuf::from(stdout.lines().last().expect("the binary's path").trim())
}

/// GETs `path`; the JSON answer.
pub(crate) fn get_json(server: &Server, path: &str) -> Value {
    client()
        .get(server.url(path))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// POSTs `body` as JSON; the status and the JSON answer.
pub(crate) fn post_json(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = client().post(server.url(path)).json(body).send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap())
}

/// The value of the one series of counter `name` in a `/metrics` text (0 when absent).
pub(crate) fn metric(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A port nothing listens on right now (bound, read, released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
