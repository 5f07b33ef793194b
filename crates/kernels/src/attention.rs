//! Flash attention whose floats do not depend on the batch: wick's kernel for ggml's
//! `FLASH_ATTN_EXT` in the deterministic mode.
//!
//! ggml's reference attention (what `ggml_backend_cpu_set_use_ref` selects) is batch-invariant
//! but slow: one query row at a time, a scalar `expf` and an F16 accumulator per cached key. Its
//! fast paths (tiled for many query rows, split over the keys for one) group the work by the
//! batch's shape, so a row's floats change with it. This kernel keeps the property and wins the
//! speed back:
//!
//! - **A row's arithmetic depends on that row alone.** Its keys are the cached cells its mask
//!   leaves open, in cell order; they are taken in blocks of [`BLOCK`] *open* keys (not cells),
//!   so where the cells sit, how long the KV view is, which other rows share the step and how
//!   the work is split between threads change nothing. Each block runs the same fixed sequence
//!   of operations (a dot product per key in key-dimension order, the block maximum, an
//!   exponential per key, a fixed-shape sum, and the value accumulation in key order).
//! - **The work is shared where rows agree.** Rows of one sequence see nested key lists, so a
//!   block of keys and values is converted from F16 once and serves a tile of [`TILE`] rows and
//!   every query head of a key-value head (grouped-query attention).
//! - **Everything is F32 and vectorisable**: fixed-width lane loops with `mul_add`, which the
//!   workspace's `target-cpu=native` turns into FMA vector code.
//!
//! The answers are not bit-equal to ggml's reference kernel (which accumulates values in F16);
//! they are equal to themselves whatever the batch, which is the property wick needs.

use std::ops::Range;

/// Open keys per block.
pub const BLOCK: usize = 64;
/// Query rows per unit of work.
pub const TILE: usize = 32;
/// Lanes of the block sum.
const LANES: usize = 16;
/// The F16 bit pattern of −∞, what ggml's masks hold for a closed cell.
const F16_NEG_INF: u16 = 0xFC00;

/// A 4-dimensional view: `data` from the view's first element, strides in elements for
/// dimensions 1, 2 and 3 (dimension 0 is contiguous).
#[derive(Debug, Clone, Copy)]
pub struct View<'a, T> {
    /// The elements, from the view's first.
    pub data: &'a [T],
    /// Strides in elements of dimensions 1, 2 and 3.
    pub stride: [usize; 3],
}

impl<'a, T> View<'a, T> {
    /// The `len` elements of row `(i1, i2, i3)`.
    fn row(&self, i1: usize, i2: usize, i3: usize, len: usize) -> &'a [T] {
        let at = i1 * self.stride[0] + i2 * self.stride[1] + i3 * self.stride[2];
        &self.data[at..at + len]
    }
}

/// The shape of one `FLASH_ATTN_EXT` (ggml's names in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Key and query width (`DK`).
    pub dk: usize,
    /// Value width (`DV`).
    pub dv: usize,
    /// Query rows (`neq1`).
    pub rows: usize,
    /// Query heads (`neq2`).
    pub heads: usize,
    /// Query streams (`neq3`).
    pub streams: usize,
    /// Cached cells in the view (`nek1`).
    pub cells: usize,
    /// Key heads (`nek2`).
    pub k_heads: usize,
    /// Key streams (`nek3`).
    pub k_streams: usize,
    /// Value heads (`nev2`).
    pub v_heads: usize,
    /// Value streams (`nev3`).
    pub v_streams: usize,
    /// The mask's heads (`mask->ne[2]`; heads and streams broadcast by modulo).
    pub mask_heads: usize,
    /// The mask's streams.
    pub mask_streams: usize,
}

/// The op's scalar parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// The queries' scale.
    pub scale: f32,
    /// `ALiBi`'s maximum bias (0: none).
    pub max_bias: f32,
    /// The logits' soft cap (0: none).
    pub softcap: f32,
}

/// Keys or values as the KV cache holds them, one variant per cache type llama.cpp offers: F16,
/// BF16 (their bits) or F32 values, or ggml's blocks of 32 values (`Q8_0`, `Q4_0`, `Q4_1`,
/// `Q5_0`, `Q5_1`, `IQ4_NL`: a view of bytes, strides in bytes, a row of `d` values is `d / 32`
/// blocks). Every type's values are read exactly or by one fixed IEEE operation: BF16 and F16
/// widen exactly; a block's F16 scale times an integer of at most 8 bits is exact in F32 (11
/// significant bits times 8); the types with a minimum add it to that exact product, one
/// rounding. So every path and CPU reads the same values, and the rest is the F16 cache's
/// arithmetic.
#[derive(Debug, Clone, Copy)]
pub enum Cache<'a> {
    /// F16 bits.
    F16(View<'a, u16>),
    /// bfloat16 bits.
    BF16(View<'a, u16>),
    /// F32 values.
    F32(View<'a, f32>),
    /// `Q8_0` blocks: an F16 scale, 32 signed bytes.
    Q8_0(View<'a, u8>),
    /// `Q4_0` blocks: an F16 scale, 32 four-bit values less 8 (values 0–15 in the low
    /// nibbles, 16–31 in the high ones).
    Q4_0(View<'a, u8>),
    /// `Q4_1` blocks: an F16 scale and minimum, 32 four-bit values (nibbles as `Q4_0`'s).
    Q4_1(View<'a, u8>),
    /// `Q5_0` blocks: an F16 scale, 32 fifth bits (a little-endian word), 32 four-bit values
    /// (as `Q4_0`'s); values less 16.
    Q5_0(View<'a, u8>),
    /// `Q5_1` blocks: an F16 scale and minimum, then `Q5_0`'s bits without the offset.
    Q5_1(View<'a, u8>),
    /// `IQ4_NL` blocks: an F16 scale, 32 four-bit indices (as `Q4_0`'s nibbles) into ggml's
    /// table of 16 signed bytes.
    IQ4NL(View<'a, u8>),
}

/// Block `block`'s F16 at byte `at`, as F32.
#[inline]
fn half(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// A KV cache's block format: a block's value `j` is `d · n_j`, or `d · n_j + m` with a
/// minimum. A trait with always-inlined methods, not closures: LLVM left a closure giving
/// `Q8_0`'s integers out of line, and its result, written to the stack and read back as
/// vectors, stalled the conversion (a fifth of a decode step's time at a 1439-token context).
trait BlockFormat {
    /// Bytes per block.
    const BYTES: usize;
    /// The block's `(d, m)`.
    fn scales(block: &[u8]) -> (f32, Option<f32>);
    /// The block's integers `n`, in value order.
    fn integers(block: &[u8]) -> [i8; 32];
}

/// The block formats, by ggml's names.
struct Q80;
struct Q40;
struct Q41;
struct Q50;
struct Q51;
struct IQ4NL;

/// `impl BlockFormat` for a format: its bytes, its scales and its integers.
macro_rules! block_format {
    ($t:ty, $bytes:expr, |$b:ident| $scales:expr, $integers:block) => {
        impl BlockFormat for $t {
            const BYTES: usize = $bytes;
            #[allow(clippy::inline_always)] // per block in the conversion
            #[inline(always)]
            fn scales($b: &[u8]) -> (f32, Option<f32>) {
                $scales
            }
            #[allow(clippy::inline_always)] // per block in the conversion
            #[inline(always)]
            fn integers($b: &[u8]) -> [i8; 32] $integers
        }
    };
}

block_format!(Q80, Cache::Q8_0_BYTES, |b| (half(b, 0), None), {
    let q: &[u8; 32] = b[2..34].try_into().expect("32 bytes");
    q.map(u8::cast_signed)
});
block_format!(Q40, Cache::Q4_0_BYTES, |b| (half(b, 0), None), {
    nibbles(b, 2, 0).map(|n| n - 8)
});
block_format!(
    Q41,
    Cache::Q4_1_BYTES,
    |b| (half(b, 0), Some(half(b, 2))),
    { nibbles(b, 4, 0) }
);
block_format!(Q50, Cache::Q5_0_BYTES, |b| (half(b, 0), None), {
    nibbles(b, 6, fifth_bits(b, 2)).map(|n| n - 16)
});
block_format!(
    Q51,
    Cache::Q5_1_BYTES,
    |b| (half(b, 0), Some(half(b, 2))),
    { nibbles(b, 8, fifth_bits(b, 4)) }
);
block_format!(IQ4NL, Cache::IQ4_NL_BYTES, |b| (half(b, 0), None), {
    crate::matmul::iq4_block(b[2..18].try_into().expect("16 bytes"))
});

/// The values of row `(i1, i2, i3)` of `view`, `F`'s blocks, into `out` (a whole number of
/// blocks): `d · n`, or `d · n + m` with a minimum. `d · n` is exact in F32, so `+ m` is the
/// one rounding.
#[allow(clippy::inline_always)] // per cell in the block conversion
#[inline(always)]
fn blocks_into<F: BlockFormat>(out: &mut [f32], view: &View<'_, u8>, [i1, i2, i3]: [usize; 3]) {
    let bytes = view.row(i1, i2, i3, out.len() / Cache::BLOCK_VALUES * F::BYTES);
    for (out, block) in out
        .chunks_exact_mut(Cache::BLOCK_VALUES)
        .zip(bytes.chunks_exact(F::BYTES))
    {
        let (d, m) = F::scales(block);
        let n = F::integers(block);
        // Fixed lengths: LLVM turns the loops into vector conversions.
        let out: &mut [f32; 32] = out.try_into().expect("a block");
        match m {
            None => {
                for i in 0..32 {
                    out[i] = d * f32::from(n[i]);
                }
            }
            Some(m) => {
                for i in 0..32 {
                    out[i] = d * f32::from(n[i]) + m;
                }
            }
        }
    }
}

/// A block's 16 bytes of nibbles at `at` as values 0–15 (low nibbles) and 16–31 (high ones),
/// each plus its fifth bit from the word `high` (bit `i` for value `i`) times 16.
#[allow(clippy::inline_always, clippy::cast_possible_wrap)] // per block; below 32
#[inline(always)]
fn nibbles(block: &[u8], at: usize, high: u32) -> [i8; 32] {
    let q: &[u8; 16] = block[at..at + 16].try_into().expect("16 bytes");
    std::array::from_fn(|i| {
        let nibble = if i < 16 { q[i] & 0x0f } else { q[i - 16] >> 4 };
        (nibble | (((high >> i) & 1) as u8) << 4) as i8
    })
}

/// A `Q5_0`/`Q5_1` block's word of fifth bits at byte `at`.
#[inline]
fn fifth_bits(block: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"))
}

impl Cache<'_> {
    /// Values per block of a quantized cache.
    pub const BLOCK_VALUES: usize = 32;
    /// Bytes per `Q8_0` block.
    pub const Q8_0_BYTES: usize = 34;
    /// Bytes per `Q4_0` block.
    pub const Q4_0_BYTES: usize = 18;
    /// Bytes per `Q4_1` block.
    pub const Q4_1_BYTES: usize = 20;
    /// Bytes per `Q5_0` block.
    pub const Q5_0_BYTES: usize = 22;
    /// Bytes per `Q5_1` block.
    pub const Q5_1_BYTES: usize = 24;
    /// Bytes per `IQ4_NL` block.
    pub const IQ4_NL_BYTES: usize = 18;

    /// Row `(i1, i2, i3)`'s `out.len()` values, as F32 (see [`Cache`] for how each type's
    /// values are read).
    #[allow(clippy::inline_always)] // per cell in the block conversion
    #[inline(always)]
    fn row_into(&self, i1: usize, i2: usize, i3: usize, out: &mut [f32]) {
        let n = out.len();
        let at = [i1, i2, i3];
        match self {
            Cache::F16(view) => convert(out, view.row(i1, i2, i3, n)),
            Cache::BF16(view) => {
                for (x, &b) in out.iter_mut().zip(view.row(i1, i2, i3, n)) {
                    *x = f32::from_bits(u32::from(b) << 16);
                }
            }
            Cache::F32(view) => out.copy_from_slice(view.row(i1, i2, i3, n)),
            Cache::Q8_0(view) => blocks_into::<Q80>(out, view, at),
            Cache::Q4_0(view) => blocks_into::<Q40>(out, view, at),
            Cache::Q4_1(view) => blocks_into::<Q41>(out, view, at),
            Cache::Q5_0(view) => blocks_into::<Q50>(out, view, at),
            Cache::Q5_1(view) => blocks_into::<Q51>(out, view, at),
            Cache::IQ4NL(view) => blocks_into::<IQ4NL>(out, view, at),
        }
    }

    /// Whether rows of `d` values fit this cache's layout (whole blocks).
    pub fn holds(&self, d: usize) -> bool {
        matches!(self, Cache::F16(_) | Cache::BF16(_) | Cache::F32(_))
            || d.is_multiple_of(Self::BLOCK_VALUES)
    }
}

/// One `FLASH_ATTN_EXT`: queries F32, keys and values F16 (as bits) or quantized, mask F16
/// (as bits).
#[derive(Debug, Clone, Copy)]
pub struct Attention<'a> {
    /// The sizes.
    pub shape: Shape,
    /// The scalar parameters.
    pub params: Params,
    /// Queries.
    pub q: View<'a, f32>,
    /// Keys.
    pub k: Cache<'a>,
    /// Values.
    pub v: Cache<'a>,
    /// The mask (F16 bits), if any.
    pub mask: Option<View<'a, u16>>,
    /// One logit per query head, joined to every row's softmax (attention sinks).
    pub sinks: Option<&'a [f32]>,
}

/// What a thread works on: a tile of rows of one stream, for a run of query heads that read
/// the same key and value heads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unit {
    stream: usize,
    heads: Range<usize>,
    rows: Range<usize>,
}

impl Attention<'_> {
    /// Whether the shape is one this kernel computes (the caller leaves others to ggml).
    pub fn supported(shape: &Shape) -> bool {
        let divides = |a: usize, b: usize| b != 0 && a.is_multiple_of(b);
        shape.dk > 0
            && shape.dv > 0
            && divides(shape.heads, shape.k_heads)
            && divides(shape.heads, shape.v_heads)
            && divides(shape.streams, shape.k_streams)
            && divides(shape.streams, shape.v_streams)
            && shape.mask_heads > 0
            && shape.mask_streams > 0
    }

    /// Computes thread `ith`'s share (of `nth`) and hands each finished output row to `out`:
    /// its index among the `streams × rows × heads` rows of width `dv` (ggml's permuted
    /// layout) and its values.
    ///
    /// # Panics
    ///
    /// When a quantized cache's rows are not whole blocks ([`Cache::holds`]).
    pub fn run(&self, ith: usize, nth: usize, out: &mut dyn FnMut(usize, &[f32])) {
        assert!(
            self.k.holds(self.shape.dk) && self.v.holds(self.shape.dv),
            "a quantized KV cache's rows must be whole blocks of 32 values"
        );
        let slopes: Vec<f32> = (0..self.shape.heads).map(|h| self.slope(h)).collect();
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            for unit in self.units(nth).into_iter().skip(ith).step_by(nth.max(1)) {
                self.unit(&unit, &slopes[unit.heads.clone()], &mut scratch, out);
            }
        });
    }

    /// The units of work for `nth` threads, in a fixed order. Query heads that share their
    /// key and value heads go together, so that a block is converted once for all of them;
    /// so do the rows of one sequence (see [`Attention::segments`]), in tiles of up to
    /// [`TILE`]. Where that leaves fewer than two units per thread, tiles are split further
    /// (evenly) so that the threads get even shares. However the work is cut, a row's
    /// arithmetic is the same.
    fn units(&self, nth: usize) -> Vec<Unit> {
        let s = &self.shape;
        let group = s.heads / s.k_heads;
        let same_groups = s.heads / s.v_heads == group;
        let per_head = group == 1 || !same_groups || s.mask_heads > 1;
        let width = if per_head { 1 } else { group };
        let runs = s.heads / width;
        let segments: Vec<(usize, Range<usize>)> = (0..s.streams)
            .flat_map(|stream| self.segments(stream).into_iter().map(move |r| (stream, r)))
            .collect();
        let tiles: usize = segments.iter().map(|(_, r)| r.len().div_ceil(TILE)).sum();
        let split = (2 * nth).div_ceil((tiles * runs).max(1)).max(1);
        let mut units = Vec::new();
        for (stream, rows) in &segments {
            let pieces = (rows.len().div_ceil(TILE) * split).min(rows.len());
            for run in 0..runs {
                for piece in 0..pieces {
                    let at = |i: usize| rows.start + rows.len() * i / pieces;
                    units.push(Unit {
                        stream: *stream,
                        heads: run * width..(run + 1) * width,
                        rows: at(piece)..at(piece + 1),
                    });
                }
            }
        }
        units
    }

    /// The rows of `stream` cut where a row's first open cell (under head 0's mask) changes:
    /// the rows of one sequence see nested keys and share their conversion, rows of
    /// different sequences share no key, so a tile of them would only make its thread's
    /// share larger. Without a mask every row sees every cell: one segment.
    fn segments(&self, stream: usize) -> Vec<Range<usize>> {
        let (rows, n_cells) = (self.shape.rows, self.shape.cells);
        // A row's first block starts at its first open cell (`n_cells` when none is open).
        let (mut cells, mut marks) = ([0; BLOCK], [0.0; BLOCK]);
        let first: Vec<usize> = (0..rows)
            .map(|row| {
                let mask = self.mask_row(row, 0, stream);
                let n = next_block(mask, n_cells, &mut 0, &mut cells, &mut marks);
                if n == 0 {
                    n_cells
                } else {
                    cells[0]
                }
            })
            .collect();
        let mut segments = Vec::new();
        let mut start = 0;
        for row in 1..=rows {
            if row == rows || first[row] != first[start] {
                segments.push(start..row);
                start = row;
            }
        }
        segments
    }

    /// The `ALiBi` slope of query head `h` (1 without a bias), as ggml computes it.
    #[allow(clippy::cast_precision_loss)] // head counts are small
    fn slope(&self, h: usize) -> f32 {
        let max_bias = self.params.max_bias;
        if max_bias <= 0.0 {
            return 1.0;
        }
        let n_head_log2 = 1usize << self.shape.heads.max(1).ilog2();
        let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
        let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
        if h < n_head_log2 {
            m0.powf((h + 1) as f32)
        } else {
            m1.powf((2 * (h - n_head_log2) + 1) as f32)
        }
    }

    /// Row `row`'s mask for head `h` of stream `stream` (`None` without a mask).
    fn mask_row(&self, row: usize, h: usize, stream: usize) -> Option<&[u16]> {
        let s = &self.shape;
        self.mask
            .map(|m| m.row(row, h % s.mask_heads, stream % s.mask_streams, s.cells))
    }

    /// One unit of work; `slopes` are its heads' `ALiBi` slopes.
    fn unit(
        &self,
        unit: &Unit,
        slopes: &[f32],
        scratch: &mut Scratch,
        out: &mut dyn FnMut(usize, &[f32]),
    ) {
        let s = &self.shape;
        let (dk, dv) = (s.dk, s.dv);
        let n_rows = unit.rows.len();
        let n_heads = unit.heads.len();
        scratch.reset(n_rows, n_heads, dk, dv);
        let h0 = unit.heads.start;
        let (kh, ks) = (
            h0 / (s.heads / s.k_heads),
            unit.stream / (s.streams / s.k_streams),
        );
        let (vh, vs) = (
            h0 / (s.heads / s.v_heads),
            unit.stream / (s.streams / s.v_streams),
        );
        let mask_rows: Vec<Option<&[u16]>> = unit
            .rows
            .clone()
            .map(|row| self.mask_row(row, h0, unit.stream))
            .collect();
        while scratch.next_blocks(&mask_rows, s.cells) {
            let Scratch {
                cells,
                marks,
                counts,
                maxes,
                sums,
                acc,
                kt,
                vb,
                kr,
                cached,
                ..
            } = &mut *scratch;
            cached.clear();
            // The last rows of a causal tile see the most keys: converting their block first
            // lets the earlier rows reuse it (their keys are its prefix).
            for r in (0..n_rows).rev() {
                let n = counts[r];
                if n == 0 {
                    continue;
                }
                let row_cells = &cells[r * BLOCK..r * BLOCK + n];
                if !(n <= cached.len() && cached[..n] == *row_cells) {
                    convert_block(
                        row_cells,
                        |c, out| self.k.row_into(c, kh, ks, out),
                        |c, out| self.v.row_into(c, vh, vs, out),
                        dk,
                        dv,
                        kt,
                        vb,
                        kr,
                    );
                    cached.clear();
                    cached.extend_from_slice(row_cells);
                }
                let row = unit.rows.start + r;
                let row_marks: &[f32; BLOCK] = marks[r * BLOCK..(r + 1) * BLOCK]
                    .try_into()
                    .expect("a block of marks");
                let block = Block {
                    marks: row_marks,
                    n,
                    params: self.params,
                    kt,
                    vb,
                    dv,
                };
                let mut state = State {
                    maxes: &mut maxes[r * n_heads..(r + 1) * n_heads],
                    sums: &mut sums[r * n_heads..(r + 1) * n_heads],
                    acc: &mut acc[r * n_heads * dv..(r + 1) * n_heads * dv],
                };
                block.update_heads(
                    |i| self.q.row(row, h0 + i, unit.stream, dk),
                    slopes,
                    &mut state,
                );
            }
        }
        let Scratch {
            maxes, sums, acc, ..
        } = scratch;
        for r in 0..n_rows {
            let row = unit.rows.start + r;
            for (j, h) in unit.heads.clone().enumerate() {
                let at = r * n_heads + j;
                let values = &mut acc[at * dv..(at + 1) * dv];
                let sink = self.sinks.map(|sinks| sinks[h]);
                finish(values, maxes[at], sums[at], sink);
                out((unit.stream * s.rows + row) * s.heads + h, values);
            }
        }
    }
}

/// Joins a row's sink logit (if any) to its softmax and divides the values by the sum.
fn finish(values: &mut [f32], max: f32, mut sum: f32, sink: Option<f32>) {
    if let Some(sink) = sink {
        if sink > max {
            let ms = (max - sink).exp();
            for x in values.iter_mut() {
                *x *= ms;
            }
            sum = sum * ms + 1.0;
        } else {
            sum += (sink - max).exp();
        }
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for x in values.iter_mut() {
        *x *= inv;
    }
}

/// Per-thread buffers, kept between ops.
#[derive(Debug, Default)]
struct Scratch {
    /// Per row: the next cell its mask has not been read at.
    cursor: Vec<usize>,
    /// Per row: the cells of its current block, and their mask values.
    cells: Vec<usize>,
    marks: Vec<f32>,
    /// Per row: how many keys its current block has.
    counts: Vec<usize>,
    /// Per row and head: the running maximum, the running sum and the value accumulator.
    maxes: Vec<f32>,
    sums: Vec<f32>,
    acc: Vec<f32>,
    /// The converted block: keys transposed (`dk × BLOCK`), values (`BLOCK × dv`), its cells.
    kt: Vec<f32>,
    vb: Vec<f32>,
    cached: Vec<usize>,
    /// The block's keys in rows (`BLOCK × dk`), before they are transposed.
    kr: Vec<f32>,
}

impl Scratch {
    /// Moves every row to its next block of open cells; false when no row has one left.
    fn next_blocks(&mut self, mask_rows: &[Option<&[u16]>], n_cells: usize) -> bool {
        let mut any = false;
        for (r, mask) in mask_rows.iter().enumerate() {
            self.counts[r] = next_block(
                *mask,
                n_cells,
                &mut self.cursor[r],
                &mut self.cells[r * BLOCK..(r + 1) * BLOCK],
                &mut self.marks[r * BLOCK..(r + 1) * BLOCK],
            );
            any |= self.counts[r] > 0;
        }
        any
    }

    fn reset(&mut self, rows: usize, heads: usize, dk: usize, dv: usize) {
        let fill = |v: &mut Vec<f32>, n: usize, x: f32| {
            v.clear();
            v.resize(n, x);
        };
        self.cursor.clear();
        self.cursor.resize(rows, 0);
        self.cells.clear();
        self.cells.resize(rows * BLOCK, 0);
        fill(&mut self.marks, rows * BLOCK, 0.0);
        self.counts.clear();
        self.counts.resize(rows, 0);
        fill(&mut self.maxes, rows * heads, f32::NEG_INFINITY);
        fill(&mut self.sums, rows * heads, 0.0);
        fill(&mut self.acc, rows * heads * dv, 0.0);
        // The converted block is written before it is read (`convert_block`): no need to clear.
        self.kt.resize(dk * BLOCK, 0.0);
        self.vb.resize(BLOCK * dv, 0.0);
        self.kr.resize(BLOCK * dk, 0.0);
        self.cached.clear();
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Fills `cells` and `marks` with the next (up to [`BLOCK`]) cells `mask` leaves open from
/// `cursor` on, and their mask values; returns how many. Without a mask every cell is open.
fn next_block(
    mask: Option<&[u16]>,
    n_cells: usize,
    cursor: &mut usize,
    cells: &mut [usize],
    marks: &mut [f32],
) -> usize {
    let mut n = 0;
    while n < BLOCK && *cursor < n_cells {
        let c = *cursor;
        // Take a run of open cells with no bias at once (a causal mask's past; every cell
        // without a mask), as far as it goes: each cell is looked at once.
        let room = (BLOCK - n).min(n_cells - c);
        let run = mask.map_or(room, |mask| {
            mask[c..c + room]
                .iter()
                .take_while(|&&bits| bits == 0)
                .count()
        });
        if run > 0 {
            for (i, (cell, mark)) in cells[n..n + run]
                .iter_mut()
                .zip(&mut marks[n..n + run])
                .enumerate()
            {
                *cell = c + i;
                *mark = 0.0;
            }
            n += run;
            *cursor += run;
            continue;
        }
        // Without a mask the run above took the whole room.
        let Some(mask) = mask else { break };
        // Skip 64 closed cells at a time (the tail of a causal mask, other sequences' cells).
        if c.is_multiple_of(64) && c + 64 <= n_cells {
            let open = mask[c..c + 64]
                .iter()
                .fold(0u16, |any, &bits| any | (bits ^ F16_NEG_INF));
            if open == 0 {
                *cursor += 64;
                continue;
            }
        }
        let bits = mask[c];
        *cursor += 1;
        if bits != F16_NEG_INF {
            cells[n] = c;
            marks[n] = f16_to_f32(bits);
            n += 1;
        }
    }
    n
}

/// Converts the keys (transposed: `kt[d * BLOCK + j]`) and values (`vb[j * dv + d]`) of
/// `cells` to F32; the key columns past them are zeroed. `kr` holds the keys in rows on the
/// way.
///
/// The keys are converted row by row like the values, then transposed in 8×8 tiles in
/// registers ([`transpose8`]). Writing each converted element to its column one at a time
/// cost six times the values' conversion.
#[allow(clippy::too_many_arguments)]
fn convert_block(
    cells: &[usize],
    key: impl Fn(usize, &mut [f32]),
    value: impl Fn(usize, &mut [f32]),
    dk: usize,
    dv: usize,
    kt: &mut [f32],
    vb: &mut [f32],
    kr: &mut [f32],
) {
    let n = cells.len();
    let filled = n.next_multiple_of(8);
    for (j, &cell) in cells.iter().enumerate() {
        key(cell, &mut kr[j * dk..(j + 1) * dk]);
        value(cell, &mut vb[j * dv..(j + 1) * dv]);
    }
    kr[n * dk..filled * dk].fill(0.0);
    // Whole tiles of eight dimensions, then the dimensions past them (a head size that is not
    // a multiple of 8) one at a time.
    let tiled = dk - dk % 8;
    for jb in (0..filled).step_by(8) {
        for db in (0..tiled).step_by(8) {
            let rows: [[f32; 8]; 8] = std::array::from_fn(|i| {
                let at = (jb + i) * dk + db;
                kr[at..at + 8].try_into().expect("eight dimensions")
            });
            for (d, column) in transpose8(rows).iter().enumerate() {
                let at = (db + d) * BLOCK + jb;
                kt[at..at + 8].copy_from_slice(column);
            }
        }
        for d in tiled..dk {
            for j in jb..jb + 8 {
                kt[d * BLOCK + j] = kr[j * dk + d];
            }
        }
    }
    for d in 0..dk {
        kt[d * BLOCK + filled..(d + 1) * BLOCK].fill(0.0);
    }
}

/// `out[i]` = `bits[i]` as F32 (exact): eight at a time with F16C where the build has it.
#[inline]
fn convert(out: &mut [f32], bits: &[u16]) {
    let mut outs = out.chunks_exact_mut(8);
    let mut ins = bits.chunks_exact(8);
    for (x, b) in (&mut outs).zip(&mut ins) {
        x.copy_from_slice(&crate::matmul::f16x8(b.try_into().expect("eight values")));
    }
    for (x, &b) in outs.into_remainder().iter_mut().zip(ins.remainder()) {
        *x = f16_to_f32(b);
    }
}

/// An 8×8 tile transposed: row `i` of the result is column `i` of `rows` (`wide`'s unpack,
/// shuffle and lane-swap network with AVX).
#[inline]
fn transpose8(rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
    wide::f32x8::transpose(rows.map(wide::f32x8::new)).map(wide::f32x8::to_array)
}

/// A converted block as one row sees it: its keys' mask values, how many keys, the values.
struct Block<'a> {
    marks: &'a [f32; BLOCK],
    n: usize,
    params: Params,
    kt: &'a [f32],
    vb: &'a [f32],
    dv: usize,
}

/// The running softmax state of consecutive heads of one row: maxima, sums, accumulators.
struct State<'a> {
    maxes: &'a mut [f32],
    sums: &'a mut [f32],
    acc: &'a mut [f32],
}

impl Block<'_> {
    /// Updates every head of one row (queries by `q`), up to three at a time, which share
    /// each load of a key or value.
    fn update_heads<'q>(
        &self,
        q: impl Fn(usize) -> &'q [f32],
        slopes: &[f32],
        state: &mut State<'_>,
    ) {
        let heads = slopes.len();
        let mut j = 0;
        while j < heads {
            let mut part = State {
                maxes: &mut state.maxes[j..],
                sums: &mut state.sums[j..],
                acc: &mut state.acc[j * self.dv..],
            };
            let slopes = &slopes[j..];
            j += match heads - j {
                1 => self.update::<1>([q(j)], slopes, &mut part),
                2 => self.update::<2>([q(j), q(j + 1)], slopes, &mut part),
                _ => self.update::<3>([q(j), q(j + 1), q(j + 2)], slopes, &mut part),
            };
        }
    }

    /// Scores, the online softmax and the value accumulation of `N` heads of one row (their
    /// queries `qs`, their slopes first in `slopes`); returns `N`. Each head's arithmetic is
    /// the same whatever `N`: the heads only share the loads of the keys and values.
    fn update<const N: usize>(
        &self,
        qs: [&[f32]; N],
        slopes: &[f32],
        state: &mut State<'_>,
    ) -> usize {
        let mut s = scores::<N>(qs, self.kt);
        let mut p = [[0f32; BLOCK]; N];
        for h in 0..N {
            let acc = &mut state.acc[h * self.dv..(h + 1) * self.dv];
            self.softmax(
                &mut s[h],
                slopes[h],
                &mut state.maxes[h],
                &mut state.sums[h],
                acc,
                &mut p[h],
            );
        }
        let live: [bool; N] = std::array::from_fn(|h| state.maxes[h] != f32::NEG_INFINITY);
        let acc = &mut state.acc[..N * self.dv];
        if live.iter().all(|&x| x) {
            accumulate_all::<N>(acc, &p, self.n, self.vb, self.dv);
        } else {
            // A head whose every key so far is masked by an infinite bias adds nothing.
            for (h, acc) in acc.chunks_exact_mut(self.dv).enumerate() {
                if live[h] {
                    accumulate_all::<1>(acc, &[p[h]], self.n, self.vb, self.dv);
                }
            }
        }
        N
    }

    /// One head's online softmax over the block: scales and masks its scores, rescales its
    /// accumulator and sum to a new maximum, and leaves the block's weights in `p`.
    fn softmax(
        &self,
        s: &mut [f32; BLOCK],
        slope: f32,
        max: &mut f32,
        sum: &mut f32,
        acc: &mut [f32],
        p: &mut [f32; BLOCK],
    ) {
        let params = self.params;
        // Lanes past the block's keys become −∞ (their exponential is exactly 0); the loops
        // run over whole blocks, branch-free, so that they vectorise.
        if params.softcap == 0.0 {
            for x in s.iter_mut() {
                *x *= params.scale;
            }
        } else {
            let scale = params.scale / params.softcap;
            for x in s.iter_mut() {
                *x = params.softcap * (*x * scale).tanh();
            }
        }
        for (l, (x, &mark)) in s.iter_mut().zip(self.marks).enumerate() {
            let biased = slope.mul_add(mark, *x);
            *x = if l < self.n {
                biased
            } else {
                f32::NEG_INFINITY
            };
        }
        let mut lane_max = [f32::NEG_INFINITY; LANES];
        for chunk in s.chunks_exact(LANES) {
            for l in 0..LANES {
                lane_max[l] = if chunk[l] > lane_max[l] {
                    chunk[l]
                } else {
                    lane_max[l]
                };
            }
        }
        let block_max = lane_max
            .iter()
            .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        if block_max > *max {
            let correction = (*max - block_max).exp();
            for x in acc.iter_mut() {
                *x *= correction;
            }
            *sum *= correction;
            *max = block_max;
        }
        if *max == f32::NEG_INFINITY {
            return;
        }
        for (p, &x) in p.iter_mut().zip(s.iter()) {
            *p = exp_nonpositive(x - *max);
        }
        let mut part = [0f32; LANES];
        for chunk in p.chunks_exact(LANES) {
            for l in 0..LANES {
                part[l] += chunk[l];
            }
        }
        *sum += crate::tree_sum(part);
    }
}

/// The block's dot products `q · k_j` for `N` queries, each summed in key-dimension order.
/// Four 16-lane accumulators per query, kept apart so that they stay in registers; the
/// queries share each load of a key column.
#[inline]
fn scores<const N: usize>(qs: [&[f32]; N], kt: &[f32]) -> [[f32; BLOCK]; N] {
    let mut a = [[[0f32; LANES]; 4]; N];
    let dk = qs[0].len();
    for d in 0..dk {
        let col: &[f32; BLOCK] = kt[d * BLOCK..(d + 1) * BLOCK]
            .try_into()
            .expect("a block column");
        for h in 0..N {
            let qd = qs[h][d];
            let [a0, a1, a2, a3] = &mut a[h];
            for l in 0..LANES {
                a0[l] = qd.mul_add(col[l], a0[l]);
                a1[l] = qd.mul_add(col[LANES + l], a1[l]);
                a2[l] = qd.mul_add(col[2 * LANES + l], a2[l]);
                a3[l] = qd.mul_add(col[3 * LANES + l], a3[l]);
            }
        }
    }
    let mut s = [[0f32; BLOCK]; N];
    for (out, lanes) in s.iter_mut().zip(&a) {
        for (chunk, lane) in out.chunks_exact_mut(LANES).zip(lanes) {
            chunk.copy_from_slice(lane);
        }
    }
    s
}

/// [`accumulate`] over every value dimension, in the widest lane groups `dv` divides into (64,
/// 16 or 8), one dimension at a time past the last whole group of 8. Each dimension's sum is
/// its own chain in key order, so the grouping changes no bits.
fn accumulate_all<const N: usize>(
    acc: &mut [f32],
    p: &[[f32; BLOCK]; N],
    n: usize,
    vb: &[f32],
    dv: usize,
) {
    if dv.is_multiple_of(64) {
        accumulate::<N, 64>(acc, p, n, vb, dv, 0..dv);
    } else if dv.is_multiple_of(LANES) {
        accumulate::<N, LANES>(acc, p, n, vb, dv, 0..dv);
    } else {
        let grouped = dv - dv % 8;
        accumulate::<N, 8>(acc, p, n, vb, dv, 0..grouped);
        accumulate::<N, 1>(acc, p, n, vb, dv, grouped..dv);
    }
}

/// `acc_h += Σ_j p_h[j] · vb[j]` for `N` heads (their accumulators one after another in
/// `acc`), in key order, over the value dimensions `dims` (a multiple of `W` long), `W` lanes
/// of each at a time (held in registers); the heads share each load of a value row.
fn accumulate<const N: usize, const W: usize>(
    acc: &mut [f32],
    p: &[[f32; BLOCK]; N],
    n: usize,
    vb: &[f32],
    dv: usize,
    dims: Range<usize>,
) {
    for g in dims.step_by(W) {
        let mut a: [[f32; W]; N] = std::array::from_fn(|h| {
            acc[h * dv + g..h * dv + g + W]
                .try_into()
                .expect("a lane group")
        });
        for j in 0..n {
            let v: &[f32; W] = vb[j * dv + g..j * dv + g + W]
                .try_into()
                .expect("a lane group");
            for h in 0..N {
                let pj = p[h][j];
                for l in 0..W {
                    a[h][l] = pj.mul_add(v[l], a[h][l]);
                }
            }
        }
        for (h, lanes) in a.iter().enumerate() {
            acc[h * dv + g..h * dv + g + W].copy_from_slice(lanes);
        }
    }
}

/// `e^x` for `x ≤ 0` (−∞ gives 0), within 2 ulp: Cephes' polynomial after a reduction by
/// `ln 2`, written without branches so that lanes vectorise.
#[inline]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // `whole` is in −126..=0
fn exp_nonpositive(arg: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2^23: adding it rounds to an integer (ties to even), kept in the low bits.
    const ROUND: f32 = 12_582_912.0;
    const LOW: f32 = -87.0;
    let under = arg < LOW;
    let clamped = arg.max(LOW);
    let shifted = clamped.mul_add(LOG2E, ROUND);
    let whole = shifted - ROUND;
    let rest = whole.mul_add(-LN2_HI, clamped);
    let rest = whole.mul_add(-LN2_LO, rest);
    let mut poly = 1.987_569_1e-4f32;
    poly = poly.mul_add(rest, 1.398_199_9e-3);
    poly = poly.mul_add(rest, 8.333_452e-3);
    poly = poly.mul_add(rest, 4.166_579_6e-2);
    poly = poly.mul_add(rest, 0.166_666_65);
    poly = poly.mul_add(rest, 0.5);
    let poly = poly.mul_add(rest * rest, rest) + 1.0;
    let power = f32::from_bits(((whole as i32 + 127) as u32) << 23);
    if under {
        0.0
    } else {
        poly * power
    }
}

/// An F16 (its bits) as F32, exactly: normal, subnormal, infinite and NaN values.
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let rest = u32::from(bits & 0x7FFF);
    // Shifted into an F32's exponent and mantissa, the value is 2^-112 of the F16's (exact for
    // subnormals too, the multiplication by 2^112 is exact); infinities and NaNs get the F32's
    // all-ones exponent.
    let magnitude = if rest >= 0x7C00 {
        (rest << 13) | 0x7F80_0000
    } else {
        (f32::from_bits(rest << 13) * f32::from_bits(0x7780_0000)).to_bits()
    };
    f32::from_bits(sign | magnitude)
}

#[cfg(test)]
mod tests;
