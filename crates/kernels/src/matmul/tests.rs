#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::float_cmp,
    clippy::many_single_char_names
)]

use super::*;
use proptest::prelude::*;

use crate::cpu::available;
use crate::test_rng::{fingerprint, Rng};
use layouts::half_at;

/// The paths of every level this machine has and, with the vector paths, the VNNI paths'
/// arithmetic on AVX2 ([`Path::Generic`]): what the tests hold to the definition.
fn paths() -> Vec<Path> {
    let paths = available().into_iter().map(Path::of);
    #[cfg(vector)]
    let paths = paths.chain([Path::Generic]);
    paths.collect()
}

/// A random F16 of magnitude between 2^-8 and 2^-1 (a block's scale or minimum), its bytes.
fn half(rng: &mut Rng) -> [u8; 2] {
    rng.half(7).to_le_bytes()
}

/// A float in [−2, 2).
fn float(rng: &mut Rng) -> f32 {
    (rng.next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
}

/// A random float weight of `format` (one of the floats) in [−2, 2) (F16: magnitudes
/// between 2^-5 and 2^2), its bytes (four, of which the format's first).
fn float_weight(format: Format, rng: &mut Rng) -> [u8; 4] {
    match format {
        Format::F16 => {
            let [a, b] = rng.half(10).to_le_bytes();
            [a, b, 0, 0]
        }
        Format::BF16 => {
            let [a, b] = ((float(rng).to_bits() >> 16) as u16).to_le_bytes();
            [a, b, 0, 0]
        }
        _ => float(rng).to_le_bytes(),
    }
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
        let w_stride = k / format.block_values() * bytes + pad;
        let mut w = vec![0u8; n * w_stride];
        for row in w.chunks_mut(w_stride) {
            for block in row[..k / format.block_values() * bytes].chunks_mut(bytes) {
                if format.is_float() {
                    block.copy_from_slice(&float_weight(format, &mut rng)[..bytes]);
                    continue;
                }
                // Random bytes (every value, bit and 6-bit scale), then the F16 scales (and
                // minimums) in range.
                for byte in block.iter_mut() {
                    *byte = rng.next() as u8;
                }
                for &at in halves(format) {
                    block[at..at + 2].copy_from_slice(&half(&mut rng));
                }
                if let Some(at) = exponent(format) {
                    block[at] = exponent_byte(&mut rng);
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

    /// Every output, `[input row][weight row]`, computed by `nth` threads at the build's best
    /// level.
    fn run(&self, nth: usize) -> Vec<Vec<f32>> {
        self.run_on(Path::of(crate::cpu::best()), nth)
    }

    /// Every output, computed by `nth` threads on `path`.
    fn run_on(&self, path: Path, nth: usize) -> Vec<Vec<f32>> {
        let mut out = vec![vec![f32::NAN; self.n]; self.m];
        let matmul = self.matmul();
        for ith in 0..nth {
            matmul.run_on(path, ith, nth, &mut |i, first, values| {
                out[i][first..first + values.len()].copy_from_slice(values);
            });
        }
        out
    }

    /// Every output by the scalar definition, each pair on its own.
    fn definition(&self) -> Vec<Vec<f32>> {
        let mut x = Quantized::default();
        x.of(self.matmul().x, self.k, self.format.block_values());
        (0..self.m)
            .map(|i| {
                (0..self.n)
                    .map(|n| {
                        let raw = &self.x[i * self.x_stride..][..self.k];
                        dot(self.format, &self.w[n * self.w_stride..], &x, raw, i)
                    })
                    .collect()
            })
            .collect()
    }

    /// Weight row `n`'s values, dequantized as ggml does.
    fn weights(&self, n: usize) -> Vec<f64> {
        let row = &self.w[n * self.w_stride..];
        let (values, bytes) = (self.format.block_values(), self.format.block_bytes());
        let mut out = vec![0.0; self.k];
        for (block, y) in out.chunks_mut(values).enumerate() {
            dequantize(self.format, &row[block * bytes..][..bytes], y);
        }
        out
    }
}

/// The byte offsets of a block's F16 fields.
fn halves(format: Format) -> &'static [usize] {
    match format {
        Format::Q4_1 | Format::Q5_1 | Format::Q4_K | Format::Q5_K => &[0, 2],
        Format::Q2_K => &[80, 82],
        Format::Q6_K => &[208],
        Format::Q3_K => &[108],
        Format::F16 | Format::BF16 | Format::F32 | Format::MXFP4 => &[],
        _ => &[0],
    }
}

/// The byte offset of a block's E8M0 exponent (`MXFP4`'s scale), if it has one.
fn exponent(format: Format) -> Option<usize> {
    (format == Format::MXFP4).then_some(0)
}

/// A random E8M0 exponent whose scale is as far from 1 as an F16 scale's (`half`'s): 2^−10
/// to 2^5, and now and then the subnormal scales (2^−128, 2^−127), 2^−126 and 2^22.
fn exponent_byte(rng: &mut Rng) -> u8 {
    let r = rng.next();
    if r.is_multiple_of(64) {
        [0, 1, 2, 150][(r >> 8) as usize % 4]
    } else {
        117 + (r >> 8) as u8 % 16
    }
}

/// ggml's `get_scale_min_k4`.
fn scale_min(j: usize, q: &[u8]) -> (f64, f64) {
    let (sc, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (f64::from(sc), f64::from(m))
}

/// One ggml block's values, following ggml's own `dequantize_row_*` loops (an independent
/// reading of the layouts for the accuracy test).
#[allow(clippy::too_many_lines)]
fn dequantize(format: Format, x: &[u8], y: &mut [f64]) {
    let f16 = |at: usize| f64::from(crate::attention::f16_to_f32(half_at(x, at)));
    let word = |at: usize| u32::from_le_bytes(x[at..at + 4].try_into().unwrap());
    let iq4 = |q: u8| f64::from(layouts::IQ4[usize::from(q)]);
    match format {
        Format::F16 => y[0] = f16(0),
        Format::BF16 => y[0] = f64::from(f32::from_bits(u32::from(half_at(x, 0)) << 16)),
        Format::F32 => y[0] = f64::from(f32::from_le_bytes(x[..4].try_into().unwrap())),
        Format::Q4_0 | Format::Q4_1 | Format::IQ4_NL => {
            let (d, qs) = (f16(0), if format == Format::Q4_1 { 4 } else { 2 });
            let m = if format == Format::Q4_1 { f16(2) } else { 0.0 };
            for j in 0..16 {
                let (a, b) = (x[qs + j] & 0x0F, x[qs + j] >> 4);
                match format {
                    Format::Q4_0 => {
                        y[j] = f64::from(i32::from(a) - 8) * d;
                        y[j + 16] = f64::from(i32::from(b) - 8) * d;
                    }
                    Format::Q4_1 => {
                        y[j] = f64::from(a) * d + m;
                        y[j + 16] = f64::from(b) * d + m;
                    }
                    _ => {
                        y[j] = d * iq4(a);
                        y[j + 16] = d * iq4(b);
                    }
                }
            }
        }
        Format::Q5_0 | Format::Q5_1 => {
            let one = format == Format::Q5_1;
            let (d, m) = (f16(0), if one { f16(2) } else { 0.0 });
            let (qh, qs) = if one { (word(4), 8) } else { (word(2), 6) };
            for j in 0..16 {
                let xh0 = ((qh >> j) << 4) & 0x10;
                let xh1 = (qh >> (j + 12)) & 0x10;
                let x0 = f64::from(u32::from(x[qs + j] & 0x0F) | xh0);
                let x1 = f64::from(u32::from(x[qs + j] >> 4) | xh1);
                if one {
                    y[j] = x0 * d + m;
                    y[j + 16] = x1 * d + m;
                } else {
                    y[j] = (x0 - 16.0) * d;
                    y[j + 16] = (x1 - 16.0) * d;
                }
            }
        }
        Format::Q8_0 => {
            for j in 0..32 {
                y[j] = f64::from(x[2 + j].cast_signed()) * f16(0);
            }
        }
        Format::Q4_K | Format::Q5_K => {
            let (d, min) = (f16(0), f16(2));
            let scales = &x[4..16];
            let five = format == Format::Q5_K;
            let (qh, mut q) = if five {
                (&x[16..48], 48)
            } else {
                (&x[..0], 16)
            };
            let (mut u1, mut u2) = (1u8, 2u8);
            for (i, j) in (0..256).step_by(64).enumerate() {
                let (sc1, m1) = scale_min(2 * i, scales);
                let (sc2, m2) = scale_min(2 * i + 1, scales);
                for l in 0..32 {
                    let high = |u: u8| if five && qh[l] & u != 0 { 16.0 } else { 0.0 };
                    y[j + l] = d * sc1 * (f64::from(x[q + l] & 0xF) + high(u1)) - min * m1;
                    y[j + 32 + l] = d * sc2 * (f64::from(x[q + l] >> 4) + high(u2)) - min * m2;
                }
                q += 32;
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        Format::Q6_K => {
            let d = f16(208);
            let (mut ql, mut qh, mut sc, mut y0) = (0usize, 128usize, 192usize, 0usize);
            for _ in 0..2 {
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = i32::from((x[ql + l] & 0xF) | ((x[qh + l] & 3) << 4)) - 32;
                    let q2 = i32::from((x[ql + l + 32] & 0xF) | (((x[qh + l] >> 2) & 3) << 4)) - 32;
                    let q3 = i32::from((x[ql + l] >> 4) | (((x[qh + l] >> 4) & 3) << 4)) - 32;
                    let q4 = i32::from((x[ql + l + 32] >> 4) | (((x[qh + l] >> 6) & 3) << 4)) - 32;
                    let s = |i: usize| f64::from(x[sc + is + i].cast_signed());
                    y[y0 + l] = d * s(0) * f64::from(q1);
                    y[y0 + l + 32] = d * s(2) * f64::from(q2);
                    y[y0 + l + 64] = d * s(4) * f64::from(q3);
                    y[y0 + l + 96] = d * s(6) * f64::from(q4);
                }
                y0 += 128;
                ql += 64;
                qh += 32;
                sc += 8;
            }
        }
        Format::Q3_K => {
            // ggml's `dequantize_row_q3_K`, its scale unpacking through four words included.
            let d = f16(108);
            let mut aux = [0u32; 4];
            for (i, word) in aux.iter_mut().enumerate().take(3) {
                *word = u32::from_le_bytes(x[96 + 4 * i..100 + 4 * i].try_into().unwrap());
            }
            let (kmask1, kmask2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
            let tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
            aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
            aux[0] = (aux[0] & kmask2) | ((tmp & kmask1) << 4);
            aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
            let scales: Vec<i32> = aux
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .map(|b| i32::from(b.cast_signed()))
                .collect();
            let (hm, mut q, mut y0, mut is, mut m) = (&x[..32], 32usize, 0usize, 0usize, 1u8);
            for _ in 0..2 {
                let mut shift = 0;
                for _ in 0..4 {
                    for half in 0..2 {
                        let dl = d * f64::from(scales[is] - 32);
                        is += 1;
                        for l in 0..16 {
                            let at = 16 * half + l;
                            let low = i32::from((x[q + at] >> shift) & 3);
                            let minus = if hm[at] & m == 0 { 4 } else { 0 };
                            y[y0] = dl * f64::from(low - minus);
                            y0 += 1;
                        }
                    }
                    shift += 2;
                    m <<= 1;
                }
                q += 32;
            }
        }
        Format::Q2_K => {
            // ggml's `dequantize_row_q2_K`.
            let (d, min) = (f16(80), f16(82));
            let (mut q, mut y0, mut is) = (16usize, 0usize, 0usize);
            for _ in 0..2 {
                let mut shift = 0;
                for _ in 0..4 {
                    for half in 0..2 {
                        let sc = x[is];
                        is += 1;
                        let (dl, ml) = (d * f64::from(sc & 0xF), min * f64::from(sc >> 4));
                        for l in 0..16 {
                            y[y0] = dl * f64::from((x[q + 16 * half + l] >> shift) & 3) - ml;
                            y0 += 1;
                        }
                    }
                    shift += 2;
                }
                q += 32;
            }
        }
        Format::MXFP4 => {
            let d = f64::from(layouts::e8m0_half(x[0]));
            let value = |q: u8| f64::from(layouts::MXFP4_VALUES[usize::from(q)]);
            for j in 0..16 {
                y[j] = d * value(x[1 + j] & 0x0F);
                y[j + 16] = d * value(x[1 + j] >> 4);
            }
        }
        Format::IQ4_XS => {
            let d = f16(0);
            let scales_h = u16::from_le_bytes([x[2], x[3]]);
            for ib in 0..8 {
                let ls = i32::from((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF)
                    | i32::from((scales_h >> (2 * ib)) & 3) << 4;
                let dl = d * f64::from(ls - 32);
                let qs = &x[8 + 16 * ib..];
                for j in 0..16 {
                    y[32 * ib + j] = dl * iq4(qs[j] & 0xF);
                    y[32 * ib + j + 16] = dl * iq4(qs[j] >> 4);
                }
            }
        }
    }
}

/// Every format.
fn formats() -> [Format; 16] {
    Format::ALL
}

/// `k` rounded up to what `format`'s rows need.
fn k_for(format: Format, k: usize) -> usize {
    k.next_multiple_of(format.row_multiple())
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter()
        .map(|r| r.iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn the_kernel_matches_the_scalar_definition_bit_for_bit_at_every_level() {
    // Tiles of every height (1 to 4 inputs), short last weight tiles, several panels, padded
    // rows; a panel or more with 29 inputs: the paired float tile's twelve and four rows
    // (F32 and BF16 at `avx512`, from a panel's share of weight rows) and a rest of one.
    for format in formats() {
        for (seed, k, n, m) in [
            (1, 32, 1, 1),
            (2, 64, 5, 2),
            (3, 576, 67, 7),
            (4, 1536, 130, 9),
            (5, 96, 70, 29),
        ] {
            let k = k_for(format, k);
            matches_the_definition_at_every_level(&Case::new(seed, format, k, n, m, 4, 3));
        }
    }
}

/// Every level's outputs for `case`, on one thread, equal the scalar definition's bit for bit.
fn matches_the_definition_at_every_level(case: &Case) {
    let want = bits(&case.definition());
    for path in paths() {
        assert_eq!(
            bits(&case.run_on(path, 1)),
            want,
            "{:?} on {path:?}: k {}, n {}, m {}",
            case.format,
            case.k,
            case.n,
            case.m
        );
    }
}

#[test]
fn every_strip_and_tile_height_matches_the_definition_at_every_level() {
    // 1 to 15 input rows (every pass height, 1 to 4, runs of them, direct passes of three
    // and a rest up to each type's direct batch and strips past it, and the `avx512` level's
    // passes of eight over two strips with a rest of one to seven), 1 to 24 weight rows
    // (short strips and tiles, pairs of strips with a strip or a short one after them), an
    // odd number of blocks (a last pair of blocks half empty).
    for k in [32, 96, 576] {
        for format in formats() {
            let k = k_for(format, k);
            for (n, m) in [
                (1, 1),
                (3, 2),
                (8, 3),
                (9, 4),
                (17, 5),
                (16, 7),
                (9, 8),
                (8, 9),
                (17, 12),
                (24, 15),
            ] {
                let seed = (k * n + m) as u64;
                matches_the_definition_at_every_level(&Case::new(seed, format, k, n, m, 0, 0));
            }
        }
    }
}

#[test]
fn every_float_path_matches_the_scalar_tile_bit_for_bit() {
    fn check<E: Element, const C: usize>(case: &Case, path: Path) {
        let w: [&[u8]; TILE_W] = std::array::from_fn(|r| &case.w[r * case.w_stride..]);
        let x: [&[f32]; C] = std::array::from_fn(|c| &case.x[(c + 1) * case.x_stride..][..case.k]);
        let got = float_tile::<E, C>(path, w, x, case.k);
        let want = float_tile::<E, C>(Path::Scalar, w, x, case.k);
        for c in 0..C {
            assert_eq!(
                got[c].map(f32::to_bits),
                want[c].map(f32::to_bits),
                "{path:?} {C}: {c}"
            );
        }
    }
    fn all<E: Element>(case: &Case, path: Path) {
        check::<E, 1>(case, path);
        check::<E, 2>(case, path);
        check::<E, 3>(case, path);
        check::<E, 4>(case, path);
        check::<E, 8>(case, path);
    }
    // The paired tile (inputs side by side), for every type, though only F32 and BF16 run it.
    #[cfg(wide)]
    fn paired<E: Element>(case: &Case) {
        let w: [&[u8]; TILE_W] = std::array::from_fn(|r| &case.w[r * case.w_stride..]);
        let x: [&[f32]; 8] = std::array::from_fn(|c| &case.x[(c + 1) * case.x_stride..][..case.k]);
        let mut pairs = floats::Paired::default();
        pairs.of(&case.x[case.x_stride..], case.x_stride, case.k, 8);
        let lanes =
            floats::accumulate_paired::<E, 4, 8>(w, std::array::from_fn(|p| pairs.pair(p)), case.k);
        let want = float_tile::<E, 8>(Path::Scalar, w, x, case.k);
        for c in 0..8 {
            assert_eq!(
                lanes[c].map(|lanes| lane_sum(lanes).to_bits()),
                want[c].map(f32::to_bits),
                "paired: {c}"
            );
        }
    }
    // A lane group alone, whole steps, a step and a lane group, many steps.
    for k in [8, 96, 40, 576] {
        for format in [Format::F16, Format::BF16, Format::F32] {
            let case = Case::new(k as u64, format, k, TILE_W, 9, 0, 0);
            for level in available() {
                with_layout!(format, L => unreachable!("{}", L::VALUES), E => all::<E>(&case, Path::of(level)));
            }
            // (A build with AVX-512 runs only where the machine has it.)
            #[cfg(wide)]
            with_layout!(format, L => unreachable!("{}", L::VALUES), E => paired::<E>(&case));
        }
    }
}

#[test]
fn extreme_values_stay_exact_on_every_path() {
    // The largest magnitudes every type can hold against inputs of ±127: the bound that keeps
    // AVX2's 16-bit pair sums from saturating (the integer paths': the floats have none).
    for format in formats().into_iter().filter(|f| !f.is_float()) {
        let k = k_for(format, 256);
        let mut case = Case::new(9, format, k, 8, 3, 0, 0);
        for (i, v) in case.x.iter_mut().enumerate() {
            *v = if i % 3 == 0 { -1.0 } else { 1.0 };
        }
        let bytes = format.block_bytes();
        for (i, block) in case.w.chunks_mut(bytes).enumerate() {
            let fill = [0xFF, 0x00, 0x80][i % 3];
            for (at, byte) in block.iter_mut().enumerate() {
                let scale = halves(format).iter().any(|&h| at == h || at == h + 1)
                    || exponent(format) == Some(at);
                if !scale {
                    *byte = fill;
                }
            }
        }
        let want = bits(&case.definition());
        for path in paths() {
            assert_eq!(bits(&case.run_on(path, 2)), want, "{format:?} on {path:?}");
        }
        close_to_exact(&case);
    }
}

#[test]
fn an_output_does_not_change_with_the_batch_or_the_threads() {
    for format in formats() {
        batch_and_threads(&Case::new(7, format, k_for(format, 576), 200, 11, 0, 0));
    }
}

/// Batches large enough that the threads share the inputs (at least [`SPLIT_INPUTS`] rows each,
/// rows a stride apart with a gap): every thread count gives the definition's bits, and each
/// thread's rows are the ones a split by weight rows would have given it.
#[test]
fn threads_sharing_the_inputs_give_the_same_bits() {
    for format in formats() {
        let m = 2 * SPLIT_INPUTS + 7;
        let case = Case::new(17, format, k_for(format, 64), 40, m, 0, 3);
        let want = bits(&case.definition());
        for nth in [1, 2, 3] {
            assert_eq!(bits(&case.run(nth)), want, "{format:?}, {nth} threads");
        }
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
        close_to_exact(&Case::new(12, format, 256, 24, 3, 0, 0));
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
        let mut case = Case::new(5, format, k_for(format, 64), 9, 3, 0, 0);
        case.x.fill(0.0);
        assert!(case.run(2).iter().flatten().all(|v| *v == 0.0));
    }
}

#[test]
fn shares_cover_the_rows_once_in_whole_strips() {
    for n in [1, 4, 5, 63, 64, 576, 1537] {
        for nth in 1..=9 {
            let shares: Vec<_> = (0..nth).map(|ith| share(n, ith, nth)).collect();
            assert_eq!(shares[0].start, 0);
            assert_eq!(shares[nth - 1].end, n);
            for pair in shares.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
                assert!(pair[0].end == n || pair[0].end.is_multiple_of(STRIP));
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
    values[16] = 5.0;
    let mut q = [0i8; QK];
    let d = scale_of(&values);
    let sums = quantize_block(&values, d, &mut q);
    assert_eq!((d, q[0], q[1], q[2], q[16]), (1.0, 127, -64, 0, 5));
    assert_eq!(sums, [63, 5]);
}

#[test]
fn a_super_block_type_quantizes_its_inputs_per_256_values() {
    let mut values = vec![0.0f32; 512];
    values[3] = 254.0; // the first group's largest: its scale is 2
    values[40] = 3.0; // another block of the first group: 1.5 steps, a tie, to even
    values[300] = -127.0; // the second group's: its scale is 1
    let x = Inputs {
        data: &values,
        stride: 512,
        rows: 1,
    };
    let mut q = Quantized::default();
    q.of(x, 512, 256);
    let scales: Vec<f32> = q.data.iter().map(|block| block.d).collect();
    assert_eq!(scales, [[2.0; 8], [1.0; 8]].concat());
    assert_eq!(
        (q.data[0].q[3], q.data[1].q[8], q.data[9].q[12]),
        (127, 2, -127)
    );
    q.of(x, 512, QK);
    assert_eq!((q.data[1].d, q.data[1].q[8]), (3.0 / 127.0, 127));
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
        which in 0usize..15,
    ) {
        let format = formats()[which];
        let case = Case::new(seed, format, blocks * format.row_multiple(), n, m, 0, 0);
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

/// The same bits on every machine, recorded: each type's product of fixed weights and inputs
/// (19 weight rows, 5 input rows, 2 threads) at every level this machine has, its bits'
/// fingerprint against the snapshot made on the machine that wrote the kernels (AVX2, no
/// VNNI). On a VNNI or AVX-512 machine this holds those paths to the AVX2 machine's bits; on
/// an ARM machine, the portable definition to x86's. A deliberate change of a definition
/// (a new kernel revision) updates the snapshot (`INSTA_UPDATE=always`).
#[test]
fn every_type_gives_the_recorded_bits_at_every_level() {
    use std::fmt::Write;
    let mut table = String::new();
    for format in formats() {
        let case = Case::new(0x5eed, format, k_for(format, 512), 19, 5, 0, 0);
        let want = case.run_on(Path::Scalar, 2);
        for path in paths() {
            assert_eq!(
                bits(&case.run_on(path, 2)),
                bits(&want),
                "{format:?} on {path:?}"
            );
        }
        let values: Vec<f32> = want.concat();
        writeln!(table, "{:<7}{}", format.name(), fingerprint(&values)).expect("a String");
    }
    insta::assert_snapshot!(table);
}

/// Each super-block type's integer numbers, against ggml's readings one value at a time
/// (`get_scale_min_k4`, `dequantize_row_q3_K`'s and `IQ4_XS`'s bit gathering), over random
/// bytes: the word-at-a-time readers feed the definition itself, so the kernel's agreement
/// with the definition cannot check them.
#[test]
fn the_super_block_numbers_are_ggml_s() {
    use layouts::{Layout, IQ4XS, Q2K, Q3K, Q4K, Q6K};
    let mut rng = Rng(0x5eed_cafe);
    for _ in 0..200 {
        let row: Vec<u8> = (0..2 * 256).map(|_| rng.next() as u8).collect();
        for s in 0..2 {
            // Q4_K: scales and minimums at bytes 4–15 of a 144-byte super-block.
            let q = &row[s * 144 + 4..][..12];
            let n = Q4K::numbers(&row, s);
            for j in 0..8 {
                let (scale, min) = if j < 4 {
                    (q[j] & 63, q[j + 4] & 63)
                } else {
                    (
                        (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
                        (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
                    )
                };
                assert_eq!(
                    (n.scale(j), n.minimum(j)),
                    (i32::from(scale), i32::from(min))
                );
            }
            // Q3_K: sixteen 6-bit scales less 32 at bytes 96–107 of 110.
            let q = &row[s * 110 + 96..][..12];
            let n = Q3K::numbers(&row, s);
            for j in 0..16 {
                let low = if j < 8 { q[j] & 0xF } else { q[j - 8] >> 4 };
                let high = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
                assert_eq!(n.scale(j), i32::from(low | high << 4) - 32);
            }
            // IQ4_XS: eight 6-bit scales less 32 in bytes 2–7 of 136.
            let n = IQ4XS::numbers(&row, s);
            for j in 0..8 {
                assert_eq!(n.scale(j), IQ4XS::scale(&row[s * 136..], j) - 32);
            }
            // Q6_K: sixteen signed bytes at 192 of 210; Q2_K: a nibble each at 0–15 of 84.
            let n = Q6K::numbers(&row, s);
            for j in 0..16 {
                assert_eq!(n.scale(j), i32::from(row[s * 210 + 192 + j].cast_signed()));
            }
            let n = Q2K::numbers(&row, s);
            for j in 0..16 {
                let byte = row[s * 84 + j];
                assert_eq!(
                    (n.scale(j), n.minimum(j)),
                    (i32::from(byte & 0xF), i32::from(byte >> 4))
                );
            }
        }
    }
}

/// Each super-block layout's four-row widened numbers (the decode path's) are its one-row
/// numbers widened, lane for lane, over random bytes: `Q4_K` and `Q5_K` unpack theirs for four
/// rows at once in vector registers.
#[cfg(vector)]
#[test]
fn the_four_row_numbers_are_the_one_row_numbers() {
    use layouts::{Layout, Q4K, Q5K};
    fn check<L: Layout>(rng: &mut Rng) {
        let rows: [Vec<u8>; TILE_W] =
            std::array::from_fn(|_| (0..2 * L::BYTES).map(|_| rng.next() as u8).collect());
        let w: [&[u8]; TILE_W] = std::array::from_fn(|r| rows[r].as_slice());
        let widen = |bytes: u128| -> [i16; 16] {
            std::array::from_fn(|k| i16::from(((bytes >> (8 * k)) as u8).cast_signed()))
        };
        for s in 0..2 {
            let four = L::numbers16(&w, s);
            for (r, (scales, minimums)) in four.into_iter().enumerate() {
                let one = L::numbers(w[r], s);
                assert_eq!(<[i16; 16]>::from(scales), widen(one.scales), "row {r}");
                assert_eq!(<[i16; 16]>::from(minimums), widen(one.minimums), "row {r}");
            }
        }
    }
    let mut rng = Rng(0x4e75_6d62);
    for _ in 0..100 {
        check::<Q4K>(&mut rng);
        check::<Q5K>(&mut rng);
    }
}
