//! How the kernel reads each weight type: every type is read in 32-value blocks, each with a
//! scale `d` and, for the unsigned types, a minimum `m`:
//!
//! - **signed** types give value `j` as `d · w_j` with `w_j` from −128 to 127 (`Q4_0`'s
//!   nibbles minus 8, `Q5_0`'s five bits minus 16, `Q8_0`'s bytes, the `IQ4` types' table
//!   entries), and the kernel's sign trick keeps AVX2's pair sums exact;
//! - **unsigned** types give it as `d · u_j + m` with `u_j` from 0 to 31 (`Q4_1`, `Q5_1`, and
//!   the K-quants' sub-blocks).
//!
//! A 32-value type's `d` and `m` are floats ([`Layout::headers`]); a super-block type gives
//! each sub-block's scale and minimum as integers ([`Layout::numbers`]) and the super-block's
//! `d` and `−dmin` as floats ([`Layout::super_scales`]), as the kernel sums a super-block in
//! integers. Each layout has a scalar reader ([`Layout::values`], the definition) and, with the
//! vector paths, a paired reader ([`Layout::pair`]) and for some super-block types a block
//! reader ([`Layout::blocks`]) that the tests hold to it.

// Block fields by ggml's names (`qs`, `qh`, `d`, `dmin`).
#![allow(clippy::many_single_char_names)]

#[cfg(vector)]
use safe_arch::m256i;

#[cfg(vector)]
use super::DIRECT_ROWS;
use super::{f16x8, QK, TILE_W};

/// One weight type's block layout.
pub(super) trait Layout {
    /// Values per ggml block (32, or 256 for super-blocks).
    const VALUES: usize;
    /// A super-block type (256 values): the kernel sums each super-block in integers, with
    /// its sub-blocks' integer scales, and takes one float step per super-block.
    const SUPER: bool = Self::VALUES > QK;
    /// Bytes per ggml block.
    const BYTES: usize;
    /// Signed values without minimums, or unsigned ones with them.
    const SIGNED: bool;
    /// A scale per 16 values (a super-block type): [`Numbers::block`]'s second number is then
    /// the scale of values 16–31, and an unsigned type's minimums (also per 16 values) come
    /// from [`Numbers::split_minimums`].
    const SPLIT: bool = false;
    /// A signed type stored with a bias: values `w_j = u_j − BIAS` with `u_j` from 0 to 63.
    /// [`Layout::pair`] then gives `u_j`, which the vector paths multiply as unsigned bytes
    /// and correct by `BIAS` times the inputs' sum (see the kernel's `vector` module); 0: it
    /// gives `w_j`.
    #[cfg_attr(not(vector), allow(dead_code))] // read by the vector paths only
    const BIAS: u8 = 0;

    /// 32-value block `b`'s values `w_j` (or `u_j`), in value order (scalar code).
    fn values(row: &[u8], b: usize) -> [i8; QK];

    /// A 32-value type's scales and minimums of blocks `b` (even) and `b + 1` of the rows `w`
    /// (zeros past the row): `(d_b, m_b, d_b+1, m_b+1)`, each per row; minimums are zeros for
    /// the signed types. (A super-block type's numbers are [`Layout::super_scales`] and
    /// [`Layout::numbers`].)
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn headers(_w: &[&[u8]; TILE_W], _b: usize, _blocks: usize) -> [[f32; TILE_W]; 4] {
        [[0.0; TILE_W]; 4]
    }

    /// A super-block type's float numbers for the super-block holding 32-value block `b` of
    /// the rows `w`: `(d, −dmin)`, each per row (`−dmin` zero for the signed types).
    #[allow(clippy::inline_always)] // as `headers`
    #[inline(always)]
    fn super_scales(_w: &[&[u8]; TILE_W], _b: usize) -> [[f32; TILE_W]; 2] {
        [[0.0; TILE_W]; 2]
    }

    /// A super-block type's integer scales and minimums of super-block `s` of `row` (see
    /// [`Numbers`]). Values of a sub-block `j` are `d · sc_j · w` (signed types) or
    /// `d · sc_j · u − dmin · m_j` (unsigned ones).
    fn numbers(_row: &[u8], _s: usize) -> Numbers {
        Numbers::default()
    }

    /// [`Layout::numbers`] of super-block `s` of the rows `w`, widened to 16-bit lanes: per
    /// row `(scales, minimums)`, each [`Numbers`] field's sixteen bytes as sixteen lanes (the
    /// decode path multiplies them by 16-bit sums). A layout may compute all four rows'
    /// together; the lanes are the same.
    #[cfg(vector)]
    #[allow(clippy::inline_always)] // once per super-block in the decode path's loop
    #[inline(always)]
    fn numbers16(w: &[&[u8]; TILE_W], s: usize) -> [(m256i, m256i); TILE_W] {
        let sixteen = |bytes: u128| {
            safe_arch::convert_to_i16_m256i_from_i8_m128i(safe_arch::m128i::from(bytes))
        };
        std::array::from_fn(|r| {
            let numbers = Self::numbers(w[r], s);
            (sixteen(numbers.scales), sixteen(numbers.minimums))
        })
    }

    /// Blocks `b` and `b + 1` of `row` (zeros past the row) in the inputs' paired layout:
    /// values 0–15 of `b` then of `b + 1`, and values 16–31 of `b` then of `b + 1`.
    #[cfg(vector)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i);

    /// A super-block type whose decode path reads whole blocks ([`Layout::blocks`]) rather
    /// than pairs.
    #[cfg(vector)]
    const NATURAL: bool = false;

    /// Input rows up to which a batch takes the vector paths' direct passes (at most
    /// [`DIRECT_ROWS`] rows each, no strip) rather than a strip, on a path whose integer sums
    /// are `vpmaddubsw`'s (AVX2) and on one with VNNI's exact sums: a strip's unpacking pays
    /// off only past it. Measured per type on the kernel bench (1536 × 1536, 4 to 12 rows,
    /// `docs/kernels.md`); the `avx512` level's limit is VNNI's.
    #[cfg(vector)]
    const DIRECT_BATCH: (usize, usize) = (DIRECT_ROWS, DIRECT_ROWS);

    /// With [`Layout::NATURAL`], 32-value blocks `b` (even) and `b + 1` of `row`, each in value
    /// order: what [`Layout::values`] gives (or `u_j` for a biased type), as bytes.
    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `headers`
    #[inline(always)]
    fn blocks(_row: &[u8], _b: usize) -> (m256i, m256i) {
        unreachable!("a natural layout reads its blocks")
    }
}

/// A super-block's integer numbers, sixteen signed bytes each (little-endian): `scales` per
/// 32-value block (bytes 0–7), or per 16 values with split scales (all sixteen), and
/// `minimums` the same way (zeros for the signed types). Integers, not arrays, so the vector
/// paths take them from registers (an array written byte by byte and read as a vector stalls
/// on the store).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Numbers {
    pub(super) scales: u128,
    pub(super) minimums: u128,
}

impl Numbers {
    /// Scale `k`.
    #[inline]
    pub(super) fn scale(&self, k: usize) -> i32 {
        byte(self.scales, k)
    }

    /// Minimum `k`.
    #[inline]
    pub(super) fn minimum(&self, k: usize) -> i32 {
        byte(self.minimums, k)
    }

    /// 32-value block `j`'s `(scale, second)`, where `second` is the minimum (an unsigned
    /// type), the scale of values 16–31 (`split`: [`Layout::SPLIT`]) or zero.
    #[inline]
    pub(super) fn block(&self, split: bool, j: usize) -> [i32; 2] {
        if split {
            [self.scale(2 * j), self.scale(2 * j + 1)]
        } else {
            [self.scale(j), self.minimum(j)]
        }
    }

    /// With split scales and minimums, 32-value block `j`'s minimums of values 0–15 and 16–31.
    #[inline]
    pub(super) fn split_minimums(&self, j: usize) -> [i32; 2] {
        [self.minimum(2 * j), self.minimum(2 * j + 1)]
    }
}

/// Signed byte `k` of `bytes`.
#[inline]
fn byte(bytes: u128, k: usize) -> i32 {
    #[allow(clippy::cast_possible_truncation)] // the byte
    i32::from(((bytes >> (8 * k)) as u8).cast_signed())
}

/// The 16 bits (an F16, or the floats' BF16) at byte `at` of `w`, little-endian.
#[inline]
pub(super) fn half_at(w: &[u8], at: usize) -> u16 {
    // One 16-bit load: two byte loads joined here become a vector of bytes where eight of
    // these build a vector (the headers), which LLVM assembles with a byte shuffle per value.
    u16::from_le_bytes(w[at..at + 2].try_into().expect("two bytes"))
}

/// The F16s at byte `at` of 32-value blocks `b` and `b + 1` (of `bytes` each) of the rows `w`,
/// as F32: `(block b's, block b + 1's)` per row, zeros past the row.
#[allow(clippy::inline_always)] // in the tile loop: measured a fifth of the product when not inlined
#[inline(always)]
fn block_halves(
    w: &[&[u8]; TILE_W],
    b: usize,
    blocks: usize,
    bytes: usize,
    at: usize,
) -> ([f32; TILE_W], [f32; TILE_W]) {
    let bits: [u16; 8] = std::array::from_fn(|i| {
        let b = b + i / TILE_W;
        if b < blocks {
            half_at(w[i % TILE_W], b * bytes + at)
        } else {
            0
        }
    });
    let d = f16x8(bits);
    (
        std::array::from_fn(|r| d[r]),
        std::array::from_fn(|r| d[TILE_W + r]),
    )
}

/// Value `j` of a 32-value block stored as 16 bytes of nibbles: the low nibble of byte `j`
/// for `j < 16`, the high nibble of byte `j − 16` after.
#[inline]
fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0F
    } else {
        qs[j - 16] >> 4
    }
}

/// The 16 bytes at `at` of 32-value block `b` (of `bytes`), or zeros past the row.
#[cfg(vector)]
#[inline]
fn sixteen(row: &[u8], b: usize, blocks: usize, bytes: usize, at: usize) -> [u8; 16] {
    if b >= blocks {
        return [0; 16];
    }
    let at = b * bytes + at;
    row[at..at + 16].try_into().expect("16 bytes")
}

/// The headers of a type with a scale (an F16 at byte 0 of each 32-value block) and no
/// minimum.
#[allow(clippy::inline_always)] // as `block_halves`
#[inline(always)]
fn scale_headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize, bytes: usize) -> [[f32; TILE_W]; 4] {
    let (d0, d1) = block_halves(w, b, blocks, bytes, 0);
    [d0, [0.0; TILE_W], d1, [0.0; TILE_W]]
}

/// Blocks `b` and `b + 1`'s 16 bytes of nibbles at byte `at` (of `bytes`-byte blocks) as
/// their paired values (zeros past the row).
#[cfg(vector)]
#[inline]
fn nibble_pair(row: &[u8], b: usize, blocks: usize, bytes: usize, at: usize) -> (m256i, m256i) {
    vector::nibbles(
        sixteen(row, b, blocks, bytes, at),
        sixteen(row, b + 1, blocks, bytes, at),
    )
}

/// The 32-bit word at byte `at` of 32-value block `b`, or zero past the row.
#[inline]
fn word(row: &[u8], b: usize, blocks: usize, bytes: usize, at: usize) -> u32 {
    if b >= blocks {
        return 0;
    }
    let at = b * bytes + at;
    u32::from_le_bytes(row[at..at + 4].try_into().expect("4 bytes"))
}

/// `IQ4_NL`'s and `IQ4_XS`'s 16 values (ggml's `kvalues_iq4nl`).
pub(crate) const IQ4: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `MXFP4`'s 16 values (ggml's `kvalues_mxfp4`): E2M1's 0, 0.5, 1, 1.5, 2, 3, 4 and 6 and
/// their negatives, doubled to integers (the block's scale is halved to match).
pub(crate) const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// An E8M0 exponent `e` as the scale of `MXFP4`'s doubled values: half of `2^(e − 127)`, built
/// as F32 bits (a subnormal for `e` below 2), as ggml's `GGML_E8M0_TO_FP32_HALF` does. Exact
/// for every `e`.
#[inline]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000_u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// An `IQ4_NL` block's 16 bytes of nibbles as its 32 table values in value order (the low
/// nibbles', then the high ones'): how the attention kernel reads an `IQ4_NL` KV cache. One
/// byte shuffle with the vector paths (a table lookup per value is not vectorised).
#[inline]
pub(crate) fn iq4_block(qs: &[u8; 16]) -> [i8; 32] {
    #[cfg(vector)]
    {
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(qs);
        let (nibbles, _) = vector::k_nibbles(&bytes);
        <[i8; 32]>::from(vector::iq4(nibbles))
    }
    #[cfg(not(vector))]
    std::array::from_fn(|j| {
        IQ4[usize::from(if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        })]
    })
}

/// ggml's `Q4_0`: F16 `d`, 16 bytes of nibbles `q`; value `d · (q − 8)`.
pub(super) struct Q40;
/// ggml's `Q4_1`: F16 `d` and `m`, 16 bytes of nibbles `q`; value `d · q + m`.
pub(super) struct Q41;
/// ggml's `Q5_0`: F16 `d`, 32 high bits, 16 bytes of low nibbles; value `d · (q − 16)`.
pub(super) struct Q50;
/// ggml's `Q5_1`: F16 `d` and `m`, 32 high bits, 16 bytes of low nibbles; value `d · q + m`.
pub(super) struct Q51;
/// ggml's `Q8_0`: F16 `d`, 32 signed bytes `q`; value `d · q`.
pub(super) struct Q80;
/// ggml's `Q4_K`: super-blocks of 256 values (F16 `d` and `dmin`, eight 6-bit scales and
/// minimums, 128 bytes of nibbles); sub-block `j`'s value is `d · sc_j · q − dmin · m_j`.
pub(super) struct Q4K;
/// ggml's `Q5_K`: `Q4_K` with a fifth bit per value (32 bytes of high bits).
pub(super) struct Q5K;
/// ggml's `IQ4_NL`: F16 `d`, 16 bytes of nibbles indexing a table of 16 values.
pub(super) struct IQ4NL;
/// ggml's `MXFP4` (the OCP microscaling format): an E8M0 exponent `e`, 16 bytes of nibbles
/// indexing [`MXFP4_VALUES`]; value `e8m0_half(e) · t(q)`.
pub(super) struct MXFP4;
/// ggml's `IQ4_XS`: super-blocks of 256 values (F16 `d`, eight 6-bit scales, 128 bytes of
/// nibbles indexing `IQ4_NL`'s table); sub-block `j`'s value is `d · (ls_j − 32) · t(q)`.
pub(super) struct IQ4XS;

#[allow(clippy::cast_possible_wrap)] // nibbles and five-bit values fit an i8
impl Layout for Q40 {
    const VALUES: usize = QK;
    const BYTES: usize = 18;
    const SIGNED: bool = true;
    const BIAS: u8 = 8;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qs = &row[b * Self::BYTES + 2..];
        std::array::from_fn(|j| nibble(qs, j) as i8 - 8)
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        scale_headers(w, b, blocks, Self::BYTES)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        let (lo, hi) = nibble_pair(row, b, blocks, Self::BYTES, 2);
        (lo, hi) // the nibbles: values plus `BIAS`
    }
}

#[allow(clippy::cast_possible_wrap)] // nibbles fit an i8
impl Layout for Q41 {
    const VALUES: usize = QK;
    const BYTES: usize = 20;
    const SIGNED: bool = false;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qs = &row[b * Self::BYTES + 4..];
        std::array::from_fn(|j| nibble(qs, j) as i8)
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
            let at = b * Self::BYTES;
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

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `headers`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        nibble_pair(row, b, blocks, Self::BYTES, 4)
    }
}

/// Value `j`'s fifth bit (16 or 0) from a 32-value block's word of high bits.
#[inline]
fn fifth(qh: u32, j: usize) -> u8 {
    if qh >> j & 1 == 1 {
        16
    } else {
        0
    }
}

#[allow(clippy::cast_possible_wrap)] // five-bit values fit an i8
impl Layout for Q50 {
    const VALUES: usize = QK;
    const BYTES: usize = 22;
    const SIGNED: bool = true;
    const BIAS: u8 = 16;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qh = word(row, b, b + 1, Self::BYTES, 2);
        let qs = &row[b * Self::BYTES + 6..];
        std::array::from_fn(|j| (nibble(qs, j) | fifth(qh, j)) as i8 - 16)
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        scale_headers(w, b, blocks, Self::BYTES)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        let (lo, hi) = nibble_pair(row, b, blocks, Self::BYTES, 6);
        let (bits_lo, bits_hi) = vector::fifth_bits(
            word(row, b, blocks, Self::BYTES, 2),
            word(row, b + 1, blocks, Self::BYTES, 2),
        );
        (
            safe_arch::bitor_m256i(lo, bits_lo),
            safe_arch::bitor_m256i(hi, bits_hi),
        )
    }
}

#[allow(clippy::cast_possible_wrap)] // five-bit values fit an i8
impl Layout for Q51 {
    const VALUES: usize = QK;
    const BYTES: usize = 24;
    const SIGNED: bool = false;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qh = word(row, b, b + 1, Self::BYTES, 4);
        let qs = &row[b * Self::BYTES + 8..];
        std::array::from_fn(|j| (nibble(qs, j) | fifth(qh, j)) as i8)
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        let (d0, d1) = block_halves(w, b, blocks, Self::BYTES, 0);
        let (m0, m1) = block_halves(w, b, blocks, Self::BYTES, 2);
        [d0, m0, d1, m1]
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        let (lo, hi) = nibble_pair(row, b, blocks, Self::BYTES, 8);
        let (bits_lo, bits_hi) = vector::fifth_bits(
            word(row, b, blocks, Self::BYTES, 4),
            word(row, b + 1, blocks, Self::BYTES, 4),
        );
        (
            safe_arch::bitor_m256i(lo, bits_lo),
            safe_arch::bitor_m256i(hi, bits_hi),
        )
    }
}

impl Layout for Q80 {
    const VALUES: usize = QK;
    const BYTES: usize = 34;
    const SIGNED: bool = true;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qs = &row[b * Self::BYTES + 2..];
        std::array::from_fn(|j| qs[j].cast_signed())
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        scale_headers(w, b, blocks, Self::BYTES)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        let load = |at: usize| {
            vector::join(
                sixteen(row, b, blocks, Self::BYTES, at),
                sixteen(row, b + 1, blocks, Self::BYTES, at),
            )
        };
        (load(2), load(18))
    }
}

#[allow(clippy::cast_possible_wrap)] // nibbles index the table
impl Layout for IQ4NL {
    const VALUES: usize = QK;
    const BYTES: usize = 18;
    const SIGNED: bool = true;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qs = &row[b * Self::BYTES + 2..];
        std::array::from_fn(|j| IQ4[usize::from(nibble(qs, j))])
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        scale_headers(w, b, blocks, Self::BYTES)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        let (lo, hi) = nibble_pair(row, b, blocks, Self::BYTES, 2);
        (vector::iq4(lo), vector::iq4(hi))
    }
}

impl Layout for MXFP4 {
    const VALUES: usize = QK;
    const BYTES: usize = 17;
    const SIGNED: bool = true;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qs = &row[b * Self::BYTES + 1..];
        std::array::from_fn(|j| MXFP4_VALUES[usize::from(nibble(qs, j))])
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn headers(w: &[&[u8]; TILE_W], b: usize, blocks: usize) -> [[f32; TILE_W]; 4] {
        let scales = |b: usize| -> [f32; TILE_W] {
            std::array::from_fn(|r| {
                if b < blocks {
                    e8m0_half(w[r][b * Self::BYTES])
                } else {
                    0.0
                }
            })
        };
        [scales(b), [0.0; TILE_W], scales(b + 1), [0.0; TILE_W]]
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, blocks: usize) -> (m256i, m256i) {
        let (lo, hi) = nibble_pair(row, b, blocks, Self::BYTES, 1);
        (vector::mxfp4(lo), vector::mxfp4(hi))
    }
}

/// A K-quant's twelve bytes of 6-bit scales and minimums as words whose byte `j % 4` is
/// sub-block `j`'s (ggml's `get_scale_min_k4` for four sub-blocks at once): `(scales,
/// minimums)` of sub-blocks 0–3 (`high` false) or 4–7. `words` are the three little-endian
/// words of the twelve bytes. (The vector paths' `k_numbers` does the same per lane.)
#[inline]
fn scales_mins_k4(words: [u32; 3], high: bool) -> (u32, u32) {
    let [a, b, c] = words;
    if high {
        // Low four bits from bytes 8–11, the top two from the top bits of bytes 0–3
        // (scales) or 4–7 (minimums).
        (
            (c & 0x0F0F_0F0F) | ((a >> 2) & 0x3030_3030),
            ((c >> 4) & 0x0F0F_0F0F) | ((b >> 2) & 0x3030_3030),
        )
    } else {
        (a & 0x3F3F_3F3F, b & 0x3F3F_3F3F)
    }
}

/// The super-block F16s at bytes `at` and `at + 2` (`d` and `dmin`) of the super-block
/// holding 32-value block `b`, per row, as F32.
#[allow(clippy::inline_always)] // as `block_halves`
#[inline(always)]
fn super_halves(
    w: &[&[u8]; TILE_W],
    b: usize,
    bytes: usize,
    at: usize,
) -> ([f32; TILE_W], [f32; TILE_W]) {
    let at = b / 8 * bytes + at;
    let bits: [u16; 8] = std::array::from_fn(|i| half_at(w[i % TILE_W], at + 2 * (i / TILE_W)));
    let d = f16x8(bits);
    (
        std::array::from_fn(|r| d[r]),
        std::array::from_fn(|r| d[TILE_W + r]),
    )
}

/// A K-quant's `(d, −dmin)` (the F16s at bytes `at` and `at + 2` of its super-blocks) for
/// the super-block holding 32-value block `b`, per row.
#[allow(clippy::inline_always)] // as `block_halves`
#[inline(always)]
fn k_super_scales(w: &[&[u8]; TILE_W], b: usize, bytes: usize, at: usize) -> [[f32; TILE_W]; 2] {
    let (d, dmin) = super_halves(w, b, bytes, at);
    [d, dmin.map(|m| -m)]
}

/// A K-quant's numbers (`Q4_K`, `Q5_K`): the eight 6-bit scales and minimums in the twelve
/// bytes at byte 4 of super-block `s`.
#[allow(clippy::inline_always)] // once per super-block in the decode path's loop
#[inline(always)]
fn k_numbers(row: &[u8], s: usize, bytes: usize) -> Numbers {
    let at = s * bytes + 4;
    let word = |k: usize| word(row, 0, 1, 0, at + 4 * k);
    let words = [word(0), word(1), word(2)];
    let (scales, mins) = scales_mins_k4(words, false);
    let (high_scales, high_mins) = scales_mins_k4(words, true);
    let join = |low: u32, high: u32| u128::from(low) | u128::from(high) << 32;
    Numbers {
        scales: join(scales, high_scales),
        minimums: join(mins, high_mins),
    }
}

/// The F16 at byte `d_at` of the super-block holding 32-value block `b`, per row, as F32:
/// `(d, 0)` for a super-block type without minimums.
#[allow(clippy::inline_always)] // as `block_halves`
#[inline(always)]
fn scale_only(w: &[&[u8]; TILE_W], b: usize, bytes: usize, d_at: usize) -> [[f32; TILE_W]; 2] {
    let at = b / 8 * bytes + d_at;
    let bits: [u16; 8] = std::array::from_fn(|i| if i < TILE_W { half_at(w[i], at) } else { 0 });
    let d = f16x8(bits);
    [[d[0], d[1], d[2], d[3]], [0.0; TILE_W]]
}

#[allow(clippy::cast_possible_wrap)] // nibbles fit an i8
impl Layout for Q4K {
    const VALUES: usize = 256;
    const BYTES: usize = 144;
    #[cfg(vector)]
    const DIRECT_BATCH: (usize, usize) = (6, DIRECT_ROWS);
    const SIGNED: bool = false;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let (j, qs) = (b % 8, &row[b / 8 * Self::BYTES + 16..]);
        let bytes = &qs[32 * (j / 2)..][..32];
        let shift = 4 * (j % 2);
        std::array::from_fn(|l| (bytes[l] >> shift & 0x0F) as i8)
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn super_scales(w: &[&[u8]; TILE_W], b: usize) -> [[f32; TILE_W]; 2] {
        k_super_scales(w, b, Self::BYTES, 0)
    }

    #[allow(clippy::inline_always)] // as `k_numbers`
    #[inline(always)]
    fn numbers(row: &[u8], s: usize) -> Numbers {
        k_numbers(row, s, Self::BYTES)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `numbers16`
    #[inline(always)]
    fn numbers16(w: &[&[u8]; TILE_W], s: usize) -> [(m256i, m256i); TILE_W] {
        vector::k_numbers4(w, s * Self::BYTES + 4)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, _blocks: usize) -> (m256i, m256i) {
        let at = b / 8 * Self::BYTES + 16 + 32 * (b % 8 / 2);
        vector::k_nibbles(row[at..at + 32].try_into().expect("32 bytes"))
    }
}

#[allow(clippy::cast_possible_wrap)] // five-bit values fit an i8
impl Layout for Q5K {
    const VALUES: usize = 256;
    const BYTES: usize = 176;
    #[cfg(vector)]
    const DIRECT_BATCH: (usize, usize) = (6, DIRECT_ROWS);
    const SIGNED: bool = false;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let (j, block) = (b % 8, &row[b / 8 * Self::BYTES..]);
        let (qh, bytes) = (&block[16..48], &block[48 + 32 * (j / 2)..][..32]);
        let shift = 4 * (j % 2);
        std::array::from_fn(|l| {
            let high = if qh[l] >> j & 1 == 1 { 16 } else { 0 };
            ((bytes[l] >> shift & 0x0F) | high) as i8
        })
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn super_scales(w: &[&[u8]; TILE_W], b: usize) -> [[f32; TILE_W]; 2] {
        k_super_scales(w, b, Self::BYTES, 0)
    }

    #[allow(clippy::inline_always)] // as `k_numbers`
    #[inline(always)]
    fn numbers(row: &[u8], s: usize) -> Numbers {
        k_numbers(row, s, Self::BYTES)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `numbers16`
    #[inline(always)]
    fn numbers16(w: &[&[u8]; TILE_W], s: usize) -> [(m256i, m256i); TILE_W] {
        vector::k_numbers4(w, s * Self::BYTES + 4)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, _blocks: usize) -> (m256i, m256i) {
        let block = b / 8 * Self::BYTES;
        let at = block + 48 + 32 * (b % 8 / 2);
        let (lo, hi) = vector::k_nibbles(row[at..at + 32].try_into().expect("32 bytes"));
        let qh: &[u8; 32] = row[block + 16..block + 48].try_into().expect("32 bytes");
        let (bits_lo, bits_hi) = vector::k_fifth_bits(qh, b % 8);
        (
            safe_arch::bitor_m256i(lo, bits_lo),
            safe_arch::bitor_m256i(hi, bits_hi),
        )
    }
}

impl IQ4XS {
    /// Sub-block `j`'s 6-bit scale of the super-block at `block`, one bit at a time (what the
    /// tests hold [`Layout::numbers`] to).
    #[cfg(test)]
    pub(super) fn scale(block: &[u8], j: usize) -> i32 {
        let high = half_at(block, 2);
        let low = block[4 + j / 2] >> (4 * (j % 2)) & 0x0F;
        i32::from(low) | i32::from((high >> (2 * j)) & 3) << 4
    }
}

impl Layout for IQ4XS {
    const VALUES: usize = 256;
    const BYTES: usize = 136;
    const SIGNED: bool = true;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let qs = &row[b / 8 * Self::BYTES + 8 + 16 * (b % 8)..];
        std::array::from_fn(|j| IQ4[usize::from(nibble(qs, j))])
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn super_scales(w: &[&[u8]; TILE_W], b: usize) -> [[f32; TILE_W]; 2] {
        scale_only(w, b, Self::BYTES, 0)
    }

    #[allow(clippy::inline_always)] // as `k_numbers`
    #[inline(always)]
    fn numbers(row: &[u8], s: usize) -> Numbers {
        let block = &row[s * Self::BYTES..][..8];
        // Scale `j`'s low four bits are nibble `j` of bytes 4–7, its high two bits `2j` of the
        // 16 at byte 2: each spread to byte `j` of a word.
        let low = u64::from(u32::from_le_bytes(block[4..8].try_into().expect("4 bytes")));
        let low = (low | low << 16) & 0x0000_FFFF_0000_FFFF;
        let low = (low | low << 8) & 0x00FF_00FF_00FF_00FF;
        let nibbles = 0x000F_000F_000F_000F;
        let low = (low & nibbles) | (low >> 4 & nibbles) << 8;
        let high = u64::from(half_at(block, 2));
        let high = (high | high << 24) & 0x0000_00FF_0000_00FF;
        let high = (high | high << 12) & 0x000F_000F_000F_000F;
        let high = (high | high << 6) & 0x0303_0303_0303_0303;
        let six = low | high << 4;
        // ls − 32 as signed bytes (see `Q3K::four_scales`).
        let scales = (six & 0x1F1F_1F1F_1F1F_1F1F) | ((!six & 0x2020_2020_2020_2020) * 7);
        Numbers {
            scales: u128::from(scales),
            minimums: 0,
        }
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, _blocks: usize) -> (m256i, m256i) {
        let at = b / 8 * Self::BYTES + 8 + 16 * (b % 8);
        let (lo, hi) = vector::nibbles(
            row[at..at + 16].try_into().expect("16 bytes"),
            row[at + 16..at + 32].try_into().expect("16 bytes"),
        );
        (vector::iq4(lo), vector::iq4(hi))
    }
}

/// ggml's `Q6_K`: super-blocks of 256 values (128 bytes of low nibbles, 64 bytes of two high
/// bits each, sixteen 8-bit scales, F16 `d`); 16-value sub-block `s`'s value is
/// `d · sc_s · (q − 32)`.
pub(super) struct Q6K;

impl Q6K {
    /// Where 32-value block `b`'s bits are within its super-block: the low nibbles' bytes, their
    /// shift, the high bits' bytes and their shift.
    #[inline]
    fn places(b: usize) -> (usize, u32, usize, u32) {
        let (n, t) = ((b % 8) / 4, b % 4);
        let ql = 64 * n + if t % 2 == 1 { 32 } else { 0 };
        let shift = if t >= 2 { 4 } else { 0 };
        #[allow(clippy::cast_possible_truncation)] // t < 4
        (ql, shift, 128 + 32 * n, 2 * t as u32)
    }
}

#[allow(clippy::cast_possible_wrap)] // six-bit values fit an i8
impl Layout for Q6K {
    const VALUES: usize = 256;
    const BYTES: usize = 210;
    #[cfg(vector)]
    const DIRECT_BATCH: (usize, usize) = (12, 6);
    const SIGNED: bool = true;
    const BIAS: u8 = 32;
    const SPLIT: bool = true;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let block = &row[b / 8 * Self::BYTES..];
        let (ql, shift, qh, high) = Self::places(b);
        std::array::from_fn(|l| {
            let q = (block[ql + l] >> shift & 0x0F) | ((block[qh + l] >> high) & 3) << 4;
            q as i8 - 32
        })
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn super_scales(w: &[&[u8]; TILE_W], b: usize) -> [[f32; TILE_W]; 2] {
        scale_only(w, b, Self::BYTES, 208)
    }

    #[allow(clippy::inline_always)] // as `k_numbers`
    #[inline(always)]
    fn numbers(row: &[u8], s: usize) -> Numbers {
        let scales = &row[s * Self::BYTES + 192..][..16];
        Numbers {
            scales: u128::from_le_bytes(scales.try_into().expect("16 bytes")),
            minimums: 0,
        }
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, _blocks: usize) -> (m256i, m256i) {
        let block = &row[b / 8 * Self::BYTES..];
        let (ql0, shift0, qh, high0) = Self::places(b);
        let (ql1, _, _, high1) = Self::places(b + 1);
        let sixteen = |at: usize| -> [u8; 16] { block[at..at + 16].try_into().expect("16 bytes") };
        let half = |h: usize| {
            vector::six_bits(
                (sixteen(ql0 + h), sixteen(ql1 + h)),
                shift0,
                sixteen(qh + h),
                (high0, high1),
            )
        };
        (half(0), half(16))
    }

    #[cfg(vector)]
    const NATURAL: bool = true;

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn blocks(row: &[u8], b: usize) -> (m256i, m256i) {
        let block = b / 8 * Self::BYTES;
        let (ql0, shift, qh, high0) = Self::places(b);
        let (ql1, _, _, high1) = Self::places(b + 1);
        let qh = vector::load(row, block + qh);
        let value = |ql: usize, high: u32| {
            safe_arch::bitor_m256i(
                vector::bits(vector::load(row, block + ql), shift, 0x0F),
                vector::bit_to(qh, high as usize, 3, 4),
            )
        };
        (value(ql0, high0), value(ql1, high1))
    }
}

/// ggml's `Q3_K`: super-blocks of 256 values (32 bytes of high bits, 64 bytes of 2-bit values,
/// twelve bytes of sixteen 6-bit scales, F16 `d`); value `d · (sc − 32) · w` with `w` from −4
/// to 3 (the two low bits, less 4 where the high bit is clear), a scale per 16 values.
pub(super) struct Q3K;

impl Q3K {
    /// Scales `j` to `j + 3` (of 16, per 16 values; `j` a multiple of 4) of a super-block's
    /// twelve bytes of them, less 32, as a word of signed bytes. ggml's `dequantize_row_q3_K`
    /// takes scale `j`'s low four bits from byte `j` (low nibble) or `j − 8` (high nibble) and
    /// its high two from byte `8 + j % 4`, shifted by `2 · (j / 4)`: for four consecutive
    /// scales, one word of each.
    #[inline]
    fn four_scales(scales: &[u8; 12], j: usize) -> u32 {
        // One 32-bit load per word (see `half_at`).
        let word = |at: usize| u32::from_le_bytes(scales[at..at + 4].try_into().expect("4 bytes"));
        let low = if j < 8 {
            word(j) & 0x0F0F_0F0F
        } else {
            (word(j - 8) >> 4) & 0x0F0F_0F0F
        };
        let high = (word(8) >> (2 * (j / 4))) & 0x0303_0303;
        let six = low | high << 4;
        // Each byte less 32, as a signed byte: from 32 up, its low five bits; below, those
        // bits with the top three set (0x20 · 7 = 0xE0, no carry between bytes).
        (six & 0x1F1F_1F1F) | ((!six & 0x2020_2020) * 7)
    }

    /// Where 32-value block `b`'s bits are within its super-block: the shift of its low bits
    /// (in bytes `32 + 32n…`, `n` the returned half) and of its high bit (in bytes 0–31).
    #[inline]
    fn places(b: usize) -> (usize, u32, u32) {
        let (n, t) = ((b % 8) / 4, b % 4);
        #[allow(clippy::cast_possible_truncation)] // below 8
        (n, 2 * t as u32, (4 * n + t) as u32)
    }
}

#[allow(clippy::cast_possible_wrap)] // three-bit values fit an i8
impl Layout for Q3K {
    const VALUES: usize = 256;
    const BYTES: usize = 110;
    #[cfg(vector)]
    const DIRECT_BATCH: (usize, usize) = (6, 6);
    const SIGNED: bool = true;
    const SPLIT: bool = true;
    const BIAS: u8 = 4;

    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let block = &row[b / 8 * Self::BYTES..];
        let (n, shift, high) = Self::places(b);
        std::array::from_fn(|v| {
            let low = (block[32 + 32 * n + v] >> shift) & 3;
            let high = (block[v] >> high) & 1;
            (low | high << 2) as i8 - 4
        })
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn super_scales(w: &[&[u8]; TILE_W], b: usize) -> [[f32; TILE_W]; 2] {
        scale_only(w, b, Self::BYTES, 108)
    }

    #[allow(clippy::inline_always)] // as `k_numbers`
    #[inline(always)]
    fn numbers(row: &[u8], s: usize) -> Numbers {
        let bytes: &[u8; 12] = row[s * Self::BYTES + 96..][..12]
            .try_into()
            .expect("12 bytes");
        let four = |j: usize| u128::from(Self::four_scales(bytes, j)) << (8 * j);
        Numbers {
            scales: four(0) | four(4) | four(8) | four(12),
            minimums: 0,
        }
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, _blocks: usize) -> (m256i, m256i) {
        let block = &row[b / 8 * Self::BYTES..];
        let (n, shift, high) = Self::places(b);
        let sixteen = |at: usize| -> [u8; 16] { block[at..at + 16].try_into().expect("16 bytes") };
        // Block `b + 1` is the next `t`: its low bits two further, its high bit one.
        let half = |h: usize| {
            vector::three_bits(
                sixteen(32 + 32 * n + 16 * h),
                (shift, shift + 2),
                sixteen(16 * h),
                (high, high + 1),
            )
        };
        (half(0), half(1))
    }

    #[cfg(vector)]
    const NATURAL: bool = true;

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn blocks(row: &[u8], b: usize) -> (m256i, m256i) {
        let block = b / 8 * Self::BYTES;
        let (n, shift, high) = Self::places(b);
        // Block `b + 1` is the next `t`: its low bits two further, its high bit one.
        let (low, hmask) = (
            vector::load(row, block + 32 + 32 * n),
            vector::load(row, block),
        );
        let value = |shift: u32, high: u32| {
            safe_arch::bitor_m256i(
                vector::bits(low, shift, 3),
                vector::bit_to(hmask, high as usize, 1, 2),
            )
        };
        (value(shift, high), value(shift + 2, high + 1))
    }
}

/// ggml's `Q2_K`: super-blocks of 256 values (sixteen bytes of scales, 64 bytes of 2-bit
/// values, F16 `d` and `dmin`); each 16 values' byte of scales holds a 4-bit scale `sc` (low)
/// and minimum `m` (high), and value `d · sc · q − dmin · m` with `q` from 0 to 3.
pub(super) struct Q2K;

impl Q2K {
    /// Where 32-value block `b`'s two bits are within its super-block: the 32 bytes at
    /// `16 + 32n` (`n` the returned half), shifted down by the returned count.
    #[inline]
    fn places(b: usize) -> (usize, u32) {
        #[allow(clippy::cast_possible_truncation)] // below 8
        ((b % 8) / 4, 2 * (b % 4) as u32)
    }
}

impl Layout for Q2K {
    const VALUES: usize = 256;
    const BYTES: usize = 84;
    #[cfg(vector)]
    const DIRECT_BATCH: (usize, usize) = (12, 8);
    const SIGNED: bool = false;
    const SPLIT: bool = true;

    #[allow(clippy::cast_possible_wrap)] // two-bit values fit an i8
    fn values(row: &[u8], b: usize) -> [i8; QK] {
        let block = &row[b / 8 * Self::BYTES..];
        let (n, shift) = Self::places(b);
        std::array::from_fn(|v| ((block[16 + 32 * n + v] >> shift) & 3) as i8)
    }

    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn super_scales(w: &[&[u8]; TILE_W], b: usize) -> [[f32; TILE_W]; 2] {
        k_super_scales(w, b, Self::BYTES, 80)
    }

    #[allow(clippy::inline_always)] // as `k_numbers`
    #[inline(always)]
    fn numbers(row: &[u8], s: usize) -> Numbers {
        let bytes = &row[s * Self::BYTES..][..16];
        let bytes = u128::from_le_bytes(bytes.try_into().expect("16 bytes"));
        let low = 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F;
        Numbers {
            scales: bytes & low,
            minimums: bytes >> 4 & low,
        }
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn pair(row: &[u8], b: usize, _blocks: usize) -> (m256i, m256i) {
        let block = &row[b / 8 * Self::BYTES..];
        let (n, shift) = Self::places(b);
        let sixteen = |at: usize| -> [u8; 16] { block[at..at + 16].try_into().expect("16 bytes") };
        // Block `b + 1` is the next pair of bits of the same bytes.
        let half = |h: usize| vector::two_bits(sixteen(16 + 32 * n + 16 * h), (shift, shift + 2));
        (half(0), half(1))
    }

    #[cfg(vector)]
    const NATURAL: bool = true;

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // as `block_halves`
    #[inline(always)]
    fn blocks(row: &[u8], b: usize) -> (m256i, m256i) {
        let (n, shift) = Self::places(b);
        // Block `b + 1` is the next pair of bits of the same 32 bytes.
        let bytes = vector::load(row, b / 8 * Self::BYTES + 16 + 32 * n);
        (
            vector::bits(bytes, shift, 3),
            vector::bits(bytes, shift + 2, 3),
        )
    }
}

/// AVX2 unpacking, behind `safe_arch`'s safe API.
#[cfg(vector)]
mod vector {
    use safe_arch::{
        bitand_m256i, bitor_m256i, cmp_eq_mask_i8_m256i, load_unaligned_m128i, m128i, m256i,
        set_m128i_m256i, set_splat_i32_m256i, set_splat_i8_m256i, shl_imm_u16_m256i,
        shr_all_u16_m256i, shr_each_u32_m256i, shr_imm_u16_m256i, shr_imm_u32_m256i,
        shuffle_abi_i128z_all_m256i, shuffle_ai_i32_half_m256i, shuffle_av_i8z_half_m256i,
        unpack_high_i8_m256i, unpack_low_i32_m256i, unpack_low_i8_m256i, zeroed_m256i,
    };

    use super::{IQ4, MXFP4_VALUES, TILE_W};

    /// The 32 bytes at `at` of `row`.
    #[allow(clippy::inline_always)] // in the decode path's loop
    #[inline(always)]
    pub(super) fn load(row: &[u8], at: usize) -> m256i {
        let bytes: [u8; 32] = row[at..at + 32].try_into().expect("32 bytes");
        m256i::from(bytes)
    }

    /// Each byte shifted down by `shift` (below 8) and masked by `mask` (which drops the bits
    /// shifted in from the next byte).
    #[inline]
    #[allow(clippy::cast_possible_wrap)] // shifts below 8, masks below 256
    pub(super) fn bits(bytes: m256i, shift: u32, mask: u8) -> m256i {
        let count = m128i::from([shift as i32, 0, 0, 0]);
        bitand_m256i(
            shr_all_u16_m256i(bytes, count),
            set_splat_i8_m256i(mask as i8),
        )
    }

    /// Each byte's bits `at..` (masked by `mask`) moved up to bit `to`.
    #[inline]
    #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)] // below 8
    pub(super) fn bit_to(bytes: m256i, at: usize, mask: u8, to: u32) -> m256i {
        let bits = self::bits(bytes, at as u32, mask);
        let count = m128i::from([to as i32, 0, 0, 0]);
        safe_arch::shl_all_u16_m256i(bits, count)
    }

    /// Two 16-byte halves in one register: `first` in the low lane, `second` in the high.
    #[inline]
    pub(super) fn join(first: [u8; 16], second: [u8; 16]) -> m256i {
        set_m128i_m256i(load_unaligned_m128i(&second), load_unaligned_m128i(&first))
    }

    /// A K-quant's (`Q4_K`, `Q5_K`) eight 6-bit scales and eight minimums of the four rows
    /// `w`, from the twelve bytes at `at` of each (the four after them are read and
    /// dropped): per row `(scales, minimums)` in 16-bit lanes 0–7, zeros above — what
    /// [`super::k_numbers`] unpacks bit by bit, widened, for four rows in 32 vector
    /// instructions (12 per two rows, 8 lane moves) instead of about eighty scalar ones and
    /// eight widenings (a fifth of a decode step's instructions in `Q4_K`).
    #[allow(clippy::inline_always)] // once per super-block in the decode path's loop
    #[inline(always)]
    pub(super) fn k_numbers4(w: &[&[u8]; TILE_W], at: usize) -> [(m256i, m256i); TILE_W] {
        let bytes = |r: usize| -> [u8; 16] { w[r][at..at + 16].try_into().expect("16 bytes") };
        // Two rows, a lane each: their words `a` (scales 0–3 and the top bits of 4–7), `b`
        // (minimums 0–3, the top bits of 4–7) and `c` (the low four bits of both 4–7).
        let two = |first: usize| {
            let words = join(bytes(first), bytes(first + 1));
            let low = bitand_m256i(words, set_splat_i32_m256i(0x3F3F_3F3F));
            // `c` in words 0 and 1, shifted down by 0 and 4, under `a`'s and `b`'s top bits.
            let c = shr_each_u32_m256i(
                shuffle_ai_i32_half_m256i::<0b1010_1010>(words),
                m256i::from([0i32, 4, 0, 0, 0, 4, 0, 0]),
            );
            let high = bitor_m256i(
                bitand_m256i(c, set_splat_i32_m256i(0x0F0F_0F0F)),
                bitand_m256i(
                    shr_imm_u32_m256i::<2>(words),
                    set_splat_i32_m256i(0x3030_3030),
                ),
            );
            // Per lane: scales 0–3, 4–7, minimums 0–3, 4–7; then each byte widened.
            let both = unpack_low_i32_m256i(low, high);
            let zero = zeroed_m256i();
            (
                unpack_low_i8_m256i(both, zero),
                unpack_high_i8_m256i(both, zero),
            )
        };
        // A row's lane in the low half, zeros in the high.
        let low = |v: m256i| shuffle_abi_i128z_all_m256i::<0x80>(v, v);
        let high = |v: m256i| shuffle_abi_i128z_all_m256i::<0x81>(v, v);
        let ((s0, m0), (s2, m2)) = (two(0), two(2));
        [
            (low(s0), low(m0)),
            (high(s0), high(m0)),
            (low(s2), low(m2)),
            (high(s2), high(m2)),
        ]
    }

    /// Two blocks' 16 bytes of nibbles as their paired values: `(low nibbles of both, high
    /// nibbles of both)`, `first`'s in the low lane.
    #[inline]
    pub(super) fn nibbles(first: [u8; 16], second: [u8; 16]) -> (m256i, m256i) {
        let both = join(first, second);
        let low = set_splat_i8_m256i(0x0F);
        (
            bitand_m256i(both, low),
            bitand_m256i(shr_imm_u16_m256i::<4>(both), low),
        )
    }

    /// A K-quant's 32 bytes of nibbles for sub-blocks `2i` (low nibbles) and `2i + 1` (high
    /// nibbles) as their paired values: values 0–15 of both, then 16–31 of both.
    #[inline]
    pub(super) fn k_nibbles(bytes: &[u8; 32]) -> (m256i, m256i) {
        let first: [u8; 16] = bytes[..16].try_into().expect("16 bytes");
        let second: [u8; 16] = bytes[16..].try_into().expect("16 bytes");
        // The low lane keeps its nibbles where they are, the high lane shifts its high
        // nibbles down (the bits shifted in from the next byte are masked off).
        let shifts = m256i::from([0i32, 0, 0, 0, 4, 4, 4, 4]);
        let low = set_splat_i8_m256i(0x0F);
        let spread =
            |half: [u8; 16]| bitand_m256i(shr_each_u32_m256i(join(half, half), shifts), low);
        (spread(first), spread(second))
    }

    /// 16 in each byte whose bit of `mask`'s byte is set in `bytes`, else 0.
    #[inline]
    fn sixteen_where(bytes: m256i, mask: m256i) -> m256i {
        bitand_m256i(
            cmp_eq_mask_i8_m256i(bitand_m256i(bytes, mask), mask),
            set_splat_i8_m256i(16),
        )
    }

    /// Two `Q5` blocks' words of high bits (bit `j` for value `j`) as 16 or 0 per value, in
    /// the paired layout: `(values 0–15 of both, values 16–31 of both)`.
    #[inline]
    #[allow(clippy::cast_possible_wrap)] // bit patterns
    pub(super) fn fifth_bits(first: u32, second: u32) -> (m256i, m256i) {
        let words = m256i::from([
            first as i32,
            first as i32,
            first as i32,
            first as i32,
            second as i32,
            second as i32,
            second as i32,
            second as i32,
        ]);
        // Byte `k` of a lane's first eight takes the word's byte 0 (or 2), the next eight its
        // byte 1 (or 3); each then tests its own bit.
        let spread = |low: i8| {
            let high = low + 1;
            let index = m256i::from([
                low, low, low, low, low, low, low, low, high, high, high, high, high, high, high,
                high, low, low, low, low, low, low, low, low, high, high, high, high, high, high,
                high, high,
            ]);
            shuffle_av_i8z_half_m256i(words, index)
        };
        let bits = m256i::from(bit_of_byte());
        (
            sixteen_where(spread(0), bits),
            sixteen_where(spread(2), bits),
        )
    }

    /// The bit each byte of a 16-byte run tests: 1, 2, 4, … 128, twice, in both lanes.
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    fn bit_of_byte() -> [i8; 32] {
        std::array::from_fn(|i| (1u8 << (i % 8)) as i8)
    }

    /// A `Q5_K` super-block's 32 bytes of high bits as 16 or 0 per value of sub-blocks `j`
    /// (even; bit `j` of byte `l` for its value `l`) and `j + 1`, paired.
    #[inline]
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    pub(super) fn k_fifth_bits(qh: &[u8; 32], j: usize) -> (m256i, m256i) {
        let (a, b) = ((1u8 << j) as i8, (2u8 << j) as i8);
        let mask = m256i::from(std::array::from_fn::<i8, 32, _>(
            |i| if i < 16 { a } else { b },
        ));
        let first: [u8; 16] = qh[..16].try_into().expect("16 bytes");
        let second: [u8; 16] = qh[16..].try_into().expect("16 bytes");
        (
            sixteen_where(join(first, first), mask),
            sixteen_where(join(second, second), mask),
        )
    }

    /// `Q3_K`'s values of two blocks from the same 16 bytes of low bits and of high bits:
    /// the low bits shifted by `shifts.0` (block `b`, the low lane) and `shifts.1` (block
    /// `b + 1`), the high bit by `highs`, as `low | high << 2` (the values plus `Q3_K`'s bias of 4).
    #[inline]
    pub(super) fn three_bits(
        low: [u8; 16],
        shifts: (u32, u32),
        high: [u8; 16],
        highs: (u32, u32),
    ) -> m256i {
        let low = two_bits(low, shifts);
        let high = bitand_m256i(
            shr_each_u32_m256i(join(high, high), counts(highs)),
            set_splat_i8_m256i(1),
        );
        bitor_m256i(low, shl_imm_u16_m256i::<2>(high))
    }

    /// Per-lane shift counts: `a` for the low 128 bits (block `b`), `b` for the high.
    #[allow(clippy::cast_possible_wrap)] // shifts below 8
    fn counts((a, b): (u32, u32)) -> m256i {
        let (a, b) = (a as i32, b as i32);
        m256i::from([a, a, a, a, b, b, b, b])
    }

    /// Two blocks' values of two bits from the same 16 bytes: shifted down by `shifts.0`
    /// (block `b`, the low lane) and `shifts.1` (block `b + 1`), masked to two bits. A byte's
    /// bits stay its own under these shifts once masked: at most bit 7 moves to bit 0, and the
    /// bits shifted in from the next byte land above the mask.
    #[inline]
    pub(super) fn two_bits(bytes: [u8; 16], shifts: (u32, u32)) -> m256i {
        bitand_m256i(
            shr_each_u32_m256i(join(bytes, bytes), counts(shifts)),
            set_splat_i8_m256i(3),
        )
    }

    /// Two `Q6_K` blocks' 16 values (of one half) plus its bias of 32 (six unsigned bits): low
    /// nibbles of `ql` (shifted down by `shift`, the same for both blocks of a pair), two high
    /// bits of `qh` (shifted down by `highs`' first for the first block, its second for the
    /// second).
    #[inline]
    pub(super) fn six_bits(
        ql: ([u8; 16], [u8; 16]),
        shift: u32,
        qh: [u8; 16],
        highs: (u32, u32),
    ) -> m256i {
        #[allow(clippy::cast_possible_wrap)] // 0 or 4
        let count = m128i::from([shift as i32, 0, 0, 0]);
        let low = shr_all_u16_m256i(join(ql.0, ql.1), count);
        let low = bitand_m256i(low, set_splat_i8_m256i(0x0F));
        #[allow(clippy::cast_possible_wrap)] // shifts below 8
        let (a, b) = (highs.0 as i32, highs.1 as i32);
        let counts = m256i::from([a, a, a, a, b, b, b, b]);
        let high = bitand_m256i(
            shr_each_u32_m256i(join(qh, qh), counts),
            set_splat_i8_m256i(3),
        );
        bitor_m256i(low, shl_imm_u16_m256i::<4>(high))
    }

    /// Nibbles (0–15 per byte) as the `IQ4` table's values.
    #[inline]
    pub(super) fn iq4(nibbles: m256i) -> m256i {
        let table: [u8; 16] = IQ4.map(i8::cast_unsigned);
        shuffle_av_i8z_half_m256i(join(table, table), nibbles)
    }

    /// Nibbles (0–15 per byte) as `MXFP4`'s doubled values.
    #[inline]
    pub(super) fn mxfp4(nibbles: m256i) -> m256i {
        let table: [u8; 16] = MXFP4_VALUES.map(i8::cast_unsigned);
        shuffle_av_i8z_half_m256i(join(table, table), nibbles)
    }
}
