//! Float weights (`F16`, `BF16`, `F32`) times F32 inputs: the kernel's second family of
//! formats, with the same properties as the block formats' (see the module above) and a
//! simpler definition, since nothing is quantized.
//!
//! **The definition.** A pair's product runs eight F32 lanes: lane `l` adds the products of
//! values `8j + l`, for `j` in order, each with one fused multiply-add of the weight (exact in
//! F32: F16 and BF16 widen exactly) and the input as it is; then the lanes are summed in the
//! same fixed tree as the block formats'. Every operation is one IEEE operation, so the scalar
//! code and AVX2 (eight lanes per register; AVX-512 has no path of its own here) give the same
//! bits, and a pair's arithmetic depends on that pair alone. AVX-512 runs two pairs per 512-bit
//! register (for batches two input rows' lanes side by side, else two weight rows'): the same
//! operations on the same lanes.
//!
//! ggml's own product of these types rounds the inputs to the weights' type first (F16 or BF16)
//! and sums in as many lanes as the instruction set has, so its bits change with the CPU; this
//! one keeps the inputs' F32 precision.

#[cfg(wide)]
use safe_arch::m512;
#[cfg(vector)]
use safe_arch::{m256, m256i};

use super::layouts::half_at;
use super::TILE_W;

/// Values per lane group: a row's length is a multiple of it.
pub(super) const LANES: usize = 8;

/// One float weight type.
pub(super) trait Element {
    /// Bytes per value.
    const BYTES: usize;

    /// Input rows per tile of the vector paths below AVX-512's own: three (twelve accumulators
    /// with four weight rows), or for the 16-bit types [`HALF_TILE_X`].
    const TILE_X: usize = super::TILE_X;

    /// Value `j` of `row`, as F32 (exact).
    fn get(row: &[u8], j: usize) -> f32;

    /// Values `j..j + 8` of `row`, as F32 (exact).
    #[cfg(vector)]
    fn eight(row: &[u8], j: usize) -> m256;

    /// Values `j..j + 8` of `low` and of `high`, as F32 (exact): `low`'s in the low half.
    #[cfg(wide)]
    fn pair(low: &[u8], high: &[u8], j: usize) -> m512;

    /// Values `j..j + 8` of `row`, as F32 (exact), in both halves of a 512-bit register: the
    /// weight vector of [`accumulate_paired`], the `avx512` level's tile for batches. F32's is
    /// a load alone, BF16's one byte shuffle of a broadcast load, F16's one conversion of the
    /// eight values twice (the weights-side-by-side tile, [`accumulate_wide`], converts two
    /// rows at once, but inserts a row into each register or shifts; kernel bench, one
    /// thread, 512 rows, medians: BF16 43 -> 61.5 Gelem/s, F16 52 -> 55.4).
    #[cfg(wide)]
    fn twice(row: &[u8], j: usize) -> m512;
}

/// [`Element::TILE_X`] of the 16-bit types: two input rows on builds with AVX2's sixteen
/// registers, three with AVX-512's thirty-two (AVX-512 VL: `ymm16`–`ymm31`). BF16's byte
/// shuffle keeps its mask in a register; with three rows that left AVX2's sixteen one short,
/// and an accumulator went to the stack. Measured on an AVX2 build (x86-64-v3), prefill
/// of 512 rows, one thread: BF16 (widened by a byte shuffle, whose mask takes a register) 33 ->
/// 42 G/s, and a BF16 model's first token after a 1439-token prompt 3.75 -> 3.33 s (three rows
/// with the shuffle spilled an accumulator); F16 35 -> 38 G/s (3.48 -> 3.38 s). With AVX-512's
/// registers three rows run faster (BF16 at a native build's `avx2` level: 2.74 s against 3.0).
const HALF_TILE_X: usize = if cfg!(target_feature = "avx512vl") {
    super::TILE_X
} else {
    2
};

/// IEEE half precision.
pub(super) struct F16;
/// bfloat16: the top 16 bits of an F32.
pub(super) struct BF16;
/// IEEE single precision.
pub(super) struct F32;

/// The 16 bytes at `at`.
#[cfg(vector)]
#[inline]
fn sixteen(row: &[u8], at: usize) -> [u8; 16] {
    row[at..at + 16].try_into().expect("16 bytes")
}

/// Values `j..j + 8` of a 16-bit row, their bits.
#[cfg(vector)]
#[allow(clippy::inline_always)] // in the tile loop
#[inline(always)]
fn eight_halves(row: &[u8], j: usize) -> [u16; 8] {
    let bytes = sixteen(row, 2 * j);
    std::array::from_fn(|i| u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))
}

impl Element for F16 {
    const BYTES: usize = 2;
    const TILE_X: usize = HALF_TILE_X;

    #[inline]
    fn get(row: &[u8], j: usize) -> f32 {
        crate::attention::f16_to_f32(half_at(row, 2 * j))
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn eight(row: &[u8], j: usize) -> m256 {
        m256::from(super::f16x8(eight_halves(row, j)))
    }

    #[cfg(wide)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn pair(low: &[u8], high: &[u8], j: usize) -> m512 {
        crate::intrinsics::f16x16(eight_halves(low, j), eight_halves(high, j))
    }

    #[cfg(wide)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn twice(row: &[u8], j: usize) -> m512 {
        let bits = eight_halves(row, j);
        crate::intrinsics::f16x16(bits, bits)
    }
}

/// [`BF16::eight`]'s byte shuffle: 32-bit lane `i` of the low half takes value `i`'s two
/// bytes into its top two, of the high half value `4 + i`'s; −1 (bit 7 set) gives a zero byte.
#[cfg(vector)]
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)] // indices below 16
const BF16_SPREAD: [i8; 32] = {
    let mut table = [-1i8; 32];
    let mut i = 0;
    while i < 8 {
        let (half, lane) = (i / 4, i % 4);
        table[16 * half + 4 * lane + 2] = (2 * i) as i8;
        table[16 * half + 4 * lane + 3] = (2 * i + 1) as i8;
        i += 1;
    }
    table
};

impl Element for BF16 {
    const BYTES: usize = 2;
    const TILE_X: usize = HALF_TILE_X;

    #[inline]
    fn get(row: &[u8], j: usize) -> f32 {
        f32::from_bits(u32::from(half_at(row, 2 * j)) << 16)
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn eight(row: &[u8], j: usize) -> m256 {
        use safe_arch::{
            cast_to_m256_from_m256i, load_unaligned_m128i, set_m128i_m256i,
            shuffle_av_i8z_half_m256i,
        };
        // The sixteen bytes in both halves (one broadcast load), then one byte shuffle puts
        // values 0–3 (low half) and 4–7 (high half) in the top 16 bits of their lanes, zeros
        // below: no shift, so the conversion leaves the multiply-add ports to the tile.
        let bits = load_unaligned_m128i(&sixteen(row, 2 * j));
        cast_to_m256_from_m256i(shuffle_av_i8z_half_m256i(
            set_m128i_m256i(bits, bits),
            m256i::from(BF16_SPREAD),
        ))
    }

    /// The sixteen bytes in all four quarters (one broadcast load), then one byte shuffle puts
    /// values 0–3 and 4–7 in the top 16 bits of their lanes, in each half: the conversion is
    /// one shuffle per weight row, as the weights-side-by-side tile's two per pair of rows.
    #[cfg(wide)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn twice(row: &[u8], j: usize) -> m512 {
        const SPREAD: [i8; 64] = {
            let mut table = [0i8; 64];
            let mut i = 0;
            while i < 64 {
                table[i] = BF16_SPREAD[i % 32];
                i += 1;
            }
            table
        };
        safe_arch::cast_to_m512_from_m512i(crate::intrinsics::broadcast_shuffle(
            &sixteen(row, 2 * j),
            &SPREAD,
        ))
    }

    #[cfg(wide)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn pair(low: &[u8], high: &[u8], j: usize) -> m512 {
        use safe_arch::{
            cast_to_m512_from_m512i, convert_to_u32_m512i_from_u16_m256i, load_unaligned_m128i,
            set_m128i_m256i, set_splat_i32_m512i, shl_each_u32_m512i,
        };
        let bits = set_m128i_m256i(
            load_unaligned_m128i(&sixteen(high, 2 * j)),
            load_unaligned_m128i(&sixteen(low, 2 * j)),
        );
        cast_to_m512_from_m512i(shl_each_u32_m512i(
            convert_to_u32_m512i_from_u16_m256i(bits),
            set_splat_i32_m512i(16),
        ))
    }
}

impl Element for F32 {
    const BYTES: usize = 4;
    #[inline]
    fn get(row: &[u8], j: usize) -> f32 {
        let at = 4 * j;
        f32::from_le_bytes(row[at..at + 4].try_into().expect("4 bytes"))
    }

    #[cfg(vector)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn eight(row: &[u8], j: usize) -> m256 {
        let bytes: &[u8; 32] = row[4 * j..4 * j + 32].try_into().expect("32 bytes");
        m256::from(std::array::from_fn::<f32, 8, _>(|i| {
            f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"))
        }))
    }

    #[cfg(wide)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn twice(row: &[u8], j: usize) -> m512 {
        crate::intrinsics::twice(Self::eight(row, j))
    }

    #[cfg(wide)]
    #[allow(clippy::inline_always)] // in the tile loop
    #[inline(always)]
    fn pair(low: &[u8], high: &[u8], j: usize) -> m512 {
        use safe_arch::{cast_m256_to_m512, insert_m256_to_m512};
        insert_m256_to_m512::<1>(cast_m256_to_m512(Self::eight(low, j)), Self::eight(high, j))
    }
}

/// The definition's eight lanes for weight row `w` and input row `x` (`x.len()` values, a
/// multiple of [`LANES`]): the scalar level's path and the vector tiles' reference.
pub(super) fn pair_lanes<E: Element>(w: &[u8], x: &[f32]) -> [f32; LANES] {
    let mut lanes = [0.0f32; LANES];
    for (j, values) in x.chunks_exact(LANES).enumerate() {
        for (l, (lane, &v)) in lanes.iter_mut().zip(values).enumerate() {
            *lane = E::get(w, LANES * j + l).mul_add(v, *lane);
        }
    }
    lanes
}

/// The definition of one pair's product.
#[cfg(test)]
pub(super) fn dot<E: Element>(w: &[u8], x: &[f32]) -> f32 {
    super::lane_sum(pair_lanes::<E>(w, x))
}

/// The products of weight rows `w` with the input rows `x` (`k` values each), by the scalar
/// definition: `[input][weight]` lanes.
pub(super) fn accumulate_scalar<E: Element, const C: usize>(
    w: [&[u8]; TILE_W],
    x: [&[f32]; C],
) -> [[[f32; LANES]; TILE_W]; C] {
    std::array::from_fn(|c| std::array::from_fn(|r| pair_lanes::<E>(w[r], x[c])))
}

/// Values per step of [`accumulate`]'s main loop: a cache line of F16 or BF16 weights per row.
#[cfg(vector)]
const STEP: usize = 4 * LANES;

/// [`accumulate_scalar`] with AVX2 and FMA: each weight vector converted once for the `C`
/// input rows. The main loop takes [`STEP`] values at a time from slices of known length (no
/// bounds checks inside, one prefetch per row); a row's last values (below a step) follow one
/// lane group at a time.
#[cfg(vector)]
#[allow(clippy::inline_always)] // the tile's loop, specialised per type
#[inline(always)]
pub(super) fn accumulate<E: Element, const C: usize>(
    w: [&[u8]; TILE_W],
    x: [&[f32]; C],
    k: usize,
) -> [[[f32; LANES]; TILE_W]; C] {
    use safe_arch::zeroed_m256;
    let mut acc: [[m256; TILE_W]; C] = [[zeroed_m256(); TILE_W]; C];
    sweep::<E, C, Lane>(w, x, k, &mut acc);
    // Loops, not `map`: left out of line, it was a tenth of the tile's time.
    let mut lanes = [[[0.0f32; LANES]; TILE_W]; C];
    for (lanes, acc) in lanes.iter_mut().zip(&acc) {
        for (lanes, acc) in lanes.iter_mut().zip(acc) {
            *lanes = (*acc).into();
        }
    }
    lanes
}

/// One lane group of a tile: values `j..j + 8` of the weight rows `w` and input rows `x`,
/// into its accumulators. A trait with an always-inlined method rather than a closure or a
/// function item: LLVM left those out of line for F32's wide tile (its accumulators then
/// lived in memory, at half the AVX2 tile's speed).
#[cfg(vector)]
trait Step<const C: usize> {
    /// Input values per weight value in `x`: 2 where two input rows lie side by side.
    const SPREAD: usize = 1;
    type Acc;
    fn step<E: Element>(w: &[&[u8]; TILE_W], x: &[&[f32]; C], j: usize, acc: &mut Self::Acc);
}

/// [`accumulate`]'s step: [`lane_step`].
#[cfg(vector)]
struct Lane;

#[cfg(vector)]
impl<const C: usize> Step<C> for Lane {
    type Acc = [[m256; TILE_W]; C];
    #[allow(clippy::inline_always)] // the tile's inner loop
    #[inline(always)]
    fn step<E: Element>(w: &[&[u8]; TILE_W], x: &[&[f32]; C], j: usize, acc: &mut Self::Acc) {
        lane_step::<E, C>(w, x, j, acc);
    }
}

/// [`accumulate_wide`]'s step: [`wide_step`].
#[cfg(wide)]
struct Wide;

#[cfg(wide)]
impl<const C: usize> Step<C> for Wide {
    type Acc = [[m512; TILE_W / 2]; C];
    #[allow(clippy::inline_always)] // the tile's inner loop
    #[inline(always)]
    fn step<E: Element>(w: &[&[u8]; TILE_W], x: &[&[f32]; C], j: usize, acc: &mut Self::Acc) {
        wide_step::<E, C>(w, x, j, acc);
    }
}

/// The tiles' loop over a row: `S::step` takes values `j..j + 8` (of the inputs, values
/// `S::SPREAD · j..`). The main loop
/// takes [`STEP`] values at a time from slices of known length (no bounds checks inside, one
/// prefetch per row); a row's last values (below a step) follow one lane group at a time.
#[cfg(vector)]
#[allow(clippy::inline_always)] // the tile's loop, specialised per type and path
#[inline(always)]
fn sweep<E: Element, const C: usize, S: Step<C>>(
    w: [&[u8]; TILE_W],
    x: [&[f32]; C],
    k: usize,
    acc: &mut S::Acc,
) {
    let whole = k / STEP * STEP;
    let mut j = 0;
    while j < whole {
        for row in &w {
            crate::intrinsics::prefetch(row.as_ptr().wrapping_add(j * E::BYTES + super::PREFETCH));
        }
        let bytes = STEP * E::BYTES;
        let part = |r: usize| &w[r][j * E::BYTES..][..bytes];
        let weights = [part(0), part(1), part(2), part(3)];
        let mut inputs: [&[f32]; C] = [&[]; C];
        for (inputs, x) in inputs.iter_mut().zip(&x) {
            *inputs = &x[S::SPREAD * j..][..S::SPREAD * STEP];
        }
        for s in (0..STEP).step_by(LANES) {
            S::step::<E>(&weights, &inputs, s, acc);
        }
        j += STEP;
    }
    while j < k {
        S::step::<E>(&w, &x, j, acc);
        j += LANES;
    }
}

/// One lane group of [`accumulate`]: values `j..j + 8` of the weight rows `w` and input rows
/// `x`, into the tile's accumulators.
#[cfg(vector)]
#[allow(clippy::inline_always)] // the tile's inner loop
#[inline(always)]
fn lane_step<E: Element, const C: usize>(
    w: &[&[u8]; TILE_W],
    x: &[&[f32]; C],
    j: usize,
    acc: &mut [[m256; TILE_W]; C],
) {
    use safe_arch::{fused_mul_add_m256, load_unaligned_m256, zeroed_m256};
    // The inputs first, then one weight vector at a time: `C` input vectors, one weight and
    // `4 · C` accumulators in AVX2's sixteen registers.
    let mut v = [zeroed_m256(); C];
    for (v, x) in v.iter_mut().zip(x) {
        *v = load_unaligned_m256(x[j..j + LANES].try_into().expect("eight values"));
    }
    for r in 0..TILE_W {
        let weights = E::eight(w[r], j);
        for c in 0..C {
            acc[c][r] = fused_mul_add_m256(weights, v[c], acc[c][r]);
        }
    }
}

/// [`accumulate`] with AVX-512 (the `avx512` level): the same lanes, two weight rows' side by
/// side in each 512-bit register, every input vector in both halves. Per lane group: two
/// weight conversions, `C` broadcast loads (no arithmetic) and `2 · C` multiply-adds of
/// sixteen lanes, against four conversions and `4 · C` multiply-adds of eight on AVX2; `2 · C`
/// accumulators, two weight registers and one input in AVX-512's thirty-two registers.
#[cfg(wide)]
#[allow(clippy::inline_always)] // the tile's loop, specialised per type
#[inline(always)]
pub(super) fn accumulate_wide<E: Element, const C: usize>(
    w: [&[u8]; TILE_W],
    x: [&[f32]; C],
    k: usize,
) -> [[[f32; LANES]; TILE_W]; C] {
    use safe_arch::zeroed_m512;
    let mut acc: [[m512; TILE_W / 2]; C] = [[zeroed_m512(); TILE_W / 2]; C];
    sweep::<E, C, Wide>(w, x, k, &mut acc);
    let mut lanes = [[[0.0f32; LANES]; TILE_W]; C];
    for (lanes, acc) in lanes.iter_mut().zip(&acc) {
        for (p, acc) in acc.iter().enumerate() {
            let both: [f32; 2 * LANES] = (*acc).into();
            lanes[2 * p].copy_from_slice(&both[..LANES]);
            lanes[2 * p + 1].copy_from_slice(&both[LANES..]);
        }
    }
    lanes
}

/// One lane group of [`accumulate_wide`].
#[cfg(wide)]
#[allow(clippy::inline_always)] // the tile's inner loop
#[inline(always)]
fn wide_step<E: Element, const C: usize>(
    w: &[&[u8]; TILE_W],
    x: &[&[f32]; C],
    j: usize,
    acc: &mut [[m512; TILE_W / 2]; C],
) {
    use safe_arch::{fused_mul_add_m512, load_unaligned_m256};
    let weights = [E::pair(w[0], w[1], j), E::pair(w[2], w[3], j)];
    for (acc, x) in acc.iter_mut().zip(x) {
        let v = crate::intrinsics::twice(load_unaligned_m256(
            x[j..j + LANES].try_into().expect("eight values"),
        ));
        for (acc, weights) in acc.iter_mut().zip(&weights) {
            *acc = fused_mul_add_m512(*weights, v, *acc);
        }
    }
}

/// Input rows two by two, side by side, for [`accumulate_paired`]: pair `p` (rows `2p` and
/// `2p + 1`) is `2k` values, each lane group of row `2p` followed by the same lane group of
/// row `2p + 1`, so that one 512-bit load gives both rows' eight values. Made once per
/// product (the inputs are a small part of its bytes) and read by every tile.
#[derive(Default)]
#[cfg_attr(not(wide), allow(dead_code))] // only AVX-512 builds lay inputs out in pairs
pub(super) struct Paired {
    data: Vec<f32>,
    k: usize,
}

#[cfg_attr(not(wide), allow(dead_code))]
impl Paired {
    /// The first `rows` rows (a multiple of four: whole tiles of two pairs) of `x`, whose
    /// rows are `k` values `stride` apart.
    pub(super) fn of(&mut self, x: &[f32], stride: usize, k: usize, rows: usize) {
        debug_assert!(rows.is_multiple_of(4) && k.is_multiple_of(LANES));
        self.k = k;
        // Whatever the buffer held is overwritten: `resize` only fills what it adds.
        self.data.resize(rows * k, 0.0);
        for (p, out) in self.data.chunks_exact_mut(2 * k).enumerate() {
            let low = &x[2 * p * stride..][..k];
            let high = &x[(2 * p + 1) * stride..][..k];
            let groups = low.chunks_exact(LANES).zip(high.chunks_exact(LANES));
            for (out, (low, high)) in out.chunks_exact_mut(2 * LANES).zip(groups) {
                out[..LANES].copy_from_slice(low);
                out[LANES..].copy_from_slice(high);
            }
        }
    }

    /// The rows laid out.
    pub(super) fn rows(&self) -> usize {
        self.data.len().checked_div(self.k).unwrap_or(0)
    }

    /// Pair `p`: rows `2p` and `2p + 1`, side by side.
    pub(super) fn pair(&self, p: usize) -> &[f32] {
        &self.data[2 * p * self.k..][..2 * self.k]
    }
}

/// [`accumulate_paired`]'s step: [`paired_step`].
#[cfg(wide)]
struct Pair;

#[cfg(wide)]
impl<const P: usize> Step<P> for Pair {
    const SPREAD: usize = 2;
    type Acc = [[m512; TILE_W]; P];
    #[allow(clippy::inline_always)] // the tile's inner loop
    #[inline(always)]
    fn step<E: Element>(w: &[&[u8]; TILE_W], x: &[&[f32]; P], j: usize, acc: &mut Self::Acc) {
        paired_step::<E, P>(w, x, j, acc);
    }
}

/// [`accumulate`] with AVX-512 for batches: the same lanes, two *input* rows side by side in
/// each 512-bit register ([`Paired`]), each weight vector in both halves ([`Element::twice`]).
/// Per lane group: [`TILE_W`] weight vectors (for F32 broadcast loads alone, for BF16 and F16
/// one shuffle or conversion each) and `P` loads of input pairs, then `TILE_W · P`
/// multiply-adds of sixteen lanes (the weights-side-by-side tile inserts a weight row's half
/// into each register);
/// `TILE_W · P` accumulators, the weights and one input pair in AVX-512's thirty-two
/// registers. `x` holds the pairs; the result is `[input][weight]` for the `2P` input rows.
#[cfg(wide)]
#[allow(clippy::inline_always)] // the tile's loop, specialised per type
#[inline(always)]
pub(super) fn accumulate_paired<E: Element, const P: usize, const C: usize>(
    w: [&[u8]; TILE_W],
    x: [&[f32]; P],
    k: usize,
) -> [[[f32; LANES]; TILE_W]; C] {
    use safe_arch::zeroed_m512;
    const { assert!(C == 2 * P) };
    let mut acc: [[m512; TILE_W]; P] = [[zeroed_m512(); TILE_W]; P];
    sweep::<E, P, Pair>(w, x, k, &mut acc);
    let mut lanes = [[[0.0f32; LANES]; TILE_W]; C];
    for (p, acc) in acc.iter().enumerate() {
        for (r, acc) in acc.iter().enumerate() {
            let both: [f32; 2 * LANES] = (*acc).into();
            lanes[2 * p][r].copy_from_slice(&both[..LANES]);
            lanes[2 * p + 1][r].copy_from_slice(&both[LANES..]);
        }
    }
    lanes
}

/// One lane group of [`accumulate_paired`].
#[cfg(wide)]
#[allow(clippy::inline_always)] // the tile's inner loop
#[inline(always)]
fn paired_step<E: Element, const P: usize>(
    w: &[&[u8]; TILE_W],
    x: &[&[f32]; P],
    j: usize,
    acc: &mut [[m512; TILE_W]; P],
) {
    use safe_arch::{fused_mul_add_m512, load_m512};
    let weights: [m512; TILE_W] = std::array::from_fn(|r| E::twice(w[r], j));
    for (acc, x) in acc.iter_mut().zip(x) {
        let v = load_m512(
            x[2 * j..2 * j + 2 * LANES]
                .try_into()
                .expect("sixteen values"),
        );
        for (acc, weights) in acc.iter_mut().zip(&weights) {
            *acc = fused_mul_add_m512(*weights, v, *acc);
        }
    }
}
