//! wick's batch-invariant product of quantized weights with F32 inputs, run in place of ggml's
//! matrix product in the deterministic kernel mode, for every weight type in [`Format`].
//!
//! ggml's reference matrix product is batch-invariant, but it computes every (weight row,
//! input row) pair on its own: each pair unpacks the weight block's bits and converts its
//! scales again. This kernel computes tiles of 4 weight rows × up to 4 input rows, unpacking
//! each weight block once per tile, two 32-value blocks per 256-bit register, and keeps the
//! properties:
//!
//! - **A pair's arithmetic depends on that pair alone.** Each input row is quantized on its
//!   own (32 values to 8 bits with one F32 scale, as ggml's `Q8_1` does with F16 scales), and
//!   each pair's dot product runs the same operations in the same order whatever tile, thread
//!   or batch it is computed in ([`dot`] defines them): eight F32 lanes, blocks `b` and
//!   `b + 1` side by side in lanes 0–3 and 4–7; per block, each of its lanes adds an exact
//!   integer sum of eight products times the two scales' product, with one fused
//!   multiply-add; then the lanes summed in a fixed tree, plus (for types stored with a
//!   minimum) the minimums' chain (`m · s` per block, in block order).
//! - **Every instruction set gives the same bits.** The only parts that differ between the
//!   scalar code, AVX2, AVX-VNNI and AVX-512 VNNI are the integer sums, and those are exact
//!   on every path: AVX2's 16-bit pair sums (`vpmaddubsw`) cannot saturate because unsigned
//!   weights stay below 32 and signed ones go through the sign trick (`|w|` times `x` with
//!   `w`'s sign, at most 128 · 127 per product); the conversion of a sum to F32 is exact (it
//!   stays below 2^24) and every float operation is the same IEEE operation on every path.
//!   [`crate::cpu`]'s level chooses the path at run time, so one machine runs each level it
//!   has, and the unit tests hold every path to the scalar definition.
//!
//! Every thread quantizes all input rows itself (a custom op has no shared step before its
//! threads start; quantizing costs one pass over the inputs against one per weight row for
//! the product) and computes an even share of the weight rows.

// The product's conventional names: weights `w`, inputs `x`, `k` values, quantized `q`,
// scales `d`, sums `s`.
#![allow(clippy::many_single_char_names)]

use std::cell::RefCell;
use std::ops::Range;

use crate::cpu::Level;

/// Values per quantization block of the inputs, and per lane group of the kernel (ggml's
/// `QK8_1`).
pub const QK: usize = 32;

/// Evaluates `$body` with `$L` the [`layouts::Layout`] of `$format`, or for a float format
/// `$float` with `$E` its [`floats::Element`]: the one place a format becomes its type.
macro_rules! with_layout {
    ($format:expr, $L:ident => $body:expr, $E:ident => $float:expr) => {
        match $format {
            Format::F16 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $E = floats::F16;
                $float
            }
            Format::BF16 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $E = floats::BF16;
                $float
            }
            Format::F32 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $E = floats::F32;
                $float
            }
            Format::Q4_0 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q40;
                $body
            }
            Format::Q4_1 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q41;
                $body
            }
            Format::Q5_0 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q50;
                $body
            }
            Format::Q5_1 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q51;
                $body
            }
            Format::Q8_0 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q80;
                $body
            }
            Format::Q4_K => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q4K;
                $body
            }
            Format::Q5_K => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q5K;
                $body
            }
            Format::IQ4_NL => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::IQ4NL;
                $body
            }
            Format::IQ4_XS => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::IQ4XS;
                $body
            }
            Format::Q6_K => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q6K;
                $body
            }
        }
    };
}

/// The weight types the kernel reads, each one of ggml's block formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's names
pub enum Format {
    /// 4 bits, a scale per 32 values.
    Q4_0,
    /// 4 bits, a scale and a minimum per 32 values.
    Q4_1,
    /// 5 bits, a scale per 32 values.
    Q5_0,
    /// 5 bits, a scale and a minimum per 32 values.
    Q5_1,
    /// 8 bits, a scale per 32 values.
    Q8_0,
    /// 4 bits in super-blocks of 256, 6-bit scales and minimums per 32.
    Q4_K,
    /// 5 bits in super-blocks of 256, 6-bit scales and minimums per 32.
    Q5_K,
    /// 4-bit indices into a fixed table of 16 values, a scale per 32.
    IQ4_NL,
    /// `IQ4_NL`'s values in super-blocks of 256, 6-bit scales per 32.
    IQ4_XS,
    /// 6 bits in super-blocks of 256, 8-bit scales per 16.
    Q6_K,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
}

impl Format {
    /// Every format: the block formats in ggml's type order, then the floats.
    pub const ALL: [Format; 13] = [
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::Q4_K,
        Format::Q5_K,
        Format::IQ4_NL,
        Format::IQ4_XS,
        Format::Q6_K,
        Format::F16,
        Format::BF16,
        Format::F32,
    ];

    /// Values per ggml block (32, or 256 for the super-block types, 1 for the floats).
    pub fn block_values(self) -> usize {
        with_layout!(self, L => L::VALUES, E => 1)
    }

    /// Bytes per ggml block (per value for the floats).
    pub fn block_bytes(self) -> usize {
        with_layout!(self, L => L::BYTES, E => E::BYTES)
    }

    /// What a row's length must be a multiple of for the kernel: the block formats' block, the
    /// floats' lane group of 8.
    pub fn row_multiple(self) -> usize {
        with_layout!(self, L => L::VALUES, E => floats::LANES)
    }

    /// Whether the weights are floats (nothing quantized, inputs kept as they are).
    pub fn is_float(self) -> bool {
        matches!(self, Format::F16 | Format::BF16 | Format::F32)
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Format::Q4_0 => "q4_0",
            Format::Q4_1 => "q4_1",
            Format::Q5_0 => "q5_0",
            Format::Q5_1 => "q5_1",
            Format::Q8_0 => "q8_0",
            Format::Q4_K => "q4_K",
            Format::Q5_K => "q5_K",
            Format::IQ4_NL => "iq4_nl",
            Format::IQ4_XS => "iq4_xs",
            Format::Q6_K => "q6_K",
            Format::F16 => "f16",
            Format::BF16 => "bf16",
            Format::F32 => "f32",
        }
    }

    /// The format ggml calls `name` (its type names, as `gguf` tools print them).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }
}

/// Whether `wick-llama` should hand `format`'s products to this kernel on this build: wherever
/// the vector paths are compiled in (every format has one). Without them ggml's own per-pair
/// product, with SIMD of its own, is faster than the scalar definition; the scalar level still
/// computes every format (the same bits, slowly), which is what the cap is for.
pub fn supports(_format: Format) -> bool {
    VECTORISED
}

/// Whether the kernel's vector paths are compiled in (x86-64 with AVX2, FMA and F16C).
/// Without them the scalar path is the definition the tests hold, and ggml's reference
/// product (batch-invariant too, with NEON of its own) runs instead.
pub const VECTORISED: bool = cfg!(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma",
    target_feature = "f16c"
));

/// Weight rows per tile.
const TILE_W: usize = 4;
// The tile loop writes its per-row arrays out for four rows.
const _: () = assert!(TILE_W == 4);
/// Input rows per tile, at most.
const TILE_X: usize = 4;
/// How far ahead of the weight block in use (bytes) the kernel asks for weights. Reading
/// each weight once per step from memory, a decode step is bound by how fast the weights
/// arrive; the hardware's own prefetching alone kept one thread at about 8.5 GB/s here.
/// Measured on one thread, 576-value rows from a 35 MB Q4_1 matrix: 512 → 11.3 GB/s, 2048 →
/// 16.4, 4096 → 19, 6144 → 21, 8192 → 20.
#[cfg(vector)]
const PREFETCH: usize = 6144;
/// Weight rows whose results a thread gathers before handing them out, per input row.
const PANEL: usize = 64;

/// A weight matrix: `rows` rows of `k` values in `format`'s blocks, row `r` at byte
/// `r · stride`.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    /// The blocks' type.
    pub format: Format,
    /// The bytes, from row 0's.
    pub data: &'a [u8],
    /// Bytes from one row to the next.
    pub stride: usize,
    /// Rows.
    pub rows: usize,
}

/// F32 inputs: `rows` rows of `k` values, row `r` at element `r · stride`.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The values, from row 0's.
    pub data: &'a [f32],
    /// Elements from one row to the next.
    pub stride: usize,
    /// Rows.
    pub rows: usize,
}

/// One product: output `(i, n)` is weight row `n` · input row `i`, over `k` values (a
/// multiple of the format's [`Format::block_values`]).
#[derive(Clone, Copy, Debug)]
pub struct MatMul<'a> {
    /// Values per row.
    pub k: usize,
    /// The weights.
    pub w: Weights<'a>,
    /// The inputs.
    pub x: Inputs<'a>,
}

/// Input rows quantized to 8 bits per value, in pairs of blocks laid out for the kernel:
/// `rows × pairs` of `lo`, `hi` and `d`, `rows × blocks` of `s`.
#[derive(Default, Debug)]
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

mod floats;
use floats::Element;
mod layouts;
use layouts::Layout;

/// The definition of one pair's product, in scalar code: weight row `w` (its blocks of
/// `format`) with input row `i` of `x`. The kernel matches it bit for bit at every level.
///
/// Block `b` feeds lanes `4 · (b mod 2)` to `4 · (b mod 2) + 3`: lane `l` of its four gets
/// the exact integer sum of the products of values `4l..4l + 4` and `16 + 4l..16 + 4l + 4`,
/// times the two scales' product, with one fused multiply-add. A format with a scale per 16
/// values (`Q6_K`, [`Layout::SPLIT`]) adds the two sums one after the other instead, values
/// `4l..4l + 4` with the first half's scale, then `16 + 4l..16 + 4l + 4` with the second's.
/// For a format with minimums, their chain takes `m · s` per block, in block order, and is
/// added last.
///
/// A float format's definition is [`floats`]': it reads input row `i` as it is, `raw`.
#[cfg(test)]
pub(crate) fn dot(format: Format, w: &[u8], x: &Quantized, raw: &[f32], i: usize) -> f32 {
    with_layout!(
        format,
        L => {
            let (lanes, minimums) = pair_lanes::<L>(w, x, i);
            finish(lanes, minimums, !L::SIGNED)
        },
        E => floats::dot::<E>(w, raw)
    )
}

/// A pair's result from its lanes and minimums' chain.
#[inline]
fn finish(lanes: [f32; 8], minimums: f32, with_minimums: bool) -> f32 {
    if with_minimums {
        lane_sum(lanes) + minimums
    } else {
        lane_sum(lanes)
    }
}

/// [`dot`]'s eight lane accumulators and minimums' chain after every block, before they are
/// summed: the scalar definition the kernel's tiles are held to, and the scalar level's path.
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
            let values = L::values(w, b);
            let (pair, at) = (x.pairs_of(i).start + p, 16 * half);
            let scale = wd * x.d[pair][at / 4];
            // With split scales, `wm` is the second half's scale.
            let second = wm * x.d[pair][at / 4];
            for l in 0..4 {
                let (mut first_sum, mut second_sum) = (0i32, 0i32);
                for j in 4 * l..4 * l + 4 {
                    first_sum += i32::from(values[j]) * i32::from(x.lo[pair][at + j]);
                    second_sum += i32::from(values[16 + j]) * i32::from(x.hi[pair][at + j]);
                }
                let lane = &mut lanes[at / 4 + l];
                // |sum| ≤ 8 · 128 · 127: exact in F32.
                #[allow(clippy::cast_precision_loss)]
                if L::SPLIT {
                    *lane = scale.mul_add(first_sum as f32, *lane);
                    *lane = second.mul_add(second_sum as f32, *lane);
                } else {
                    *lane = scale.mul_add((first_sum + second_sum) as f32, *lane);
                }
            }
            if !L::SIGNED {
                minimums = wm.mul_add(x.s[x.blocks_of(i).start + b], minimums);
            }
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

/// How a tile's integer sums are computed: the levels' paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// [`pair_lanes`] per pair.
    Scalar,
    /// AVX2: `vpmaddubsw` then `vpmaddwd`.
    #[cfg(vector)]
    Avx2,
    /// AVX-VNNI's `vpdpbusd`.
    #[cfg(all(vector, target_feature = "avxvnni"))]
    AvxVnni,
    /// AVX-512 VNNI's `vpdpbusd` (256-bit, EVEX).
    #[cfg(all(vector, target_feature = "avx512vnni", target_feature = "avx512vl"))]
    Avx512Vnni,
}

impl Path {
    fn of(level: Level) -> Self {
        match level {
            Level::Scalar => Path::Scalar,
            #[cfg(vector)]
            Level::Avx2 => Path::Avx2,
            #[cfg(all(vector, target_feature = "avxvnni"))]
            Level::Avx2Vnni => Path::AvxVnni,
            #[cfg(all(vector, target_feature = "avx512vnni", target_feature = "avx512vl"))]
            Level::Avx512 => Path::Avx512Vnni,
            // A level this build lacks is never active (`crate::cpu` caps at the build's);
            // the closest lower path computes the same bits.
            #[allow(unreachable_patterns)]
            _ => Path::fallback(),
        }
    }

    /// The best path compiled in below a level the build lacks (AVX-512 VNNI without
    /// AVX-VNNI, capped at `avx2-vnni`, say).
    #[allow(unreachable_code)]
    fn fallback() -> Self {
        #[cfg(vector)]
        return Path::Avx2;
        Path::Scalar
    }
}

impl MatMul<'_> {
    /// Computes thread `ith`'s share (of `nth`) of the weight rows for every input row at the
    /// active CPU level ([`crate::cpu::level`]) and hands the results to `out`: input row,
    /// first weight row, values (consecutive weight rows).
    pub fn run(&self, ith: usize, nth: usize, out: &mut dyn FnMut(usize, usize, &[f32])) {
        self.run_at(crate::cpu::level(), ith, nth, out);
    }

    /// [`MatMul::run`] at `level` (at most the build's: see [`crate::cpu::best`]).
    pub fn run_at(
        &self,
        level: Level,
        ith: usize,
        nth: usize,
        out: &mut dyn FnMut(usize, usize, &[f32]),
    ) {
        let mine = share(self.w.rows, ith, nth);
        if mine.is_empty() || self.x.rows == 0 {
            return;
        }
        let path = Path::of(level.min(crate::cpu::best()));
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch { x, out: results } = &mut *scratch;
            if !self.w.format.is_float() {
                x.of(self.x, self.k);
            }
            results.resize(self.x.rows * PANEL, 0.0);
            let mut panel = mine.start;
            while panel < mine.end {
                let panel_end = (panel + PANEL).min(mine.end);
                self.panel(path, x, panel..panel_end, results);
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
    fn panel(&self, path: Path, x: &Quantized, rows: Range<usize>, results: &mut [f32]) {
        with_layout!(
            self.w.format,
            L => self.panel_with(self.k / L::VALUES * L::BYTES, rows, results, |w, i, count| {
                block_tiles::<L>(path, w, x, i, count)
            }),
            E => self.panel_with(self.k * E::BYTES, rows, results, |w, i, count| {
                self.float_tiles::<E>(path, w, i, count)
            })
        );
    }

    /// The panel's loop: `tile(w, i, count)` gives the products of weight rows `w` with input
    /// rows `i..i + count` (at most [`TILE_X`]), `[input][weight]`.
    fn panel_with(
        &self,
        row_bytes: usize,
        rows: Range<usize>,
        out: &mut [f32],
        tile: impl Fn([&[u8]; TILE_W], usize, usize) -> [[f32; TILE_W]; TILE_X],
    ) {
        let weight_row = |n: usize| {
            let n = n.min(rows.end - 1); // a short last tile repeats its last row
            &self.w.data[n * self.w.stride..][..row_bytes]
        };
        let mut i = 0;
        while i < self.x.rows {
            let count = (self.x.rows - i).min(TILE_X);
            for n in rows.clone().step_by(TILE_W) {
                let w: [&[u8]; TILE_W] = std::array::from_fn(|r| weight_row(n + r));
                let tile = tile(w, i, count);
                let width = (rows.end - n).min(TILE_W);
                for (c, values) in tile[..count].iter().enumerate() {
                    let at = (i + c) * PANEL + (n - rows.start);
                    out[at..at + width].copy_from_slice(&values[..width]);
                }
            }
            i += count;
        }
    }

    /// Float weight rows `w` times input rows `first..first + count`, `[input][weight]`.
    #[allow(clippy::inline_always)] // one call per tile
    #[inline(always)]
    fn float_tiles<E: Element>(
        &self,
        path: Path,
        w: [&[u8]; TILE_W],
        first: usize,
        count: usize,
    ) -> [[f32; TILE_W]; TILE_X] {
        let row = |c: usize| {
            let i = (first + c).min(first + count - 1);
            &self.x.data[i * self.x.stride..][..self.k]
        };
        let mut tile = [[0.0f32; TILE_W]; TILE_X];
        match count {
            1 => tile[..1].copy_from_slice(&float_tile::<E, 1>(path, w, [row(0)], self.k)),
            2 => tile[..2].copy_from_slice(&float_tile::<E, 2>(path, w, [row(0), row(1)], self.k)),
            3 => tile[..3].copy_from_slice(&float_tile::<E, 3>(
                path,
                w,
                [row(0), row(1), row(2)],
                self.k,
            )),
            _ => tile = float_tile::<E, TILE_X>(path, w, [row(0), row(1), row(2), row(3)], self.k),
        }
        tile
    }
}

/// Block-format weight rows `w` times input rows `first..first + count`, `[input][weight]`.
#[allow(clippy::inline_always)] // one call per tile
#[inline(always)]
fn block_tiles<L: Layout>(
    path: Path,
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
    count: usize,
) -> [[f32; TILE_W]; TILE_X] {
    let mut tile = [[0.0f32; TILE_W]; TILE_X];
    match count {
        1 => tile[..1].copy_from_slice(&tile_of::<L, 1>(path, w, x, first)),
        2 => tile[..2].copy_from_slice(&tile_of::<L, 2>(path, w, x, first)),
        3 => tile[..3].copy_from_slice(&tile_of::<L, 3>(path, w, x, first)),
        _ => tile = tile_of::<L, TILE_X>(path, w, x, first),
    }
    tile
}

/// The products of float weight rows `w` with input rows `x` on `path`: `[input][weight]`.
#[allow(clippy::inline_always)] // one call per tile, dispatching to the path's loop
#[inline(always)]
fn float_tile<E: Element, const C: usize>(
    path: Path,
    w: [&[u8]; TILE_W],
    x: [&[f32]; C],
    k: usize,
) -> [[f32; TILE_W]; C] {
    // The floats' one vector path serves every level above scalar: the same bits.
    #[cfg(vector)]
    let lanes = if path == Path::Scalar {
        floats::accumulate_scalar::<E, C>(w, x)
    } else {
        floats::accumulate::<E, C>(w, x, k)
    };
    #[cfg(not(vector))]
    let lanes = {
        let _ = (path, k);
        floats::accumulate_scalar::<E, C>(w, x)
    };
    lanes.map(|row| row.map(lane_sum))
}

/// The products of weight rows `w` with input rows `first..first + C` on `path`:
/// `[input][weight]`.
#[allow(clippy::inline_always)] // one call per tile, dispatching to the path's loop
#[inline(always)]
fn tile_of<L: Layout, const C: usize>(
    path: Path,
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
) -> [[f32; TILE_W]; C] {
    let (lanes, minimums) = accumulate::<L, C>(path, w, x, first);
    let mut out = [[0.0f32; TILE_W]; C];
    for c in 0..C {
        for r in 0..TILE_W {
            out[c][r] = finish(lanes[c][r], minimums[c][r], !L::SIGNED);
        }
    }
    out
}

/// Lanes and minimums' chains of a tile.
type Accumulated<const C: usize> = ([[[f32; 8]; TILE_W]; C], [[f32; TILE_W]; C]);

/// Each pair's eight lane accumulators and its minimums' chain after every block, on `path`.
#[allow(clippy::inline_always)] // as `tile_of`
#[inline(always)]
fn accumulate<L: Layout, const C: usize>(
    path: Path,
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
) -> Accumulated<C> {
    match path {
        Path::Scalar => accumulate_scalar::<L, C>(w, x, first),
        #[cfg(vector)]
        Path::Avx2 => vector::accumulate::<L, vector::Maddubs, C>(w, x, first),
        #[cfg(all(vector, target_feature = "avxvnni"))]
        Path::AvxVnni => vector::accumulate::<L, vector::AvxVnni, C>(w, x, first),
        #[cfg(all(vector, target_feature = "avx512vnni", target_feature = "avx512vl"))]
        Path::Avx512Vnni => vector::accumulate::<L, vector::Avx512Vnni, C>(w, x, first),
    }
}

/// Eight F16 values (bits) as F32, exactly.
#[allow(clippy::inline_always)] // as `headers`, whose part it is
#[inline(always)]
fn f16x8(bits: [u16; 8]) -> [f32; 8] {
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    return crate::intrinsics::f16x8(bits);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    return bits.map(crate::attention::f16_to_f32);
}

/// Each pair's eight lane accumulators and its minimums' chain after every block, by the
/// scalar definition ([`pair_lanes`]): the scalar level's path, and the vector tiles'
/// reference in the tests.
fn accumulate_scalar<L: Layout, const C: usize>(
    w: [&[u8]; TILE_W],
    x: &Quantized,
    first: usize,
) -> Accumulated<C> {
    let mut acc = [[[0.0f32; 8]; TILE_W]; C];
    let mut minimums = [[0.0f32; TILE_W]; C];
    for c in 0..C {
        for r in 0..TILE_W {
            (acc[c][r], minimums[c][r]) = pair_lanes::<L>(w[r], x, first + c);
        }
    }
    (acc, minimums)
}

/// The vector paths: AVX2 with FMA and F16C, and the VNNI instructions for the integer sums.
#[cfg(vector)]
mod vector {
    use safe_arch::{
        abs_i8_m256i, add_i32_m256i, convert_to_m256_from_i32_m256i, fused_mul_add_m256,
        load_unaligned_m256i, m256, m256i, mul_i16_horizontal_add_m256i, mul_m256,
        mul_u8i8_add_horizontal_saturating_m256i, set_splat_i16_m256i, sign_apply_i8_m256i,
        zeroed_m256, zeroed_m256i,
    };

    use super::{Accumulated, Layout, Quantized, PREFETCH, TILE_W};

    /// `acc` plus, per 32-bit lane, the exact sum of its four products of `a`'s unsigned
    /// bytes with `b`'s signed ones, where no pair of products passes 32,767 (the callers'
    /// bound: see the module's doc).
    pub(super) trait Sums {
        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i;
    }

    /// AVX2: 16-bit pair sums (`vpmaddubsw`, exact under the bound), then 32-bit ones.
    pub(super) struct Maddubs;

    impl Sums for Maddubs {
        #[inline]
        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i {
            add_i32_m256i(
                acc,
                mul_i16_horizontal_add_m256i(
                    mul_u8i8_add_horizontal_saturating_m256i(a, b),
                    set_splat_i16_m256i(1),
                ),
            )
        }
    }

    /// AVX-VNNI's `vpdpbusd`.
    #[cfg(target_feature = "avxvnni")]
    pub(super) struct AvxVnni;

    #[cfg(target_feature = "avxvnni")]
    impl Sums for AvxVnni {
        #[inline]
        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i {
            crate::intrinsics::dpbusd_avx_vnni(acc, a, b)
        }
    }

    /// AVX-512 VNNI's `vpdpbusd` on 256-bit registers.
    #[cfg(all(target_feature = "avx512vnni", target_feature = "avx512vl"))]
    pub(super) struct Avx512Vnni;

    #[cfg(all(target_feature = "avx512vnni", target_feature = "avx512vl"))]
    impl Sums for Avx512Vnni {
        #[inline]
        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i {
            crate::intrinsics::dpbusd_avx512_vnni(acc, a, b)
        }
    }

    /// Each pair's eight lane accumulators and its minimums' chain after every block: one
    /// 256-bit register per pair, each pair of weight blocks unpacked once for the `C` input
    /// rows.
    #[allow(clippy::inline_always)] // the tile's loop, specialised per format and path
    #[inline(always)]
    pub(super) fn accumulate<L: Layout, S: Sums, const C: usize>(
        w: [&[u8]; TILE_W],
        x: &Quantized,
        first: usize,
    ) -> Accumulated<C> {
        let mut acc: [[m256; TILE_W]; C] = [[zeroed_m256(); TILE_W]; C];
        let mut minimums = [[0.0f32; TILE_W]; C];
        let pairs: [usize; C] = std::array::from_fn(|c| x.pairs_of(first + c).start);
        let blocks: [usize; C] = std::array::from_fn(|c| x.blocks_of(first + c).start);
        for p in 0..x.pairs {
            let (b, n) = (2 * p, x.blocks);
            for row in &w {
                crate::intrinsics::prefetch(
                    row.as_ptr()
                        .wrapping_add(b * L::BYTES / (L::VALUES / super::QK) + PREFETCH),
                );
            }
            let [d0, m0, d1, m1] = L::headers(&w, b, n);
            // Arrays written out (not `from_fn`, whose closure was measured not inlined: half
            // of the product's time went to its calls).
            let lanes = |a: [f32; TILE_W], b: [f32; TILE_W], r: usize| {
                m256::from([a[r], a[r], a[r], a[r], b[r], b[r], b[r], b[r]])
            };
            let scales: [m256; TILE_W] = [
                lanes(d0, d1, 0),
                lanes(d0, d1, 1),
                lanes(d0, d1, 2),
                lanes(d0, d1, 3),
            ];
            // With split scales, the second halves' scales.
            let seconds: [m256; TILE_W] = [
                lanes(m0, m1, 0),
                lanes(m0, m1, 1),
                lanes(m0, m1, 2),
                lanes(m0, m1, 3),
            ];
            // Unsigned values as they are; signed ones as their magnitudes, their signs going
            // to the inputs below.
            let unpacked: [(m256i, m256i); TILE_W] = [
                L::pair(w[0], b, n),
                L::pair(w[1], b, n),
                L::pair(w[2], b, n),
                L::pair(w[3], b, n),
            ];
            let mut magnitudes = unpacked;
            if L::SIGNED {
                for (lo, hi) in &mut magnitudes {
                    (*lo, *hi) = (abs_i8_m256i(*lo), abs_i8_m256i(*hi));
                }
            }
            for c in 0..C {
                let at = pairs[c] + p;
                let (xl, xh) = (
                    load_unaligned_m256i(&x.lo[at]),
                    load_unaligned_m256i(&x.hi[at]),
                );
                let xd = m256::from(x.d[at]);
                for r in 0..TILE_W {
                    let (lo, hi) = magnitudes[r];
                    let (xl, xh) = if L::SIGNED {
                        let (sl, sh) = unpacked[r];
                        (sign_apply_i8_m256i(xl, sl), sign_apply_i8_m256i(xh, sh))
                    } else {
                        (xl, xh)
                    };
                    if L::SPLIT {
                        let first = convert_to_m256_from_i32_m256i(S::dot(zeroed_m256i(), lo, xl));
                        let second = convert_to_m256_from_i32_m256i(S::dot(zeroed_m256i(), hi, xh));
                        acc[c][r] = fused_mul_add_m256(mul_m256(scales[r], xd), first, acc[c][r]);
                        acc[c][r] = fused_mul_add_m256(mul_m256(seconds[r], xd), second, acc[c][r]);
                    } else {
                        let sums = S::dot(S::dot(zeroed_m256i(), lo, xl), hi, xh);
                        let sums = convert_to_m256_from_i32_m256i(sums);
                        acc[c][r] = fused_mul_add_m256(mul_m256(scales[r], xd), sums, acc[c][r]);
                    }
                }
                if !L::SIGNED {
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
        }
        (acc.map(|row| row.map(<[f32; 8]>::from)), minimums)
    }
}

#[cfg(test)]
mod tests;
