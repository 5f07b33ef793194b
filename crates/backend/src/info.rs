use wick_types::TokenId;

/// What a loaded model and its context are (seed 001's `extra_metadata` and more).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelInfo {
    /// A short name: the GGUF `general.name`, else the file stem.
    pub name: String,
    /// The architecture (`llama`, `qwen2`, …).
    pub architecture: String,
    /// Size of the weights in bytes.
    pub model_size_bytes: u64,
    /// Number of parameters.
    pub n_params: u64,
    /// Transformer layers.
    pub n_layer: u32,
    /// Layers offloaded to a GPU.
    pub n_gpu_layers: u32,
    /// Vocabulary size: valid token ids are `0..n_vocab`.
    pub n_vocab: u32,
    /// Embedding width (the length of [`crate::Backend::embed`]'s vector).
    pub n_embd: u32,
    /// Tokens of context each sequence can hold.
    pub n_ctx: u32,
    /// The context length the model was trained with.
    pub n_ctx_train: u32,
    /// Sequences the context holds side by side.
    pub n_seq_max: u32,
    /// The model's special tokens.
    pub special: SpecialTokens,
    /// The chat template from the model's metadata, if any.
    pub chat_template: Option<String>,
    /// Whether the kernels are batch-invariant: a sequence's logits are bit-identical however
    /// its tokens are batched, chunked, cached or co-batched, and whatever the thread count
    /// ([`crate::KernelMode::Deterministic`] on a CPU). The engine reuses cached prefixes at
    /// token granularity either way; only with this are warm answers exactly the cold ones.
    pub deterministic: bool,
    /// The build and kernel mode that computed this context's state (for example
    /// `llama.cpp 0.1.161 cpu deterministic`): prompt-cache snapshots are keyed by it. It names
    /// what can change the state's bits — on the CPU, the instruction sets ggml was compiled
    /// with, or only [`CpuKernels::same_bits_on`]'s level where the model's bits are the same
    /// on every machine of it.
    pub build: String,
    /// Where the layers run, in layer order: one span per device (the CPU, a GPU, an RPC
    /// worker). Empty when the backend does not say.
    pub placement: Vec<LayerPlacement>,
    /// The most LoRA adapters [`crate::Backend::apply_adapters`] makes active at once (0: the
    /// backend has no adapters).
    pub max_active_adapters: u32,
    /// wick's own CPU kernels, where they compute the layers on the CPU (the deterministic
    /// mode, with or without layers on a GPU).
    pub cpu_kernels: Option<CpuKernels>,
    /// Whether the model keeps a recurrent state per sequence (Mamba, RWKV, LFM2's short
    /// convolutions, and hybrids of them with attention). Such a state holds the sequence's
    /// last position only, so cutting a sequence back ([`crate::Backend::seq_rm_last`], a
    /// shorter [`crate::Backend::seq_copy`], a verify's rejected drafts) evaluates the tokens
    /// it keeps again — exact, but as costly as a prefill of them — except back to a
    /// checkpoint: the backend keeps the state at the end of each prefill op
    /// ([`crate::StepOp::Prefill`], and [`crate::StepOp::PrefillDecode`]'s tokens: the
    /// sequence's length after them), the last [`RECURRENT_CHECKPOINTS`] of a sequence, so a
    /// cut back to such a length evaluates nothing again. The engine cuts such a sequence
    /// back only to those lengths, and does not speculate.
    pub recurrent: bool,
}

/// wick's own CPU kernels in a deterministic model: the CPU level they run at and the weight
/// types whose matrix products they compute. Every other type runs ggml's per-pair reference
/// product: batch-invariant too, but its rounding may change with the instruction set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuKernels {
    /// The CPU level (`scalar`, `avx2`, `avx2-vnni`, `avx512`): the same bits at each.
    pub level: String,
    /// The weight types (ggml's names) of wick's matrix kernel.
    pub matmul_types: Vec<String>,
    /// What computes attention: `wick` (wick's kernel, which reads every KV cache type) or
    /// `ggml-reference` (ggml's own flash attention, batch-invariant too, its rounding
    /// ggml's: for a cache type wick's kernel would not read).
    pub attention: String,
    /// The CPU level (`x86-64-v3`: AVX2, FMA and F16C) on every machine of which this model
    /// computes the same bits, whatever more the machine has: prompt-cache snapshots are then
    /// shared by replicas on different CPUs ([`ModelInfo::build`] names the level, not the
    /// build machine's instruction sets). `None` when the model's bits may change with the
    /// instruction sets ggml was compiled with.
    pub same_bits_on: Option<String>,
}

/// A run of consecutive layers computed on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerPlacement {
    /// The device's name (`CPU`, `RPC0`, `CUDA0`, …).
    pub device: String,
    /// What the device is: the processor's name, or an RPC worker's `HOST:PORT`.
    pub description: String,
    /// The first layer of the run.
    pub first_layer: u32,
    /// How many repeating layers it holds (the output layer not counted).
    pub n_layers: u32,
    /// Whether it also computes the output layer (the last one).
    pub output: bool,
    /// Bytes of KV cache its layers keep on the device (each layer's keys and values live
    /// with the layer); 0 when the backend does not say.
    pub kv_bytes: u64,
    /// Whether its layers are computed by batch-invariant kernels (the CPU's, in the
    /// deterministic mode): the whole model is bit-deterministic only when every span is
    /// ([`ModelInfo::deterministic`]).
    pub deterministic: bool,
}

/// How many checkpoints a recurrent model's sequence keeps ([`ModelInfo::recurrent`]): the
/// last ones; each is a copy of the recurrent state (kilobytes for LFM2's short convolutions,
/// up to hundreds of megabytes for a large state-space model). llama-server keeps as many.
pub const RECURRENT_CHECKPOINTS: usize = 8;

impl ModelInfo {
    /// Metadata for a model called `name`; every size starts at zero for the backend to fill in.
    pub fn new(name: impl Into<String>, special: SpecialTokens) -> Self {
        ModelInfo {
            name: name.into(),
            architecture: String::new(),
            model_size_bytes: 0,
            n_params: 0,
            n_layer: 0,
            n_gpu_layers: 0,
            n_vocab: 0,
            n_embd: 0,
            n_ctx: 0,
            n_ctx_train: 0,
            n_seq_max: 0,
            special,
            chat_template: None,
            deterministic: false,
            build: String::new(),
            placement: Vec::new(),
            max_active_adapters: 0,
            cpu_kernels: None,
            recurrent: false,
        }
    }
}

/// The special tokens of a vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SpecialTokens {
    /// Beginning of sequence, if the model has one.
    pub bos: Option<TokenId>,
    /// End of sequence, if the model has one.
    pub eos: Option<TokenId>,
    /// Whether tokenization prepends [`SpecialTokens::bos`] to a prompt.
    pub add_bos: bool,
    /// Every token that ends generation.
    pub eog: Vec<TokenId>,
    /// Every control token (never produced by tokenizing text with `special = false`).
    pub control: Vec<TokenId>,
    /// The reasoning block's opening and closing tokens, when the vocabulary has them.
    pub thinking: Option<ThinkingTokens>,
}

impl SpecialTokens {
    /// Whether `token` ends generation.
    pub fn is_eog(&self, token: TokenId) -> bool {
        self.eog.contains(&token)
    }

    /// Whether `token` is a control token.
    pub fn is_control(&self, token: TokenId) -> bool {
        self.control.binary_search(&token).is_ok()
    }
}

/// The tokens that open and close a reasoning ("thinking") block, e.g. `<think>` / `</think>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingTokens {
    /// Opens the block.
    pub start: TokenId,
    /// Closes the block.
    pub end: TokenId,
}

/// The opening/closing texts of reasoning blocks, in the order backends look them up.
pub const THINKING_MARKERS: &[(&str, &str)] = &[
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("<seed:think>", "</seed:think>"),
];
