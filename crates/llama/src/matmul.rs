//! wick's batch-invariant product of Q4_1 and `Q8_0` weights with F32 inputs, run in place of
//! ggml's matrix product (on its reference kernels) in the deterministic kernel mode.
//!
//! ggml's reference matrix product is batch-invariant, but it computes every (weight row,
//! input row) pair on its own: each pair unpacks the weight block's nibbles and converts its
//! scales again. On a small model this product is most of a step (about 55 % of a decode step
//! with 8 streams on a 2-core CPU), so this kernel computes tiles of 4 weight rows × up to 4
//! input rows, unpacking each weight block once per tile, two blocks per 256-bit register, and
//! keeps the property:
//!
//! - **A pair's arithmetic depends on that pair alone.** Each input row is quantized on its
//!   own (32 values to 8 bits with one F32 scale, as ggml's `Q8_1` does with F16 scales), and
//!   each pair's dot product runs the same operations in the same order whatever tile, thread
//!   or batch it is computed in ([`dot`] defines them): eight F32 lanes, blocks `b` and
//!   `b + 1` side by side in lanes 0–3 and 4–7; per block, each of its lanes adds an exact
//!   integer sum of eight products times the two scales' product, with one fused
//!   multiply-add; then the lanes summed in a fixed tree, plus the weight minimums' chain
//!   (`m · s` per block, in block order).
//! - **The vector path and the scalar one agree bit for bit**: integer sums are exact, their
//!   conversion to F32 is exact (they stay below 2^24), and the scalar path uses the same
//!   fused multiply-adds. The unit tests hold the kernel to the scalar definition.
//!
//! Every thread quantizes all input rows itself (a custom op has no shared step before its
//! threads start; quantizing costs one pass over the inputs against one per weight row for
//! the product) and computes an even share of the weight rows.

// The product's conventional names: weights `w`, inputs `x`, `k` values, quantized `q`,
// scales `d`, sums `s`.
#![allow(clippy::many_single_char_names)]

use std::cell::RefCell;
use std::ops::Range;

/// Whether the kernel's vector path is compiled in (x86-64 with AVX2 and FMA). Without it the
/// scalar path is the reference of the tests only: ggml's reference product, which is
/// batch-invariant too and has SIMD of its own (NEON, …), runs instead.
pub(crate) const VECTORISED: bool = cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
));

/// Whether the vector path computes `format` exactly on this build: Q4_1 with AVX2; `Q8_0`'s
/// bytes need a VNNI instruction (AVX-VNNI, or AVX-512 VNNI with VL), since AVX2's 16-bit pair
/// sums would saturate on them.
pub(crate) fn supports(format: Format) -> bool {
    VECTORISED
        && (format == Format::Q4_1
            || cfg!(any(
                target_feature = "avxvnni",
                all(target_feature = "avx512vnni", target_feature = "avx512vl")
            )))
}

/// Values per quantization block (ggml's `QK4_1` and `QK8_1`).
pub(crate) const QK: usize = 32;
/// Bytes of one ggml `block_q4_1`: F16 scale `d`, F16 minimum `m`, 16 bytes of nibbles
/// (value `j` is `d · q_j + m`; `q_j` is the low nibble of byte `j` for `j < 16`, the high
/// nibble of byte `j − 16` after).
pub(crate) const Q4_1_BYTES: usize = 20;
/// Bytes of one ggml `block_q8_0`: F16 scale `d`, 32 signed bytes (value `j` is `d · q_j`).
pub(crate) const Q8_0_BYTES: usize = 34;

/// The weight types the kernel reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Q4_1,
    Q8_0,
}

impl Format {
    /// Bytes per block of [`QK`] values.
    pub(crate) fn block_bytes(self) -> usize {
        match self {
            Format::Q4_1 => Q4_1_BYTES,
            Format::Q8_0 => Q8_0_BYTES,
        }
    }
}
/// Weight rows per tile.
const TILE_W: usize = 4;
/// Input rows per tile, at most.
const TILE_X: usize = 4;
/// How far ahead of the weight block in use (bytes) the kernel asks for weights. Reading
/// each weight once per step from memory, a decode step is bound by how fast the weights
/// arrive; the hardware's own prefetching alone kept one thread at about 8.5 GB/s here.
/// Measured on one thread, 576-value rows from a 35 MB matrix: 512 → 11.3 GB/s, 2048 →
/// 16.4, 4096 → 19, 6144 → 21, 8192 → 20.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
))]
const PREFETCH: usize = 6144;
/// Weight rows whose results a thread gathers before handing them out, per input row.
const PANEL: usize = 64;

/// A weight matrix: `rows` rows of `k` values in `format`'s blocks, row `r` at byte
/// `r · stride`.
#[derive(Clone, Copy)]
pub(crate) struct Weights<'a> {
    pub(crate) format: Format,
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

/// Input rows quantized to 8 bits per value, in pairs of blocks laid out for the kernel:
/// `rows × pairs` of `lo`, `hi` and `d`, `rows × blocks` of `s`.
#[derive(Default)]
pub(crate) struct Quantized {
    /// Per pair of blocks `(b, b + 1)`: values 0–15 of block `b`, then those of `b + 1`.
    lo: Vec<[i8; QK]>,
    /// Per pair: values 16–31 of block `b`, then those of `b + 1`.
    hi: Vec<[i8; QK]>,
    /// Per pair: block `b`'s scale four times, then block `b + 1`'s (value `j` is about
    /// `d · q_j`). A row with an odd number of blocks ends with a pair whose second block is
    /// zeros, with scale 0.
    d: Vec<[f32; 8]>,
    /// Each block's `d · Σ q_j`, for the weights' minimums.
    s: Vec<f32>,
    blocks: usize,
    pairs: usize,
}

impl Quantized {
    /// Quantizes `x`'s rows of `k` values.
    pub(crate) fn of(&mut self, x: Inputs<'_>, k: usize) {
        let blocks = k / QK;
        let pairs = blocks.div_ceil(2);
        (self.blocks, self.pairs) = (blocks, pairs);
        self.lo.resize(x.rows * pairs, [0; QK]);
        self.hi.resize(x.rows * pairs, [0; QK]);
        self.d.resize(x.rows * pairs, [0.0; 8]);
        self.s.resize(x.rows * blocks, 0.0);
        let mut q = [0i8; QK];
        for i in 0..x.rows {
            let row = &x.data[i * x.stride..][..k];
            for (b, values) in row.chunks_exact(QK).enumerate() {
                let (d, s) = quantize_block(values, &mut q);
                self.s[i * blocks + b] = s;
                let (pair, half) = (i * pairs + b / 2, 16 * (b % 2));
                self.lo[pair][half..half + 16].copy_from_slice(&q[..16]);
                self.hi[pair][half..half + 16].copy_from_slice(&q[16..]);
                self.d[pair][half / 4..half / 4 + 4].fill(d);
            }
            if blocks % 2 == 1 {
                let last = i * pairs + pairs - 1;
                self.lo[last][16..].fill(0);
                self.hi[last][16..].fill(0);
                self.d[last][4..].fill(0.0);
            }
        }
    }

    fn pairs_of(&self, i: usize) -> Range<usize> {
        i * self.pairs..(i + 1) * self.pairs
    }

    fn blocks_of(&self, i: usize) -> Range<usize> {
        i * self.blocks..(i + 1) * self.blocks
    }
}

/// 32 values to 8 bits with one scale (round to nearest, ties to even); returns the scale
/// and the scale times the sum of the quantized values.
fn quantize_block(values: &[f32], q: &mut [i8; QK]) -> (f32, f32) {
    use wide::f32x8;
    let v: [f32x8; 4] =
        std::array::from_fn(|i| f32x8::new(values[8 * i..8 * i + 8].try_into().expect("a block")));
    // The largest magnitude (`max` is exact and passes NaN over, like `f32::max`).
    let lanes = (v[0].abs().max(v[1].abs())).max(v[2].abs().max(v[3].abs()));
    let amax = lanes.to_array().into_iter().fold(0.0f32, f32::max);
    let d = amax / 127.0;
    let inverse = f32x8::splat(if d == 0.0 { 0.0 } else { 1.0 / d });
    // `round_int` rounds to nearest, ties to even, saturates and takes NaN to 0, as
    // `round_ties_even() as i32` does; the values are in range by construction
    // (|v · inverse| ≤ 127).
    let rounded = v.map(|v| (v * inverse).round_int());
    let mut sum = 0i32;
    for (i, r) in rounded.iter().enumerate() {
        for (q, r) in q[8 * i..8 * i + 8].iter_mut().zip(r.to_array()) {
            #[allow(clippy::cast_possible_truncation)]
            let r8 = r as i8;
            *q = r8;
            sum += r;
        }
    }
    #[allow(clippy::cast_precision_loss)] // |sum| ≤ 32 · 127
    (d, d * sum as f32)
}

/// How the kernel reads one weight type. Every type is read as unsigned bytes `u_j` with a
/// scale `d` and a minimum `m` per block: value `j` is `d · u_j + m`. Q4_1's `u_j` are its
/// nibbles and `m` its minimum; `Q8_0`'s `u_j` are its signed bytes plus 128 (their top bit
/// flipped) and `m` is `−128 · d` (exact).
trait Layout {
    const BYTES: usize;

    /// One block's values `u_j`, in value order (scalar code).
    #[cfg(any(
        test,
        not(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "fma"
        ))
    ))]
    fn values(block: &[u8]) -> [u8; QK];

    /// The scales and minimums of blocks `b` and `b + 1` of the rows `w` (zeros past the
    /// row): `(d_b, m_b, d_b+1, m_b+1)`, each per row.
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4];

    /// Blocks `b` and `b + 1` of `row` (zeros past the row) in the inputs' paired layout:
    /// values 0–15 of `b` then of `b + 1`, and values 16–31 of `b` then of `b + 1`.
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (safe_arch::m256i, safe_arch::m256i);
}

/// ggml's `Q4_1`.
struct Q41;
/// ggml's `Q8_0`.
struct Q80;

/// The F16 at byte `at` of `w`.
#[inline]
fn half_at(w: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([w[at], w[at + 1]])
}

impl Layout for Q41 {
    const BYTES: usize = Q4_1_BYTES;

    #[cfg(any(
        test,
        not(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "fma"
        ))
    ))]
    fn values(block: &[u8]) -> [u8; QK] {
        std::array::from_fn(|j| {
            if j < 16 {
                block[4 + j] & 0x0F
            } else {
                block[4 + j - 16] >> 4
            }
        })
    }

    // Measured: left to the compiler, it is not inlined into the tile loop and takes a fifth
    // of the product's time.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        let one = |b: usize| {
            if b >= blocks {
                return [0.0; 8];
            }
            let at = b * Q4_1_BYTES;
            let words: [u32; TILE_W] = std::array::from_fn(|r| {
                u32::from_le_bytes(w[r][at..at + 4].try_into().expect("4 bytes"))
            });
            // The low half of a block's first word is its scale, the high half its minimum.
            #[allow(clippy::cast_possible_truncation)]
            let bits: [u16; 8] =
                std::array::from_fn(|i| (words[i % TILE_W] >> (16 * (i / TILE_W))) as u16);
            f16x8(bits)
        };
        let (first, second) = (one(b), one(b + 1));
        [
            std::array::from_fn(|r| first[r]),
            std::array::from_fn(|r| first[TILE_W + r]),
            std::array::from_fn(|r| second[r]),
            std::array::from_fn(|r| second[TILE_W + r]),
        ]
    }

    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    #[allow(clippy::inline_always)] // as `headers`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (safe_arch::m256i, safe_arch::m256i) {
        use safe_arch::{
            bitand_m256i, load_unaligned_m128i, set_m128i_m256i, set_splat_i8_m256i,
            shr_imm_u16_m256i,
        };
        let nibbles = |b: usize| -> [u8; 16] {
            if b >= blocks {
                return [0; 16];
            }
            let at = b * Q4_1_BYTES + 4;
            row[at..at + 16].try_into().expect("16 bytes")
        };
        let both = set_m128i_m256i(
            load_unaligned_m128i(&nibbles(b + 1)),
            load_unaligned_m128i(&nibbles(b)),
        );
        let low = set_splat_i8_m256i(0x0F);
        (
            bitand_m256i(both, low),
            bitand_m256i(shr_imm_u16_m256i::<4>(both), low),
        )
    }
}

impl Layout for Q80 {
    const BYTES: usize = Q8_0_BYTES;

    #[cfg(any(
        test,
        not(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "fma"
        ))
    ))]
    fn values(block: &[u8]) -> [u8; QK] {
        std::array::from_fn(|j| block[2 + j] ^ 0x80)
    }

    #[allow(clippy::inline_always)] // as `Q41::headers`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        let bits: [u16; 8] = std::array::from_fn(|i| {
            let b = b + i / TILE_W;
            if b < blocks {
                half_at(w[i % TILE_W], b * Q8_0_BYTES)
            } else {
                0
            }
        });
        let d = f16x8(bits);
        let first: [f32; TILE_W] = std::array::from_fn(|r| d[r]);
        let second: [f32; TILE_W] = std::array::from_fn(|r| d[TILE_W + r]);
        [
            first,
            first.map(|d| -128.0 * d),
            second,
            second.map(|d| -128.0 * d),
        ]
    }

    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    #[allow(clippy::inline_always)] // as `Q41::headers`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (safe_arch::m256i, safe_arch::m256i) {
        use safe_arch::{bitxor_m256i, load_unaligned_m128i, set_m128i_m256i, set_splat_i8_m256i};
        let half = |b: usize, h: usize| -> [u8; 16] {
            if b >= blocks {
                return [0; 16];
            }
            let at = b * Q8_0_BYTES + 2 + 16 * h;
            row[at..at + 16].try_into().expect("16 bytes")
        };
        let load = |h: usize| {
            set_m128i_m256i(
                load_unaligned_m128i(&half(b + 1, h)),
                load_unaligned_m128i(&half(b, h)),
            )
        };
        // Signed bytes to unsigned ones plus 128 (the minimum takes the 128 back). Past the
        // row the bytes become 128, against inputs of 0.
        let flip = set_splat_i8_m256i(i8::MIN);
        (bitxor_m256i(load(0), flip), bitxor_m256i(load(1), flip))
    }
}

/// The definition of one pair's product, in scalar code: weight row `w` (its blocks of
/// `format`) with input row `i` of `x`. The kernel matches it bit for bit.
///
/// Block `b` feeds lanes `4 · (b mod 2)` to `4 · (b mod 2) + 3`: lane `l` of its four gets
/// the exact integer sum of the products of values `4l..4l + 4` and `16 + 4l..16 + 4l + 4`,
/// times the two scales' product, with one fused multiply-add. The minimums' chain takes
/// `m · s` per block, in block order.
#[cfg(test)]
pub(crate) fn dot(format: Format, w: &[u8], x: &Quantized, i: usize) -> f32 {
    let (lanes, minimums) = match format {
        Format::Q4_1 => pair_lanes::<Q41>(w, x, i),
        Format::Q8_0 => pair_lanes::<Q80>(w, x, i),
    };
    lane_sum(lanes) + minimums
}

/// [`dot`]'s eight lane accumulators and minimums' chain after every block, before they are
/// summed: the scalar definition the kernel's tiles are held to.
#[cfg(any(
    test,
    not(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))
))]
#[allow(clippy::needless_range_loop)] // `j` indexes three arrays at two offsets
fn pair_lanes<L: Layout>(w: &[u8], x: &Quantized, i: usize) -> ([f32; 8], f32) {
    let mut lanes = [0.0f32; 8];
    let mut minimums = 0.0f32;
    for p in 0..x.pairs {
        // The row's headers are the first of a tile of four copies of it.
        let [d0, m0, d1, m1] = L::headers(&[w; TILE_W], 2 * p, x.blocks);
        for (half, (wd, wm)) in [(d0[0], m0[0]), (d1[0], m1[0])].into_iter().enumerate() {
            let b = 2 * p + half;
            if b == x.blocks {
                break;
            }
            let values = L::values(&w[b * L::BYTES..]);
            let (pair, at) = (x.pairs_of(i).start + p, 16 * half);
            let scale = wd * x.d[pair][at / 4];
            for l in 0..4 {
                let mut sum = 0i32;
                for j in 4 * l..4 * l + 4 {
                    sum += i32::from(values[j]) * i32::from(x.lo[pair][at + j]);
                    sum += i32::from(values[16 + j]) * i32::from(x.hi[pair][at + j]);
                }
                #[allow(clippy::cast_precision_loss)] // |sum| ≤ 8 · 255 · 128
                let sum = sum as f32;
                lanes[at / 4 + l] = scale.mul_add(sum, lanes[at / 4 + l]);
            }
            minimums = wm.mul_add(x.s[x.blocks_of(i).start + b], minimums);
        }
    }
    (lanes, minimums)
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
        match self.w.format {
            Format::Q4_1 => self.panel_of::<Q41>(x, rows, results),
            Format::Q8_0 => self.panel_of::<Q80>(x, rows, results),
        }
    }

    fn panel_of<L: Layout>(&self, x: &Quantized, rows: Range<usize>, results: &mut [f32]) {
        let weight_row = |n: usize| {
            let n = n.min(rows.end - 1); // a short last tile repeats its last row
            &self.w.data[n * self.w.stride..][..x.blocks * L::BYTES]
        };
        let mut i = 0;
        while i < self.x.rows {
            let count = (self.x.rows - i).min(TILE_X);
            for n in rows.clone().step_by(TILE_W) {
                let w: [&[u8]; TILE_W] = std::array::from_fn(|r| weight_row(n + r));
                let mut tile = [[0.0f32; TILE_W]; TILE_X];
                match count {
                    1 => tile[..1].copy_from_slice(&tile_of::<L, 1>(w, x, i)),
                    2 => tile[..2].copy_from_slice(&tile_of::<L, 2>(w, x, i)),
                    3 => tile[..3].copy_from_slice(&tile_of::<L, 3>(w, x, i)),
                    _ => tile = tile_of::<L, TILE_X>(w, x, i),
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
fn tile_of<L: Layout, const C: usize>(
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
) -> [[f32; TILE_W]; C] {
    let (lanes, minimums) = accumulate::<L, C>(w, x, first);
    let mut out = [[0.0f32; TILE_W]; C];
    for c in 0..C {
        for r in 0..TILE_W {
            out[c][r] = lane_sum(lanes[c][r].into()) + minimums[c][r];
        }
    }
    out
}

/// Eight F16 values (bits) as F32, exactly.
#[allow(clippy::inline_always)] // as `headers`, whose part it is
#[inline(always)]
fn f16x8(bits: [u16; 8]) -> [f32; 8] {
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    return crate::ffi::f16x8(bits);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    return bits.map(crate::attention::f16_to_f32);
}

/// Each pair's eight lane accumulators and its minimums' chain after every block, with
/// AVX2: one 256-bit register per pair, each pair of weight blocks unpacked once for the
/// `C` input rows.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
))]
fn accumulate<L: Layout, const C: usize>(
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
) -> ([[safe_arch::m256; TILE_W]; C], [[f32; TILE_W]; C]) {
    use safe_arch::{
        convert_to_m256_from_i32_m256i, fused_mul_add_m256, load_unaligned_m256i, m256, mul_m256,
        zeroed_m256,
    };
    let mut acc: [[m256; TILE_W]; C] = [[zeroed_m256(); TILE_W]; C];
    let mut minimums = [[0.0f32; TILE_W]; C];
    let pairs: [usize; C] = std::array::from_fn(|c| x.pairs_of(first + c).start);
    let blocks: [usize; C] = std::array::from_fn(|c| x.blocks_of(first + c).start);
    for p in 0..x.pairs {
        let (b, n) = (2 * p, x.blocks);
        for row in &w {
            crate::ffi::prefetch(row.as_ptr().wrapping_add(b * L::BYTES + PREFETCH));
        }
        let [d0, m0, d1, m1] = L::headers(&w, b, n);
        let scales: [m256; TILE_W] = std::array::from_fn(|r| {
            m256::from([d0[r], d0[r], d0[r], d0[r], d1[r], d1[r], d1[r], d1[r]])
        });
        let unpacked: [_; TILE_W] = std::array::from_fn(|r| L::pair(w[r], b, n));
        for c in 0..C {
            let at = pairs[c] + p;
            let (xl, xh) = (
                load_unaligned_m256i(&x.lo[at]),
                load_unaligned_m256i(&x.hi[at]),
            );
            let xd = m256::from(x.d[at]);
            for r in 0..TILE_W {
                let (lo, hi) = unpacked[r];
                let sums = dot_u8_i8(dot_u8_i8(safe_arch::zeroed_m256i(), lo, xl), hi, xh);
                let sums = convert_to_m256_from_i32_m256i(sums);
                acc[c][r] = fused_mul_add_m256(mul_m256(scales[r], xd), sums, acc[c][r]);
            }
            let s = &x.s[blocks[c] + b..];
            for r in 0..TILE_W {
                minimums[c][r] = m0[r].mul_add(s[0], minimums[c][r]);
            }
            if b + 1 < n {
                for r in 0..TILE_W {
                    minimums[c][r] = m1[r].mul_add(s[1], minimums[c][r]);
                }
            }
        }
    }
    (acc, minimums)
}

/// `acc` plus, per 32-bit lane, the sum of its four products of `a`'s unsigned bytes with
/// `b`'s signed ones: exact with a VNNI instruction; without one, through 16-bit pair sums
/// that saturate past 32,767, so only where the unsigned bytes stay small (Q4_1's nibbles:
/// see [`supports`]).
#[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
#[inline]
fn dot_u8_i8(acc: safe_arch::m256i, a: safe_arch::m256i, b: safe_arch::m256i) -> safe_arch::m256i {
    #[cfg(any(
        target_feature = "avxvnni",
        all(target_feature = "avx512vnni", target_feature = "avx512vl")
    ))]
    return crate::ffi::dot_u8_i8(acc, a, b);
    #[cfg(not(any(
        target_feature = "avxvnni",
        all(target_feature = "avx512vnni", target_feature = "avx512vl")
    )))]
    return safe_arch::add_i32_m256i(
        acc,
        safe_arch::mul_i16_horizontal_add_m256i(
            safe_arch::mul_u8i8_add_horizontal_saturating_m256i(a, b),
            safe_arch::set_splat_i16_m256i(1),
        ),
    );
}

#[cfg(not(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
)))]
use accumulate_scalar as accumulate;

/// Each pair's eight lane accumulators and its minimums' chain after every block, by the
/// scalar definition ([`pair_lanes`]): the kernel without AVX2 (where [`supports`] sends
/// nothing to it), and the vector tile's reference in the tests.
#[cfg(any(
    test,
    not(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))
))]
fn accumulate_scalar<L: Layout, const C: usize>(
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
) -> ([[[f32; 8]; TILE_W]; C], [[f32; TILE_W]; C]) {
    let mut acc = [[[0.0f32; 8]; TILE_W]; C];
    let mut minimums = [[0.0f32; TILE_W]; C];
    for c in 0..C {
        for r in 0..TILE_W {
            (acc[c][r], minimums[c][r]) = pair_lanes::<L>(w[r], x, first + c);
        }
    }
    (acc, minimums)
}

#[cfg(test)]
mod tests;
