//! Loading: the process-wide llama.cpp init, model and context parameters, model metadata.

use std::num::NonZeroU32;
use std::sync::OnceLock;

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::llama_backend::LlamaBackend as LlamaRuntime;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use wick_backend::{BackendConfig, BackendError, GpuLayers, KernelMode, ModelInfo};

/// llama.cpp's global state (`llama_backend_init`) may be set up once per process, so it is the
/// one process-wide value wick keeps; every model shares it.
static RUNTIME: OnceLock<Result<LlamaRuntime, String>> = OnceLock::new();

pub(crate) fn runtime() -> Result<&'static LlamaRuntime, BackendError> {
    RUNTIME
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaRuntime::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|reason| BackendError::Load {
            path: "llama.cpp".into(),
            reason: reason.clone(),
        })
}

/// Whether the layers `config` leaves on the CPU run the batch-invariant CPU kernels (wick's
/// and ggml's reference ones): asked for, in a process where the switch could be put in.
pub(crate) fn cpu_deterministic(config: &BackendConfig) -> bool {
    config.kernels == KernelMode::Deterministic && crate::ffi::kernel_switch_available()
}

/// Whether the whole model is bit-deterministic: every layer on the CPU's batch-invariant
/// kernels (GPU kernels are not batch-invariant).
pub(crate) fn deterministic(config: &BackendConfig) -> bool {
    cpu_deterministic(config) && config.n_gpu_layers.is_none()
}

/// The devices `names` names, in that order; an unknown name is an error listing the known
/// ones.
fn named_devices(names: &[String]) -> Result<Vec<crate::ffi::Device>, BackendError> {
    let known: Vec<crate::ffi::Device> = crate::ffi::all_devices()
        .into_iter()
        .filter(|d| d.kind != "cpu")
        .collect();
    names
        .iter()
        .map(|name| {
            let found = known.iter().find(|d| d.name.eq_ignore_ascii_case(name));
            found.cloned().ok_or_else(|| {
                let listed: Vec<String> = known
                    .iter()
                    .map(|d| format!("{} ({})", d.name, d.description))
                    .collect();
                let listed = if listed.is_empty() {
                    "none: this build runs on the CPU only".to_owned()
                } else {
                    listed.join(", ")
                };
                BackendError::Config {
                    field: "devices",
                    value: format!("{name} (this build of llama.cpp has {listed})"),
                    allowed: "a GPU device llama.cpp sees, by name: `wick devices` lists them",
                }
            })
        })
        .collect()
}

/// A device llama.cpp can run layers on, as [`devices`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// ggml's name for it (`CPU`, `Vulkan0`, `CUDA0`, `RPC0`, …): what `--device` takes.
    pub name: String,
    /// What it is (the processor's or the card's name, an RPC worker's `HOST:PORT`).
    pub description: String,
    /// `cpu`, `gpu`, `igpu` (integrated GPU) or `accel`.
    pub kind: &'static str,
    /// Its memory, in bytes.
    pub total: u64,
    /// Its free memory now, in bytes.
    pub free: u64,
}

/// Every device this build of llama.cpp sees, in its order: the CPU, then the GPUs of the
/// backends it was built with (CUDA, Vulkan, …). llama.cpp's Vulkan backend leaves out
/// CPU-type Vulkan devices (lavapipe) unless `GGML_VK_VISIBLE_DEVICES` names them.
///
/// # Errors
///
/// [`BackendError::Load`] when llama.cpp cannot start.
pub fn devices() -> Result<Vec<DeviceInfo>, BackendError> {
    runtime()?;
    Ok(crate::ffi::all_devices()
        .into_iter()
        .map(|d| DeviceInfo {
            name: d.name,
            description: d.description,
            kind: d.kind,
            total: d.total as u64,
            free: d.free as u64,
        })
        .collect())
}

/// A model loaded: the devices it offloads to and its config with `--gpu-layers auto` resolved
/// to the layers that fitted.
pub(crate) struct LoadedModel {
    pub(crate) model: LlamaModel,
    pub(crate) devices: Vec<crate::ffi::Device>,
    pub(crate) config: BackendConfig,
}

/// Loads the model of `config`: on the CPU, its local GPUs, or with `rpc_servers` the RPC
/// workers' devices (checked and registered first).
pub(crate) fn load_model(config: &BackendConfig) -> Result<LoadedModel, BackendError> {
    crate::gguf::check_gguf(&config.model_path)?;
    runtime()?;
    let mut params = LlamaModelParams::default();
    let devices = if config.rpc_servers.is_empty() {
        crate::ffi::local_gpus()
    } else {
        crate::rpc::connect(&config.rpc_servers)?
    };
    // Devices named by the user: those only, in the order given.
    let devices = if config.devices.is_empty() {
        devices
    } else {
        named_devices(&config.devices)?
    };
    // ggml's device list is process-wide: name the devices whenever workers are registered, so
    // a model gets its own workers and one without `rpc_servers` none.
    if crate::ffi::rpc_registered() || !config.devices.is_empty() {
        let indices: Vec<usize> = devices.iter().map(|d| d.index).collect();
        params = params
            .with_devices(&indices)
            .map_err(|e| BackendError::RpcWorker {
                endpoint: config.rpc_servers.join(","),
                reason: format!("llama.cpp cannot use these devices ({e})"),
            })?;
    }
    let n_gpu_layers = match config.n_gpu_layers {
        GpuLayers::Count(n) => {
            params = params.with_n_gpu_layers(n);
            n
        }
        GpuLayers::Auto { margin } => fit_layers(config, &mut params, &devices, margin)?,
    };
    let config = &config.clone().with_n_gpu_layers(n_gpu_layers);
    // Deterministic: every weight in ggml's plain layout. The repacked ones (Q4_0, Q4_K,
    // IQ4_NL, … in "CPU_REPACK") run tiled GEMM kernels outside the reference switch, whose
    // sums depend on the batch's row count, and wick's kernels read the plain layout only. A
    // tensor override to the CPU buffer type does not keep them out (llama.cpp then still
    // considers the extra buffer types), so the CPU registry is asked not to offer them.
    let runtime = runtime()?;
    let loaded = crate::ffi::with_plain_weights(cpu_deterministic(config), || {
        LlamaModel::load_from_file(runtime, &config.model_path, &params)
    });
    let model = loaded.map_err(|e| {
        let offloaded = if n_gpu_layers == 0 || devices.is_empty() {
            String::new()
        } else {
            format!(
                ", with {n_gpu_layers} layers on {} (do they fit? fewer --gpu-layers, or \
                 --gpu-layers auto, leave some on the CPU)",
                free_memory_of(&devices)
            )
        };
        BackendError::Load {
            path: config.model_path.clone(),
            reason: format!(
                "llama.cpp could not load it ({e}{offloaded}); is it a complete GGUF model?"
            ),
        }
    })?;
    Ok(LoadedModel {
        model,
        devices,
        config: config.clone(),
    })
}

/// `Vulkan0 (llvmpipe, 1.9 GiB free), …`: the devices and their free memory now.
fn free_memory_of(devices: &[crate::ffi::Device]) -> String {
    let now = crate::ffi::all_devices();
    devices
        .iter()
        .map(|d| {
            let free = now
                .iter()
                .find(|n| n.index == d.index)
                .map_or(d.free, |n| n.free);
            format!("{} ({}, {} free)", d.name, d.description, gib(free as u64))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bytes as GiB with one decimal (`1.9 GiB`), MiB below one GiB.
pub(crate) fn gib(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)] // a figure for a message
    let bytes = bytes as f64;
    if bytes >= f64::from(1u32 << 30) {
        format!("{:.1} GiB", bytes / f64::from(1u32 << 30))
    } else {
        format!("{:.0} MiB", bytes / f64::from(1u32 << 20))
    }
}

/// `--gpu-layers auto`: llama.cpp's `common_fit_params` (what llama-server's `--fit on` runs)
/// measures the model and the context on `devices` without allocating, and sets the layers
/// (and, for mixture-of-experts models, which experts stay in system memory) so each device keeps `margin`
/// bytes free. Returns the layers offloaded; none without a GPU.
fn fit_layers(
    config: &BackendConfig,
    params: &mut LlamaModelParams,
    devices: &[crate::ffi::Device],
    margin: u64,
) -> Result<u32, BackendError> {
    // The fit swaps llama.cpp's global logger while it runs: one at a time.
    static FITTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if devices.is_empty() {
        return Ok(0);
    }
    let _one = FITTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let path =
        std::ffi::CString::new(config.model_path.to_string_lossy().as_bytes()).map_err(|_| {
            BackendError::Load {
                path: config.model_path.clone(),
                reason: "the path holds a NUL byte".into(),
            }
        })?;
    let mut cparams = context_params(config, config.n_ctx);
    let mut margins =
        vec![usize::try_from(margin).unwrap_or(usize::MAX); llama_cpp_2::max_devices()];
    std::pin::Pin::new(&mut *params)
        .fit_params(
            &path,
            &mut cparams,
            &mut margins,
            config.n_ctx,
            llama_cpp_sys_2::GGML_LOG_LEVEL_WARN,
        )
        .map_err(|e| BackendError::Load {
            path: config.model_path.clone(),
            reason: format!(
                "--gpu-layers auto: llama.cpp found no split of it and a context of {} tokens × \
                 {} sequences that leaves {} free on {} ({e})",
                config.n_ctx,
                config.n_seq_max,
                gib(margin),
                free_memory_of(devices)
            ),
        })?;
    // llama.cpp's default (-1), left when everything fits, is every layer.
    Ok(u32::try_from(params.n_gpu_layers()).unwrap_or(GPU_ALL))
}

/// llama.cpp's "every layer": more than any model has.
const GPU_ALL: u32 = 999;

/// The per-sequence window: the configured one, capped at the model's training context.
pub(crate) fn seq_ctx(config: &BackendConfig, model: &LlamaModel) -> u32 {
    let train = model.n_ctx_train();
    if train == 0 {
        config.n_ctx
    } else {
        config.n_ctx.min(train)
    }
}

pub(crate) fn threads(config: &BackendConfig) -> i32 {
    let n = config.n_threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(4, |n| u32::try_from(n.get()).unwrap_or(4))
    });
    i32::try_from(n).unwrap_or(4)
}

/// The generation context: `n_seq_max` sequences decoding in one batch. On the CPU each has
/// its own KV stream (not one unified cache): a sequence's attention then never spans cells of
/// other sequences, and its keys stay in position order, which the batch-invariant attention
/// needs. Flash attention is on: with the reference kernels its per-row sums are the same
/// whatever the batch (the tiled and split-KV paths are what vary).
///
/// With layers offloaded (never bit-deterministic) the cache is one unified stream, as
/// llama-server's default: ggml-vulkan on several streams crashed lavapipe (Mesa 22.3) on
/// every batch of several sequences run first in a process, and one unified stream did not
/// (`crates/cli/tests/gpu.rs`, the conformance suite's batched checks).
pub(crate) fn context_params(config: &BackendConfig, n_ctx: u32) -> LlamaContextParams {
    let total = n_ctx.saturating_mul(config.n_seq_max);
    let unified = !config.n_gpu_layers.is_none();
    LlamaContextParams::default()
        .with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED)
        .with_n_ctx(NonZeroU32::new(total))
        .with_n_batch(config.n_batch)
        .with_n_ubatch(config.n_batch)
        .with_n_seq_max(config.n_seq_max)
        .with_kv_unified(unified)
        .with_type_k(cache_type(config.cache_types[0]))
        .with_type_v(cache_type(config.cache_types[1]))
        .with_n_threads(threads(config))
        .with_n_threads_batch(threads(config))
}

/// llama.cpp's name for a KV cache type.
fn cache_type(t: wick_backend::CacheType) -> llama_cpp_2::context::params::KvCacheType {
    use llama_cpp_2::context::params::KvCacheType as Kv;
    use wick_backend::CacheType;
    match t {
        CacheType::F32 => Kv::F32,
        CacheType::F16 => Kv::F16,
        CacheType::BF16 => Kv::BF16,
        CacheType::Q8_0 => Kv::Q8_0,
        CacheType::Q4_0 => Kv::Q4_0,
        CacheType::Q4_1 => Kv::Q4_1,
        CacheType::IQ4_NL => Kv::IQ4_NL,
        CacheType::Q5_0 => Kv::Q5_0,
        CacheType::Q5_1 => Kv::Q5_1,
    }
}

/// The embedding context: mean pooling over one sequence, the whole input in one batch.
pub(crate) fn embedding_params(config: &BackendConfig, n_ctx: u32) -> LlamaContextParams {
    LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(n_ctx))
        .with_n_batch(n_ctx)
        .with_n_ubatch(n_ctx)
        .with_n_seq_max(1)
        .with_embeddings(true)
        .with_pooling_type(LlamaPoolingType::Mean)
        .with_n_threads(threads(config))
        .with_n_threads_batch(threads(config))
}

pub(crate) fn model_info(
    config: &BackendConfig,
    model: &LlamaModel,
    devices: &[crate::ffi::Device],
) -> ModelInfo {
    let stem = config
        .model_path
        .file_stem()
        .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned());
    let mut info = ModelInfo::new(
        model.meta_val_str("general.name").unwrap_or(stem),
        crate::vocab::special_tokens(model),
    );
    info.architecture = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    info.model_size_bytes = model.size();
    info.n_params = model.n_params();
    info.n_layer = model.n_layer();
    info.n_gpu_layers = offloaded(config).min(model.n_layer() + 1);
    info.n_vocab = u32::try_from(model.n_vocab()).unwrap_or(0);
    info.n_embd = u32::try_from(model.n_embd()).unwrap_or(0);
    info.n_ctx = seq_ctx(config, model);
    info.n_ctx_train = model.n_ctx_train();
    info.n_seq_max = config.n_seq_max;
    info.chat_template = model
        .chat_template(None)
        .ok()
        .and_then(|t| t.to_string().ok());
    info.deterministic = deterministic(config);
    info.recurrent = model.is_recurrent() || model.is_hybrid();
    // llama-cpp-2 sets one adapter at a time (see `Worker::apply_adapters`).
    info.max_active_adapters = 1;
    let cpu_deterministic = cpu_deterministic(config);
    let mode = if cpu_deterministic {
        KernelMode::Deterministic
    } else {
        KernelMode::Fast
    };
    info.placement = crate::rpc::placement(
        devices,
        info.n_layer,
        offloaded(config),
        &crate::ffi::cpu_description(),
    );
    // Each layer's keys and values live with the layer (llama.cpp's `offload_kqv`).
    let per_layer =
        kv_bytes_per_layer_token(model) * u64::from(info.n_ctx) * u64::from(info.n_seq_max);
    for span in &mut info.placement {
        span.kv_bytes = per_layer * u64::from(span.n_layers);
        span.deterministic = cpu_deterministic && span.device == "CPU";
    }
    // Where the layers run, device by device: a snapshot saved from one device's memory (or
    // with another split) is never restored by a server placing the layers elsewhere.
    let offloaded: Vec<String> = info
        .placement
        .iter()
        .filter(|p| p.device != "CPU")
        .map(|p| {
            let output = if p.output { "+output" } else { "" };
            format!("{}:{}:{}{output}", p.device, p.description, p.n_layers)
        })
        .collect();
    let device = if offloaded.is_empty() {
        "cpu".to_owned()
    } else {
        let kind = if config.rpc_servers.is_empty() {
            "gpu"
        } else {
            "rpc"
        };
        format!("{kind} [{}]", offloaded.join(", "))
    };
    // wick's own kernels change the floats of the deterministic mode when they change, so
    // their revision is part of the build (and so of the snapshot fingerprint below): a
    // snapshot computed by other kernels is never restored. wick's kernels give the same bits
    // at every CPU level, but ggml's own ops left in the graph (the matrix products of the
    // types wick does not read, the ops of graphs no test has compared across builds) are
    // compiled for the build machine and may round differently on another instruction set.
    // So the build names the instruction sets ggml was compiled with — replicas on different
    // CPUs keep separate snapshots — unless this model's bits are known to be the same on
    // every machine of a base level: then it names that level, and replicas on an AVX2 and
    // an AVX-512 machine share one another's snapshots.
    let same_bits = if cpu_deterministic {
        let weights = crate::ffi::gguf_tensor_types(&config.model_path);
        same_bits_on(config, &info, weights.as_deref())
    } else {
        None
    };
    let kernels = if cpu_deterministic {
        let isa = same_bits.map_or_else(ggml_cpu_features, str::to_owned);
        format!(" wick-kernels/{KERNELS_REVISION} ggml-cpu/{isa}")
    } else {
        String::new()
    };
    info.build = format!(
        "llama.cpp ggml {} {device} {mode}{kernels}",
        crate::ffi::ggml_version()
    );
    if cpu_deterministic {
        use wick_kernels::matmul::{supports, Format};
        info.cpu_kernels = Some(wick_backend::CpuKernels {
            level: wick_kernels::cpu::level().to_string(),
            matmul_types: Format::ALL
                .into_iter()
                .filter(|f| supports(*f))
                .map(|f| f.name().to_string())
                .collect(),
            attention: attention_kernel(config.cache_types).to_owned(),
            same_bits_on: same_bits.map(str::to_owned),
        });
    }
    info
}

/// What computes a deterministic model's attention with KV cache types `cache_types` (keys',
/// values'): wick's kernel reads every type (`ffi`'s `attention_of`); a type added to
/// [`wick_backend::CacheType`] that it does not read would run ggml's reference flash
/// attention, and must be named here.
fn attention_kernel(cache_types: [wick_backend::CacheType; 2]) -> &'static str {
    use wick_backend::CacheType;
    let wick = |t: CacheType| match t {
        CacheType::F32
        | CacheType::F16
        | CacheType::BF16
        | CacheType::Q8_0
        | CacheType::Q4_0
        | CacheType::Q4_1
        | CacheType::IQ4_NL
        | CacheType::Q5_0
        | CacheType::Q5_1 => true,
    };
    if cache_types.into_iter().all(wick) {
        "wick"
    } else {
        "ggml-reference"
    }
}

/// The layers `config` offloads, once [`load_model`] resolved `auto` (none before).
fn offloaded(config: &BackendConfig) -> u32 {
    match config.n_gpu_layers {
        GpuLayers::Count(n) => n,
        GpuLayers::Auto { .. } => 0,
    }
}

/// Bytes one token's key and value take in one layer of the F16 KV cache.
fn kv_bytes_per_layer_token(model: &LlamaModel) -> u64 {
    let heads = model.n_head().max(1);
    let kv_heads = match model.n_head_kv() {
        0 => heads,
        n => n,
    };
    let width = u32::try_from(model.n_embd()).unwrap_or(0);
    let arch = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    let length = |name: &str| {
        model
            .meta_val_str(&format!("{arch}.attention.{name}"))
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(u64::from(width / heads))
    };
    u64::from(kv_heads) * (length("key_length") + length("value_length")) * 2
}

/// Refuses a context whose KV cache does not fit the free memory of a device it goes to, with
/// what was asked and what is free, before llama.cpp tries (a failed device allocation can
/// abort inside a driver).
pub(crate) fn check_device_memory(info: &ModelInfo) -> Result<(), BackendError> {
    let now = crate::ffi::all_devices();
    for span in info.placement.iter().filter(|p| p.device != "CPU") {
        let Some(device) = now.iter().find(|d| d.name == span.device) else {
            continue;
        };
        // Every span of the device together.
        let asked: u64 = info
            .placement
            .iter()
            .filter(|p| p.device == span.device)
            .map(|p| p.kv_bytes)
            .sum();
        if asked > device.free as u64 {
            return Err(BackendError::Config {
                field: "n_ctx",
                value: format!(
                    "{} tokens × {} sequences: a KV cache of {} on {} ({}), which has {} free",
                    info.n_ctx,
                    info.n_seq_max,
                    gib(asked),
                    device.name,
                    device.description,
                    gib(device.free as u64)
                ),
                allowed: "a context that fits the device: lower --ctx-size or --parallel, \
                          offload fewer layers, or --gpu-layers auto",
            });
        }
    }
    Ok(())
}

/// The architectures whose whole graph gives the same bits from this machine's build and from
/// an `x86-64-v3` build, at every CPU level, in every weight type of wick's kernel:
/// `crates/cli/tests/cross_build.rs` compares every logit of a model of each (the test model,
/// a mixture of experts, a layer-norm `starcoder2` model, `gemma2`, `gemma3`, `qwen2`,
/// `qwen3`, `qwen3moe`, `phi3`, `gpt-oss`, `smollm3`, `granite`, `mistral3`, `olmo2`, `exaone4`,
/// `cohere2`, `deepseek2` and `lfm2` models), and an architecture joins this list only with a
/// model there.
const SAME_BITS_ARCHITECTURES: [&str; 17] = [
    "llama",
    "starcoder2",
    "gemma2",
    "gemma3",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "phi3",
    "gpt-oss",
    "smollm3",
    "granite",
    "mistral3",
    "olmo2",
    "exaone4",
    "cohere2",
    "deepseek2",
    "lfm2",
];

/// The base level of [`same_bits_on`]: AVX2, FMA and F16C, the instruction sets wick's
/// vector kernels need and whose absence changes how ggml's compiled C rounds (without FMA
/// the compiler does not fuse a multiply and an add; without F16C halves convert in software).
const SAME_BITS_BASE: &str = "x86-64-v3";

/// The CPU level on every machine of which this model computes the same bits, whatever else
/// the machine has (AVX-512, VNNI) and whatever `--cpu-level` caps it to; `None` when its bits
/// may change with the instruction sets ggml was compiled with. `Some` needs: a build for the
/// base level or above; every layer on the CPU's deterministic kernels (no GPU, no RPC
/// worker), no image projector (its graph is ggml's); wick's attention (every KV cache
/// type of it); every tensor (`weights`: their ggml types, `None` when unknown) in a
/// type of wick's matrix kernel; and an architecture of [`SAME_BITS_ARCHITECTURES`].
/// LoRA adapters are not counted: the prompt cache on disk is never used with them.
fn same_bits_on(
    config: &BackendConfig,
    info: &ModelInfo,
    weights: Option<&[llama_cpp_sys_2::ggml_type]>,
) -> Option<&'static str> {
    // The base level's instruction sets are the ones wick's vector kernels are built with.
    let built_for_base = wick_kernels::matmul::VECTORISED;
    let on_the_cpu = info.deterministic && info.placement.iter().all(|p| p.device == "CPU");
    let wick_weights = weights.is_some_and(|types| {
        types
            .iter()
            .all(|&t| crate::ffi::kernel_format(t).is_some_and(wick_kernels::matmul::supports))
    });
    (built_for_base
        && on_the_cpu
        && config.mmproj.is_none()
        && attention_kernel(config.cache_types) == "wick"
        && wick_weights
        && SAME_BITS_ARCHITECTURES.contains(&info.architecture.as_str()))
    .then_some(SAME_BITS_BASE)
}

/// The instruction sets ggml's CPU code is compiled with that change how it rounds (wick
/// builds ggml with `target-cpu=native`, like the crate itself), joined by `+`.
fn ggml_cpu_features() -> String {
    let features: [(&str, bool); 8] = [
        ("x86-64", cfg!(target_arch = "x86_64")),
        ("aarch64", cfg!(target_arch = "aarch64")),
        ("f16c", cfg!(target_feature = "f16c")),
        ("fma", cfg!(target_feature = "fma")),
        ("avx2", cfg!(target_feature = "avx2")),
        ("avx512", cfg!(target_feature = "avx512f")),
        ("avxvnni", cfg!(target_feature = "avxvnni")),
        ("avx512vnni", cfg!(target_feature = "avx512vnni")),
    ];
    let named: Vec<&str> = features
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
    if named.is_empty() {
        std::env::consts::ARCH.to_string()
    } else {
        named.join("+")
    }
}

/// The revision of wick's deterministic CPU kernels ([`wick_kernels::attention`],
/// [`wick_kernels::matmul`]): raised whenever a change to them changes a single float.
/// 11: `Q8_0` and `Q4_0` KV caches run wick's attention (ggml's reference one before).
/// 12: so do `BF16`, `F32`, `Q4_1`, `Q5_0`, `Q5_1` and `IQ4_NL` caches.
/// 13: so do head sizes that are not multiples of 16, and `NORM` (layer norm) is wick's.
/// 14: `MXFP4` weights (gpt-oss's experts) run wick's matrix kernel (ggml's per-pair product
/// before).
const KERNELS_REVISION: u32 = 14;

/// Names the model and the KV layout, so a snapshot from another model or layout is refused.
pub(crate) fn fingerprint(config: &BackendConfig, info: &ModelInfo) -> String {
    let file_len = std::fs::metadata(&config.model_path).map_or(0, |m| m.len());
    // Images' positions were computed by the projector: a snapshot holding them is only
    // restored with the same one.
    let projector = config.mmproj.as_ref().map_or(String::new(), |path| {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        format!(":mmproj={name}:{len}")
    });
    // A snapshot's cells are in the cache's types (the default F16 keeps older keys).
    let [k, v] = config.cache_types;
    let cache = if config.cache_types == [wick_backend::CacheType::F16; 2] {
        String::new()
    } else {
        format!(":kv={k}/{v}")
    };
    format!(
        "llama:v1:{}:{}:file={file_len}{projector}{cache}:params={}:vocab={}:layers={}:embd={}:ctx={}:build={}",
        info.architecture,
        info.name,
        info.n_params,
        info.n_vocab,
        info.n_layer,
        info.n_embd,
        info.n_ctx,
        info.build
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use llama_cpp_sys_2 as sys;
    use wick_backend::{LayerPlacement, SpecialTokens};

    /// A deterministic `llama` model on the CPU, as `model_info` describes one.
    fn cpu_model() -> ModelInfo {
        let mut info = ModelInfo::new("m", SpecialTokens::default());
        info.architecture = "llama".into();
        info.deterministic = true;
        info.placement = vec![LayerPlacement {
            device: "CPU".into(),
            description: "a CPU".into(),
            first_layer: 0,
            n_layers: 30,
            output: true,
            kv_bytes: 0,
            deterministic: true,
        }];
        info
    }

    /// Only a model whose every part the cross-build test compares is named by a level.
    #[test]
    fn only_a_model_computed_all_by_checked_parts_has_the_same_bits_on_a_level() {
        let config = BackendConfig::new("m.gguf");
        let info = cpu_model();
        let quantized = [sys::GGML_TYPE_F32, sys::GGML_TYPE_Q4_K, sys::GGML_TYPE_Q6_K];
        // Where wick's vector kernels are not built, nothing is.
        let level = wick_kernels::matmul::VECTORISED.then_some(SAME_BITS_BASE);
        assert_eq!(same_bits_on(&config, &info, Some(&quantized)), level);
        for architecture in SAME_BITS_ARCHITECTURES {
            let mut other = cpu_model();
            other.architecture = architecture.into();
            assert_eq!(same_bits_on(&config, &other, Some(&quantized)), level);
        }

        // A weight type of ggml's per-pair product, or weights not known.
        let iq2 = [sys::GGML_TYPE_F32, sys::GGML_TYPE_IQ2_XXS];
        assert_eq!(same_bits_on(&config, &info, Some(&iq2)), None);
        assert_eq!(same_bits_on(&config, &info, None), None);
        // A graph no test compares across builds (Mamba's selective scan, ggml's).
        let mut mamba = cpu_model();
        mamba.architecture = "mamba".into();
        assert_eq!(same_bits_on(&config, &mamba, Some(&quantized)), None);
        // Layers on an RPC worker, or the fast kernels.
        let mut rpc = cpu_model();
        rpc.placement[0].n_layers = 10;
        rpc.placement.push(LayerPlacement {
            device: "RPC0".into(),
            description: "10.0.0.2:50052".into(),
            first_layer: 10,
            ..rpc.placement[0].clone()
        });
        assert_eq!(same_bits_on(&config, &rpc, Some(&quantized)), None);
        let mut fast = cpu_model();
        fast.deterministic = false;
        assert_eq!(same_bits_on(&config, &fast, Some(&quantized)), None);
        // An image projector's graph.
        let mut with_images = BackendConfig::new("m.gguf");
        with_images.mmproj = Some("mmproj.gguf".into());
        assert_eq!(same_bits_on(&with_images, &info, Some(&quantized)), None);
    }

    /// ggml's reader lists a real model's tensor types, a split model's from every part; a
    /// file it cannot read, or a split model with a part missing, lists none.
    #[test]
    fn the_tensor_types_come_from_the_gguf_headers() {
        let model = wick_testutil::model_path();
        let types = crate::ffi::gguf_tensor_types(&model).expect("the test model's header reads");
        // SmolLM2-135M: 30 layers of 9 tensors, the embeddings and the output norm.
        assert_eq!(types.len(), 272);
        assert!(types.contains(&sys::GGML_TYPE_Q4_1), "{types:?}");
        assert!(types.contains(&sys::GGML_TYPE_F32), "{types:?}");

        let dir = tempfile::tempdir().unwrap();
        let shards = wick_testutil::split_gguf(&std::fs::read(&model).unwrap(), 3);
        let names: Vec<_> = (1..=3)
            .map(|i| dir.path().join(format!("smol-{i:05}-of-00003.gguf")))
            .collect();
        for (name, shard) in names.iter().zip(&shards) {
            std::fs::write(name, shard).unwrap();
        }
        assert_eq!(crate::ffi::gguf_tensor_types(&names[0]), Some(types));
        std::fs::remove_file(&names[2]).unwrap();
        assert_eq!(crate::ffi::gguf_tensor_types(&names[0]), None);

        let text = dir.path().join("text.gguf");
        std::fs::write(&text, "not a model").unwrap();
        assert_eq!(crate::ffi::gguf_tensor_types(&text), None);
        assert_eq!(
            crate::ffi::gguf_tensor_types(&dir.path().join("missing.gguf")),
            None
        );
    }
}
