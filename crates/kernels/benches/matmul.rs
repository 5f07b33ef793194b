//! The matrix kernel per weight type at every CPU level this build has (`scalar` is the
//! definition itself, per pair), on one thread: one decode row, a 4-row batch (a decode step
//! of four clients: direct passes or a strip, by type and level) and an 8-row prefill tile
//! against a 1536 × 1536 matrix of random blocks (in cache), and one decode row against a
//! 576 × 49152 one (`big`: SmolLM2's output layer, larger than the caches, so a decode step's
//! memory traffic counts as it does in a model).
#![allow(missing_docs, clippy::cast_precision_loss)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wick_kernels::cpu;
use wick_kernels::matmul::{Format, MatMul};

/// (k, n, input rows, name) of each product measured.
const SHAPES: [(usize, usize, usize, &str); 4] = [
    (1536, 1536, 1, "1"),
    (1536, 1536, 4, "4"),
    (1536, 1536, 8, "8"),
    (576, 49152, 1, "big"),
];

fn weights(format: Format, k: usize, n: usize) -> Vec<u8> {
    let bytes = k / format.block_values() * format.block_bytes();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut w: Vec<u8> = (0..n * bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    if format.is_float() {
        // Every value 2^-6 in the format's bits (F16, BF16 or F32, little-endian).
        let value: &[u8] = match format {
            Format::F16 => &[0x00, 0x24],
            Format::BF16 => &[0x80, 0x3C],
            _ => &[0x00, 0x00, 0x80, 0x3C],
        };
        for v in w.chunks_mut(value.len()) {
            v.copy_from_slice(value);
        }
        return w;
    }
    // Scales in range: every block's leading F16 fields set to 2^-6.
    for block in w.chunks_mut(format.block_bytes()) {
        block[..2].copy_from_slice(&0x2400u16.to_le_bytes());
        block[2..4].copy_from_slice(&0x2400u16.to_le_bytes());
    }
    w
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("matmul");
    group.sample_size(10);
    for format in Format::ALL {
        for (k, n, rows, name) in SHAPES {
            if k % format.row_multiple() != 0 {
                continue;
            }
            let w = weights(format, k, n);
            let x: Vec<f32> = (0..rows * k)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let product = MatMul::packed(format, k, &w, &x);
            group.throughput(Throughput::Elements((k * n * rows) as u64));
            for level in cpu::available() {
                let id = BenchmarkId::new(format!("{}/{name}", format.name()), level);
                group.bench_with_input(id, &level, |b, &level| {
                    b.iter(|| {
                        let mut sum = 0.0f32;
                        product.run_at(level, 0, 1, &mut |_, _, v| sum += v[0]);
                        sum
                    });
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
