//! What completions and chats return.

use wick_engine::{PromptProgress, ScoredToken};
use wick_types::{FinishReason, Usage};

/// A whole completion, or one item of a streamed one.
///
/// A stream item carries what it adds ([`delta`](Self::delta), [`logprobs`](Self::logprobs)),
/// never the text so far: a consumer that needs the text mid-stream concatenates the deltas.
/// The last item of a stream (the one with `finish_reason` and `usage`) is the whole answer:
/// it carries [`text`](Self::text), assembled once, at the end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompletionResponse {
    /// The whole text: set on a whole response and on the last item of a stream; empty on
    /// the items before it.
    pub text: String,
    /// The text added by this stream item (empty for a whole response and for the last item).
    pub delta: String,
    /// How generation ended: set on the last item only.
    pub finish_reason: Option<FinishReason>,
    /// Token accounting: set on the last item only.
    pub usage: Option<Usage>,
    /// With [`crate::GenerateOptions::logprobs`]: the generated tokens this item completes,
    /// in order (a whole response: all of them). Empty otherwise.
    pub logprobs: Vec<ScoredToken>,
    /// The stop string that ended the answer, when one did: set on the last item only.
    pub stop_sequence: Option<String>,
    /// With [`crate::GenerateOptions::progress`]: how far the prompt is computed, on a
    /// stream item that carries nothing else. `None` otherwise.
    pub progress: Option<PromptProgress>,
}

/// Facts about the model an [`crate::Llm`] runs.
// Four independent facts (chat, tools, determinism, recurrence), each a yes or no.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmMetadata {
    /// The context window, in tokens.
    pub context_window: u32,
    /// Most tokens one answer may have.
    pub num_output: u32,
    /// Whether chats are formatted with a chat template.
    pub is_chat_model: bool,
    /// Whether the chat template has a tool-call format.
    pub is_function_calling_model: bool,
    /// The model's name.
    pub model_name: String,
    /// Whether greedy answers are bit-identical warm, cold and concurrent (batch-invariant
    /// CPU kernels); `false` with fast kernels or GPU layers.
    pub deterministic: bool,
    /// The build and kernel mode computing the model (prompt-cache snapshots are keyed by it).
    pub build: String,
    /// Where the layers run: one span of layers per device (the CPU, a GPU, an RPC worker).
    pub placement: Vec<crate::LayerPlacement>,
    /// wick's own CPU kernels, where they compute the model: their CPU level and weight types.
    pub cpu_kernels: Option<crate::CpuKernels>,
    /// Whether the model keeps a recurrent state (Mamba, RWKV, LFM2, hybrids): a prompt then
    /// reuses a held conversation only where it extends all of it, and nothing speculates.
    pub recurrent: bool,
}
