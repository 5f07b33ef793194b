//! llama.cpp's own `llama-bench`, `llama-server` and `llama-quantize`, built on demand into the
//! cache directory.
//!
//! llama-cpp-sys-2 ships a llama.cpp trimmed to the library, so the tools come from the
//! llama-cpp-python source distribution, which vendors the whole tree under `vendor/llama.cpp`.
//! It is fetched with `pip download` (the only network wick's machines have is the package
//! registries), unpacked once, configured with the same CPU flags wick builds with
//! (`GGML_NATIVE`, see `.cargo/config.toml`) and only the two targets are built.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use wick_kernels::cpu::Level;

/// llama-cpp-python's version whose vendored llama.cpp is nearest the one wick links.
pub(crate) const DEFAULT_LLAMA_CPP_PYTHON: &str = "0.3.36";

/// The llama-cpp-sys-2 version wick links (read from Cargo.lock by the build script).
pub(crate) const WICK_LLAMA_CPP_SYS: &str = env!("WICK_LLAMA_CPP_SYS_VERSION");

/// The built tools and where they came from.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub(crate) llama_bench: PathBuf,
    pub(crate) llama_server: PathBuf,
    pub(crate) llama_quantize: PathBuf,
    /// `llama-cpp-python <version> vendor/llama.cpp`, plus the build number when known.
    pub(crate) version: String,
}

/// Where one llama-cpp-python version's tree and build live (a GPU build beside the CPU one).
fn root(cache: &Path, version: &str, gpu: Option<Gpu>) -> PathBuf {
    let suffix = gpu.map_or(String::new(), |g| format!("-{}", g.name()));
    cache
        .join("llama.cpp")
        .join(format!("llama-cpp-python-{version}{suffix}"))
}

/// A GPU backend llama.cpp's tools are built with, as wick itself is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gpu {
    Cuda,
    Vulkan,
}

impl Gpu {
    /// The backend this wick was built with (`--features cuda` or `vulkan`), if any.
    pub(crate) fn of_this_build() -> Option<Gpu> {
        if cfg!(feature = "cuda") {
            Some(Gpu::Cuda)
        } else if cfg!(feature = "vulkan") {
            Some(Gpu::Vulkan)
        } else {
            None
        }
    }

    fn name(self) -> &'static str {
        match self {
            Gpu::Cuda => "cuda",
            Gpu::Vulkan => "vulkan",
        }
    }

    /// The cmake option that builds ggml with it.
    fn cmake_flag(self) -> &'static str {
        match self {
            Gpu::Cuda => "-DGGML_CUDA=ON",
            Gpu::Vulkan => "-DGGML_VULKAN=ON",
        }
    }
}

/// The tools for `version` (with `gpu`'s backend: a build of their own), building them first
/// when they are missing.
pub(crate) fn ensure(cache: &Path, version: &str, gpu: Option<Gpu>) -> Result<Tools> {
    let root = root(cache, version, gpu);
    let build = Build {
        dir: root.join("build"),
        flags: cmake_flags(gpu),
        targets: &["llama-bench", "llama-server", "llama-quantize"],
        root,
    };
    build.ensure(version)?;
    let bin = build.dir.join("bin");
    Ok(Tools {
        llama_bench: bin.join("llama-bench"),
        llama_server: bin.join("llama-server"),
        llama_quantize: bin.join("llama-quantize"),
        version: format!(
            "llama-cpp-python {version} vendor/llama.cpp{}",
            gpu.map_or(String::new(), |g| format!(" ({})", g.name()))
        ),
    })
}

/// `llama-bench` built for one CPU level (`wick bench --llama-per-level`): ggml without
/// `GGML_NATIVE`, with only the instruction sets wick's kernels use at that level, so a level
/// below the machine's own is compared with llama.cpp as it runs on a CPU of that level. Built
/// from the CPU tools' source tree into a build directory of its own (`build-<level>`), once.
/// `None` where the level is the machine's own or the architecture has no such build: the
/// native tools stand for it.
pub(crate) fn ensure_bench_at(
    cache: &Path,
    version: &str,
    level: Level,
) -> Result<Option<PathBuf>> {
    let Some(flags) = level_flags(level) else {
        return Ok(None);
    };
    // The machine's own level is the native llama-bench's (a wick built for a lower level,
    // x86-64-v3 say, is compared at its best level with a llama-bench built for it too).
    if level >= wick_kernels::cpu::machine() {
        return Ok(None);
    }
    let root = root(cache, version, None);
    let build = Build {
        dir: root.join(format!("build-{level}")),
        flags,
        targets: &["llama-bench"],
        root,
    };
    build.ensure(version)?;
    Ok(Some(build.dir.join("bin").join("llama-bench")))
}

/// One build of llama.cpp's tools: the tree it builds from (`root/src`), its build directory,
/// cmake options and targets.
struct Build {
    root: PathBuf,
    dir: PathBuf,
    flags: Vec<String>,
    targets: &'static [&'static str],
}

impl Build {
    /// Builds the targets unless they are there, built with these options (a stamp file in
    /// the build directory records them: a build made with others is built again), fetching
    /// the source first when it is missing.
    fn ensure(&self, version: &str) -> Result<()> {
        let bin = self.dir.join("bin");
        let stamp = self.dir.join("wick-cmake-flags");
        let flags = self.flags.join(" ");
        let built = || {
            self.targets.iter().all(|t| bin.join(t).is_file())
                && std::fs::read_to_string(&stamp).is_ok_and(|s| s == flags)
        };
        if built() {
            return Ok(());
        }
        if !self.root.join("src").join("CMakeLists.txt").is_file() {
            fetch_source(&self.root, version)?;
        }
        build(self)?;
        std::fs::write(&stamp, &flags).with_context(|| format!("writing {}", stamp.display()))?;
        if !built() {
            bail!(
                "the llama.cpp build finished but a tool is missing in {}; see {}",
                bin.display(),
                self.log().display()
            );
        }
        Ok(())
    }

    /// The build's log, beside its directory (`build.log`, `build-avx2.log`).
    fn log(&self) -> PathBuf {
        let name = self
            .dir
            .file_name()
            .map_or_else(|| "build".into(), |n| n.to_string_lossy().into_owned());
        self.root.join(format!("{name}.log"))
    }
}

/// `pip download` the sdist and unpack its `vendor/llama.cpp` into `root/src`.
fn fetch_source(root: &Path, version: &str) -> Result<()> {
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let download = root.join("sdist");
    eprintln!("wick bench: fetching llama-cpp-python {version}'s source (pip download)…");
    let status = Command::new(python())
        .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:"])
        .arg(format!("llama-cpp-python=={version}"))
        .arg("-d")
        .arg(&download)
        .stdout(Stdio::null())
        .status()
        .context("running python3 -m pip (install Python 3 with pip)")?;
    if !status.success() {
        bail!("pip download of llama-cpp-python=={version} failed ({status})");
    }
    let archive = std::fs::read_dir(&download)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .with_context(|| format!("no .tar.gz in {}", download.display()))?;
    let unpack = root.join("unpack");
    let _ = std::fs::remove_dir_all(&unpack);
    std::fs::create_dir_all(&unpack)?;
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpack)
        .arg("--wildcards")
        .arg("*/vendor/llama.cpp/*")
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("unpacking {} failed ({status})", archive.display());
    }
    let vendored = unpack
        .join(format!("llama_cpp_python-{version}"))
        .join("vendor")
        .join("llama.cpp");
    let src = root.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::rename(&vendored, &src)
        .with_context(|| format!("moving {} to {}", vendored.display(), src.display()))?;
    let _ = std::fs::remove_dir_all(&unpack);
    let _ = std::fs::remove_dir_all(&download);
    Ok(())
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// What every build of the tools is configured with.
const COMMON_FLAGS: [&str; 5] = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
];

/// The tools' cmake options (a build made with others is built again).
///
/// On x86-64 without ggml's AMX kernels: they crashed on the first AMX machine wick ran on
/// (`llama-bench` itself: an illegal instruction on `tileloadd`), and wick's fast mode leaves
/// them out too (`wick-llama`'s `with_plain_weights`), so both sides run the same kernels.
/// GCC and Clang let an explicit `-mno-…` win over what `-march=native` implies.
fn cmake_flags(gpu: Option<Gpu>) -> Vec<String> {
    let mut flags: Vec<String> = COMMON_FLAGS.map(String::from).into();
    flags.push("-DGGML_NATIVE=ON".into());
    if cfg!(target_arch = "x86_64") {
        let no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";
        flags.push(format!("-DCMAKE_C_FLAGS={no_amx}"));
        flags.push(format!("-DCMAKE_CXX_FLAGS={no_amx}"));
    }
    flags.extend(gpu.map(|g| g.cmake_flag().to_owned()));
    flags
}

/// The cmake options of a `llama-bench` for `level` (see [`ensure_bench_at`]): ggml's
/// instruction-set options set one by one instead of `GGML_NATIVE`. `scalar` is x86-64's
/// baseline (SSE2), ggml's plainest build. `None` off x86-64.
fn level_flags(level: Level) -> Option<Vec<String>> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let x86_64_v3 = [
        "GGML_SSE42",
        "GGML_AVX",
        "GGML_AVX2",
        "GGML_BMI2",
        "GGML_FMA",
        "GGML_F16C",
    ];
    let on: Vec<&str> = match level {
        Level::Scalar => Vec::new(),
        Level::Avx2 => x86_64_v3.to_vec(),
        Level::Avx2Vnni => [&x86_64_v3[..], &["GGML_AVX_VNNI"]].concat(),
        Level::Avx512 => [&x86_64_v3[..], &["GGML_AVX512", "GGML_AVX512_VNNI"]].concat(),
    };
    let every = [
        "GGML_SSE42",
        "GGML_AVX",
        "GGML_AVX_VNNI",
        "GGML_AVX2",
        "GGML_BMI2",
        "GGML_FMA",
        "GGML_F16C",
        "GGML_AVX512",
        "GGML_AVX512_VBMI",
        "GGML_AVX512_VNNI",
        "GGML_AVX512_BF16",
        "GGML_AMX_TILE",
        "GGML_AMX_INT8",
        "GGML_AMX_BF16",
    ];
    let mut flags: Vec<String> = COMMON_FLAGS.map(String::from).into();
    flags.push("-DGGML_NATIVE=OFF".into());
    flags.extend(every.iter().map(|option| {
        let value = if on.contains(option) { "ON" } else { "OFF" };
        format!("-D{option}={value}")
    }));
    Some(flags)
}

/// Configures and builds `b`'s targets, showing cmake's progress (a tree built before keeps
/// what it built: only what is missing compiles).
fn build(b: &Build) -> Result<()> {
    let log_path = b.log();
    let log = std::fs::File::create(&log_path)?;
    let configure = Command::new("cmake")
        .arg("-S")
        .arg(b.root.join("src"))
        .arg("-B")
        .arg(&b.dir)
        .args(&b.flags)
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        .status()
        .context("running cmake (scripts/common.sh installs it)")?;
    if !configure.success() {
        bail!("configuring llama.cpp failed; see {}", log_path.display());
    }
    let jobs = std::thread::available_parallelism().map_or(2, usize::from);
    let started = Instant::now();
    let bar = ProgressBar::new(100).with_style(
        ProgressStyle::with_template("building llama.cpp's tools {bar:30} {pos}% {elapsed} {msg}")
            .expect("a valid template"),
    );
    let mut child = Command::new("cmake")
        .arg("--build")
        .arg(&b.dir)
        .arg("--target")
        .args(b.targets)
        .arg("-j")
        .arg(jobs.to_string())
        .stdout(Stdio::piped())
        .stderr(log.try_clone()?)
        .spawn()
        .context("running cmake --build")?;
    let mut log = log;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        std::io::Write::write_all(&mut log, format!("{line}\n").as_bytes())?;
        if let Some(percent) = percent(&line) {
            bar.set_position(percent);
        }
    }
    let status = child.wait()?;
    bar.finish_and_clear();
    if !status.success() {
        bail!(
            "building llama.cpp's tools failed; see {}",
            log_path.display()
        );
    }
    eprintln!(
        "wick: built {} in {} ({:.0}s)",
        b.targets.join(", "),
        b.dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The percentage of a cmake/make progress line (`[ 42%] Building …`).
fn percent(line: &str) -> Option<u64> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (number, _) = rest.split_once("%]")?;
    number.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cmake_progress() {
        assert_eq!(percent("[ 42%] Building CXX object x.o"), Some(42));
        assert_eq!(percent("[100%] Built target llama-bench"), Some(100));
        assert_eq!(percent("-- Configuring done"), None);
    }

    #[test]
    fn a_level_s_llama_bench_has_that_level_s_instruction_sets_only() {
        if !cfg!(target_arch = "x86_64") {
            assert_eq!(level_flags(Level::Avx2), None);
            return;
        }
        let flags = |level| level_flags(level).unwrap().join(" ");
        for level in Level::ALL {
            let flags = flags(level);
            assert!(flags.contains("-DGGML_NATIVE=OFF"), "{flags}");
            assert!(!flags.contains("GGML_NATIVE=ON"), "{flags}");
            assert!(flags.contains("-DGGML_AMX_INT8=OFF"), "{flags}");
            assert!(flags.contains("-DCMAKE_BUILD_TYPE=Release"), "{flags}");
        }
        let avx2 = flags(Level::Avx2);
        for on in ["AVX2", "FMA", "F16C", "BMI2"] {
            assert!(avx2.contains(&format!("-DGGML_{on}=ON")), "{avx2}");
        }
        for off in ["AVX_VNNI", "AVX512", "AVX512_VNNI"] {
            assert!(avx2.contains(&format!("-DGGML_{off}=OFF")), "{avx2}");
        }
        let vnni = flags(Level::Avx2Vnni);
        assert!(vnni.contains("-DGGML_AVX_VNNI=ON") && vnni.contains("-DGGML_AVX512=OFF"));
        let wide = flags(Level::Avx512);
        assert!(wide.contains("-DGGML_AVX512=ON") && wide.contains("-DGGML_AVX512_VNNI=ON"));
        let scalar = flags(Level::Scalar);
        assert!(!scalar.contains("=ON"), "{scalar}");
    }

    #[test]
    fn knows_the_linked_version() {
        assert!(
            WICK_LLAMA_CPP_SYS.split('.').count() == 3,
            "{WICK_LLAMA_CPP_SYS}"
        );
    }
}
