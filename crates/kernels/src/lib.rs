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

/// The sum of `N` lanes (a power of two) in the kernels' fixed pairwise order: lane `l` takes
/// lane `l + N/2`, then the same over the first half, down to lane 0. Every kernel that sums
/// lanes ends with it, so its order is part of each kernel's definition.
#[inline]
pub(crate) fn tree_sum<T: Copy + std::ops::Add<Output = T>, const N: usize>(mut x: [T; N]) -> T {
    const { assert!(N.is_power_of_two()) };
    let mut width = N / 2;
    while width > 0 {
        for l in 0..width {
            x[l] = x[l] + x[l + width];
        }
        width /= 2;
    }
    x[0]
}
