//! The only `unsafe` in wick: raw per-sequence KV state bytes, which `llama-cpp-2` exposes only
//! as unsafe functions (its safe `SeqState` is opaque and cannot be written to disk).
#![allow(unsafe_code)]

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;

/// The KV state of sequence `seq` as bytes.
pub(crate) fn seq_state_bytes(ctx: &LlamaContext<'_>, seq: i32) -> Option<Vec<u8>> {
    let flags = LlamaStateSeqFlags::empty();
    let size = ctx.state_seq_get_size_ext(seq, flags);
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds exactly `size` bytes, the size llama.cpp reported for this
    // sequence's state; the context is exclusively ours (one thread owns it), so the state cannot
    // grow between the two calls, and llama.cpp writes at most that many bytes.
    let written = unsafe { ctx.state_seq_get_data_ext(bytes.as_mut_ptr(), seq, flags) };
    (written == size).then_some(bytes)
}

/// Restores sequence `seq` from bytes made by [`seq_state_bytes`].
///
/// Callers only pass bytes that came out of [`seq_state_bytes`] for the same model and context
/// layout: the snapshot envelope (`wick_backend::snapshot`) checks a SHA-256 and the layout
/// fingerprint before the bytes get here.
pub(crate) fn set_seq_state_bytes(ctx: &mut LlamaContext<'_>, seq: i32, bytes: &[u8]) -> bool {
    // SAFETY: llama.cpp reads at most `bytes.len()` bytes (it is passed the length and bounds-
    // checks every read), and the bytes were produced by `llama_state_seq_get_data_ext` for a
    // context of the same model and layout (checked by the caller's envelope), which is the
    // precondition of `llama_state_seq_set_data_ext`.
    unsafe { ctx.state_seq_set_data_ext(bytes, seq, LlamaStateSeqFlags::empty()) }
}
