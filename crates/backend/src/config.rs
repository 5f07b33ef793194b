use std::path::PathBuf;

/// What a backend is initialised from (seed 001's `init(Config)`).
///
/// Every field has a default that just works on a laptop CPU; see each field.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackendConfig {
    /// The GGUF model file. The stub backend ignores it.
    pub model_path: PathBuf,
    /// Tokens of context per sequence (default 4096, capped at the model's training context).
    pub n_ctx: u32,
    /// Sequences that can live side by side in the context (default 4).
    pub n_seq_max: u32,
    /// Most tokens evaluated in one forward pass (default 512).
    pub n_batch: u32,
    /// CPU threads for decoding; `None` uses every core.
    pub n_threads: Option<u32>,
    /// Layers offloaded to a GPU (default none; needs a GPU build).
    pub n_gpu_layers: GpuLayers,
    /// Which CPU kernels evaluate the model (default [`KernelMode::Deterministic`]).
    pub kernels: KernelMode,
    /// llama.cpp RPC workers (`HOST:PORT`, `wick rpc-worker`) whose devices take the
    /// offloaded layers (`n_gpu_layers`), split by their free memory (default none).
    pub rpc_servers: Vec<String>,
    /// The devices to offload to, by llama.cpp's names (`Vulkan0`, `CUDA1`, `RPC0`, …; `wick
    /// devices` lists them); empty: every GPU (and RPC worker) llama.cpp sees.
    pub devices: Vec<String>,
    /// The model's multimodal projector (an `mmproj` GGUF): images (or sounds) in prompts
    /// become positions through it (default none: text only).
    pub mmproj: Option<PathBuf>,
    /// The KV cache's type for keys and for values (default [`CacheType::F16`] for both). A
    /// quantized cache holds more tokens in the same memory; in the deterministic mode every
    /// type runs wick's attention kernel.
    pub cache_types: [CacheType; 2],
}

/// A KV cache element type: llama-server's `--cache-type-k`/`-v` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[allow(non_camel_case_types)] // ggml's names
pub enum CacheType {
    /// 32-bit floats.
    F32,
    /// 16-bit floats (the default).
    #[default]
    F16,
    /// bfloat16.
    BF16,
    /// 8 bits per value, a scale per 32.
    Q8_0,
    /// 4 bits, a scale per 32.
    Q4_0,
    /// 4 bits, a scale and a minimum per 32.
    Q4_1,
    /// 4 bits through a table of 16 values, a scale per 32.
    IQ4_NL,
    /// 5 bits, a scale per 32.
    Q5_0,
    /// 5 bits, a scale and a minimum per 32.
    Q5_1,
}

impl CacheType {
    /// Every type, in llama-server's order.
    pub const ALL: [CacheType; 9] = [
        CacheType::F32,
        CacheType::F16,
        CacheType::BF16,
        CacheType::Q8_0,
        CacheType::Q4_0,
        CacheType::Q4_1,
        CacheType::IQ4_NL,
        CacheType::Q5_0,
        CacheType::Q5_1,
    ];

    /// Its name as llama-server spells it (`f16`, `q8_0`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CacheType::F32 => "f32",
            CacheType::F16 => "f16",
            CacheType::BF16 => "bf16",
            CacheType::Q8_0 => "q8_0",
            CacheType::Q4_0 => "q4_0",
            CacheType::Q4_1 => "q4_1",
            CacheType::IQ4_NL => "iq4_nl",
            CacheType::Q5_0 => "q5_0",
            CacheType::Q5_1 => "q5_1",
        }
    }
}

impl std::fmt::Display for CacheType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CacheType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        CacheType::ALL
            .into_iter()
            .find(|t| t.as_str() == lower)
            .ok_or_else(|| {
                let names: Vec<&str> = CacheType::ALL.iter().map(|t| t.as_str()).collect();
                format!("`{s}` is not a KV cache type: one of {}", names.join(", "))
            })
    }
}

/// How a backend's CPU kernels trade speed for reproducible floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum KernelMode {
    /// Batch-invariant kernels (ggml's reference CPU paths, flash attention on): a sequence's
    /// logits do not change with how its tokens are batched, chunked, cached, co-batched with
    /// other sequences, or with the thread count. Warm, cold and concurrent greedy answers are
    /// then bit-identical. Where a backend cannot make its kernels invariant (GPU layers), it
    /// says so in [`crate::ModelInfo::deterministic`].
    #[default]
    Deterministic,
    /// The fastest kernels: their floats depend on the batch shape and the thread count.
    Fast,
}

impl KernelMode {
    /// `"deterministic"` or `"fast"`.
    pub fn as_str(self) -> &'static str {
        match self {
            KernelMode::Deterministic => "deterministic",
            KernelMode::Fast => "fast",
        }
    }
}

impl std::fmt::Display for KernelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KernelMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deterministic" => Ok(KernelMode::Deterministic),
            "fast" => Ok(KernelMode::Fast),
            other => Err(format!(
                "unknown kernel mode `{other}` (deterministic or fast)"
            )),
        }
    }
}

/// How many of a model's layers go to the GPUs (llama.cpp's `n_gpu_layers`; the output layer
/// counts as one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuLayers {
    /// This many, the last ones (0: every layer on the CPU; more than the model has: all).
    Count(u32),
    /// As many as fit the devices' free memory, leaving `margin` bytes free on each
    /// (llama.cpp's `common_fit_params`, llama-server's `--fit on`); with mixture-of-experts models the experts
    /// may stay in system memory. Without a GPU: none.
    Auto {
        /// Bytes to leave free on each device.
        margin: u64,
    },
}

impl GpuLayers {
    /// Every layer, whatever the model has.
    pub const ALL: GpuLayers = GpuLayers::Count(999);

    /// llama-server's default margin for `--fit on`: 1 GiB a device.
    pub const DEFAULT_MARGIN: u64 = 1 << 30;

    /// [`GpuLayers::Auto`] with the default margin.
    pub const AUTO: GpuLayers = GpuLayers::Auto {
        margin: Self::DEFAULT_MARGIN,
    };

    /// Whether no layer is asked for a GPU (a count of 0).
    pub fn is_none(self) -> bool {
        self == GpuLayers::Count(0)
    }
}

impl Default for GpuLayers {
    fn default() -> Self {
        GpuLayers::Count(0)
    }
}

impl From<u32> for GpuLayers {
    fn from(n: u32) -> Self {
        GpuLayers::Count(n)
    }
}

impl std::fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuLayers::Count(n) => write!(f, "{n}"),
            GpuLayers::Auto { .. } => f.write_str("auto"),
        }
    }
}

impl std::str::FromStr for GpuLayers {
    type Err = String;

    /// `N`, `all` (every layer) or `auto` (as many as fit, default margin), as llama-server's
    /// `--gpu-layers` takes them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(GpuLayers::AUTO),
            "all" => Ok(GpuLayers::ALL),
            n => n
                .parse()
                .map(GpuLayers::Count)
                .map_err(|_| format!("`{s}` is not a layer count: a number, `all` or `auto`")),
        }
    }
}

impl BackendConfig {
    /// The defaults, for `model_path`.
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        BackendConfig {
            model_path: model_path.into(),
            n_ctx: 4096,
            n_seq_max: 4,
            n_batch: 512,
            n_threads: None,
            n_gpu_layers: GpuLayers::Count(0),
            kernels: KernelMode::default(),
            rpc_servers: Vec::new(),
            devices: Vec::new(),
            mmproj: None,
            cache_types: [CacheType::F16; 2],
        }
    }

    /// Sets [`BackendConfig::cache_types`]: keys', values'.
    #[must_use]
    pub fn with_cache_types(mut self, cache_types: [CacheType; 2]) -> Self {
        self.cache_types = cache_types;
        self
    }

    /// Sets [`BackendConfig::n_ctx`].
    #[must_use]
    pub fn with_n_ctx(mut self, n_ctx: u32) -> Self {
        self.n_ctx = n_ctx;
        self
    }

    /// Sets [`BackendConfig::n_seq_max`].
    #[must_use]
    pub fn with_n_seq_max(mut self, n_seq_max: u32) -> Self {
        self.n_seq_max = n_seq_max;
        self
    }

    /// Sets [`BackendConfig::n_batch`].
    #[must_use]
    pub fn with_n_batch(mut self, n_batch: u32) -> Self {
        self.n_batch = n_batch;
        self
    }

    /// Sets [`BackendConfig::n_threads`].
    #[must_use]
    pub fn with_n_threads(mut self, n_threads: Option<u32>) -> Self {
        self.n_threads = n_threads;
        self
    }

    /// Sets [`BackendConfig::n_gpu_layers`]: a count (999: every layer) or [`GpuLayers::Auto`].
    #[must_use]
    pub fn with_n_gpu_layers(mut self, n_gpu_layers: impl Into<GpuLayers>) -> Self {
        self.n_gpu_layers = n_gpu_layers.into();
        self
    }

    /// Sets [`BackendConfig::kernels`].
    #[must_use]
    pub fn with_kernels(mut self, kernels: KernelMode) -> Self {
        self.kernels = kernels;
        self
    }

    /// Sets [`BackendConfig::rpc_servers`].
    #[must_use]
    pub fn with_rpc_servers(mut self, servers: Vec<String>) -> Self {
        self.rpc_servers = servers;
        self
    }

    /// Sets [`BackendConfig::mmproj`].
    #[must_use]
    pub fn with_mmproj(mut self, mmproj: Option<PathBuf>) -> Self {
        self.mmproj = mmproj;
        self
    }

    /// Sets [`BackendConfig::devices`].
    #[must_use]
    pub fn with_devices(mut self, devices: Vec<String>) -> Self {
        self.devices = devices;
        self
    }

    /// Checks every field's range.
    ///
    /// # Errors
    ///
    /// [`crate::BackendError::Config`] naming the first field out of range.
    pub fn validate(&self) -> crate::Result<()> {
        let check = |ok: bool, field, value: u32, allowed| {
            if ok {
                Ok(())
            } else {
                Err(crate::BackendError::Config {
                    field,
                    value: value.to_string(),
                    allowed,
                })
            }
        };
        check(self.n_ctx >= 16, "n_ctx", self.n_ctx, "at least 16")?;
        check(
            (1..=256).contains(&self.n_seq_max),
            "n_seq_max",
            self.n_seq_max,
            "1 to 256",
        )?;
        check(self.n_batch >= 1, "n_batch", self.n_batch, "at least 1")?;
        if let Some(n) = self.n_threads {
            check((1..=1024).contains(&n), "n_threads", n, "1 to 1024")?;
        }
        for server in &self.rpc_servers {
            if !is_host_port(server) {
                return Err(crate::BackendError::Config {
                    field: "rpc_servers",
                    value: server.clone(),
                    allowed: "HOST:PORT (for example 192.168.1.20:50052)",
                });
            }
        }
        Ok(())
    }
}

/// Whether `s` is `HOST:PORT`: a non-empty host without spaces and a port from 1 to 65535.
fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host.contains(char::is_whitespace)
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_the_field() {
        assert!(BackendConfig::new("m.gguf").validate().is_ok());
        let err = BackendConfig::new("m.gguf")
            .with_n_seq_max(0)
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid backend config: `n_seq_max` = 0 (1 to 256)"
        );
    }

    #[test]
    fn gpu_layers_read_counts_all_and_auto_as_llama_server_does() {
        assert_eq!("0".parse(), Ok(GpuLayers::Count(0)));
        assert_eq!(" 12 ".parse(), Ok(GpuLayers::Count(12)));
        assert_eq!("all".parse(), Ok(GpuLayers::ALL));
        assert_eq!(
            "auto".parse(),
            Ok(GpuLayers::Auto {
                margin: 1024 * 1024 * 1024
            })
        );
        let err = "-1".parse::<GpuLayers>().unwrap_err();
        assert!(err.contains("`-1`") && err.contains("auto"), "{err}");
        assert!(GpuLayers::default().is_none());
        assert_eq!(GpuLayers::AUTO.to_string(), "auto");
        assert_eq!(GpuLayers::from(7).to_string(), "7");
    }

    #[test]
    fn issue_18_rpc_servers_are_host_and_port() {
        let with = |s: &str| BackendConfig::new("m.gguf").with_rpc_servers(vec![s.into()]);
        assert!(with("127.0.0.1:50052").validate().is_ok());
        assert!(with("gpu-box.lan:1").validate().is_ok());
        for bad in ["127.0.0.1", ":50052", "host:0", "host:99999", "a b:1"] {
            let err = with(bad).validate().unwrap_err().to_string();
            assert!(
                err.contains("rpc_servers") && err.contains("HOST:PORT"),
                "{err}"
            );
        }
    }
}
