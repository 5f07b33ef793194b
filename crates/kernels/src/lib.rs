//! wick's batch-invariant CPU kernels, with no llama.cpp in them: the matrix product of
//! quantized weights with F32 inputs ([`matmul`]), flash attention ([`attention`]), and the
//! activations ([`activation`]) and normalisations ([`norm`]) whose ggml versions round by the
//! instruction set.
//!
//! Each kernel keeps one fixed arithmetic per output (per (weight row, input row) pair, per
//! attention row) whatever the batch, the chunking or the thread split, and the same bits at
//! every CPU level ([`cpu`]): its definition is written once in scalar code, and the vector
//! paths only compute its exact integer parts faster. `wick-llama` hooks them into ggml's
//! graph in the deterministic kernel mode.
#![deny(missing_docs)]

pub mod activation;
pub mod attention;
pub mod cpu;
mod intrinsics;
pub mod matmul;
pub mod norm;
#[cfg(test)]
mod test_rng;
