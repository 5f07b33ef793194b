//! wick's matrix kernel against ggml's own CPU product, on weights ggml quantized itself: for
//! every weight type the kernel reads, at every CPU level this build has, wick's product stays
//! within a small distance of both of ggml's (its reference per-pair `vec_dot`, and what
//! llama.cpp runs by default, repacked where it repacks). The two sides quantize the inputs
//! differently (wick: 32 values to 8 bits with an F32 scale; ggml: `Q8_0`/`Q8_1` with F16
//! scales or `Q8_K` per 256), so they agree closely, never bit for bit; the kernels' own
//! tests hold every level to wick's definition bit for bit.

// Matrix dimensions by their usual names (k, n, w, x).
#![allow(clippy::many_single_char_names)]

use wick_kernels::cpu;
use wick_kernels::matmul::{Format, MatMul};
use wick_llama::{ggml_quantize, GgmlKernels, GgmlProduct};
use wick_testutil::Draw;

/// Values like a model's: roughly normal (a sum of four uniform draws), some larger.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut draw = Draw::new(seed);
    (0..n)
        .map(|_| (0..4).map(|_| draw.next()).sum::<f32>() / 2.0)
        .collect()
}

/// The largest difference between `a` and `b`, relative to `b`'s largest magnitude.
fn distance(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

#[test]
fn every_type_and_level_stays_near_ggml_s_own_products() {
    let (k, n) = (512, 64);
    for format in Format::ALL {
        for rows in [1usize, 2, 5, 16] {
            let w = ggml_quantize(format, &values(k * n, 1), k);
            let x = values(k * rows, 2 + rows as u64);
            let product = MatMul::packed(format, k, &w, &x);
            let ggml = |kernels| {
                let mut p =
                    GgmlProduct::new(format, (k, n), &w, &x, kernels, 1).expect("ggml's product");
                p.run().expect("ggml runs");
                p.output()
            };
            let (reference, fast) = (ggml(GgmlKernels::Reference), ggml(GgmlKernels::Fast));
            // The quantized types differ by the inputs' quantization (measured: up to 0.03 %
            // of the largest output with 32-value input blocks, about 1 % where ggml
            // quantizes the inputs per 256 for the K-quants and IQ4_XS); ggml also rounds the
            // inputs of F16 and BF16 weights to their type (BF16: 0.2 %), where wick keeps them
            // F32.
            let bound = if format.is_float() { 0.005 } else { 0.02 };
            for level in cpu::available() {
                let mut ours = vec![0.0f32; rows * n];
                product.run_at(level, 0, 1, &mut |i, first, v| {
                    ours[i * n + first..i * n + first + v.len()].copy_from_slice(v);
                });
                for (name, theirs) in [("reference", &reference), ("fast", &fast)] {
                    let d = distance(&ours, theirs);
                    assert!(
                        d < bound,
                        "{} at {level}, {rows} rows: {d} from ggml's {name} product",
                        format.name()
                    );
                }
            }
        }
    }
}

#[test]
fn ggml_s_fast_product_repacks_what_llama_cpp_repacks_and_sizes_are_checked() {
    let (k, n) = (256, 16);
    let x = values(k, 3);
    let made = |format| {
        let w = ggml_quantize(format, &values(k * n, 4), k);
        GgmlProduct::new(format, (k, n), &w, &x, GgmlKernels::Fast, 1).expect("ggml's product")
    };
    // ggml's CPU_REPACK takes Q4_0 on every x86-64 machine with AVX2 (and on ARM).
    if cfg!(all(target_arch = "x86_64", target_feature = "avx2")) {
        assert!(made(Format::Q4_0).repacked());
    }
    assert!(!made(Format::Q5_1).repacked());
    let w = ggml_quantize(Format::Q8_0, &values(k * n, 5), k);
    let short = GgmlProduct::new(Format::Q8_0, (k, n), &w[1..], &x, GgmlKernels::Fast, 1);
    assert!(short.is_err_and(|e| e.contains("bytes")));
    let ragged = GgmlProduct::new(Format::Q8_0, (k, n), &w, &x[1..], GgmlKernels::Fast, 1);
    assert!(ragged.is_err_and(|e| e.contains("rows of 256")));
}
