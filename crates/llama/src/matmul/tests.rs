#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::float_cmp,
    clippy::many_single_char_names
)]

use super::*;
use proptest::prelude::*;

use crate::test_rng::Rng;

/// A random F16 of magnitude between 2^-8 and 2^-1 (a block's scale or minimum), its bytes.
fn half(rng: &mut Rng) -> [u8; 2] {
    rng.half(7).to_le_bytes()
}

/// A float in [−2, 2).
fn float(rng: &mut Rng) -> f32 {
    (rng.next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
}

/// Owned weights (`n` rows of `k`, rows `pad` bytes apart beyond their blocks) and inputs
/// (`m` rows of `k`, `gap` floats apart beyond their values).
struct Case {
    format: Format,
    k: usize,
    n: usize,
    m: usize,
    w: Vec<u8>,
    w_stride: usize,
    x: Vec<f32>,
    x_stride: usize,
}

impl Case {
    fn new(
        seed: u64,
        format: Format,
        k: usize,
        n: usize,
        m: usize,
        pad: usize,
        gap: usize,
    ) -> Self {
        let mut rng = Rng(seed | 1);
        let bytes = format.block_bytes();
        let w_stride = k / QK * bytes + pad;
        let mut w = vec![0u8; n * w_stride];
        for row in w.chunks_mut(w_stride) {
            for block in row[..k / QK * bytes].chunks_mut(bytes) {
                // The scale (and Q4_1's minimum), then random values: every byte and nibble.
                let values = match format {
                    Format::Q4_1 => {
                        block[2..4].copy_from_slice(&half(&mut rng));
                        4
                    }
                    Format::Q8_0 => 2,
                };
                block[..2].copy_from_slice(&half(&mut rng));
                for byte in &mut block[values..] {
                    *byte = rng.next() as u8;
                }
            }
        }
        let x_stride = k + gap;
        let x = (0..m * x_stride).map(|_| float(&mut rng)).collect();
        Self {
            format,
            k,
            n,
            m,
            w,
            w_stride,
            x,
            x_stride,
        }
    }

    fn matmul(&self) -> MatMul<'_> {
        MatMul {
            k: self.k,
            w: Weights {
                format: self.format,
                data: &self.w,
                stride: self.w_stride,
                rows: self.n,
            },
            x: Inputs {
                data: &self.x,
                stride: self.x_stride,
                rows: self.m,
            },
        }
    }

    /// Every output, `[input row][weight row]`, computed by `nth` threads.
    fn run(&self, nth: usize) -> Vec<Vec<f32>> {
        let mut out = vec![vec![f32::NAN; self.n]; self.m];
        let matmul = self.matmul();
        for ith in 0..nth {
            matmul.run(ith, nth, &mut |i, first, values| {
                out[i][first..first + values.len()].copy_from_slice(values);
            });
        }
        out
    }

    /// Every output by the scalar definition, each pair on its own.
    fn definition(&self) -> Vec<Vec<f32>> {
        let mut x = Quantized::default();
        x.of(self.matmul().x, self.k);
        (0..self.m)
            .map(|i| {
                (0..self.n)
                    .map(|n| dot(self.format, &self.w[n * self.w_stride..], &x, i))
                    .collect()
            })
            .collect()
    }

    /// Weight row `n`'s values.
    fn weights(&self, n: usize) -> Vec<f64> {
        let row = &self.w[n * self.w_stride..];
        let bytes = self.format.block_bytes();
        let half = |at: usize| f64::from(crate::attention::f16_to_f32(half_at(row, at)));
        (0..self.k)
            .map(|j| {
                let (at, i) = (j / QK * bytes, j % QK);
                match self.format {
                    Format::Q4_1 => {
                        let byte = row[at + 4 + i % 16];
                        let q = if i < 16 { byte & 0x0F } else { byte >> 4 };
                        half(at) * f64::from(q) + half(at + 2)
                    }
                    Format::Q8_0 => half(at) * f64::from(row[at + 2 + i].cast_signed()),
                }
            })
            .collect()
    }
}

/// The formats this build's kernel computes exactly (all of them in scalar code).
fn formats() -> Vec<Format> {
    [Format::Q4_1, Format::Q8_0]
        .into_iter()
        .filter(|&f| supports(f) || !VECTORISED)
        .collect()
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter()
        .map(|r| r.iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn the_kernel_matches_the_scalar_definition_bit_for_bit() {
    // Tiles of every height (1 to 4 inputs), short last weight tiles, several panels, padded
    // rows.
    for format in formats() {
        for (seed, k, n, m) in [
            (1, 32, 1, 1),
            (2, 64, 5, 2),
            (3, 576, 67, 7),
            (4, 1536, 130, 9),
        ] {
            let case = Case::new(seed, format, k, n, m, 4, 3);
            assert_eq!(
                bits(&case.run(1)),
                bits(&case.definition()),
                "{format:?}: k {k}, n {n}, m {m}"
            );
        }
    }
}

#[test]
fn the_vector_tile_matches_the_scalar_one_bit_for_bit() {
    fn check<L: Layout, const C: usize>(case: &Case) {
        let mut x = Quantized::default();
        x.of(case.matmul().x, case.k);
        let w: [&[u8]; TILE_W] = std::array::from_fn(|r| &case.w[r * case.w_stride..]);
        let (lanes, minimums) = accumulate::<L, C>(w, &x, 1);
        let (want_lanes, want_minimums) = accumulate_scalar::<L, C>(w, &x, 1);
        let bits = |l: [f32; 8]| l.map(f32::to_bits);
        for c in 0..C {
            for r in 0..TILE_W {
                assert_eq!(
                    bits(lanes[c][r].into()),
                    bits(want_lanes[c][r]),
                    "{C}: {c}, {r}"
                );
                assert_eq!(minimums[c][r].to_bits(), want_minimums[c][r].to_bits());
            }
        }
    }
    // An odd number of blocks: the last pair's second block is empty.
    fn all<L: Layout>(case: &Case) {
        check::<L, 1>(case);
        check::<L, 2>(case);
        check::<L, 3>(case);
        check::<L, 4>(case);
    }
    for k in [32, 96, 576] {
        for format in formats() {
            let case = Case::new(k as u64, format, k, TILE_W, 5, 0, 0);
            match format {
                Format::Q4_1 => all::<Q41>(&case),
                Format::Q8_0 => all::<Q80>(&case),
            }
        }
    }
}

#[test]
fn an_output_does_not_change_with_the_batch_or_the_threads() {
    for format in formats() {
        batch_and_threads(&Case::new(7, format, 576, 200, 11, 0, 0));
    }
}

fn batch_and_threads(case: &Case) {
    let all = bits(&case.run(1));
    for nth in [2, 3, 8, 64, 300] {
        assert_eq!(bits(&case.run(nth)), all, "{nth} threads");
    }
    // Each input row alone, and any window of rows, gives the same bits as in the batch.
    for first in 0..case.m {
        for len in 1..=case.m - first {
            let window = Case {
                m: len,
                x: case.x[first * case.x_stride..(first + len) * case.x_stride].to_vec(),
                w: case.w.clone(),
                ..*case
            };
            assert_eq!(
                bits(&window.run(2)),
                all[first..first + len],
                "rows {first}+{len}"
            );
        }
    }
}

#[test]
fn the_product_is_close_to_the_exact_one() {
    for format in formats() {
        close_to_exact(&Case::new(11, format, 1536, 24, 5, 0, 0));
    }
}

fn close_to_exact(case: &Case) {
    let out = case.run(2);
    for n in 0..case.n {
        let w = case.weights(n);
        for (i, got) in out.iter().map(|row| row[n]).enumerate() {
            let x = &case.x[i * case.x_stride..][..case.k];
            let exact: f64 = w.iter().zip(x).map(|(a, &b)| a * f64::from(b)).sum();
            let scale: f64 = w
                .iter()
                .zip(x)
                .map(|(a, &b)| (a * f64::from(b)).abs())
                .sum();
            // 8-bit inputs: each value within half a step of 1/127 of its block's largest.
            assert!(
                (f64::from(got) - exact).abs() <= 0.01 * scale,
                "row {i}, weight {n}: {got} vs {exact} (scale {scale})"
            );
        }
    }
}

#[test]
fn zero_inputs_give_the_weights_nothing_but_zero() {
    for format in formats() {
        let mut case = Case::new(5, format, 64, 9, 3, 0, 0);
        case.x.fill(0.0);
        assert!(case.run(2).iter().flatten().all(|v| *v == 0.0));
    }
}

#[test]
fn shares_cover_the_rows_once_in_whole_tiles() {
    for n in [1, 4, 5, 63, 64, 576, 1537] {
        for nth in 1..=9 {
            let shares: Vec<_> = (0..nth).map(|ith| share(n, ith, nth)).collect();
            assert_eq!(shares[0].start, 0);
            assert_eq!(shares[nth - 1].end, n);
            for pair in shares.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
                assert!(pair[0].end == n || pair[0].end.is_multiple_of(TILE_W));
            }
        }
    }
}

#[test]
fn quantizing_rounds_to_the_nearest_step() {
    let mut values = [0.0f32; QK];
    values[0] = 127.0;
    values[1] = -63.5; // a tie: to even
    values[2] = 0.4;
    let mut q = [0i8; QK];
    let (d, s) = quantize_block(&values, &mut q);
    assert_eq!((d, q[0], q[1], q[2]), (1.0, 127, -64, 0));
    assert_eq!(s, 63.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_batch_split_gives_each_row_the_bits_it_has_alone(
        seed in 1u64..u64::MAX,
        blocks in 1usize..6,
        n in 1usize..40,
        m in 1usize..10,
        nth in 1usize..5,
        q8 in any::<bool>(),
    ) {
        let format = if q8 && formats().contains(&Format::Q8_0) { Format::Q8_0 } else { Format::Q4_1 };
        let case = Case::new(seed, format, blocks * QK, n, m, 0, 0);
        let all = bits(&case.run(nth));
        prop_assert_eq!(&all, &bits(&case.definition()));
        for (i, row) in all.iter().enumerate() {
            let alone = Case {
                m: 1,
                x: case.x[i * case.x_stride..(i + 1) * case.x_stride].to_vec(),
                w: case.w.clone(),
                ..case
            };
            prop_assert_eq!(&bits(&alone.run(1))[0], row);
        }
    }
}
