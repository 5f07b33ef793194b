//! `wick bench`: wick against llama.cpp's own tools, on the same model, threads and context,
//! in one run.
//!
//! (a) pp512/tg128 of wick's backend, in both kernel modes, vs `llama-bench`; (b) 1, 4 and 8
//! concurrent streaming clients sharing a system prompt, wick serve vs `llama-server -np 8`
//! (medians of several runs); (c) time to first token of a request sharing a long prefix right
//! after a server restart (512, 2,048 and 4,096 tokens); (d) prompt tokens a 10-turn chat makes
//! each server compute; (e) server CPU per token while a long tool call streams; (f) time per
//! token of a JSON-schema answer beside the unconstrained one; (g) how many greedy answers
//! change when warm or concurrent instead of cold and alone; (h) generation tokens/s with
//! speculative decoding off and on, on an edit task and on free text. Both servers run as real
//! processes driven by the same client code.

mod client;
mod determinism;
mod kernel;
mod prompts;
mod report;
mod scenarios;
mod schema;
mod server;
mod spec;
pub(crate) mod tools;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use wick_backend::{Backend, BackendConfig, KernelMode};
use wick_llama::LlamaBackend;

use report::Report;
use server::{Launch, Side};

/// Arguments of `wick bench`.
#[derive(Debug, Args)]
#[allow(clippy::struct_excessive_bools)]
pub(crate) struct BenchArgs {
    /// The model to measure: a GGUF file or any model reference [default: the default model].
    /// Repeat it to measure (a) on several models (other weight types, say `wick quantize`'s):
    /// one row pair per model and CPU level; (b)–(h) run on the first.
    #[arg(short, long, value_name = "REF")]
    model: Vec<String>,

    /// The CPU levels (a) measures wick's deterministic kernels at, comma-separated (`scalar`,
    /// `avx2`, `avx2-vnni`, `avx512`) [default: every level this build has]. The headline row
    /// is the first model at the best level listed (beside the llama-bench built for that
    /// level, when --llama-per-level built one).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    cpu_levels: Vec<String>,

    /// Compare each CPU level below this machine's own with a llama-bench built for that level
    /// (ggml configured without its native flags, with only the level's instruction sets), as
    /// llama.cpp runs on a CPU of that level (also when wick itself was built for a lower
    /// level than the CPU's, `x86-64-v3` on an AVX-512 machine say); without it every level is
    /// compared with the native llama-bench. Each such level costs one more llama.cpp build
    /// the first time (minutes; kept in the cache directory).
    #[arg(long)]
    llama_per_level: bool,

    /// Layers both sides offload to the GPU (llama-bench's and llama-server's `-ngl`): needs a
    /// GPU build of wick (`scripts/build-gpu cuda|vulkan`), and llama.cpp's tools are then
    /// built with the same backend. With layers offloaded, (a) runs at one CPU level.
    #[arg(long, default_value_t = 0, value_name = "N")]
    gpu_layers: u32,

    /// CPU threads, the same for both sides [default: every core].
    #[arg(short, long, value_name = "N")]
    threads: Option<u32>,

    /// A shorter run (fewer repetitions, shorter answers; about 6 minutes on 2 cores once
    /// llama.cpp's tools are built).
    #[arg(long)]
    quick: bool,

    /// Only these measurements (comma-separated letters a–h) [default: all].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    only: Vec<char>,

    /// Where bench.md, bench.json and bench.png go.
    #[arg(short, long, default_value = "wick-bench", value_name = "DIR")]
    out: PathBuf,

    /// llama-cpp-python source distribution whose vendored llama.cpp provides llama-bench and
    /// llama-server (built once into the cache directory).
    #[arg(long, default_value = tools::DEFAULT_LLAMA_CPP_PYTHON, value_name = "VERSION")]
    llama_cpp_python: String,
}

/// Sizes of one run.
struct Plan {
    repetitions: usize,
    load: scenarios::LoadTest,
    prefixes: Vec<usize>,
    chat_tokens: u32,
    tool_tokens: u32,
    /// Runs of (f), whose medians are reported.
    schema_runs: usize,
    schema_tokens: u32,
    determinism: determinism::DeterminismTest,
    /// Whether (g) also runs wick serve with the fast kernels.
    determinism_fast: bool,
    /// Runs of each (h) task, whose medians are reported, and each answer's length.
    spec_runs: usize,
    spec_tokens: u32,
}

impl Plan {
    fn new(quick: bool) -> Self {
        let determinism = determinism::DeterminismTest {
            requests: prompts::QUESTIONS,
            max_tokens: if quick { 32 } else { 48 },
            concurrency: 8,
        };
        if quick {
            Plan {
                repetitions: 2,
                load: scenarios::LoadTest {
                    levels: vec![1, 4, 8],
                    rounds: 1,
                    runs: 1,
                    max_tokens: 32,
                },
                prefixes: vec![512, 2048, 4096],
                chat_tokens: 16,
                tool_tokens: 1024,
                schema_runs: 1,
                schema_tokens: 300,
                determinism,
                determinism_fast: false,
                spec_runs: 1,
                spec_tokens: 200,
            }
        } else {
            Plan {
                repetitions: 5,
                load: scenarios::LoadTest {
                    levels: vec![1, 4, 8],
                    rounds: 2,
                    runs: 3,
                    max_tokens: 128,
                },
                prefixes: vec![512, 2048, 4096],
                chat_tokens: 48,
                tool_tokens: 7424,
                schema_runs: 3,
                schema_tokens: 300,
                determinism,
                determinism_fast: true,
                spec_runs: 3,
                spec_tokens: 400,
            }
        }
    }
}

impl BenchArgs {
    fn wants(&self, part: char) -> bool {
        self.only.is_empty() || self.only.contains(&part)
    }
}

/// The CPU levels (a) runs at: those named, or every level this build has, plainest first.
fn cpu_levels(names: &[String]) -> Result<Vec<wick_kernels::cpu::Level>> {
    use wick_kernels::cpu;
    if names.is_empty() {
        return Ok(cpu::available());
    }
    let mut levels = Vec::new();
    for name in names {
        levels.push(name.parse::<cpu::Level>()?.require()?);
    }
    levels.sort();
    levels.dedup();
    Ok(levels)
}

/// (a) on every model at every level, with the fast kernels and llama-bench beside each (and
/// a llama-bench built for each level in `at_level`, when asked); the first model at the best
/// level is the headline.
fn kernels(
    models: &[std::path::PathBuf],
    levels: &[wick_kernels::cpu::Level],
    tools: &tools::Tools,
    at_level: &[(wick_kernels::cpu::Level, std::path::PathBuf)],
    test: kernel::KernelTest,
    report: &mut Report,
) -> Result<()> {
    eprintln!("wick bench: (a) pp512 / tg128, wick in both kernel modes");
    for (i, path) in models.iter().enumerate() {
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        let mut at_levels = Vec::new();
        let mut llama_at_levels = Vec::new();
        let mut invariant = true;
        for level in levels {
            eprintln!("wick bench: (a) {name}: wick's deterministic kernels at {level}");
            wick_kernels::cpu::set_cap(*level)?;
            let measured = kernel::wick(path, test, KernelMode::default());
            wick_kernels::cpu::set_cap(wick_kernels::cpu::best())?;
            let (rates, det) = measured?;
            invariant &= det;
            at_levels.push((level.to_string(), rates));
            if let Some((_, tool)) = at_level.iter().find(|(l, _)| l == level) {
                eprintln!("wick bench: (a) {name}: llama-bench built for {level}");
                let (llama, _) = kernel::llama_bench(tool, path, test)?;
                llama_at_levels.push((level.to_string(), llama));
            }
        }
        eprintln!("wick bench: (a) {name}: wick's fast kernels, llama-bench");
        let (fast, fast_invariant) = kernel::wick(path, test, KernelMode::Fast)?;
        let (llama, build) = kernel::llama_bench(&tools.llama_bench, path, test)?;
        if !build.is_empty() {
            report.llama_cpp_tools = format!("{}, {build}", tools.version);
        }
        let model = report::ModelKernel {
            model: name,
            levels: at_levels,
            fast,
            llama,
            llama_at_levels,
        };
        if i == 0 {
            // The headline: the best level listed, beside the llama-bench built for that
            // level when one was (a level below this machine's own), else the native one.
            let (level, best) = model.levels.last().expect("at least one level");
            let against = model.llama_built_for(level).unwrap_or(&model.llama);
            report.kernel = Some([*best, *against]);
            report.kernel_fast = Some(fast);
            report.kernel_invariant = Some([invariant, fast_invariant]);
        }
        report.kernel_models.push(model);
    }
    Ok(())
}

pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    if let Some(bad) = args.only.iter().find(|c| !('a'..='h').contains(*c)) {
        bail!("--only takes letters a to h, not {bad:?}");
    }
    let started = Instant::now();
    let models = if args.model.is_empty() {
        vec![crate::run::resolve_model(None)?]
    } else {
        args.model
            .iter()
            .map(|m| crate::run::resolve_model(Some(m)))
            .collect::<Result<Vec<_>>>()?
    };
    let model = models[0].clone();
    let gpu = tools::Gpu::of_this_build();
    if args.gpu_layers > 0 && gpu.is_none() {
        bail!(
            "--gpu-layers needs a GPU build of wick: scripts/build-gpu cuda (or vulkan) builds one"
        );
    }
    let gpu = gpu.filter(|_| args.gpu_layers > 0);
    let levels = if gpu.is_some() {
        vec![wick_kernels::cpu::best()]
    } else {
        cpu_levels(&args.cpu_levels)?
    };
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(4, |n| u32::try_from(n.get()).unwrap_or(4))
    });
    let tools = tools::ensure(&wick_models::wick_home(), &args.llama_cpp_python, gpu)?;
    let mut at_level = Vec::new();
    if args.llama_per_level && args.wants('a') {
        for level in &levels {
            let built =
                tools::ensure_bench_at(&wick_models::wick_home(), &args.llama_cpp_python, *level)?;
            at_level.extend(built.map(|tool| (*level, tool)));
        }
    }
    let plan = Plan::new(args.quick);
    let mut report = Report {
        wick_version: env!("CARGO_PKG_VERSION").to_owned(),
        wick_llama_cpp: format!(
            "llama.cpp from llama-cpp-sys-2 {}",
            tools::WICK_LLAMA_CPP_SYS
        ),
        llama_cpp_tools: tools.version.clone(),
        model: model.display().to_string(),
        threads,
        gpu_layers: args.gpu_layers,
        quick: args.quick,
        ..Report::default()
    };
    eprintln!(
        "wick bench: {} ({} threads); wick links {}, measured against {}",
        model.display(),
        threads,
        report.wick_llama_cpp,
        tools.version
    );
    if args.wants('a') {
        let test = kernel::KernelTest {
            n_prompt: 512,
            n_gen: 128,
            repetitions: plan.repetitions,
            threads,
            gpu_layers: args.gpu_layers,
        };
        kernels(&models, &levels, &tools, &at_level, test, &mut report)?;
    }
    let scratch = tempfile::Builder::new()
        .prefix("wick-bench-")
        .tempdir_in(std::env::temp_dir())?;
    let launch = |name: &str, ctx: u32, parallel: u32| Launch {
        model: model.clone(),
        threads,
        ctx,
        parallel,
        wick_home: scratch.path().join(name),
        llama_server: tools.llama_server.clone(),
        chat_template_file: None,
        wick_args: Vec::new(),
        llama_args: Vec::new(),
        gpu_layers: args.gpu_layers,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if let Err(e) = runtime.block_on(servers(args, &plan, &model, &launch, &mut report)) {
        let kept = scratch.keep();
        return Err(e.context(format!("the servers' logs are kept in {}", kept.display())));
    }
    println!("{}", report.markdown());
    report.write(&args.out)?;
    eprintln!(
        "wick bench: wrote {0}/bench.md, {0}/bench.json and {0}/bench.png in {1:.0}s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

const SIDES: [Side; 2] = [Side::Wick, Side::LlamaCpp];

fn against(side: Side) -> impl Fn() -> String {
    move || format!("against {}", side.label())
}

/// (b) to (h): each against wick serve, then llama-server, each in a fresh process.
async fn servers(
    args: &BenchArgs,
    plan: &Plan,
    model: &std::path::Path,
    launch: &impl Fn(&str, u32, u32) -> Launch,
    report: &mut Report,
) -> Result<()> {
    if args.wants('b') {
        eprintln!("wick bench: (b) 1/4/8 concurrent streaming clients");
        let mut sides = Vec::new();
        for side in SIDES {
            let l = launch(&format!("load-{}", side.label()), 2048, 8);
            let load = scenarios::load(&l, side, &plan.load).await;
            sides.push(load.with_context(against(side))?);
        }
        report.load = Some(pair(sides));
    }
    if args.wants('c') {
        eprintln!("wick bench: (c) time to first token after a restart");
        let document = Document::load(model)?;
        let mut sides = vec![Vec::new(), Vec::new()];
        for &length in &plan.prefixes {
            let prefix = document.prefix(length)?;
            for (i, side) in SIDES.into_iter().enumerate() {
                let l = launch(&format!("restart-{length}-{}", side.label()), 8192, 1);
                let restart = scenarios::restart(&l, side, &prefix).await;
                sides[i].push(restart.with_context(against(side))?);
            }
        }
        report.restart = Some(pair(sides));
    }
    if args.wants('d') {
        eprintln!("wick bench: (d) a 10-turn chat");
        let mut sides = Vec::new();
        for side in SIDES {
            let l = launch(&format!("chat-{}", side.label()), 4096, 1);
            let chat = scenarios::conversation(&l, side, 10, plan.chat_tokens).await;
            sides.push(chat.with_context(against(side))?);
        }
        report.conversation = Some(pair(sides));
    }
    if args.wants('e') {
        eprintln!("wick bench: (e) a streamed tool call with long arguments");
        let mut sides = Vec::new();
        for side in SIDES {
            let mut l = launch(&format!("tool-{}", side.label()), 8192, 1);
            // A template with tool calls (Hermes style), the same for both servers: the
            // test model's own has none, and llama-server then ignores `tool_choice`.
            let template = l.wick_home.join("tools.jinja");
            std::fs::create_dir_all(&l.wick_home)?;
            std::fs::write(&template, scenarios::HERMES_TEMPLATE)?;
            l.chat_template_file = Some(template);
            let tool = scenarios::tool_stream(&l, side, plan.tool_tokens).await;
            sides.push(tool.with_context(against(side))?);
        }
        report.tool_stream = Some(pair(sides));
    }
    if args.wants('f') {
        eprintln!("wick bench: (f) a JSON-schema answer beside an unconstrained one");
        let mut sides = Vec::new();
        for side in SIDES {
            let l = launch(&format!("schema-{}", side.label()), 2048, 1);
            let out = schema::schema_output(&l, side, plan.schema_runs, plan.schema_tokens);
            sides.push(out.await.with_context(against(side))?);
        }
        report.schema = Some(pair(sides));
    }
    if args.wants('g') {
        determinism(plan, launch, report).await?;
    }
    if args.wants('h') {
        eprintln!("wick bench: (h) speculative decoding off and on, edit task and free text");
        let mut sides = Vec::new();
        for side in SIDES {
            let mut off = launch(&format!("spec-off-{}", side.label()), 2048, 1);
            let mut on = launch(&format!("spec-on-{}", side.label()), 2048, 1);
            match side {
                Side::Wick => {
                    // wick serve drafts by default: "off" must say so.
                    off.wick_args = spec::off_flags();
                    on.wick_args = spec::flags(side);
                }
                Side::LlamaCpp => on.llama_args = spec::flags(side),
            }
            let out = spec::speculation(&off, &on, side, plan.spec_runs, plan.spec_tokens);
            sides.push(out.await.with_context(against(side))?);
        }
        report.speculation = Some(pair(sides));
    }
    Ok(())
}

/// (g) on both servers, and on wick with the fast kernels when the plan asks.
async fn determinism(
    plan: &Plan,
    launch: &impl Fn(&str, u32, u32) -> Launch,
    report: &mut Report,
) -> Result<()> {
    let test = plan.determinism;
    eprintln!(
        "wick bench: (g) {} greedy answers cold, warm and {} at once",
        test.requests, test.concurrency
    );
    // Each process has its own empty cache directory; wick keeps no prompt cache on disk.
    let fresh = |side: Side, fast: bool| {
        move |name: &str| {
            let mut l = launch(&format!("determinism-{}-{name}", side.label()), 1024, 8);
            l.wick_args = vec!["--kv-cache-size".to_owned(), "0".to_owned()];
            if fast {
                l.wick_args
                    .extend(["--kernels".to_owned(), "fast".to_owned()]);
            }
            l
        }
    };
    let mut sides = Vec::new();
    for side in SIDES {
        let out = determinism::determinism(&fresh(side, false), side, test).await;
        sides.push(out.with_context(against(side))?);
    }
    report.determinism = Some(pair(sides));
    if plan.determinism_fast {
        let out = determinism::determinism(&fresh(Side::Wick, true), Side::Wick, test).await;
        report.determinism_fast = Some(out.context("against wick serve --kernels fast")?);
    }
    Ok(())
}

/// The two sides' results, wick first.
fn pair<T>(sides: Vec<T>) -> [T; 2] {
    let mut it = sides.into_iter();
    match (it.next(), it.next()) {
        (Some(wick), Some(llama)) => [wick, llama],
        _ => unreachable!("both sides ran"),
    }
}

/// A long, varied text and the model's tokenizer, to cut prefixes of exact token counts.
struct Document {
    backend: LlamaBackend,
    tokens: Vec<wick_types::TokenId>,
}

impl Document {
    fn load(model: &std::path::Path) -> Result<Self> {
        let backend =
            LlamaBackend::load(&BackendConfig::new(model).with_n_ctx(512).with_n_seq_max(1))?;
        let places = [
            "harbour", "mill", "market", "bridge", "library", "orchard", "quarry",
        ];
        let things = [
            "lanterns", "barrels", "letters", "ropes", "maps", "clocks", "nets",
        ];
        let mut text = String::from("A ledger of the town's records.\n");
        for i in 0..3000usize {
            let place = places[i % places.len()];
            let thing = things[(i * 3 + 1) % things.len()];
            let _ = writeln!(
                text,
                "Record {i}: at the {place}, {} {thing} were counted on day {}.",
                (i * 37) % 101 + 2,
                (i * 13) % 365 + 1
            );
        }
        let tokens = backend.tokenize(&text, false)?;
        Ok(Document { backend, tokens })
    }

    /// The text of the document's first `n` tokens.
    fn prefix(&self, n: usize) -> Result<String> {
        if n > self.tokens.len() {
            bail!("the bench document has only {} tokens", self.tokens.len());
        }
        let bytes = self.backend.detokenize(&self.tokens[..n])?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
