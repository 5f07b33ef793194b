//! wick's batch-invariant product of weights with F32 inputs, run in place of ggml's matrix
//! product in the deterministic kernel mode, for every weight type in [`Format`].
//!
//! ggml's reference matrix product is batch-invariant, but it computes every (weight row,
//! input row) pair on its own: each pair unpacks the weight block's bits and converts its
//! scales again. This kernel unpacks a **strip** of eight weight rows once per product into
//! a layout where each 32-bit lane of a register holds four values of one row, so one
//! `vpmaddubsw` (or `vpdpbusd`) against an input's four values, broadcast, gives eight rows'
//! partial sums at once, and every input row of the batch reuses the strip. A batch of at most
//! three rows (a decode step) skips the strip and multiplies each pair of blocks in
//! registers, reducing the lanes to one per row afterwards. At the `avx512` level a batch
//! takes two strips at a time, sixteen rows' lanes in 512-bit registers. The properties:
//!
//! - **A pair's arithmetic depends on that pair alone.** Each input row is quantized on its
//!   own (to 8 bits with one F32 scale per 32 values, as ggml's `Q8_1` does with F16 scales,
//!   or per 256 values for the super-block types, as `Q8_K`), and each pair's dot product runs
//!   the same float operations in the same order whatever strip, path, thread or batch
//!   computes it (`dot` defines them): per 32-value block, in block order, the block's exact
//!   integer sum times the two scales' product, added to one F32 accumulator with one fused
//!   multiply-add, then (for types stored with a minimum) the minimums' chain (`m · s` per
//!   block, in block order) added last; a super-block type sums each super-block exactly in
//!   integers first, its sub-blocks' integer scales included, and takes one such step per
//!   super-block.
//! - **Every instruction set and every path gives the same bits.** The only parts that differ
//!   between the scalar code, AVX2, AVX-VNNI and AVX-512 VNNI, and between the strip and the
//!   direct path, are how the integer sums are formed, and those are exact on every path:
//!   AVX2's 16-bit pair sums (`vpmaddubsw`) cannot saturate (see `vector::Form` for each
//!   type's bound: unsigned weights below 32, small signed ones against inputs offset by 128,
//!   larger ones through the sign trick, or on VNNI, whose four-product sums are exact for
//!   any bytes, offset by 128 themselves); the conversion of a sum to F32 is exact (a block's
//!   stays below 2^24) or, for a super-block's, the same rounding on every path, and every
//!   float operation is the same IEEE operation on every path.
//!   [`crate::cpu`]'s level chooses the path at run time, so one machine runs each level it
//!   has, and the unit tests hold every path to the scalar definition.
//!
//! Every thread quantizes all input rows itself (a custom op has no shared step before its
//! threads start; quantizing costs one pass over the inputs against one per weight row for
//! the product) and computes an even share of the weight rows, in whole strips.

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
            Format::Q3_K => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q3K;
                $body
            }
            Format::Q2_K => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::Q2K;
                $body
            }
            Format::MXFP4 => {
                #[allow(dead_code)] // unused where a body needs no type
                type $L = layouts::MXFP4;
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
    /// 3 bits in super-blocks of 256, 6-bit scales per 16.
    Q3_K,
    /// 2 bits in super-blocks of 256, 4-bit scales and minimums per 16.
    Q2_K,
    /// 4-bit indices into the OCP microscaling format's 16 values (E2M1), a power-of-two
    /// scale (E8M0) per 32 (gpt-oss's experts).
    MXFP4,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
}

impl Format {
    /// Every format: the block formats, then the floats.
    pub const ALL: [Format; 16] = [
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
        Format::Q3_K,
        Format::Q2_K,
        Format::MXFP4,
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
            Format::Q3_K => "q3_K",
            Format::Q2_K => "q2_K",
            Format::MXFP4 => "mxfp4",
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

/// Weight rows per strip of the block formats' kernel: one per 32-bit lane of a register.
const STRIP: usize = 8;
/// Input rows per pass over a strip, at most.
#[cfg(vector)]
const STRIP_X: usize = 4;
/// Input rows per pass over two strips side by side (the `avx512` level's sixteen weight
/// rows): with AVX-512's thirty-two registers, measured against 4 and 12 on prefills of 512
/// rows (1536 × 1536 weights, one thread): 8 was 10–30 % faster than 4 for every type tried,
/// 12 slower than 8 (`Q6_K`'s accumulators spill).
#[cfg(wide)]
const SIXTEEN_X: usize = 8;
/// Input rows per direct pass: the vector paths multiply each pair of weight blocks in
/// registers for up to this many rows at once rather than unpack a strip first (decode
/// steps, and batches up to a type's [`Layout::DIRECT_BATCH`] as several passes): measured by
/// instruction counts on one 1536-wide matrix, unpacking a strip costs about two rows'
/// products.
#[cfg(vector)]
const DIRECT_ROWS: usize = 3;
/// Weight rows per tile of the float formats' kernel, and per call of a layout's headers.
const TILE_W: usize = 4;
// The tile loop writes its per-row arrays out for four rows.
const _: () = assert!(TILE_W == 4);
/// Input rows per tile of the float formats' kernel, at most: three keep its twelve
/// accumulators, three input vectors and one weight vector (the tile takes the weights one at
/// a time) in AVX2's sixteen registers. Against two rows: 10 % fewer instructions for F16, 14 %
/// for BF16 (cachegrind, 64 rows × 576 × 512).
const TILE_X: usize = 3;
/// Input rows per tile of the float formats' weights-side-by-side AVX-512 tile (the `avx512`
/// level, for a thread's share of less than a panel): sixteen accumulators of two weight rows
/// each, two weight registers and one input in its thirty-two registers.
#[cfg(wide)]
const WIDE_X: usize = 8;
/// Input rows per tile of the paired float tile ([`floats::accumulate_paired`], float
/// weights' batches at the `avx512` level): six pairs, twenty-four accumulators, four weight
/// registers and one input pair in AVX-512's thirty-two. Against four pairs on one thread, 1536 × 1536 weights: 66–68
/// Gelem/s against 65 for 512 rows (a rest of four rows then takes a tile of two pairs).
#[cfg(wide)]
const PAIRED_X: usize = 12;
/// How far ahead of the weight block in use (bytes) the kernel asks for weights. Reading
/// each weight once per step from memory, a decode step is bound by how fast the weights
/// arrive; the hardware's own prefetching alone kept one thread at about 8.5 GB/s here.
/// Measured on one thread, 576-value rows from a 35 MB Q4_1 matrix: 512 → 11.3 GB/s, 2048 →
/// 16.4, 4096 → 19, 6144 → 21, 8192 → 20.
#[cfg(vector)]
const PREFETCH: usize = 6144;
/// Weight rows whose results a thread gathers before handing them out, per input row.
const PANEL: usize = 64;
/// Input rows per thread from which the threads share a product's inputs rather than its
/// weight rows: below it each thread quantizes (and for F32 lays out) every input row, which
/// for a prefill is work done once per thread; above it each thread reads every weight row,
/// which a product of this many rows per weight does many times over anyway.
const SPLIT_INPUTS: usize = 64;

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

/// One quantized 32-value input block: the values, the scale (its group's: 32 or 256 values),
/// the scale times the values' sum (for a 32-value type's minimums), and the values' sum per
/// half (for the biased types' exact sums and the super-block types' minimums). One record,
/// so the kernel's loops index (and check) once per block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    q: [i8; QK],
    d: f32,
    s: f32,
    n: [i32; 2],
}

/// Input rows quantized to 8 bits per value: a [`Block`] per row and 32-value block, row by
/// row (`row · blocks + block`).
#[derive(Default, Debug)]
pub(crate) struct Quantized {
    data: Vec<Block>,
    /// Quantized per 256 values: per row and super-block, the values' sums per 16 values and
    /// (the first eight) per 32, as the super-block types' decode path reads them.
    counts: Vec<[[i16; 16]; 2]>,
    blocks: usize,
    rows: usize,
}

impl Quantized {
    /// Quantizes `x`'s rows of `k` values with one scale per `group` values (32, or 256 for
    /// the super-block types): each block of a group records the group's scale.
    pub(crate) fn of(&mut self, x: Inputs<'_>, k: usize, group: usize) {
        let blocks = k / QK;
        (self.blocks, self.rows) = (blocks, x.rows);
        self.data.clear();
        self.counts.clear();
        for i in 0..x.rows {
            let row = &x.data[i * x.stride..][..k];
            for values in row.chunks_exact(group) {
                let d = scale_of(values);
                self.data.extend(values.chunks_exact(QK).map(|values| {
                    let mut q = [0; QK];
                    let n = quantize_block(values, d, &mut q);
                    #[allow(clippy::cast_precision_loss)] // |sum| ≤ 32 · 127
                    let scaled = |sum: i32| d * sum as f32;
                    Block {
                        q,
                        d,
                        s: scaled(n[0] + n[1]),
                        n,
                    }
                }));
                // Only the vector paths' decode reads them.
                if cfg!(vector) && group > QK {
                    let blocks = &self.data[self.data.len() - group / QK..];
                    let sixteen = |n: i32| i16::try_from(n).expect("at most 32 · 127");
                    self.counts.push([
                        std::array::from_fn(|h| sixteen(blocks[h / 2].n[h % 2])),
                        std::array::from_fn(|h| {
                            blocks.get(h).map_or(0, |b| sixteen(b.n[0] + b.n[1]))
                        }),
                    ]);
                }
            }
        }
    }

    /// Row `i`'s sums of super-block `s` (see [`Quantized::counts`]).
    #[cfg(vector)]
    #[inline]
    fn counts(&self, i: usize, s: usize) -> &[[i16; 16]; 2] {
        &self.counts[i * (self.blocks / 8) + s]
    }

    /// Where row `i`'s block `b` is.
    #[inline]
    fn at(&self, i: usize, b: usize) -> usize {
        i * self.blocks + b
    }

    /// Row `i`'s blocks.
    #[cfg(vector)]
    #[inline]
    fn row(&self, i: usize) -> &[Block] {
        &self.data[i * self.blocks..][..self.blocks]
    }
}

/// The quantization scale of `values` (whole lanes of eight): their largest magnitude over
/// 127.
fn scale_of(values: &[f32]) -> f32 {
    use wide::f32x8;
    // The largest magnitude (`max` is exact and passes NaN over, like `f32::max`), in any
    // order: the same number.
    let lanes = values
        .chunks_exact(8)
        .map(|v| f32x8::new(v.try_into().expect("eight values")).abs())
        .fold(f32x8::ZERO, f32x8::max);
    let amax = lanes.to_array().into_iter().fold(0.0f32, f32::max);
    amax / 127.0
}

/// 32 values to 8 bits with scale `d` (round to nearest, ties to even; `d` at least the
/// values' largest magnitude over 127); returns the sums of the quantized values 0–15 and
/// 16–31.
fn quantize_block(values: &[f32], d: f32, q: &mut [i8; QK]) -> [i32; 2] {
    use wide::f32x8;
    let v: [f32x8; 4] =
        std::array::from_fn(|i| f32x8::new(values[8 * i..8 * i + 8].try_into().expect("a block")));
    let inverse = f32x8::splat(if d == 0.0 { 0.0 } else { 1.0 / d });
    // `round_int` rounds to nearest, ties to even, saturates and takes NaN to 0, as
    // `round_ties_even() as i32` does; the values are in range by construction
    // (|v · inverse| ≤ 127).
    let rounded = v.map(|v| (v * inverse).round_int());
    let mut sums = [0i32; 2];
    for (i, r) in rounded.iter().enumerate() {
        for (q, r) in q[8 * i..8 * i + 8].iter_mut().zip(r.to_array()) {
            #[allow(clippy::cast_possible_truncation)]
            let r8 = r as i8;
            *q = r8;
            sums[i / 2] += r;
        }
    }
    sums
}

mod floats;
use floats::Element;
mod layouts;
pub(crate) use layouts::iq4_block;
use layouts::Layout;
#[cfg(test)]
pub(crate) use layouts::IQ4;

/// The definition of one pair's product, in scalar code: weight row `w` (its blocks of
/// `format`) with input row `i` of `x`. The kernel matches it bit for bit at every level.
///
/// A 32-value format, per block, in block order: the exact integer sum of the block's 32
/// products of weight values and quantized inputs (below 2^24 in magnitude, so exact in F32),
/// times the product of the two scales, added to one F32 accumulator with one fused
/// multiply-add. For a format with minimums, a second chain takes `m · s` per block (the
/// weights' minimum times the inputs' scaled sum) and is added last. A super-block format
/// (the K-quants, `IQ4_XS`) sums each super-block in integers first: see [`super_product`].
///
/// A float format's definition is [`floats`]': it reads input row `i` as it is, `raw`.
#[cfg(test)]
pub(crate) fn dot(format: Format, w: &[u8], x: &Quantized, raw: &[f32], i: usize) -> f32 {
    with_layout!(format, L => pair_product::<L>(w, x, i), E => floats::dot::<E>(w, raw))
}

/// `dot` (the tests' definition of one product) for a block format: the scalar level's path,
/// and what the tests hold the vector paths to.
fn pair_product<L: Layout>(w: &[u8], x: &Quantized, i: usize) -> f32 {
    if L::SUPER {
        return super_product::<L>(w, x, i);
    }
    let (mut acc, mut minimums) = (0.0f32, 0.0f32);
    for b in 0..x.blocks {
        // The headers come in pairs of blocks, for a tile of four rows: this one four times.
        let [d0, m0, d1, m1] = L::headers(&[w; TILE_W], b & !1, x.blocks);
        let (d, m) = if b % 2 == 0 {
            (d0[0], m0[0])
        } else {
            (d1[0], m1[0])
        };
        let values = L::values(w, b);
        let block = &x.data[x.at(i, b)];
        #[allow(clippy::cast_precision_loss)] // |sum| ≤ 32 · 128 · 127 < 2^24: exact
        let sum = (0..QK)
            .map(|j| i32::from(values[j]) * i32::from(block.q[j]))
            .sum::<i32>() as f32;
        acc = (d * block.d).mul_add(sum, acc);
        if !L::SIGNED {
            minimums = m.mul_add(block.s, minimums);
        }
    }
    if L::SIGNED {
        acc
    } else {
        acc + minimums
    }
}

/// `dot` for a super-block format (256 values; the inputs quantized with one scale per
/// 256 values). Per super-block, in super-block order: the exact integer sum over its
/// sub-blocks of each sub-block's integer scale times its exact integer sum of products
/// (weight values `w`, or unsigned `u`, times quantized inputs), converted to F32 (rounded to
/// nearest, ties to even, where it passes 2^24), times the product of the super-block's `d`
/// and the inputs' scale, added to one F32 accumulator with one fused multiply-add. With
/// minimums, a second chain takes the exact sum of each sub-block's integer minimum times
/// the inputs' integer sum over it, times `−dmin` and the inputs' scale, and is added last.
///
/// Every sum is bounded below 2^31 (the largest, `Q6_K`'s: 16 sub-blocks of 16 products of
/// at most 32 · 127, times scales of at most 128: 133 · 2^20), so the integer parts are exact
/// on every path; the float steps are one per super-block.
fn super_product<L: Layout>(w: &[u8], x: &Quantized, i: usize) -> f32 {
    let (mut acc, mut minimums) = (0.0f32, 0.0f32);
    for first in (0..x.blocks).step_by(8) {
        let (mut sum, mut minimum) = (0i32, 0i32);
        let numbers = L::numbers(w, first / 8);
        for b in first..first + 8 {
            let [scale, second] = numbers.block(L::SPLIT, b % 8);
            let [lo, hi] = numbers.split_minimums(b % 8);
            let values = L::values(w, b);
            let block = &x.data[x.at(i, b)];
            let products = |range: Range<usize>| {
                range
                    .map(|j| i32::from(values[j]) * i32::from(block.q[j]))
                    .sum::<i32>()
            };
            if L::SPLIT {
                sum += scale * products(0..QK / 2) + second * products(QK / 2..QK);
            } else {
                sum += scale * products(0..QK);
            }
            if !L::SIGNED && L::SPLIT {
                minimum += lo * block.n[0] + hi * block.n[1];
            } else if !L::SIGNED {
                minimum += second * (block.n[0] + block.n[1]);
            }
        }
        let [d, dmin] = L::super_scales(&[w; TILE_W], first);
        let dx = x.data[x.at(i, first)].d;
        #[allow(clippy::cast_precision_loss)] // rounded to nearest, by definition
        let (sum, minimum) = (sum as f32, minimum as f32);
        acc = (d[0] * dx).mul_add(sum, acc);
        minimums = (dmin[0] * dx).mul_add(minimum, minimums);
    }
    if L::SIGNED {
        acc
    } else {
        acc + minimums
    }
}

/// The eight lanes summed in the kernels' fixed tree ([`crate::tree_sum`]: the order of
/// ggml's `hsum_float_8`).
#[inline]
fn lane_sum(a: [f32; 8]) -> f32 {
    crate::tree_sum(a)
}

/// Thread `ith`'s share (of `nth`) of `n` weight rows: even, in whole strips.
fn share(n: usize, ith: usize, nth: usize) -> Range<usize> {
    let strips = n.div_ceil(STRIP);
    let nth = nth.max(1);
    let at = |i: usize| (strips * i / nth * STRIP).min(n);
    at(ith)..at(ith + 1)
}

/// [`STRIP`] weight rows of a block format, unpacked for the vector paths: per 32-value block
/// `b`, eight registers `values[8b + g]` holding values `4g..4g + 4` of each row (row `r` at
/// bytes `4r..4r + 4`), then each row's numbers: for a 32-value type per block its scale and
/// second number (its minimum); for a super-block type per block its integer scale and second
/// number, with split scales and minimums both halves' integer minimums, and per super-block
/// its `(d, −dmin)`.
#[derive(Default)]
#[cfg_attr(not(vector), allow(dead_code))] // the scalar path unpacks no strip
struct Strip {
    values: Vec<[i8; QK]>,
    scales: Vec<[f32; STRIP]>,
    seconds: Vec<[f32; STRIP]>,
    integers: Vec<[[i32; STRIP]; 2]>,
    minimums: Vec<[[i32; STRIP]; 2]>,
    supers: Vec<[[f32; STRIP]; 2]>,
}

#[derive(Default)]
struct Scratch {
    x: Quantized,
    /// One strip, or two (the `avx512` level's sixteen rows).
    strips: [Strip; 2],
    /// `PANEL` results per input row.
    out: Vec<f32>,
    /// The inputs two by two, for the paired float tile (AVX-512 builds only).
    pairs: floats::Paired,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// How a tile's integer sums are computed: the levels' paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// [`floats::pair_lanes`] per pair.
    Scalar,
    /// AVX2: `vpmaddubsw` then `vpmaddwd`.
    #[cfg(vector)]
    Avx2,
    /// AVX-VNNI's `vpdpbusd`.
    #[cfg(all(vector, target_feature = "avxvnni"))]
    AvxVnni,
    /// AVX-512 VNNI's `vpdpbusd`: 256-bit (EVEX) for decode steps, 512-bit for batches
    /// (two strips side by side) and the float weights' tile.
    #[cfg(all(vector, target_feature = "avx512vnni", target_feature = "avx512vl"))]
    Avx512Vnni,
    /// The VNNI paths' arithmetic on AVX2 (the [`vector::Sums`] trait's own `both` over
    /// `vpdpbusd` emulated exactly, with the wide bias), so that every machine's tests run it.
    #[cfg(all(test, vector))]
    Generic,
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

impl<'a> MatMul<'a> {
    /// The product of packed rows: `weights` holds whole rows of `k` values in `format`, one
    /// after another, and `inputs` whole rows of `k` values.
    ///
    /// # Panics
    ///
    /// When `k` is not whole blocks of `format`, or either slice is not whole rows.
    pub fn packed(format: Format, k: usize, weights: &'a [u8], inputs: &'a [f32]) -> Self {
        assert!(
            k > 0 && k.is_multiple_of(format.block_values()),
            "{k} values are not whole {} blocks",
            format.name()
        );
        let row_bytes = k / format.block_values() * format.block_bytes();
        assert!(
            weights.len().is_multiple_of(row_bytes) && inputs.len().is_multiple_of(k),
            "{} weight bytes and {} inputs are not whole rows of {k} values",
            weights.len(),
            inputs.len()
        );
        MatMul {
            k,
            w: Weights {
                format,
                data: weights,
                stride: row_bytes,
                rows: weights.len() / row_bytes,
            },
            x: Inputs {
                data: inputs,
                stride: k,
                rows: inputs.len() / k,
            },
        }
    }
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
        self.run_on(Path::of(level.min(crate::cpu::best())), ith, nth, out);
    }

    /// [`MatMul::run_at`] on `path`. A batch of at least [`SPLIT_INPUTS`] rows per thread is
    /// split between the threads by input rows (each thread quantizes only its own, and
    /// takes every weight row), a smaller one by weight rows (each thread quantizes every
    /// input). Either way each output is one pair's fixed arithmetic: the same bits.
    fn run_on(
        &self,
        path: Path,
        ith: usize,
        nth: usize,
        out: &mut dyn FnMut(usize, usize, &[f32]),
    ) {
        if nth > 1 && self.x.rows >= SPLIT_INPUTS * nth {
            let mine = self.x.rows * ith / nth..self.x.rows * (ith + 1) / nth;
            let rows = MatMul {
                x: Inputs {
                    data: &self.x.data[mine.start * self.x.stride..],
                    rows: mine.len(),
                    ..self.x
                },
                ..*self
            };
            rows.run_rows(path, 0, 1, &mut |i, first, values| {
                out(mine.start + i, first, values);
            });
        } else {
            self.run_rows(path, ith, nth, out);
        }
    }

    /// [`MatMul::run_on`] with the threads sharing the weight rows.
    fn run_rows(
        &self,
        path: Path,
        ith: usize,
        nth: usize,
        out: &mut dyn FnMut(usize, usize, &[f32]),
    ) {
        let mine = share(self.w.rows, ith, nth);
        if mine.is_empty() || self.x.rows == 0 {
            return;
        }
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Scratch {
                x,
                strips,
                out: results,
                pairs,
            } = &mut *scratch;
            if !self.w.format.is_float() {
                x.of(self.x, self.k, self.w.format.block_values());
            }
            // Float weights' batches at `avx512` run the paired tile. Laying the inputs out
            // two by two costs about what a few weight rows' products do: worth it for a share
            // of a panel or more, not for a router's four rows.
            #[cfg(wide)]
            let pairs = {
                if self.w.format.is_float() && path == Path::Avx512Vnni && mine.len() >= PANEL {
                    let rows = self.x.rows / 4 * 4;
                    pairs.of(self.x.data, self.x.stride, self.k, rows);
                    Some(&*pairs)
                } else {
                    None
                }
            };
            #[cfg(not(wide))]
            let pairs: Option<&floats::Paired> = {
                let _ = pairs;
                None
            };
            results.resize(self.x.rows * PANEL, 0.0);
            let mut panel = mine.start;
            while panel < mine.end {
                let panel_end = (panel + PANEL).min(mine.end);
                self.panel(path, x, strips, pairs, panel..panel_end, results);
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
    fn panel(
        &self,
        path: Path,
        x: &Quantized,
        strips: &mut [Strip; 2],
        pairs: Option<&floats::Paired>,
        rows: Range<usize>,
        results: &mut [f32],
    ) {
        with_layout!(
            self.w.format,
            L => self.block_panel::<L>(path, x, strips, rows, results),
            E => {
                let row_bytes = self.k * E::BYTES;
                // AVX-512 takes whole tiles of its own, then the rest as AVX2's.
                #[cfg(wide)]
                let first = if let Some(pairs) = pairs {
                    // Tiles of twelve rows, then one of four, then AVX2's for the last three.
                    let wide = self.x.rows / PAIRED_X * PAIRED_X;
                    self.panel_with::<PAIRED_X>(row_bytes, 0..wide, rows.clone(), results, |w, i, _| {
                        paired_tile::<E, { PAIRED_X / 2 }, PAIRED_X>(w, pairs, i, self.k)
                    });
                    let paired = pairs.rows();
                    self.panel_with::<4>(row_bytes, wide..paired, rows.clone(), results, |w, i, _| {
                        paired_tile::<E, 2, 4>(w, pairs, i, self.k)
                    });
                    paired
                } else if path == Path::Avx512Vnni {
                    let wide = self.x.rows / WIDE_X * WIDE_X;
                    self.panel_with::<WIDE_X>(row_bytes, 0..wide, rows.clone(), results, |w, i, _| {
                        float_tile::<E, WIDE_X>(path, w, std::array::from_fn(|c| self.x_row(i + c)), self.k)
                    });
                    wide
                } else {
                    0
                };
                #[cfg(not(wide))]
                let first = {
                    let _ = pairs; // always `None` without AVX-512
                    0
                };
                let inputs = first..self.x.rows;
                if E::TILE_X == 2 {
                    self.panel_with::<2>(row_bytes, inputs, rows, results, |w, i, count| {
                        self.float_tiles::<E, 2>(path, w, i, count)
                    });
                } else {
                    self.panel_with::<TILE_X>(row_bytes, inputs, rows, results, |w, i, count| {
                        self.float_tiles::<E, TILE_X>(path, w, i, count)
                    });
                }
            }
        );
    }

    /// [`MatMul::panel`] for a block format: strips of [`STRIP`] weight rows, each unpacked
    /// once for every input row (at the `avx512` level, for batches, two strips at a time).
    fn block_panel<L: Layout>(
        &self,
        path: Path,
        x: &Quantized,
        strips: &mut [Strip; 2],
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        let row_bytes = self.k / L::VALUES * L::BYTES;
        let weight_row = |n: usize| {
            let n = n.min(rows.end - 1); // a short last strip repeats its last row
            &self.w.data[n * self.w.stride..][..row_bytes]
        };
        let mut n = rows.start;
        while n < rows.end {
            let mut emit = |i: usize, values: &[f32]| {
                let width = (rows.end - n).min(values.len());
                let at = i * PANEL + (n - rows.start);
                out[at..at + width].copy_from_slice(&values[..width]);
            };
            #[cfg(wide)]
            if path == Path::Avx512Vnni
                && x.rows > vector::direct_batch::<L, vector::Avx512Vnni>()
                && rows.end - n > STRIP
            {
                let w: [&[u8]; 2 * STRIP] = std::array::from_fn(|r| weight_row(n + r));
                vector::strips::<L>(w, x, strips, &mut |i, values| emit(i, &values));
                n += 2 * STRIP;
                continue;
            }
            let w: [&[u8]; STRIP] = std::array::from_fn(|r| weight_row(n + r));
            let strip = &mut strips[0];
            let mut emit = |i: usize, values: [f32; STRIP]| emit(i, &values);
            match path {
                Path::Scalar => {
                    let _ = &strip;
                    for i in 0..x.rows {
                        emit(i, w.map(|w| pair_product::<L>(w, x, i)));
                    }
                }
                #[cfg(vector)]
                Path::Avx2 => vector::strip::<L, vector::Maddubs>(w, x, strip, &mut emit),
                #[cfg(all(vector, target_feature = "avxvnni"))]
                Path::AvxVnni => vector::strip::<L, vector::AvxVnni>(w, x, strip, &mut emit),
                #[cfg(all(vector, target_feature = "avx512vnni", target_feature = "avx512vl"))]
                Path::Avx512Vnni => {
                    vector::strip::<L, vector::Avx512Vnni>(w, x, strip, &mut emit);
                }
                #[cfg(all(test, vector))]
                Path::Generic => vector::strip::<L, vector::Generic>(w, x, strip, &mut emit),
            }
            n += STRIP;
        }
    }

    /// The panel's loop over input rows `inputs`: `tile(w, i, count)` gives the products of
    /// weight rows `w` with input rows `i..i + count` (at most `X`), `[input][weight]`.
    fn panel_with<const X: usize>(
        &self,
        row_bytes: usize,
        inputs: Range<usize>,
        rows: Range<usize>,
        out: &mut [f32],
        tile: impl Fn([&[u8]; TILE_W], usize, usize) -> [[f32; TILE_W]; X],
    ) {
        let weight_row = |n: usize| {
            let n = n.min(rows.end - 1); // a short last tile repeats its last row
            &self.w.data[n * self.w.stride..][..row_bytes]
        };
        let mut i = inputs.start;
        while i < inputs.end {
            let count = (inputs.end - i).min(X);
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

    /// Input row `i`.
    fn x_row(&self, i: usize) -> &[f32] {
        &self.x.data[i * self.x.stride..][..self.k]
    }

    /// Float weight rows `w` times input rows `first..first + count`, `[input][weight]`.
    #[allow(clippy::inline_always)] // one call per tile
    #[inline(always)]
    fn float_tiles<E: Element, const X: usize>(
        &self,
        path: Path,
        w: [&[u8]; TILE_W],
        first: usize,
        count: usize,
    ) -> [[f32; TILE_W]; X] {
        let row = |c: usize| self.x_row((first + c).min(first + count - 1));
        let mut tile = [[0.0f32; TILE_W]; X];
        match count {
            1 => tile[..1].copy_from_slice(&float_tile::<E, 1>(path, w, [row(0)], self.k)),
            2 if X > 2 => {
                tile[..2].copy_from_slice(&float_tile::<E, 2>(path, w, [row(0), row(1)], self.k));
            }
            _ => tile = float_tile::<E, X>(path, w, std::array::from_fn(row), self.k),
        }
        tile
    }
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
    // The floats' vector paths serve every level above scalar: the same bits. AVX-512's
    // keeps two accumulator chains per input row, so it takes the tiles of several.
    #[cfg(vector)]
    let lanes = match path {
        Path::Scalar => floats::accumulate_scalar::<E, C>(w, x),
        #[cfg(wide)]
        Path::Avx512Vnni if C >= 4 => floats::accumulate_wide::<E, C>(w, x, k),
        _ => floats::accumulate::<E, C>(w, x, k),
    };
    #[cfg(not(vector))]
    let lanes = {
        let _ = (path, k);
        floats::accumulate_scalar::<E, C>(w, x)
    };
    let mut sums = [[0.0f32; TILE_W]; C];
    for (sums, lanes) in sums.iter_mut().zip(&lanes) {
        for (sum, lanes) in sums.iter_mut().zip(lanes) {
            *sum = lane_sum(*lanes);
        }
    }
    sums
}

/// The products of float weight rows `w` with the `C = 2P` input rows from `first` (even),
/// side by side in `pairs`, on the paired tile: `[input][weight]`.
#[cfg(wide)]
#[allow(clippy::inline_always)] // one call per tile
#[inline(always)]
fn paired_tile<E: Element, const P: usize, const C: usize>(
    w: [&[u8]; TILE_W],
    pairs: &floats::Paired,
    first: usize,
    k: usize,
) -> [[f32; TILE_W]; C] {
    floats::accumulate_paired::<E, P, C>(w, std::array::from_fn(|p| pairs.pair(first / 2 + p)), k)
        .map(|lanes| lanes.map(lane_sum))
}

/// Eight F16 values (bits) as F32, exactly.
#[allow(clippy::inline_always)] // as `headers`, whose part it is
#[inline(always)]
pub(crate) fn f16x8(bits: [u16; 8]) -> [f32; 8] {
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    return crate::intrinsics::f16x8(bits);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    return bits.map(crate::attention::f16_to_f32);
}

/// The vector paths: AVX2 with FMA and F16C, and the VNNI instructions for the integer sums.
#[cfg(vector)]
mod vector {
    use safe_arch::{
        abs_i8_m256i, add_horizontal_i32_m256i, add_i16_m256i, add_i32_m128i, add_i32_m256i,
        add_m128, add_m256, bitxor_m256i, cast_to_m128i_from_m256i, convert_to_m128_from_i32_m128i,
        convert_to_m256_from_i32_m256i, extract_m128i_from_m256i, fused_mul_add_m128,
        fused_mul_add_m256, load_unaligned_hi_lo_m256i, load_unaligned_m256i, m128, m128i, m256,
        m256i, mul_i16_horizontal_add_m256i, mul_i16_keep_low_m256i, mul_i32_keep_low_m256i,
        mul_m128, mul_m256, mul_u8i8_add_horizontal_saturating_m256i, set_splat_i16_m256i,
        set_splat_i32_m128i, set_splat_i32_m256i, set_splat_i8_m256i, set_splat_m128,
        set_splat_m256, shuffle_abi_i128z_all_m256i, shuffle_av_i8z_half_m256i,
        sign_apply_i8_m256i, sub_i32_m128i, sub_i32_m256i, unpack_high_i32_m256i,
        unpack_high_i64_m256i, unpack_low_i32_m256i, unpack_low_i64_m256i, zeroed_m128,
        zeroed_m128i, zeroed_m256, zeroed_m256i,
    };
    #[cfg(wide)]
    use safe_arch::{
        add_i32_m512i, add_m512, bitxor_m512i, cast_m256_to_m512, cast_m256i_to_m512i,
        cast_m512i_to_m256i, convert_to_m512_from_i32_m512i, extract_m256i_from_m512i,
        fused_mul_add_m512, insert_m256_to_m512, insert_m256i_to_m512i, m512, m512i,
        mul_i32_keep_low_m512i, mul_m512, set_splat_i32_m512i, set_splat_i8_m512i, set_splat_m512,
        sub_i32_m512i, zeroed_m512, zeroed_m512i,
    };

    #[cfg(wide)]
    use super::SIXTEEN_X;
    use super::{
        layouts::Numbers, Block, Layout, Quantized, Strip, DIRECT_ROWS, PREFETCH, QK, STRIP,
        STRIP_X, TILE_W,
    };

    /// `acc` plus, per 32-bit lane, the exact sum of its four products of `a`'s unsigned
    /// bytes with `b`'s signed ones, where no pair of products passes 32,767 (the callers'
    /// bound: see [`Form`]).
    pub(super) trait Sums {
        /// Whether [`Sums::dot`] is exact for any bytes (VNNI's `vpdpbusd` adds the four
        /// products in 32 bits), not only under the 16-bit bound: the sign trick's types then
        /// take a bias of 128 instead ([`Form`]).
        const EXACT: bool = false;

        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i;

        /// `acc` plus, per 32-bit lane, the exact sum of its four products of `a.0` with `b.0`
        /// and four of `a.1` with `b.1`. `narrow`: those eight products' sum stays within
        /// ±32,767 too, so a path may add them in 16 bits.
        #[inline]
        fn both(_narrow: bool, acc: m256i, a: (m256i, m256i), b: (m256i, m256i)) -> m256i {
            Self::dot(Self::dot(acc, a.0, b.0), a.1, b.1)
        }

        /// `acc` plus, per 32-bit lane, its four products of `a.0` with `b.0` times
        /// `scales.0` and its four of `a.1` with `b.1` times `scales.1`, exactly: each scale
        /// a 16-bit integer repeated in both halves of its 32-bit lane. `narrow`: the pairs'
        /// sums of both products fit 16 bits together, and `scales.0` is `scales.1`.
        ///
        /// Every path, VNNI's too: the scales multiply `vpmaddubsw`'s 16-bit pair sums in
        /// `vpmaddwd` (ggml's K-quant dot products do the same), no more instructions than
        /// the unscaled sums. `vpdpbusd`'s four-product sums could only be scaled in 32-bit
        /// multiplies (`vpmulld`, two micro-operations of ten cycles' latency on Intel), which
        /// left the VNNI levels' super-block decode 10–25 % slower than AVX2's.
        #[inline]
        fn scaled(
            narrow: bool,
            acc: m256i,
            a: (m256i, m256i),
            b: (m256i, m256i),
            scales: (m256i, m256i),
        ) -> m256i {
            let pairs = |a: m256i, b: m256i| mul_u8i8_add_horizontal_saturating_m256i(a, b);
            if narrow {
                let both = add_i16_m256i(pairs(a.0, b.0), pairs(a.1, b.1));
                add_i32_m256i(acc, mul_i16_horizontal_add_m256i(both, scales.0))
            } else {
                add_i32_m256i(
                    acc,
                    add_i32_m256i(
                        mul_i16_horizontal_add_m256i(pairs(a.0, b.0), scales.0),
                        mul_i16_horizontal_add_m256i(pairs(a.1, b.1), scales.1),
                    ),
                )
            }
        }
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

        #[inline]
        fn both(narrow: bool, acc: m256i, a: (m256i, m256i), b: (m256i, m256i)) -> m256i {
            if narrow {
                let pairs = add_i16_m256i(
                    mul_u8i8_add_horizontal_saturating_m256i(a.0, b.0),
                    mul_u8i8_add_horizontal_saturating_m256i(a.1, b.1),
                );
                add_i32_m256i(
                    acc,
                    mul_i16_horizontal_add_m256i(pairs, set_splat_i16_m256i(1)),
                )
            } else {
                Self::dot(Self::dot(acc, a.0, b.0), a.1, b.1)
            }
        }
    }

    /// `vpdpbusd` in AVX2 (each byte widened to 16 bits, `vpmaddwd` on the even bytes and on
    /// the odd ones: exact for any bytes), under the trait's own `both` and with
    /// [`Sums::EXACT`]: the VNNI paths' arithmetic, which the tests run where no VNNI
    /// instruction is.
    #[cfg(test)]
    pub(super) struct Generic;

    #[cfg(test)]
    impl Sums for Generic {
        const EXACT: bool = true;

        #[inline]
        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i {
            use safe_arch::{
                bitand_m256i, shl_imm_u16_m256i, shr_imm_i16_m256i, shr_imm_u16_m256i,
            };
            let a_even = bitand_m256i(a, set_splat_i16_m256i(0x00ff));
            let a_odd = shr_imm_u16_m256i::<8>(a);
            let b_even = shr_imm_i16_m256i::<8>(shl_imm_u16_m256i::<8>(b));
            let b_odd = shr_imm_i16_m256i::<8>(b);
            add_i32_m256i(
                acc,
                add_i32_m256i(
                    mul_i16_horizontal_add_m256i(a_even, b_even),
                    mul_i16_horizontal_add_m256i(a_odd, b_odd),
                ),
            )
        }
    }

    /// AVX-VNNI's `vpdpbusd`.
    #[cfg(target_feature = "avxvnni")]
    pub(super) struct AvxVnni;

    #[cfg(target_feature = "avxvnni")]
    impl Sums for AvxVnni {
        const EXACT: bool = true;

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
        const EXACT: bool = true;

        #[inline]
        fn dot(acc: m256i, a: m256i, b: m256i) -> m256i {
            crate::intrinsics::dpbusd_avx512_vnni(acc, a, b)
        }
    }

    /// How a format's integer sums are formed on a path whose sums are `S`, each exact:
    /// `(unsigned, signed)` operands of every product.
    struct Form<L, S>(std::marker::PhantomData<(L, S)>);

    impl<L: Layout, S: Sums> Form<L, S> {
        /// Signed values without a stored bias (`Q8_0`, `IQ4_NL`, `IQ4_XS`) on a path with exact
        /// four-product sums ([`Sums::EXACT`]): `w + 128` (the weight bytes with their top bit
        /// flipped, an unsigned byte) times the inputs, less 128 times the inputs' sum — one
        /// `vpdpbusd` per product group and no sign trick.
        const WIDE: bool = S::EXACT && L::SIGNED && L::BIAS == 0;
        /// What the unsigned operands are offset by: [`Layout::BIAS`], or 128 with
        /// [`Form::WIDE`].
        const BIAS: i32 = if Self::WIDE { 128 } else { L::BIAS as i32 };
        /// Signed values stored with a bias ([`Layout::BIAS`]: `w = u − BIAS`, `u` from 0 to
        /// 63): `u` (unsigned bytes) times the inputs, less `BIAS` times the inputs' sum (kept
        /// by [`Quantized`]). A pair of products stays within 2 · 63 · 127 = 16,002. Other
        /// signed values move their signs onto the inputs (the sign trick: `|w|` times `x` with
        /// `w`'s sign, at most 2 · 128 · 127 = 32,512 per pair), or with [`Form::WIDE`] take a
        /// bias of 128. Unsigned values (below 32) multiply the inputs as they are: at most
        /// 2 · 31 · 127 per pair.
        const BIASED: bool = L::SIGNED && Self::BIAS > 0;
        /// The sign trick: signed values without a bias.
        const SIGN_TRICK: bool = L::SIGNED && !Self::BIASED;
        /// Whether four products fit 16 bits as well: stored-biased values (4 · 63 · 127 =
        /// 32,004) and unsigned ones (4 · 31 · 127).
        const NARROW: bool = !L::SIGNED || L::BIAS > 0;

        /// What a biased type subtracts from its exact sums with input block `x`: `(bias
        /// times the inputs' sum of the block, or with split scales of its first half; of its
        /// second half)`. Zeros for the other types.
        #[inline]
        fn corrections(x: &Block) -> (i32, i32) {
            if !Self::BIASED {
                return (0, 0);
            }
            let bias = Self::BIAS;
            let [first, second] = x.n;
            if L::SPLIT {
                (bias * first, bias * second)
            } else {
                (bias * (first + second), 0)
            }
        }
    }

    /// Row `r`'s eight 32-bit words of `rows` as the eight rows' word `k` in register `k`: an
    /// 8 × 8 transpose of 32-bit words.
    #[allow(clippy::inline_always)] // in the strip's fill
    #[inline(always)]
    fn transpose(rows: [m256i; STRIP]) -> [m256i; STRIP] {
        let [r0, r1, r2, r3, r4, r5, r6, r7] = rows;
        let (t0, t1) = (unpack_low_i32_m256i(r0, r1), unpack_high_i32_m256i(r0, r1));
        let (t2, t3) = (unpack_low_i32_m256i(r2, r3), unpack_high_i32_m256i(r2, r3));
        let (t4, t5) = (unpack_low_i32_m256i(r4, r5), unpack_high_i32_m256i(r4, r5));
        let (t6, t7) = (unpack_low_i32_m256i(r6, r7), unpack_high_i32_m256i(r6, r7));
        // Rows 0–3's words 0, 1, 2, 3 (low lane) and 4, 5, 6, 7 (high lane); then rows 4–7's.
        let u = [
            unpack_low_i64_m256i(t0, t2),
            unpack_high_i64_m256i(t0, t2),
            unpack_low_i64_m256i(t1, t3),
            unpack_high_i64_m256i(t1, t3),
            unpack_low_i64_m256i(t4, t6),
            unpack_high_i64_m256i(t4, t6),
            unpack_low_i64_m256i(t5, t7),
            unpack_high_i64_m256i(t5, t7),
        ];
        let low = |k: usize| shuffle_abi_i128z_all_m256i::<0x20>(u[k], u[k + 4]);
        let high = |k: usize| shuffle_abi_i128z_all_m256i::<0x31>(u[k], u[k + 4]);
        [
            low(0),
            low(1),
            low(2),
            low(3),
            high(0),
            high(1),
            high(2),
            high(3),
        ]
    }

    /// `N` numbers per row of rows 0–3 (`top`) and 4–7 (`bottom`), as eight rows'.
    #[allow(clippy::inline_always)] // in the strip's fill
    #[inline(always)]
    fn eight_rows<T: Copy, const N: usize>(
        top: [[T; TILE_W]; N],
        bottom: [[T; TILE_W]; N],
    ) -> [[T; STRIP]; N] {
        std::array::from_fn(|h| {
            std::array::from_fn(|r| {
                if r < TILE_W {
                    top[h][r]
                } else {
                    bottom[h][r - TILE_W]
                }
            })
        })
    }

    /// Asks for the weights [`PREFETCH`] bytes past 32-value block `b` of each row of `w`.
    #[inline]
    fn prefetch<L: Layout>(w: &[&[u8]], b: usize) {
        for row in w {
            crate::intrinsics::prefetch(
                row.as_ptr()
                    .wrapping_add(b * L::BYTES / (L::VALUES / QK) + PREFETCH),
            );
        }
    }

    /// Unpacks the eight rows `w` (`blocks` blocks each) into `strip`.
    #[allow(clippy::inline_always)] // once per strip, specialised per format and path
    #[inline(always)]
    fn fill<L: Layout>(w: &[&[u8]; STRIP], blocks: usize, strip: &mut Strip) {
        let padded = blocks.next_multiple_of(2);
        strip.values.resize(padded * 8, [0; QK]);
        if L::SUPER {
            strip.integers.resize(padded, [[0; STRIP]; 2]);
            strip.minimums.resize(padded, [[0; STRIP]; 2]);
            strip.supers.resize(blocks / 8, [[0.0; STRIP]; 2]);
        } else {
            strip.scales.resize(padded, [0.0; STRIP]);
            strip.seconds.resize(padded, [0.0; STRIP]);
        }
        // Whole units, then a last odd block, as in [`direct`].
        let (unit_blocks, bytes) = unit::<L>();
        let whole = blocks / unit_blocks;
        for u in 0..whole {
            let unit = |r: usize| &w[r][u * bytes..][..bytes];
            let units = [
                unit(0),
                unit(1),
                unit(2),
                unit(3),
                unit(4),
                unit(5),
                unit(6),
                unit(7),
            ];
            if L::SUPER {
                fill_numbers::<L>(&units, u, strip);
            }
            for j in (0..unit_blocks).step_by(2) {
                let b = u * unit_blocks + j;
                prefetch::<L>(w, b);
                fill_pair::<L>(&units, (j, unit_blocks), b, strip);
            }
        }
        if whole * unit_blocks < blocks {
            let b = whole * unit_blocks;
            fill_pair::<L>(w, (b, blocks), b, strip);
        }
    }

    /// [`fill`]'s numbers of super-block `s` of the strip from `units` (each row's bytes of
    /// that super-block): each row's [`Numbers`] read once for its eight blocks, and the
    /// super-block's `(d, −dmin)`.
    #[allow(clippy::inline_always)] // the fill's loop body
    #[inline(always)]
    fn fill_numbers<L: Layout>(units: &[&[u8]; STRIP], s: usize, strip: &mut Strip) {
        let numbers: [Numbers; STRIP] = std::array::from_fn(|r| L::numbers(units[r], 0));
        // Per row a pair of numbers, as the pair's firsts and seconds.
        let rows = |pairs: [[i32; 2]; STRIP]| [pairs.map(|p| p[0]), pairs.map(|p| p[1])];
        for k in 0..8 {
            strip.integers[8 * s + k] = rows(numbers.map(|n| n.block(L::SPLIT, k)));
            if !L::SIGNED && L::SPLIT {
                strip.minimums[8 * s + k] = rows(numbers.map(|n| n.split_minimums(k)));
            }
        }
        let (top, bottom) = (
            &[units[0], units[1], units[2], units[3]],
            &[units[4], units[5], units[6], units[7]],
        );
        strip.supers[s] = eight_rows(L::super_scales(top, 0), L::super_scales(bottom, 0));
    }

    /// [`fill`]'s step: blocks `b` (even) and `b + 1` of the strip from rows `w` (`(j, count)`:
    /// the block index and count the layout's readers take); a super-block type's numbers are
    /// [`fill_numbers`]'.
    #[allow(clippy::inline_always)] // the fill's loop body
    #[inline(always)]
    fn fill_pair<L: Layout>(
        w: &[&[u8]; STRIP],
        (j, count): (usize, usize),
        b: usize,
        strip: &mut Strip,
    ) {
        if !L::SUPER {
            let (top, bottom) = (&[w[0], w[1], w[2], w[3]], &[w[4], w[5], w[6], w[7]]);
            let [d0, m0, d1, m1] =
                eight_rows(L::headers(top, j, count), L::headers(bottom, j, count));
            (strip.scales[b], strip.seconds[b]) = (d0, m0);
            (strip.scales[b + 1], strip.seconds[b + 1]) = (d1, m1);
        }
        let pairs = [
            L::pair(w[0], j, count),
            L::pair(w[1], j, count),
            L::pair(w[2], j, count),
            L::pair(w[3], j, count),
            L::pair(w[4], j, count),
            L::pair(w[5], j, count),
            L::pair(w[6], j, count),
            L::pair(w[7], j, count),
        ];
        // Each row's `lo` holds words 0–3 of block `b` then of `b + 1`, `hi` words 4–7.
        let lo = transpose(pairs.map(|p| p.0));
        let hi = transpose(pairs.map(|p| p.1));
        for (half, block) in [b, b + 1].into_iter().enumerate() {
            let words: [m256i; 8] = std::array::from_fn(|g| {
                if g < 4 {
                    lo[4 * half + g]
                } else {
                    hi[4 * half + g - 4]
                }
            });
            for (g, word) in words.iter().enumerate() {
                strip.values[8 * block + g] = (*word).into();
            }
        }
    }

    /// The registers [`product`] works in: one lane per weight row. [`Eight`] holds a strip's
    /// eight rows in 256-bit registers, its integer sums formed by `S`; [`Sixteen`] two
    /// strips' sixteen rows in 512-bit ones (the `avx512` level: `vpdpbusd` on `zmm`). A lane
    /// does the same operations in both, so both give the same bits.
    pub(super) trait Lanes {
        /// Integer lanes.
        type I: Copy;
        /// Float lanes.
        type F: Copy;
        /// How a lane's integer sums are formed (what [`Form`] bounds them by).
        type S: Sums;
        /// One input row's results: a value per weight row.
        type Out: Copy;

        fn zero_i() -> Self::I;
        fn zero_f() -> Self::F;
        fn splat_i32(v: i32) -> Self::I;
        fn splat_f32(v: f32) -> Self::F;
        fn add_i32(a: Self::I, b: Self::I) -> Self::I;
        fn sub_i32(a: Self::I, b: Self::I) -> Self::I;
        fn mul_i32(a: Self::I, b: Self::I) -> Self::I;
        fn to_f32(a: Self::I) -> Self::F;
        fn mul(a: Self::F, b: Self::F) -> Self::F;
        /// `a · b + c`, one rounding.
        fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
        fn add(a: Self::F, b: Self::F) -> Self::F;
        /// Each byte's magnitude.
        fn abs_i8(a: Self::I) -> Self::I;
        /// `v`'s bytes with `w`'s signs (zero where `w`'s byte is).
        fn sign_i8(v: Self::I, w: Self::I) -> Self::I;
        /// Each byte with its top bit flipped (a signed byte plus 128, as an unsigned one).
        fn flip_top(a: Self::I) -> Self::I;
        /// [`Sums::both`] on these lanes.
        fn both(
            narrow: bool,
            acc: Self::I,
            a: (Self::I, Self::I),
            b: (Self::I, Self::I),
        ) -> Self::I;
        /// The four bytes of group `g` (values `4g..4g + 4`) of a quantized input block, in
        /// every 32-bit lane.
        fn group(block: &[i8; QK], g: usize) -> Self::I;
        /// Register `k` of the strips' values.
        fn values(strips: &[Strip], k: usize) -> Self::I;
        /// A 32-value type's `(scale, second number)` of block `b`, per row.
        fn headers(strips: &[Strip], b: usize) -> (Self::F, Self::F);
        /// A super-block type's `(integers, minimums)` of block `b`, per row.
        fn integers(strips: &[Strip], b: usize) -> ([Self::I; 2], [Self::I; 2]);
        /// A super-block type's `(d, −dmin)` of super-block `s`, per row.
        fn supers(strips: &[Strip], s: usize) -> [Self::F; 2];
        fn out(a: Self::F) -> Self::Out;
    }

    /// One strip's eight rows in 256-bit registers, sums by `S`.
    pub(super) struct Eight<S>(std::marker::PhantomData<S>);

    impl<S: Sums> Lanes for Eight<S> {
        type I = m256i;
        type F = m256;
        type S = S;
        type Out = [f32; STRIP];

        #[inline]
        fn zero_i() -> m256i {
            zeroed_m256i()
        }
        #[inline]
        fn zero_f() -> m256 {
            zeroed_m256()
        }
        #[inline]
        fn splat_i32(v: i32) -> m256i {
            set_splat_i32_m256i(v)
        }
        #[inline]
        fn splat_f32(v: f32) -> m256 {
            set_splat_m256(v)
        }
        #[inline]
        fn add_i32(a: m256i, b: m256i) -> m256i {
            add_i32_m256i(a, b)
        }
        #[inline]
        fn sub_i32(a: m256i, b: m256i) -> m256i {
            sub_i32_m256i(a, b)
        }
        #[inline]
        fn mul_i32(a: m256i, b: m256i) -> m256i {
            mul_i32_keep_low_m256i(a, b)
        }
        #[inline]
        fn to_f32(a: m256i) -> m256 {
            convert_to_m256_from_i32_m256i(a)
        }
        #[inline]
        fn mul(a: m256, b: m256) -> m256 {
            mul_m256(a, b)
        }
        #[inline]
        fn fma(a: m256, b: m256, c: m256) -> m256 {
            fused_mul_add_m256(a, b, c)
        }
        #[inline]
        fn add(a: m256, b: m256) -> m256 {
            add_m256(a, b)
        }
        #[inline]
        fn abs_i8(a: m256i) -> m256i {
            abs_i8_m256i(a)
        }
        #[inline]
        fn sign_i8(v: m256i, w: m256i) -> m256i {
            sign_apply_i8_m256i(v, w)
        }
        #[inline]
        fn flip_top(a: m256i) -> m256i {
            bitxor_m256i(a, set_splat_i8_m256i(i8::MIN))
        }
        #[inline]
        fn both(narrow: bool, acc: m256i, a: (m256i, m256i), b: (m256i, m256i)) -> m256i {
            S::both(narrow, acc, a, b)
        }
        #[inline]
        fn group(block: &[i8; QK], g: usize) -> m256i {
            set_splat_i32_m256i(group_word(block, g))
        }
        #[inline]
        fn values(strips: &[Strip], k: usize) -> m256i {
            load_unaligned_m256i(&strips[0].values[k])
        }
        #[inline]
        fn headers(strips: &[Strip], b: usize) -> (m256, m256) {
            (
                m256::from(strips[0].scales[b]),
                m256::from(strips[0].seconds[b]),
            )
        }
        #[inline]
        fn integers(strips: &[Strip], b: usize) -> ([m256i; 2], [m256i; 2]) {
            (
                strips[0].integers[b].map(m256i::from),
                strips[0].minimums[b].map(m256i::from),
            )
        }
        #[inline]
        fn supers(strips: &[Strip], s: usize) -> [m256; 2] {
            strips[0].supers[s].map(m256::from)
        }
        #[inline]
        fn out(a: m256) -> [f32; STRIP] {
            a.into()
        }
    }

    /// Two strips' sixteen rows in 512-bit registers (the first strip's in the low half),
    /// sums by AVX-512 VNNI's `vpdpbusd` on `zmm`.
    #[cfg(wide)]
    pub(super) struct Sixteen;

    #[cfg(wide)]
    impl Sixteen {
        #[inline]
        fn join_i(low: m256i, high: m256i) -> m512i {
            insert_m256i_to_m512i::<1>(cast_m256i_to_m512i(low), high)
        }
        #[inline]
        fn join_f(low: m256, high: m256) -> m512 {
            insert_m256_to_m512::<1>(cast_m256_to_m512(low), high)
        }
        /// `f` on each 256-bit half (the sign trick's byte operations, which AVX-512 F has
        /// not; never on the hot path: VNNI's sums take the wide bias instead).
        #[inline]
        fn halves(a: m512i, b: m512i, f: impl Fn(m256i, m256i) -> m256i) -> m512i {
            Self::join_i(
                f(cast_m512i_to_m256i(a), cast_m512i_to_m256i(b)),
                f(
                    extract_m256i_from_m512i::<1>(a),
                    extract_m256i_from_m512i::<1>(b),
                ),
            )
        }
    }

    // `cfg(wide)` implies these features where the code is compiled; rustdoc sees the
    // build script's `wide` without them (no `target-cpu`), and `Avx512Vnni` then.
    #[cfg(all(wide, target_feature = "avx512vnni", target_feature = "avx512vl"))]
    impl Lanes for Sixteen {
        type I = m512i;
        type F = m512;
        type S = Avx512Vnni;
        type Out = [f32; 2 * STRIP];

        #[inline]
        fn zero_i() -> m512i {
            zeroed_m512i()
        }
        #[inline]
        fn zero_f() -> m512 {
            zeroed_m512()
        }
        #[inline]
        fn splat_i32(v: i32) -> m512i {
            set_splat_i32_m512i(v)
        }
        #[inline]
        fn splat_f32(v: f32) -> m512 {
            set_splat_m512(v)
        }
        #[inline]
        fn add_i32(a: m512i, b: m512i) -> m512i {
            add_i32_m512i(a, b)
        }
        #[inline]
        fn sub_i32(a: m512i, b: m512i) -> m512i {
            sub_i32_m512i(a, b)
        }
        #[inline]
        fn mul_i32(a: m512i, b: m512i) -> m512i {
            mul_i32_keep_low_m512i(a, b)
        }
        #[inline]
        fn to_f32(a: m512i) -> m512 {
            convert_to_m512_from_i32_m512i(a)
        }
        #[inline]
        fn mul(a: m512, b: m512) -> m512 {
            mul_m512(a, b)
        }
        #[inline]
        fn fma(a: m512, b: m512, c: m512) -> m512 {
            fused_mul_add_m512(a, b, c)
        }
        #[inline]
        fn add(a: m512, b: m512) -> m512 {
            add_m512(a, b)
        }
        #[inline]
        fn abs_i8(a: m512i) -> m512i {
            Self::halves(a, a, |a, _| abs_i8_m256i(a))
        }
        #[inline]
        fn sign_i8(v: m512i, w: m512i) -> m512i {
            Self::halves(v, w, sign_apply_i8_m256i)
        }
        #[inline]
        fn flip_top(a: m512i) -> m512i {
            bitxor_m512i(a, set_splat_i8_m512i(i8::MIN))
        }
        #[inline]
        fn both(_narrow: bool, acc: m512i, a: (m512i, m512i), b: (m512i, m512i)) -> m512i {
            let dot = crate::intrinsics::dpbusd_zmm;
            dot(dot(acc, a.0, b.0), a.1, b.1)
        }
        #[inline]
        fn group(block: &[i8; QK], g: usize) -> m512i {
            set_splat_i32_m512i(group_word(block, g))
        }
        #[inline]
        fn values(strips: &[Strip], k: usize) -> m512i {
            Self::join_i(
                load_unaligned_m256i(&strips[0].values[k]),
                load_unaligned_m256i(&strips[1].values[k]),
            )
        }
        #[inline]
        fn headers(strips: &[Strip], b: usize) -> (m512, m512) {
            let [low, high] = [&strips[0], &strips[1]];
            (
                Self::join_f(m256::from(low.scales[b]), m256::from(high.scales[b])),
                Self::join_f(m256::from(low.seconds[b]), m256::from(high.seconds[b])),
            )
        }
        #[inline]
        fn integers(strips: &[Strip], b: usize) -> ([m512i; 2], [m512i; 2]) {
            let [low, high] = [&strips[0], &strips[1]];
            let join =
                |l: [i32; STRIP], h: [i32; STRIP]| Self::join_i(m256i::from(l), m256i::from(h));
            (
                std::array::from_fn(|k| join(low.integers[b][k], high.integers[b][k])),
                std::array::from_fn(|k| join(low.minimums[b][k], high.minimums[b][k])),
            )
        }
        #[inline]
        fn supers(strips: &[Strip], s: usize) -> [m512; 2] {
            std::array::from_fn(|k| {
                Self::join_f(
                    m256::from(strips[0].supers[s][k]),
                    m256::from(strips[1].supers[s][k]),
                )
            })
        }
        #[inline]
        fn out(a: m512) -> [f32; 2 * STRIP] {
            a.into()
        }
    }

    /// The unsigned operands of weight values `w` in `V`'s lanes: their magnitudes (the sign
    /// trick), `w + 128` ([`Form::WIDE`]), or `w` as they are.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn unsigned_of<L: Layout, V: Lanes>(w: (V::I, V::I)) -> (V::I, V::I) {
        if Form::<L, V::S>::SIGN_TRICK {
            (V::abs_i8(w.0), V::abs_i8(w.1))
        } else if Form::<L, V::S>::WIDE {
            (V::flip_top(w.0), V::flip_top(w.1))
        } else {
            w
        }
    }

    /// Two registers of `V`'s integer lanes.
    type Pair<V> = (<V as Lanes>::I, <V as Lanes>::I);

    /// Each product's `(unsigned, signed)` operands for input bytes `v` and weight values `w`
    /// (`unsigned`: [`unsigned_of`] them), in `V`'s lanes.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn operands_of<L: Layout, V: Lanes>(
        v: (V::I, V::I),
        w: (V::I, V::I),
        unsigned: (V::I, V::I),
    ) -> (Pair<V>, Pair<V>) {
        if Form::<L, V::S>::SIGN_TRICK {
            (unsigned, (V::sign_i8(v.0, w.0), V::sign_i8(v.1, w.1)))
        } else {
            (unsigned, v)
        }
    }

    /// One block's float operations, for the lanes' weight rows (their `(d, second)` numbers
    /// per lane) and input block `x`, given the block's exact integer sums `(sum, second
    /// half's sum)`: the definition's fused multiply-adds, in its order.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn add_block<L: Layout, V: Lanes>(
        (acc, minimums): (&mut V::F, &mut V::F),
        (d, second): (V::F, V::F),
        x: &Block,
        (sum, _): (V::I, V::I),
    ) {
        let dx = V::splat_f32(x.d);
        *acc = V::fma(V::mul(d, dx), V::to_f32(sum), *acc);
        if !L::SIGNED {
            *minimums = V::fma(second, V::splat_f32(x.s), *minimums);
        }
    }

    /// A super-block type's block, for the lanes' weight rows (their integer `(scale,
    /// second)` per lane, and with split minimums each half's integer minimum) and input block
    /// `x`, given the block's exact integer sums `(sum, second half's sum)`: added, scaled, to
    /// the super-block's exact sums `(scaled sums, minimums)`.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn add_integers<L: Layout, V: Lanes>(
        (sums, mins): &mut (V::I, V::I),
        ([scale, second], [lo, hi]): ([V::I; 2], [V::I; 2]),
        x: &Block,
        (sum, half): (V::I, V::I),
    ) {
        *sums = V::add_i32(*sums, V::mul_i32(sum, scale));
        if L::SPLIT {
            *sums = V::add_i32(*sums, V::mul_i32(half, second));
        }
        let [n0, n1] = x.n;
        if !L::SIGNED && L::SPLIT {
            *mins = V::add_i32(*mins, V::mul_i32(lo, V::splat_i32(n0)));
            *mins = V::add_i32(*mins, V::mul_i32(hi, V::splat_i32(n1)));
        } else if !L::SIGNED {
            *mins = V::add_i32(*mins, V::mul_i32(second, V::splat_i32(n0 + n1)));
        }
    }

    /// A super-block's float steps, for the lanes' weight rows (their `(d, −dmin)` per lane)
    /// and inputs of scale `dx`, given its exact sums `(scaled sums, minimums)`: the
    /// definition's fused multiply-adds.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn add_super<V: Lanes>(
        (acc, minimums): (&mut V::F, &mut V::F),
        [d, dmin]: [V::F; 2],
        dx: f32,
        (sums, mins): (V::I, V::I),
    ) {
        let dx = V::splat_f32(dx);
        *acc = V::fma(V::mul(d, dx), V::to_f32(sums), *acc);
        *minimums = V::fma(V::mul(dmin, dx), V::to_f32(mins), *minimums);
    }

    /// The four bytes of group `g` (values `4g..4g + 4`) of a quantized input block, as one
    /// 32-bit word.
    #[inline]
    fn group_word(block: &[i8; QK], g: usize) -> i32 {
        let bytes = [
            block[4 * g],
            block[4 * g + 1],
            block[4 * g + 2],
            block[4 * g + 3],
        ];
        i32::from_le_bytes(bytes.map(i8::cast_unsigned))
    }

    /// Input rows `first..first + C` times the strips, per input row a value per weight row
    /// (`V`'s lanes): the definition's accumulators, one lane per weight row.
    #[allow(clippy::inline_always)] // the strip's inner loop, specialised per format and path
    #[inline(always)]
    fn product<L: Layout, V: Lanes, const C: usize>(
        strips: &[Strip],
        x: &Quantized,
        first: usize,
    ) -> [V::Out; C] {
        type F<L, V> = Form<L, <V as Lanes>::S>;
        let mut acc = [V::zero_f(); C];
        let mut minimums = [V::zero_f(); C];
        // A super-block type's exact sums of the super-block so far: `(scaled sums, minimums)`.
        let mut integers = [(V::zero_i(), V::zero_i()); C];
        for b in 0..x.blocks {
            let blocks: [&Block; C] = std::array::from_fn(|c| &x.data[x.at(first + c, b)]);
            let mut whole = [V::zero_i(); C];
            let mut half = [V::zero_i(); C];
            for g in (0..8).step_by(2) {
                let w = (
                    V::values(strips, 8 * b + g),
                    V::values(strips, 8 * b + g + 1),
                );
                let unsigned = unsigned_of::<L, V>(w);
                for c in 0..C {
                    let inputs = &blocks[c].q;
                    let v = (V::group(inputs, g), V::group(inputs, g + 1));
                    let (a, s) = operands_of::<L, V>(v, w, unsigned);
                    let sums = if L::SPLIT && g >= 4 {
                        &mut half[c]
                    } else {
                        &mut whole[c]
                    };
                    *sums = V::both(F::<L, V>::NARROW, *sums, a, s);
                }
            }
            let unbiased = |c: usize| {
                let mut sums = (whole[c], half[c]);
                if F::<L, V>::BIASED {
                    let (first, second) = F::<L, V>::corrections(blocks[c]);
                    sums.0 = V::sub_i32(sums.0, V::splat_i32(first));
                    sums.1 = V::sub_i32(sums.1, V::splat_i32(second));
                }
                sums
            };
            if L::SUPER {
                let numbers = V::integers(strips, b);
                for c in 0..C {
                    add_integers::<L, V>(&mut integers[c], numbers, blocks[c], unbiased(c));
                }
                if b % 8 == 7 {
                    let supers = V::supers(strips, b / 8);
                    for c in 0..C {
                        add_super::<V>(
                            (&mut acc[c], &mut minimums[c]),
                            supers,
                            blocks[c].d,
                            std::mem::replace(&mut integers[c], (V::zero_i(), V::zero_i())),
                        );
                    }
                }
            } else {
                let numbers = V::headers(strips, b);
                for c in 0..C {
                    add_block::<L, V>(
                        (&mut acc[c], &mut minimums[c]),
                        numbers,
                        blocks[c],
                        unbiased(c),
                    );
                }
            }
        }
        std::array::from_fn(|c| {
            V::out(if L::SIGNED {
                acc[c]
            } else {
                V::add(acc[c], minimums[c])
            })
        })
    }

    /// Per 32-bit lane `r` of each half of the result, the sum of register `r`'s lanes in that
    /// half: four rows' paired-layout partial sums reduced to each row's sum of block `b` (the
    /// low half) and of `b + 1` (the high half). Exact (integer adds).
    #[allow(clippy::inline_always)] // in the direct path's loop
    #[inline(always)]
    fn reduce(r: [m256i; TILE_W]) -> m256i {
        add_horizontal_i32_m256i(
            add_horizontal_i32_m256i(r[0], r[1]),
            add_horizontal_i32_m256i(r[2], r[3]),
        )
    }

    /// [`add_block`] for four weight rows, in 128-bit registers.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn add_block4<L: Layout>(
        (acc, minimums): (&mut m128, &mut m128),
        (d, second): (m128, m128),
        x: &Block,
        sum: m128i,
    ) {
        let dx = set_splat_m128(x.d);
        *acc = fused_mul_add_m128(mul_m128(d, dx), convert_to_m128_from_i32_m128i(sum), *acc);
        if !L::SIGNED {
            *minimums = fused_mul_add_m128(second, set_splat_m128(x.s), *minimums);
        }
    }

    /// [`add_super`] for four weight rows, in 128-bit registers.
    #[allow(clippy::inline_always)] // in the inner loops
    #[inline(always)]
    fn add_super4(
        (acc, minimums): (&mut m128, &mut m128),
        (d, dmin): (m128, m128),
        dx: f32,
        (sums, mins): (m128i, m128i),
    ) {
        let dx = set_splat_m128(dx);
        *acc = fused_mul_add_m128(mul_m128(d, dx), convert_to_m128_from_i32_m128i(sums), *acc);
        *minimums = fused_mul_add_m128(
            mul_m128(dmin, dx),
            convert_to_m128_from_i32_m128i(mins),
            *minimums,
        );
    }

    /// [`product`]'s results for a 32-value type, `C` (at most [`DIRECT_ROWS`]) input rows
    /// from `first` and four of the strip's weight rows, without the strip: each pair of
    /// blocks unpacked in registers and multiplied in the layout [`Layout::pair`] gives (each
    /// lane a partial sum of one row), then [`reduce`]d to a lane per row. Unpacking a strip
    /// costs more than it saves for so few rows; the integer sums are exact either way, and
    /// the float operations are the same ones in the same order.
    ///
    /// The rows are read a unit at a time ([`unit()`]): the layouts' readers then see slices
    /// and block indices the compiler knows, and their checks for blocks past the row fold
    /// away; only a last odd block goes through them.
    #[allow(clippy::inline_always)] // the decode path's loop, specialised per format and path
    #[inline(always)]
    fn direct<L: Layout, S: Sums, const C: usize>(
        w: &[&[u8]; TILE_W],
        x: &Quantized,
        first: usize,
    ) -> [[f32; TILE_W]; C] {
        let mut acc = [zeroed_m128(); C];
        let mut minimums = [zeroed_m128(); C];
        let n = x.blocks;
        let (blocks, bytes) = unit::<L>();
        let whole = n / blocks;
        let mut rows: [&[Block]; C] = [&[]; C];
        for (c, row) in rows.iter_mut().enumerate() {
            *row = x.row(first + c);
        }
        for u in 0..whole {
            // Not `w.map`: left out of line, it hides the units' length from the readers.
            let unit = |r: usize| &w[r][u * bytes..][..bytes];
            let units = [unit(0), unit(1), unit(2), unit(3)];
            let mut inputs: [&[Block]; C] = [&[]; C];
            for (inputs, row) in inputs.iter_mut().zip(&rows) {
                *inputs = &row[u * blocks..][..blocks];
            }
            // A macro, not a closure: a closure called from five places is left out of line,
            // and its accumulators then live in memory.
            macro_rules! step {
                ($j:expr, $headers:expr) => {{
                    let j = $j;
                    prefetch::<L>(w, u * blocks + j);
                    let x = |c: usize| (&inputs[c][j], Some(&inputs[c][j + 1]));
                    direct_pair::<L, S, C>(
                        &units,
                        (j, blocks),
                        $headers,
                        x,
                        (&mut acc, &mut minimums),
                    );
                }};
            }
            for j in (0..blocks).step_by(2) {
                step!(j, L::headers(&units, j, blocks));
            }
        }
        if whole * blocks < n {
            // A last odd block (a 32-value type): the readers give zeros for the one past it.
            let b = whole * blocks;
            let x = |c: usize| (&rows[c][b], None);
            let headers = L::headers(w, b, n);
            direct_pair::<L, S, C>(w, (b, n), headers, x, (&mut acc, &mut minimums));
        }
        std::array::from_fn(|c| {
            if L::SIGNED {
                acc[c].into()
            } else {
                add_m128(acc[c], minimums[c]).into()
            }
        })
    }

    /// `[f(0), f(1), f(2), f(3)]`, in line (`array::map` and `from_fn` may be left out of
    /// line, and their results then pass through memory).
    #[allow(clippy::inline_always)] // the point
    #[inline(always)]
    fn four<T>(f: impl Fn(usize) -> T) -> [T; TILE_W] {
        [f(0), f(1), f(2), f(3)]
    }

    /// The byte shuffles that spread a super-block's 16-bit scales (a register holding the
    /// eight of interest in both halves) to a pair of blocks' paired layout, per pair `j / 2`:
    /// `[per 32-value block or per 16 values][pair]`, each `[for values 0–15, for 16–31]`. Per
    /// block, pair `p` takes scales `2p` (low half) and `2p + 1` (high half) for both; with
    /// split scales, scales `4p mod 8` (low half) and `4p + 2 mod 8` (high half) for values
    /// 0–15, and the next ones for 16–31.
    #[allow(clippy::cast_possible_truncation)] // indices below 32
    const SPREAD: [[[[u8; 32]; 2]; 4]; 2] = {
        let mut table = [[[[0u8; 32]; 2]; 4]; 2];
        let mut p = 0;
        while p < 4 {
            let mut i = 0;
            while i < 32 {
                let (high, byte) = (i / 16, (i % 2) as u8);
                let (block, split) = ((2 * p + high) as u8, ((4 * p + 2 * high) % 8) as u8);
                table[0][p][0][i] = 2 * block + byte;
                table[0][p][1][i] = 2 * block + byte;
                table[1][p][0][i] = 2 * split + byte;
                table[1][p][1][i] = 2 * (split + 1) + byte;
                i += 1;
            }
            p += 1;
        }
        table
    };

    /// [`SPREAD`] for a [`Layout::NATURAL`] type, per block `k` of the super-block: each
    /// block's scale in all its lanes, or with split scales scale `2k mod 8` in the low half
    /// (values 0–15) and the next in the high.
    #[allow(clippy::cast_possible_truncation)] // indices below 32
    const NATURAL_SPREAD: [[[u8; 32]; 8]; 2] = {
        let mut table = [[[0u8; 32]; 8]; 2];
        let mut k = 0;
        while k < 8 {
            let mut i = 0;
            while i < 32 {
                let (high, byte) = (i / 16, (i % 2) as u8);
                let (block, split) = (k as u8, ((2 * k + high) % 8) as u8);
                table[0][k][i] = 2 * block + byte;
                table[1][k][i] = 2 * split + byte;
                i += 1;
            }
            k += 1;
        }
        table
    };

    /// [`direct`] for a super-block type: per super-block and (weight row, input row) pair,
    /// eight 32-bit lanes of exact partial sums, each product already times its sub-block's
    /// integer scale (`vpmaddwd` with the scales, where the 32-value types use ones), less the
    /// biased types' corrections; then the lanes of four rows [`reduce`]d to a lane per row, and
    /// the super-block's float steps. The super-block's integer sum is exact however its parts
    /// are grouped, so this gives the definition's bits with one reduction per super-block
    /// instead of one per pair of blocks.
    #[allow(clippy::inline_always)] // the decode path's loop, specialised per format and path
    #[allow(clippy::too_many_lines)] // the pairs' step, written out for the natural layouts
    #[inline(always)]
    fn direct_super<L: Layout, S: Sums, const C: usize>(
        w: &[&[u8]; TILE_W],
        x: &Quantized,
        first: usize,
    ) -> [[f32; TILE_W]; C] {
        // A natural layout's two registers are two blocks, each with its own scales.
        // `S::scaled` multiplies 16-bit pair sums on every path, so the sign trick's types
        // keep it here (AVX2's form).
        type F<L> = Form<L, Maddubs>;
        let narrow = F::<L>::NARROW && !L::SPLIT && !L::NATURAL;
        let mut acc = [zeroed_m128(); C];
        let mut minimums = [zeroed_m128(); C];
        let rows: [&[Block]; C] = std::array::from_fn(|c| x.row(first + c));
        for u in 0..x.blocks / 8 {
            let unit = |r: usize| &w[r][u * L::BYTES..][..L::BYTES];
            let units = [unit(0), unit(1), unit(2), unit(3)];
            let numbers = L::numbers16(&units, 0);
            // Each row's 16-bit scales, those of the first eight in both halves of a register,
            // then (split scales) those of the second eight.
            let halves = four(|r| {
                let scales = numbers[r].0;
                (
                    shuffle_abi_i128z_all_m256i::<0x00>(scales, scales),
                    shuffle_abi_i128z_all_m256i::<0x11>(scales, scales),
                )
            });
            let mut inputs: [&[Block]; C] = [&[]; C];
            for (inputs, row) in inputs.iter_mut().zip(&rows) {
                *inputs = &row[8 * u..][..8];
            }
            let mut sums = [[zeroed_m256i(); TILE_W]; C];
            // A natural layout's four pairs are written out, not a loop: each pair's bit
            // positions, table rows and scale half are then constants (immediate shifts; a
            // shift by a register is two micro-operations on Intel). LLVM does not unroll the
            // loop itself. Decode in cache, AVX2 build: Q6_K 22 -> 29, Q3_K 19 -> 25 G/s, and
            // Q2_K 31 -> 37 as a natural layout (the same loop kept it paired).
            macro_rules! pair {
                ($j:expr) => {{
                    let j: usize = $j;
                    prefetch::<L>(w, 8 * u + j);
                    let split = usize::from(L::SPLIT);
                    let (lo, hi) = if L::NATURAL {
                        let table = &NATURAL_SPREAD[split];
                        (m256i::from(table[j]), m256i::from(table[j + 1]))
                    } else {
                        let [lo, hi] = &SPREAD[split][j / 2];
                        (m256i::from(*lo), m256i::from(*hi))
                    };
                    let mut v = [(zeroed_m256i(), zeroed_m256i()); C];
                    for (v, inputs) in v.iter_mut().zip(&inputs) {
                        let (this, next) = (&inputs[j].q, &inputs[j + 1].q);
                        *v = if L::NATURAL {
                            (load_unaligned_m256i(this), load_unaligned_m256i(next))
                        } else {
                            let half = |input: &[i8; QK], h: usize| -> [i8; 16] {
                                input[16 * h..16 * h + 16].try_into().expect("16 values")
                            };
                            (
                                load_unaligned_hi_lo_m256i(&half(next, 0), &half(this, 0)),
                                load_unaligned_hi_lo_m256i(&half(next, 1), &half(this, 1)),
                            )
                        };
                    }
                    // A row at a time: its values and scales, then every input row (all four
                    // rows' at once would not fit the sixteen registers with split scales).
                    for r in 0..TILE_W {
                        let values = if L::NATURAL {
                            L::blocks(units[r], j)
                        } else {
                            L::pair(units[r], j, 8)
                        };
                        let unsigned = unsigned_of::<L, Eight<Maddubs>>(values);
                        // The pair's scales in the paired layout: block `j`'s in the low half,
                        // `j + 1`'s in the high; for values 0–15, then 16–31.
                        let (first, second) = halves[r];
                        let half = if L::SPLIT && j >= 4 { second } else { first };
                        let scales = (
                            shuffle_av_i8z_half_m256i(half, lo),
                            shuffle_av_i8z_half_m256i(half, hi),
                        );
                        for c in 0..C {
                            let (a, s) = operands_of::<L, Eight<Maddubs>>(v[c], values, unsigned);
                            sums[c][r] = S::scaled(narrow, sums[c][r], a, s, scales);
                        }
                    }
                }};
            }
            if L::NATURAL {
                pair!(0);
                pair!(2);
                pair!(4);
                pair!(6);
            } else {
                // The paired types measured 5–15 % slower written out (Q4_K, Q5_K, IQ4_XS).
                for j in (0..8).step_by(2) {
                    pair!(j);
                }
            }
            let [d, dmin] = L::super_scales(&units, 0);
            let (d, dmin) = (m128::from(d), m128::from(dmin));
            // Per row, what the inputs' sums are multiplied by: the biased types' scales
            // times their bias (at most 128 · 32: 16 bits), the minimums.
            let bias = set_splat_i16_m256i(i16::from(L::BIAS));
            let biased = four(|r| mul_i16_keep_low_m256i(numbers[r].0, bias));
            let mins = four(|r| numbers[r].1);
            for c in 0..C {
                // The inputs' sums per 16 values (split types) or per block.
                let counts = m256i::from(x.counts(first + c, u)[usize::from(!L::SPLIT)]);
                let sums = super_sums::<L>(sums[c], (biased, mins), counts);
                add_super4(
                    (&mut acc[c], &mut minimums[c]),
                    (d, dmin),
                    inputs[c][0].d,
                    sums,
                );
            }
        }
        std::array::from_fn(|c| {
            if L::SIGNED {
                acc[c].into()
            } else {
                add_m128(acc[c], minimums[c]).into()
            }
        })
    }

    /// [`direct_super`]'s exact sums of a super-block for four weight rows, a lane per row:
    /// `(scaled sums, minimums)` from each row's lanes `sums`, less the biased types'
    /// corrections (`biased`: each row's scales times the bias, 16-bit), and each row's
    /// `minimums` (16-bit) times the inputs' `counts`.
    #[allow(clippy::inline_always)] // once per super-block in the decode path's loop
    #[inline(always)]
    fn super_sums<L: Layout>(
        mut sums: [m256i; TILE_W],
        (biased, minimums): ([m256i; TILE_W], [m256i; TILE_W]),
        counts: m256i,
    ) -> (m128i, m128i) {
        if Form::<L, Maddubs>::BIASED {
            for r in 0..TILE_W {
                let correction = mul_i16_horizontal_add_m256i(biased[r], counts);
                sums[r] = sub_i32_m256i(sums[r], correction);
            }
        }
        let lanes = |r: m256i| {
            add_i32_m128i(
                cast_to_m128i_from_m256i(r),
                extract_m128i_from_m256i::<1>(r),
            )
        };
        let minimum = if L::SIGNED {
            zeroed_m128i()
        } else {
            lanes(reduce(four(|r| {
                mul_i16_horizontal_add_m256i(minimums[r], counts)
            })))
        };
        (lanes(reduce(sums)), minimum)
    }

    /// The blocks a unit of a row holds, and its bytes: two 32-value blocks, or one
    /// super-block.
    const fn unit<L: Layout>() -> (usize, usize) {
        let per_block = L::VALUES / QK;
        let blocks = if per_block > 2 { per_block } else { 2 };
        (blocks, blocks / per_block * L::BYTES)
    }

    /// [`direct`]'s step for blocks `b` (even) and `b + 1` of rows `w` (`(b, blocks)`: the
    /// index and count the layout's readers take) with their `headers`, and the input blocks
    /// `x(c)` of each input row `c` (the second `None` past the row).
    #[allow(clippy::inline_always)] // the decode path's loop body
    #[inline(always)]
    fn direct_pair<'a, L: Layout, S: Sums, const C: usize>(
        w: &[&[u8]; TILE_W],
        (b, blocks): (usize, usize),
        headers: [[f32; TILE_W]; 4],
        x: impl Fn(usize) -> (&'a Block, Option<&'a Block>),
        (acc, minimums): (&mut [m128; C], &mut [m128; C]),
    ) {
        let none = [0i8; QK];
        let values = [
            L::pair(w[0], b, blocks),
            L::pair(w[1], b, blocks),
            L::pair(w[2], b, blocks),
            L::pair(w[3], b, blocks),
        ];
        let unsigned = values.map(unsigned_of::<L, Eight<S>>);
        for c in 0..C {
            let (this_block, next_block) = x(c);
            let (this, next) = (&this_block.q, next_block.map_or(&none, |next| &next.q));
            let half = |input: &[i8; QK], h: usize| -> [i8; 16] {
                input[16 * h..16 * h + 16].try_into().expect("16 values")
            };
            let v = (
                load_unaligned_hi_lo_m256i(&half(next, 0), &half(this, 0)),
                load_unaligned_hi_lo_m256i(&half(next, 1), &half(this, 1)),
            );
            let mut whole = [zeroed_m256i(); TILE_W];
            for r in 0..TILE_W {
                let (a, s) = operands_of::<L, Eight<S>>(v, values[r], unsigned[r]);
                whole[r] = S::both(Form::<L, S>::NARROW, zeroed_m256i(), a, s);
            }
            let sums = reduce(whole);
            let unbiased = |x: &Block, sums: m128i| {
                if Form::<L, S>::BIASED {
                    sub_i32_m128i(sums, set_splat_i32_m128i(Form::<L, S>::corrections(x).0))
                } else {
                    sums
                }
            };
            let [d0, m0, d1, m1] = headers.map(m128::from);
            let this = unbiased(this_block, cast_to_m128i_from_m256i(sums));
            add_block4::<L>((&mut acc[c], &mut minimums[c]), (d0, m0), this_block, this);
            if let Some(next) = next_block {
                let next_sums = unbiased(next, extract_m128i_from_m256i::<1>(sums));
                add_block4::<L>((&mut acc[c], &mut minimums[c]), (d1, m1), next, next_sums);
            }
        }
    }

    /// [`Layout::DIRECT_BATCH`] on the path whose sums are `S`.
    pub(super) fn direct_batch<L: Layout, S: Sums>() -> usize {
        if S::EXACT {
            L::DIRECT_BATCH.1
        } else {
            L::DIRECT_BATCH.0
        }
    }

    /// The eight weight rows `w` times every input row of `x`, handed to `emit` per input row
    /// (one value per weight row): a batch of at most [`direct_batch`] rows in direct passes
    /// of up to [`DIRECT_ROWS`], a larger one from a strip.
    #[allow(clippy::inline_always)] // once per strip, specialised per format and path
    #[inline(always)]
    pub(super) fn strip<L: Layout, S: Sums>(
        w: [&[u8]; STRIP],
        x: &Quantized,
        strip: &mut Strip,
        emit: &mut dyn FnMut(usize, [f32; STRIP]),
    ) {
        if x.rows <= direct_batch::<L, S>() {
            let [a0, a1, a2, a3, b0, b1, b2, b3] = w;
            let mut i = 0;
            while i < x.rows {
                let count = (x.rows - i).min(DIRECT_ROWS);
                let halves = |w: [&[u8]; TILE_W]| {
                    let mut out = [[0.0f32; TILE_W]; DIRECT_ROWS];
                    match (L::SUPER, count) {
                        (false, 1) => out[..1].copy_from_slice(&direct::<L, S, 1>(&w, x, i)),
                        (false, 2) => out[..2].copy_from_slice(&direct::<L, S, 2>(&w, x, i)),
                        (false, _) => out = direct::<L, S, DIRECT_ROWS>(&w, x, i),
                        (true, 1) => out[..1].copy_from_slice(&direct_super::<L, S, 1>(&w, x, i)),
                        (true, 2) => out[..2].copy_from_slice(&direct_super::<L, S, 2>(&w, x, i)),
                        (true, _) => out = direct_super::<L, S, DIRECT_ROWS>(&w, x, i),
                    }
                    out
                };
                let out = eight_rows(halves([a0, a1, a2, a3]), halves([b0, b1, b2, b3]));
                for (c, values) in out.into_iter().take(count).enumerate() {
                    emit(i + c, values);
                }
                i += count;
            }
            return;
        }
        fill::<L>(&w, x.blocks, strip);
        let strips = std::slice::from_ref(&*strip);
        let mut i = 0;
        while i < x.rows {
            let count = (x.rows - i).min(STRIP_X);
            let mut out = [[0.0f32; STRIP]; STRIP_X];
            match count {
                1 => out[..1].copy_from_slice(&product::<L, Eight<S>, 1>(strips, x, i)),
                2 => out[..2].copy_from_slice(&product::<L, Eight<S>, 2>(strips, x, i)),
                3 => out[..3].copy_from_slice(&product::<L, Eight<S>, 3>(strips, x, i)),
                _ => out = product::<L, Eight<S>, STRIP_X>(strips, x, i),
            }
            for (c, values) in out[..count].iter().enumerate() {
                emit(i + c, *values);
            }
            i += count;
        }
    }

    /// [`strip`] for sixteen weight rows at the `avx512` level, for batches past
    /// [`Layout::DIRECT_BATCH`]: two strips unpacked as usual, their products formed side by
    /// side in 512-bit registers ([`Sixteen`]), each lane the same operations as in a strip of
    /// eight.
    #[cfg(wide)]
    #[allow(clippy::inline_always)] // once per pair of strips, specialised per format
    #[inline(always)]
    pub(super) fn strips<L: Layout>(
        w: [&[u8]; 2 * STRIP],
        x: &Quantized,
        strips: &mut [Strip; 2],
        emit: &mut dyn FnMut(usize, [f32; 2 * STRIP]),
    ) {
        debug_assert!(x.rows > direct_batch::<L, Avx512Vnni>());
        let [low, high] = &mut *strips;
        fill::<L>(w[..STRIP].try_into().expect("eight rows"), x.blocks, low);
        fill::<L>(w[STRIP..].try_into().expect("eight rows"), x.blocks, high);
        let strips = &strips[..];
        let mut i = 0;
        // Whole passes of `SIXTEEN_X` input rows, then the rest as a strip of eight takes them.
        while i + SIXTEEN_X <= x.rows {
            let out = product::<L, Sixteen, SIXTEEN_X>(strips, x, i);
            for (c, values) in out.iter().enumerate() {
                emit(i + c, *values);
            }
            i += SIXTEEN_X;
        }
        while i < x.rows {
            let count = (x.rows - i).min(STRIP_X);
            let mut out = [[0.0f32; 2 * STRIP]; STRIP_X];
            match count {
                1 => out[..1].copy_from_slice(&product::<L, Sixteen, 1>(strips, x, i)),
                2 => out[..2].copy_from_slice(&product::<L, Sixteen, 2>(strips, x, i)),
                3 => out[..3].copy_from_slice(&product::<L, Sixteen, 3>(strips, x, i)),
                _ => out = product::<L, Sixteen, STRIP_X>(strips, x, i),
            }
            for (c, values) in out[..count].iter().enumerate() {
                emit(i + c, *values);
            }
            i += count;
        }
    }
}

#[cfg(test)]
mod tests;
