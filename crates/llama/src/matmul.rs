//! wick's batch-invariant product of Q4_1 weights with F32 inputs, run in place of ggml's
//! matrix product (on its reference kernels) in the deterministic kernel mode.
//!
//! ggml's reference matrix product is batch-invariant, but it computes every (weight row,
//! input row) pair on its own: each pair unpacks the weight block's nibbles and converts its
//! scales again. On a small model this product is most of a step (about 55 % of a decode step
//! with 8 streams on a 2-core CPU), so this kernel computes tiles of 4 weight rows × up to 4
//! input rows, unpacking each weight block once per tile, and keeps the property:
//!
//! - **A pair's arithmetic depends on that pair alone.** Each input row is quantized on its
//!   own (32 values to 8 bits with one F32 scale, as ggml's `Q8_1` does with F16 scales), and
//!   each pair's dot product runs the same operations in the same order whatever tile, thread
//!   or batch it is computed in: per block, eight 32-bit integer lane sums of four products,
//!   each lane accumulated with one fused multiply-add by the product of the two scales; then
//!   the lanes summed in a fixed tree, plus the weight minimums' chain (`m · s` per block, in
//!   block order).
//! - **The vector path and the scalar one agree bit for bit**: integer sums are exact, their
//!   conversion to F32 is exact (they stay below 2^24), and the scalar path uses the same
//!   fused multiply-adds. The unit tests hold the kernel to the scalar definition ([`dot`]).
//!
//! Every thread quantizes all input rows itself (a custom op has no shared step before its
//! threads start; quantizing costs one pass over the inputs against one per weight row for
//! the product) and computes an even share of the weight rows.

use std::cell::RefCell;
use std::ops::Range;

/// Values per quantization block (ggml's `QK4_1` and `QK8_1`).
pub(crate) const QK: usize = 32;
/// Bytes of one ggml `block_q4_1`: F16 scale `d`, F16 minimum `m`, 16 bytes of nibbles
/// (value `j` is `d · q_j + m`; `q_j` is the low nibble of byte `j` for `j < 16`, the high
/// nibble of byte `j − 16` after).
pub(crate) const Q4_1_BYTES: usize = 20;
/// Weight rows per tile.
const TILE_W: usize = 4;
/// Input rows per tile, at most.
const TILE_X: usize = 4;
/// Weight rows whose results a thread gathers before handing them out, per input row.
const PANEL: usize = 64;

/// A Q4_1 weight matrix: `rows` rows of `k` values, row `r` at byte `r · stride`.
#[derive(Clone, Copy)]
pub(crate) struct Weights<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) stride: usize,
    pub(crate) rows: usize,
}

/// F32 inputs: `rows` rows of `k` values, row `r` at element `r · stride`.
#[derive(Clone, Copy)]
pub(crate) struct Inputs<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) stride: usize,
    pub(crate) rows: usize,
}

/// One product: output `(i, n)` is weight row `n` · input row `i`, over `k` values (a
/// multiple of [`QK`]).
#[derive(Clone, Copy)]
pub(crate) struct MatMul<'a> {
    pub(crate) k: usize,
    pub(crate) w: Weights<'a>,
    pub(crate) x: Inputs<'a>,
}

/// Input rows quantized to 8 bits per value, block by block: `rows × blocks` of each.
#[derive(Default)]
pub(crate) struct Quantized {
    q: Vec<[i8; QK]>,
    /// Each block's scale: value `j` is about `d · q_j`.
    d: Vec<f32>,
    /// Each block's `d · Σ q_j`, for the weights' minimums.
    s: Vec<f32>,
    blocks: usize,
}

impl Quantized {
    /// Quantizes `x`'s rows of `k` values.
    pub(crate) fn of(&mut self, x: Inputs<'_>, k: usize) {
        let blocks = k / QK;
        let n = x.rows * blocks;
        self.blocks = blocks;
        self.q.resize(n, [0; QK]);
        self.d.resize(n, 0.0);
        self.s.resize(n, 0.0);
        for i in 0..x.rows {
            let row = &x.data[i * x.stride..][..k];
            for (b, values) in row.chunks_exact(QK).enumerate() {
                let at = i * blocks + b;
                (self.d[at], self.s[at]) = quantize_block(values, &mut self.q[at]);
            }
        }
    }

    fn row(&self, i: usize) -> Range<usize> {
        i * self.blocks..(i + 1) * self.blocks
    }
}

/// 32 values to 8 bits with one scale (round to nearest, ties to even); returns the scale
/// and the scale times the sum of the quantized values.
fn quantize_block(values: &[f32], q: &mut [i8; QK]) -> (f32, f32) {
    let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut sum = 0i32;
    for (q, &v) in q.iter_mut().zip(values) {
        // In range by construction (|v · inverse| ≤ 127); `as` saturates NaN to 0.
        #[allow(clippy::cast_possible_truncation)]
        let quantized = (v * inverse).round_ties_even() as i8;
        *q = quantized;
        sum += i32::from(quantized);
    }
    #[allow(clippy::cast_precision_loss)] // |sum| ≤ 32 · 127
    (d, d * sum as f32)
}

/// One weight block's scale, minimum and nibbles.
#[cfg(any(
    test,
    not(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))
))]
#[inline]
fn block(w: &[u8]) -> (f32, f32, &[u8; 16]) {
    let d = crate::attention::f16_to_f32(u16::from_le_bytes([w[0], w[1]]));
    let m = crate::attention::f16_to_f32(u16::from_le_bytes([w[2], w[3]]));
    (d, m, w[4..Q4_1_BYTES].try_into().expect("16 bytes"))
}

/// The definition of one pair's product, in scalar code: weight row `w` (its Q4_1 blocks)
/// with quantized input blocks `q`, scales `d` and sums `s`. The kernel matches it bit for bit.
#[cfg(test)]
#[allow(clippy::many_single_char_names)] // the definition's names
pub(crate) fn dot(w: &[u8], q: &[[i8; QK]], d: &[f32], s: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut minimums = 0.0f32;
    for (b, x) in q.iter().enumerate() {
        let (wd, wm, nibbles) = block(&w[b * Q4_1_BYTES..]);
        let scale = wd * d[b];
        for (l, lane) in lanes.iter_mut().enumerate() {
            let mut sum = 0i32;
            for j in 4 * l..4 * l + 4 {
                let byte = nibbles[j % 16];
                let v = if j < 16 { byte & 0x0F } else { byte >> 4 };
                sum += i32::from(v) * i32::from(x[j]);
            }
            #[allow(clippy::cast_precision_loss)] // |sum| ≤ 4 · 15 · 128
            let sum = sum as f32;
            *lane = scale.mul_add(sum, *lane);
        }
        minimums = wm.mul_add(s[b], minimums);
    }
    lane_sum(lanes) + minimums
}

/// The eight lanes summed in a fixed tree (ggml's `hsum_float_8`).
#[inline]
fn lane_sum(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// Thread `ith`'s share (of `nth`) of `n` weight rows: even, in whole tiles.
fn share(n: usize, ith: usize, nth: usize) -> Range<usize> {
    let tiles = n.div_ceil(TILE_W);
    let nth = nth.max(1);
    let at = |i: usize| (tiles * i / nth * TILE_W).min(n);
    at(ith)..at(ith + 1)
}

#[derive(Default)]
struct Scratch {
    x: Quantized,
    /// `PANEL` results per input row.
    out: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl MatMul<'_> {
    /// Computes thread `ith`'s share (of `nth`) of the weight rows for every input row and
    /// hands the results to `out`: input row, first weight row, values (consecutive weight
    /// rows).
    pub(crate) fn run(&self, ith: usize, nth: usize, out: &mut dyn FnMut(usize, usize, &[f32])) {
        let mine = share(self.w.rows, ith, nth);
        if mine.is_empty() || self.x.rows == 0 {
            return;
        }
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch { x, out: results } = &mut *scratch;
            x.of(self.x, self.k);
            results.resize(self.x.rows * PANEL, 0.0);
            let mut panel = mine.start;
            while panel < mine.end {
                let panel_end = (panel + PANEL).min(mine.end);
                self.panel(x, panel..panel_end, results);
                let width = panel_end - panel;
                for i in 0..self.x.rows {
                    out(i, panel, &results[i * PANEL..][..width]);
                }
                panel = panel_end;
            }
        });
    }

    /// Weight rows `rows` (at most [`PANEL`]) times every input row, into `results` (row `i`'s
    /// at `i · PANEL`).
    fn panel(&self, x: &Quantized, rows: Range<usize>, results: &mut [f32]) {
        let weight_row = |n: usize| {
            let n = n.min(rows.end - 1); // a short last tile repeats its last row
            &self.w.data[n * self.w.stride..][..x.blocks * Q4_1_BYTES]
        };
        let mut i = 0;
        while i < self.x.rows {
            let count = (self.x.rows - i).min(TILE_X);
            for n in rows.clone().step_by(TILE_W) {
                let w: [&[u8]; TILE_W] = std::array::from_fn(|r| weight_row(n + r));
                let mut tile = [[0.0f32; TILE_W]; TILE_X];
                match count {
                    1 => tile[..1].copy_from_slice(&tile_of::<1>(w, x, i)),
                    2 => tile[..2].copy_from_slice(&tile_of::<2>(w, x, i)),
                    3 => tile[..3].copy_from_slice(&tile_of::<3>(w, x, i)),
                    _ => tile = tile_of::<TILE_X>(w, x, i),
                }
                let width = (rows.end - n).min(TILE_W);
                for (c, values) in tile[..count].iter().enumerate() {
                    let at = (i + c) * PANEL + (n - rows.start);
                    results[at..at + width].copy_from_slice(&values[..width]);
                }
            }
            i += count;
        }
    }
}

/// The products of weight rows `w` with input rows `first..first + C`: `[input][weight]`.
fn tile_of<const C: usize>(w: [&[u8]; TILE_W], x: &Quantized, first: usize) -> [[f32; TILE_W]; C] {
    let starts: [usize; C] = std::array::from_fn(|c| x.row(first + c).start);
    let (lanes, minimums) = accumulate::<C>(w, x, &starts);
    let mut out = [[0.0f32; TILE_W]; C];
    for c in 0..C {
        for r in 0..TILE_W {
            out[c][r] = lane_sum(lanes[c][r]) + minimums[c][r];
        }
    }
    out
}

/// The scales and minimums of block `b` of the four weight rows `w`, as F32.
#[inline]
fn headers(w: &[&[u8]; TILE_W], b: usize) -> ([f32; TILE_W], [f32; TILE_W]) {
    let bits: [u16; 8] = std::array::from_fn(|i| {
        let (r, at) = (i % TILE_W, b * Q4_1_BYTES + 2 * (i / TILE_W));
        u16::from_le_bytes([w[r][at], w[r][at + 1]])
    });
    let values = f16x8(bits);
    (
        std::array::from_fn(|r| values[r]),
        std::array::from_fn(|r| values[TILE_W + r]),
    )
}

/// Eight F16 values (bits) as F32, exactly.
#[inline]
fn f16x8(bits: [u16; 8]) -> [f32; 8] {
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    return crate::ffi::f16x8(bits);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    return bits.map(crate::attention::f16_to_f32);
}

/// Each pair's eight lane accumulators and its minimums' chain after every block, with
/// AVX2: one 256-bit register per pair, each weight block's nibbles unpacked once for the
/// `C` input rows.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
))]
fn accumulate<const C: usize>(
    w: [&[u8]; TILE_W],
    x: &Quantized,
    starts: &[usize; C],
) -> ([[[f32; 8]; TILE_W]; C], [[f32; TILE_W]; C]) {
    use safe_arch::{
        bitand_m256i, convert_to_m256_from_i32_m256i, fused_mul_add_m256, load_unaligned_m128i,
        load_unaligned_m256i, m256, set_m128i_m256i, set_splat_i8_m256i, set_splat_m256,
        shr_imm_u16_m128i, zeroed_m256,
    };
    let low = set_splat_i8_m256i(0x0F);
    let mut acc: [[m256; TILE_W]; C] = [[zeroed_m256(); TILE_W]; C];
    let mut minimums = [[0.0f32; TILE_W]; C];
    for b in 0..x.blocks {
        let (wd, wm) = headers(&w, b);
        let nibbles: [_; TILE_W] = std::array::from_fn(|r| {
            let at = b * Q4_1_BYTES + 4;
            let packed: &[u8; 16] = w[r][at..at + 16].try_into().expect("16 bytes");
            let packed = load_unaligned_m128i(packed);
            bitand_m256i(set_m128i_m256i(shr_imm_u16_m128i::<4>(packed), packed), low)
        });
        for c in 0..C {
            let at = starts[c] + b;
            let q = load_unaligned_m256i(&x.q[at]);
            let (xd, xs) = (x.d[at], x.s[at]);
            for r in 0..TILE_W {
                let sums = convert_to_m256_from_i32_m256i(dot_u8_i8(nibbles[r], q));
                acc[c][r] = fused_mul_add_m256(set_splat_m256(wd[r] * xd), sums, acc[c][r]);
                minimums[c][r] = wm[r].mul_add(xs, minimums[c][r]);
            }
        }
    }
    (acc.map(|row| row.map(m256::to_array)), minimums)
}

/// Per 32-bit lane, the sum of its four products of `a`'s unsigned bytes with `b`'s signed
/// ones (exact: at most 4 · 15 · 128 in size with nibbles).
#[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
#[inline]
fn dot_u8_i8(a: safe_arch::m256i, b: safe_arch::m256i) -> safe_arch::m256i {
    #[cfg(target_feature = "avxvnni")]
    return crate::ffi::dot_u8_i8(a, b);
    #[cfg(not(target_feature = "avxvnni"))]
    return safe_arch::mul_i16_horizontal_add_m256i(
        safe_arch::mul_u8i8_add_horizontal_saturating_m256i(a, b),
        safe_arch::set_splat_i16_m256i(1),
    );
}

/// Each pair's eight lane accumulators and its minimums' chain after every block, in scalar
/// code (the same operations as [`dot`]).
#[cfg(not(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
)))]
fn accumulate<const C: usize>(
    w: [&[u8]; TILE_W],
    x: &Quantized,
    starts: &[usize; C],
) -> ([[[f32; 8]; TILE_W]; C], [[f32; TILE_W]; C]) {
    let mut acc = [[[0.0f32; 8]; TILE_W]; C];
    let mut minimums = [[0.0f32; TILE_W]; C];
    for b in 0..x.blocks {
        let (wd, wm) = headers(&w, b);
        for r in 0..TILE_W {
            let (_, _, nibbles) = block(&w[r][b * Q4_1_BYTES..]);
            let values: [u8; QK] = std::array::from_fn(|j| {
                if j < 16 {
                    nibbles[j] & 0x0F
                } else {
                    nibbles[j - 16] >> 4
                }
            });
            for c in 0..C {
                let at = starts[c] + b;
                let (q, scale) = (&x.q[at], wd[r] * x.d[at]);
                for (l, lane) in acc[c][r].iter_mut().enumerate() {
                    let sum: i32 = (4 * l..4 * l + 4)
                        .map(|j| i32::from(values[j]) * i32::from(q[j]))
                        .sum();
                    #[allow(clippy::cast_precision_loss)] // |sum| ≤ 4 · 15 · 128
                    let sum = sum as f32;
                    *lane = scale.mul_add(sum, *lane);
                }
                minimums[c][r] = wm[r].mul_add(x.s[at], minimums[c][r]);
            }
        }
    }
    (acc, minimums)
}

#[cfg(test)]
mod tests;
