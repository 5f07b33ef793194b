//! wick's matrix kernel against ggml's own CPU product, per weight type, on one thread, on
//! weights ggml quantized itself: wick at every CPU level this build has (`scalar` is the
//! definition itself), ggml's reference per-pair `vec_dot` (what wick's deterministic mode
//! replaces) and ggml's fast path (what llama.cpp runs by default: repacked weights for the
//! types it repacks, llamafile's `sgemm` for batches of the rest). Shapes: a decode step (one
//! input row) against a 1536 × 32768 matrix, larger than the caches as a model's weights are
//! taken together; the same in cache (1536 × 1536); and prefill batches of 64 and 512 rows
//! (llama-bench's pp512).
//!
//! `cargo bench -p wick-llama --bench kernels -- q4_0/decode` runs one row of it.
#![allow(
    missing_docs,
    clippy::cast_precision_loss,
    clippy::many_single_char_names // matrix dimensions by their usual names
)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wick_kernels::cpu;
use wick_kernels::matmul::{Format, MatMul};
use wick_llama::{ggml_quantize, GgmlKernels, GgmlProduct};
use wick_testutil::Draw;

/// (name, k, weight rows, input rows) of each product measured.
const SHAPES: [(&str, usize, usize, usize); 4] = [
    ("decode", 1536, 32768, 1),
    ("decode-in-cache", 1536, 1536, 1),
    ("prefill64", 1536, 1536, 64),
    ("prefill512", 1536, 1536, 512),
];

/// Weight rows quantized by ggml (once per type); other row counts repeat or cut them.
const DISTINCT_ROWS: usize = 1536;

/// Uniform values in [-0.5, 0.5).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut draw = Draw::new(seed);
    (0..n).map(|_| draw.next() / 2.0).collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("kernels");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for format in Format::ALL {
        // Every shape has k = 1536 (whole blocks of every type).
        let quantized = ggml_quantize(format, &values(SHAPES[0].1 * DISTINCT_ROWS, 1), SHAPES[0].1);
        for (name, k, n, rows) in SHAPES {
            let w: Vec<u8> = quantized
                .iter()
                .copied()
                .cycle()
                .take(quantized.len() / DISTINCT_ROWS * n)
                .collect();
            let x = values(k * rows, 2);
            let product = MatMul::packed(format, k, &w, &x);
            group.throughput(Throughput::Elements((k * n * rows) as u64));
            let id = |side: &str| BenchmarkId::new(format!("{}/{name}", format.name()), side);
            for level in cpu::available() {
                group.bench_function(id(&format!("wick-{level}")), |b| {
                    b.iter(|| {
                        let mut sum = 0.0f32;
                        product.run_at(level, 0, 1, &mut |_, _, v| sum += v[0]);
                        sum
                    });
                });
            }
            for (side, kernels) in [
                ("ggml-fast", GgmlKernels::Fast),
                ("ggml-reference", GgmlKernels::Reference),
            ] {
                let mut ggml =
                    GgmlProduct::new(format, (k, n), &w, &x, kernels, 1).expect("ggml's product");
                group.bench_function(id(side), |b| b.iter(|| ggml.run().expect("ggml runs")));
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
