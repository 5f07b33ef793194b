#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::float_cmp,
    clippy::many_single_char_names
)]

use super::*;
use proptest::prelude::*;

use crate::test_rng::Rng;

/// The biased exponent of the smallest F16 magnitudes the cases draw (2^-5 to 2^2).
const LOWEST: u16 = 10;

/// A random F16 value of magnitude between 2^-5 and 2^2, as F32.
fn float(rng: &mut Rng) -> f32 {
    f16_to_f32(rng.half(LOWEST))
}

/// Owned tensors for one attention, contiguous, and the view of them.
struct Case {
    shape: Shape,
    params: Params,
    q: Vec<f32>,
    k: Vec<u16>,
    v: Vec<u16>,
    mask: Option<Vec<u16>>,
    sinks: Option<Vec<f32>>,
}

const OPEN: u16 = 0x0000;
const CLOSED: u16 = F16_NEG_INF;

impl Case {
    fn attention(&self) -> Attention<'_> {
        let s = &self.shape;
        Attention {
            shape: *s,
            params: self.params,
            q: View {
                data: &self.q,
                stride: [s.dk, s.dk * s.rows, s.dk * s.rows * s.heads],
            },
            k: Cache::F16(self.k_view()),
            v: Cache::F16(self.v_view()),
            mask: self.mask.as_ref().map(|m| View {
                data: m,
                stride: [s.cells, s.cells * s.rows, s.cells * s.rows * s.mask_heads],
            }),
            sinks: self.sinks.as_deref(),
        }
    }

    /// The keys' F16 view.
    fn k_view(&self) -> View<'_, u16> {
        let s = &self.shape;
        View {
            data: &self.k,
            stride: [s.dk, s.dk * s.cells, s.dk * s.cells * s.k_heads],
        }
    }

    /// The values' F16 view.
    fn v_view(&self) -> View<'_, u16> {
        let s = &self.shape;
        View {
            data: &self.v,
            stride: [s.dv, s.dv * s.cells, s.dv * s.cells * s.v_heads],
        }
    }

    /// The kernel's output (`streams × rows × heads` rows of `dv`), split between `nth`
    /// threads (run one after another).
    fn run(&self, nth: usize) -> Vec<f32> {
        let s = &self.shape;
        let mut out = vec![f32::NAN; s.streams * s.rows * s.heads * s.dv];
        let attention = self.attention();
        for ith in 0..nth {
            attention.run(ith, nth, &mut |row, values| {
                out[row * s.dv..(row + 1) * s.dv].copy_from_slice(values);
            });
        }
        out
    }

    /// The same attention in F64, straight from the definition.
    fn reference(&self) -> Vec<f64> {
        let s = &self.shape;
        let a = self.attention();
        let mut out = vec![0.0; s.streams * s.rows * s.heads * s.dv];
        for stream in 0..s.streams {
            for row in 0..s.rows {
                for h in 0..s.heads {
                    let q = a.q.row(row, h, stream, s.dk);
                    let kh = h / (s.heads / s.k_heads);
                    let ks = stream / (s.streams / s.k_streams);
                    let vh = h / (s.heads / s.v_heads);
                    let vs = stream / (s.streams / s.v_streams);
                    let slope = f64::from(a.slope(h));
                    let mut scores = Vec::new();
                    for c in 0..s.cells {
                        let bias = match a.mask {
                            Some(m) => {
                                let bits =
                                    m.row(row, h % s.mask_heads, stream % s.mask_streams, s.cells)
                                        [c];
                                if bits == CLOSED {
                                    continue;
                                }
                                slope * f64::from(f16_to_f32(bits))
                            }
                            None => 0.0,
                        };
                        let k = self.k_view().row(c, kh, ks, s.dk);
                        let dot: f64 = q
                            .iter()
                            .zip(k)
                            .map(|(&x, &y)| f64::from(x) * f64::from(f16_to_f32(y)))
                            .sum();
                        let mut x = dot * f64::from(self.params.scale);
                        if self.params.softcap != 0.0 {
                            let cap = f64::from(self.params.softcap);
                            x = cap * (x / cap).tanh();
                        }
                        scores.push((c, x + bias));
                    }
                    let sink = self.sinks.as_ref().map(|s| f64::from(s[h]));
                    let max = scores
                        .iter()
                        .map(|&(_, x)| x)
                        .chain(sink)
                        .fold(f64::NEG_INFINITY, f64::max);
                    let mut total = sink.map_or(0.0, |x| (x - max).exp());
                    let at = ((stream * s.rows + row) * s.heads + h) * s.dv;
                    for &(c, x) in &scores {
                        let p = (x - max).exp();
                        total += p;
                        let v = self.v_view().row(c, vh, vs, s.dv);
                        for d in 0..s.dv {
                            out[at + d] += p * f64::from(f16_to_f32(v[d]));
                        }
                    }
                    if total > 0.0 {
                        out[at..at + s.dv].iter_mut().for_each(|x| *x /= total);
                    }
                }
            }
        }
        out
    }
}

fn shape(dk: usize, dv: usize, rows: usize, heads: usize, k_heads: usize, cells: usize) -> Shape {
    Shape {
        dk,
        dv,
        rows,
        heads,
        streams: 1,
        cells,
        k_heads,
        k_streams: 1,
        v_heads: k_heads,
        v_streams: 1,
        mask_heads: 1,
        mask_streams: 1,
    }
}

fn params() -> Params {
    Params {
        scale: 0.125,
        max_bias: 0.0,
        softcap: 0.0,
    }
}

/// Random tensors for `shape`; the mask opens cell `c` to row `r` when `open(r, c)`.
fn case(shape: Shape, params: Params, seed: u64, open: impl Fn(usize, usize) -> bool) -> Case {
    let mut rng = Rng(seed | 1);
    let s = &shape;
    let q = (0..s.dk * s.rows * s.heads * s.streams)
        .map(|_| float(&mut rng))
        .collect();
    let k = (0..s.dk * s.cells * s.k_heads * s.k_streams)
        .map(|_| rng.half(LOWEST))
        .collect();
    let v = (0..s.dv * s.cells * s.v_heads * s.v_streams)
        .map(|_| rng.half(LOWEST))
        .collect();
    let mut mask = Vec::new();
    for _ in 0..s.mask_streams * s.mask_heads {
        for r in 0..s.rows {
            mask.extend((0..s.cells).map(|c| if open(r, c) { OPEN } else { CLOSED }));
        }
    }
    Case {
        shape,
        params,
        q,
        k,
        v,
        mask: Some(mask),
        sinks: None,
    }
}

fn assert_close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(err <= 2e-5 + 2e-5 * w.abs(), "element {i}: {g} against {w}");
    }
}

#[test]
fn f16_conversion_is_exact_for_every_bit_pattern() {
    for bits in 0..=u16::MAX {
        let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exponent = i32::from((bits >> 10) & 0x1F);
        let mantissa = f64::from(bits & 0x3FF);
        let want = match exponent {
            0 => sign * mantissa * 2f64.powi(-24),
            31 if mantissa == 0.0 => sign * f64::INFINITY,
            31 => f64::NAN,
            e => sign * (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
        };
        let got = f16_to_f32(bits);
        if want.is_nan() {
            assert!(got.is_nan(), "{bits:#06x}");
        } else {
            assert_eq!(f64::from(got), want, "{bits:#06x}");
            assert_eq!(got.is_sign_negative(), bits & 0x8000 != 0, "{bits:#06x}");
        }
    }
}

#[test]
fn exp_is_within_two_ulp_and_zero_at_minus_infinity() {
    assert_eq!(exp_nonpositive(0.0), 1.0);
    assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_nonpositive(-200.0), 0.0);
    let mut x = -87.0f32;
    while x <= 0.0 {
        let want = f64::from(x).exp();
        let got = f64::from(exp_nonpositive(x));
        let ulp = f64::from(f32::EPSILON) * want;
        assert!(
            (got - want).abs() <= 2.0 * ulp,
            "exp({x}) = {got}, want {want}"
        );
        x += 0.0137;
    }
}

#[test]
fn matches_the_definition_with_a_causal_mask_and_grouped_heads() {
    // Head sizes of every kind: multiples of 64 and of 16, of 8 only (40, 72) and of
    // neither (20, 13, 1), where the kernel takes the dimensions past the last whole group one
    // at a time.
    for (dk, dv, rows, heads, k_heads) in [
        (64, 64, 70, 9, 3),
        (128, 80, 5, 4, 4),
        (32, 48, 1, 6, 2),
        (40, 72, 33, 2, 1),
        (20, 13, 9, 3, 3),
        (13, 1, 4, 2, 1),
    ] {
        let cells = 256;
        let start = 150;
        let c = case(
            shape(dk, dv, rows, heads, k_heads, cells),
            params(),
            7,
            |r, cell| cell <= start + r,
        );
        assert_close(&c.run(2), &c.reference());
    }
}

#[test]
fn matches_the_definition_with_alibi_softcap_sinks_streams_and_holes() {
    let mut s = shape(64, 64, 40, 8, 2, 200);
    s.streams = 2;
    s.k_streams = 2;
    s.v_streams = 2;
    s.mask_streams = 2;
    let mut c = case(
        s,
        Params {
            scale: 0.1,
            max_bias: 8.0,
            softcap: 30.0,
        },
        11,
        |r, cell| cell % 7 != 3 && cell <= 120 + r,
    );
    // ALiBi-style biases on the open cells.
    for (i, bits) in c.mask.as_mut().unwrap().iter_mut().enumerate() {
        if *bits == OPEN {
            *bits = [0x0000, 0xBC00, 0xC000, 0xC200][i % 4];
        }
    }
    c.sinks = Some((0..8).map(|h| h as f32 * 0.5 - 1.0).collect());
    assert_close(&c.run(3), &c.reference());
}

#[test]
fn a_row_with_every_cell_closed_is_zero_and_no_mask_opens_every_cell() {
    let c = case(shape(32, 32, 3, 2, 1, 40), params(), 5, |r, _| r != 1);
    let out = c.run(1);
    assert!(out[2 * 32..4 * 32].iter().all(|&x| x == 0.0));
    assert_close(&out, &c.reference());
    let mut open = case(shape(32, 32, 3, 2, 1, 40), params(), 5, |_, _| true);
    open.mask = None;
    assert_close(&open.run(2), &open.reference());
}

/// The output rows of the query at `position` (all heads) from a case where `query_rows`
/// lists the positions of its rows.
fn rows_of(c: &Case, out: &[f32], query_rows: &[usize], position: usize) -> Vec<u32> {
    let s = &c.shape;
    let r = query_rows.iter().position(|&p| p == position).unwrap();
    out[r * s.heads * s.dv..(r + 1) * s.heads * s.dv]
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// One sequence of `len` tokens (keys and values from `seed`), its tokens at cells `place(p)`
/// of a view of `cells` cells (the others hold other data, closed), queried by the rows at
/// `query_rows` (causal), split between `nth` threads.
fn sequence_case(
    len: usize,
    cells: usize,
    place: &dyn Fn(usize) -> usize,
    query_rows: &[usize],
    seed: u64,
) -> Case {
    sequence_case_of((64, 64), len, cells, place, query_rows, seed)
}

/// [`sequence_case`] with head sizes `(dk, dv)`.
fn sequence_case_of(
    (dk, dv): (usize, usize),
    len: usize,
    cells: usize,
    place: &dyn Fn(usize) -> usize,
    query_rows: &[usize],
    seed: u64,
) -> Case {
    let (heads, k_heads) = (9, 3);
    let mut s = shape(dk, dv, query_rows.len(), heads, k_heads, cells);
    s.rows = query_rows.len();
    let mut tokens = Rng(seed | 1);
    let mut other = Rng(seed.wrapping_mul(31) | 1);
    let mut k = vec![0u16; dk * cells * k_heads];
    let mut v = vec![0u16; dv * cells * k_heads];
    // Other cells first: junk that must never be read.
    for x in k.iter_mut().chain(v.iter_mut()) {
        *x = other.half(LOWEST);
    }
    let mut q_of = Vec::new();
    for p in 0..len {
        let cell = place(p);
        for h in 0..k_heads {
            for d in 0..dk {
                k[(h * cells + cell) * dk + d] = tokens.half(LOWEST);
            }
            for d in 0..dv {
                v[(h * cells + cell) * dv + d] = tokens.half(LOWEST);
            }
        }
        q_of.push(
            (0..heads * dk)
                .map(|_| float(&mut tokens))
                .collect::<Vec<f32>>(),
        );
    }
    let mut q = vec![0f32; dk * s.rows * heads];
    for (r, &p) in query_rows.iter().enumerate() {
        for h in 0..heads {
            q[(h * s.rows + r) * dk..(h * s.rows + r + 1) * dk]
                .copy_from_slice(&q_of[p][h * dk..(h + 1) * dk]);
        }
    }
    let mut mask = vec![CLOSED; cells * s.rows];
    for (r, &p) in query_rows.iter().enumerate() {
        for seen in 0..=p {
            mask[r * cells + place(seen)] = OPEN;
        }
    }
    Case {
        shape: s,
        params: params(),
        q,
        k,
        v,
        mask: Some(mask),
        sinks: None,
    }
}

#[test]
fn a_row_is_the_same_whatever_its_batch_placement_and_threads() {
    let len = 300;
    let all: Vec<usize> = (0..len).collect();
    let batch = sequence_case(len, 512, &|p| p, &all, 3);
    let batch_out = batch.run(2);
    for position in [0, 1, 63, 64, 65, 150, 299] {
        let want = rows_of(&batch, &batch_out, &all, position);
        // Alone, in a longer view, one or three threads.
        let alone = sequence_case(len, 768, &|p| p, &[position], 3);
        for nth in [1, 3] {
            assert_eq!(
                rows_of(&alone, &alone.run(nth), &[position], position),
                want,
                "alone at {position}"
            );
        }
        // In a chunk of other rows starting elsewhere.
        let chunk: Vec<usize> = (position.saturating_sub(16)..=position).collect();
        let chunked = sequence_case(len, 512, &|p| p, &chunk, 3);
        assert_eq!(
            rows_of(&chunked, &chunked.run(2), &chunk, position),
            want,
            "chunk at {position}"
        );
        // Its cells interleaved with another sequence's (a unified cache).
        let spread = sequence_case(len, 1024, &|p| 2 * p + 1, &[position], 3);
        assert_eq!(
            rows_of(&spread, &spread.run(2), &[position], position),
            want,
            "spread at {position}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any chunk of queries over any placement of the cells gives each row the bits it gets
    /// alone, whatever the head sizes.
    #[test]
    fn rows_are_batch_invariant(
        dims in prop::sample::select(vec![(64, 64), (128, 128), (80, 48), (40, 24), (20, 13)]),
        len in 1usize..200,
        first in 0usize..200,
        count in 1usize..50,
        stride in 1usize..3,
        nth in 1usize..4,
        seed in any::<u64>(),
    ) {
        let first = first % len;
        let rows: Vec<usize> = (first..(first + count).min(len)).collect();
        let cells = stride * len + 64;
        let place = |p: usize| stride * p;
        let batch = sequence_case_of(dims, len, cells, &place, &rows, seed);
        let out = batch.run(nth);
        for &p in &rows {
            let alone = sequence_case_of(dims, len, len + 1, &|p| p, &[p], seed);
            prop_assert_eq!(rows_of(&batch, &out, &rows, p), rows_of(&alone, &alone.run(1), &[p], p));
        }
    }
}

#[test]
fn a_block_converts_keys_into_columns_and_values_into_rows_for_every_length() {
    for (dk, dv) in [(32, 16), (20, 13)] {
        converts_keys_into_columns_and_values_into_rows(dk, dv);
    }
}

fn converts_keys_into_columns_and_values_into_rows(dk: usize, dv: usize) {
    let c = case(shape(dk, dv, 1, 2, 1, 96), params(), 11, |_, _| true);
    let a = c.attention();
    let (k, v) = (c.k_view(), c.v_view());
    let (mut kt, mut vb, mut kr) = (
        vec![f32::NAN; dk * BLOCK],
        vec![f32::NAN; BLOCK * dv],
        vec![f32::NAN; BLOCK * dk],
    );
    for n in [1, 7, 8, 9, 63, 64] {
        // Spread cells, as a mask with holes leaves them.
        let cells: Vec<usize> = (0..n).map(|j| j + j / 3).collect();
        kt.fill(f32::NAN);
        convert_block(
            &cells,
            |cell, out| a.k.row_into(cell, 0, 0, out),
            |cell, out| a.v.row_into(cell, 0, 0, out),
            dk,
            dv,
            &mut kt,
            &mut vb,
            &mut kr,
        );
        for d in 0..dk {
            for j in 0..BLOCK {
                let want = cells
                    .get(j)
                    .map_or(0.0, |&cell| f16_to_f32(k.row(cell, 0, 0, dk)[d]));
                assert_eq!(
                    kt[d * BLOCK + j].to_bits(),
                    want.to_bits(),
                    "n {n}, key {j}, dim {d}"
                );
            }
        }
        for (j, &cell) in cells.iter().enumerate() {
            for d in 0..dv {
                assert_eq!(vb[j * dv + d], f16_to_f32(v.row(cell, 0, 0, dv)[d]));
            }
        }
    }
}

/// `x`'s F16 bits, for a normal F16 value or zero that F16 holds exactly.
fn half_of(x: f32) -> u16 {
    if x == 0.0 {
        return 0;
    }
    let bits = x.to_bits();
    let sign = u16::try_from(bits >> 31).unwrap() << 15;
    let exponent = ((bits >> 23) & 0xff).cast_signed() - 127 + 15;
    assert!(
        (1..31).contains(&exponent) && bits.trailing_zeros() >= 13,
        "{x}"
    );
    sign | u16::try_from(exponent << 10).unwrap() | u16::try_from((bits >> 13) & 0x3ff).unwrap()
}

/// `values` (F16 bits, each `d` times an integer the block type holds) as blocks of 32 with
/// scale `d`: `Q8_0` (`eight`) or `Q4_0`.
fn blocks(values: &[u16], d: f32, eight: bool) -> Vec<u8> {
    let half = half_of(d);
    let q = |bits: u16| {
        let n = f16_to_f32(bits) / d;
        assert_eq!(n.fract(), 0.0);
        n as i32
    };
    let mut out = Vec::new();
    for block in values.chunks_exact(32) {
        out.extend_from_slice(&half.to_le_bytes());
        if eight {
            out.extend(
                block
                    .iter()
                    .map(|&b| i8::try_from(q(b)).unwrap().cast_unsigned()),
            );
        } else {
            for j in 0..16 {
                let (low, high) = (q(block[j]) + 8, q(block[j + 16]) + 8);
                assert!((0..16).contains(&low) && (0..16).contains(&high));
                out.push(u8::try_from(low | (high << 4)).unwrap());
            }
        }
    }
    out
}

#[test]
fn quantized_caches_give_the_bits_of_the_same_values_in_f16() {
    // Keys and values that `Q8_0` (integers −127..127) and `Q4_0` (−8..7) blocks hold
    // exactly, scale 2^-4: the kernel's output from the blocks is the F16 cache's, bit for
    // bit, with grouped heads and a causal mask, on two threads.
    for eight in [true, false] {
        let d = 0.0625f32;
        let span: u64 = if eight { 127 } else { 8 };
        let mut c = case(shape(64, 64, 4, 2, 2, 40), params(), 7, |row, cell| {
            cell <= row + 30
        });
        let mut rng = Rng(if eight { 3 } else { 5 });
        let mut value = || {
            let n = (rng.next() % (2 * span)) as i32 - span as i32;
            let n = if eight { n.max(-127) } else { n.min(7) };
            // d · n is exact in F16 (at most 11 significant bits).
            let bits = half_of(d * n as f32);
            assert_eq!(f16_to_f32(bits), d * n as f32);
            bits
        };
        c.k.iter_mut().for_each(|k| *k = value());
        c.v.iter_mut().for_each(|v| *v = value());
        let want = c.run(2);
        let s = c.shape;
        let (k, v) = (blocks(&c.k, d, eight), blocks(&c.v, d, eight));
        let bytes = if eight {
            Cache::Q8_0_BYTES
        } else {
            Cache::Q4_0_BYTES
        };
        let stride = |dims: usize, heads: usize| {
            let row = dims / 32 * bytes;
            [row, row * s.cells, row * s.cells * heads]
        };
        let mut a = c.attention();
        let kv = View {
            data: &k,
            stride: stride(s.dk, s.k_heads),
        };
        let vv = View {
            data: &v,
            stride: stride(s.dv, s.v_heads),
        };
        (a.k, a.v) = if eight {
            (Cache::Q8_0(kv), Cache::Q8_0(vv))
        } else {
            (Cache::Q4_0(kv), Cache::Q4_0(vv))
        };
        let mut got = vec![f32::NAN; want.len()];
        for ith in 0..2 {
            a.run(ith, 2, &mut |row, values| {
                got[row * s.dv..(row + 1) * s.dv].copy_from_slice(values);
            });
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "Q8_0: {eight}");
        assert!(a.k.holds(64) && !a.k.holds(48));
    }
}

#[test]
#[should_panic(expected = "whole blocks of 32 values")]
fn a_quantized_cache_of_rows_short_of_a_block_is_refused() {
    // 48 dimensions: whole lane groups, not whole blocks.
    let c = case(shape(48, 48, 1, 1, 1, 4), params(), 9, |_, _| true);
    let bytes = vec![0u8; 4 * 2 * Cache::Q8_0_BYTES];
    let mut a = c.attention();
    a.k = Cache::Q8_0(View {
        data: &bytes,
        stride: [
            2 * Cache::Q8_0_BYTES,
            8 * Cache::Q8_0_BYTES,
            8 * Cache::Q8_0_BYTES,
        ],
    });
    a.run(0, 1, &mut |_, _| {});
}

#[test]
fn transpose8_swaps_rows_and_columns() {
    let rows: [[f32; 8]; 8] = std::array::from_fn(|i| std::array::from_fn(|j| (i * 8 + j) as f32));
    let t = transpose8(rows);
    for i in 0..8 {
        for j in 0..8 {
            assert_eq!(t[i][j], rows[j][i]);
        }
    }
}

#[test]
fn units_keep_a_sequence_s_rows_together_and_part_other_sequences() {
    // Rows 0-2 decode three sequences (their own cells), rows 3-9 prefill a fourth (causal).
    let open = |r: usize, c: usize| match r {
        0..=2 => c / 10 == r,
        _ => (30..=30 + r - 3).contains(&c),
    };
    let c = case(shape(16, 16, 10, 6, 2, 40), params(), 5, open);
    let a = c.attention();
    assert_eq!(a.segments(0), vec![0..1, 1..2, 2..3, 3..10]);
    let units = a.units(2);
    // Two key-value groups of three heads, four segments each.
    assert_eq!(units.len(), 8);
    assert!(units.iter().all(|u| u.heads.len() == 3));
    assert!(units.iter().any(|u| u.rows == (3..10)));
    // One sequence's short prefill alone (one key-value group): its tile is cut evenly
    // into two pieces per thread.
    let c = case(shape(16, 16, 19, 3, 1, 40), params(), 5, |r, c| c <= 20 + r);
    let units = c.attention().units(2);
    let rows: Vec<_> = units.iter().map(|u| u.rows.clone()).collect();
    assert_eq!(rows, vec![0..4, 4..9, 9..14, 14..19]);
    // Without a mask every row sees every cell: one segment.
    let mut c = case(shape(16, 16, 5, 1, 1, 40), params(), 5, |_, _| true);
    c.mask = None;
    assert_eq!(c.attention().segments(0), vec![0..5]);
}

/// The same bits on every machine, recorded (as the matrix product's): a causal mask with
/// holes, grouped heads and a short last block, split between 3 threads. The features whose
/// floats come from the C library (a soft cap's `tanhf`, sinks' `expf`, `ALiBi`'s `powf`) are
/// left out: the C library may round them differently on another machine.
#[test]
fn the_output_is_the_recorded_bits() {
    let c = case(shape(64, 64, 37, 9, 3, 150), params(), 0x5eed, |r, cell| {
        cell % 11 != 5 && cell <= 100 + r
    });
    insta::assert_snapshot!(crate::test_rng::fingerprint(&c.run(3)));
}

/// Every cache type but F16, with its block size in bytes (0: BF16 or F32 values).
const CACHE_TYPES: [(&str, usize); 8] = [
    ("bf16", 0),
    ("f32", 0),
    ("q8_0", Cache::Q8_0_BYTES),
    ("q4_0", Cache::Q4_0_BYTES),
    ("q4_1", Cache::Q4_1_BYTES),
    ("q5_0", Cache::Q5_0_BYTES),
    ("q5_1", Cache::Q5_1_BYTES),
    ("iq4_nl", Cache::IQ4_NL_BYTES),
];

/// A cache's data, owned.
enum Owned {
    Bits(Vec<u16>),
    Floats(Vec<f32>),
    Bytes(Vec<u8>),
}

/// `cells` rows of `d` values of cache type `name` (of [`CACHE_TYPES`]), random: BF16 and
/// F32 values and the blocks' F16 scales and minimums as [`float`]'s, random integer bytes.
fn random_rows(name: &str, size: usize, d: usize, cells: usize, rng: &mut Rng) -> Owned {
    match name {
        "bf16" => Owned::Bits(
            (0..d * cells)
                .map(|_| (float(rng).to_bits() >> 16) as u16)
                .collect(),
        ),
        "f32" => Owned::Floats((0..d * cells).map(|_| float(rng)).collect()),
        _ => {
            let headers = if matches!(name, "q4_1" | "q5_1") {
                2
            } else {
                1
            };
            let mut bytes = Vec::new();
            for _ in 0..d / 32 * cells {
                for _ in 0..headers {
                    bytes.extend_from_slice(&rng.half(LOWEST).to_le_bytes());
                }
                bytes.extend((2 * headers..size).map(|_| rng.next() as u8));
            }
            Owned::Bytes(bytes)
        }
    }
}

/// The cache of type `name` over `owned` (rows of `d` values, `cells` per head, one head).
fn cache_of<'a>(name: &str, owned: &'a Owned, row_units: usize, cells: usize) -> Cache<'a> {
    let stride = [row_units, row_units * cells, row_units * cells];
    match owned {
        Owned::Bits(data) => Cache::BF16(View { data, stride }),
        Owned::Floats(data) => Cache::F32(View { data, stride }),
        Owned::Bytes(data) => {
            let view = View { data, stride };
            match name {
                "q8_0" => Cache::Q8_0(view),
                "q4_0" => Cache::Q4_0(view),
                "q4_1" => Cache::Q4_1(view),
                "q5_0" => Cache::Q5_0(view),
                "q5_1" => Cache::Q5_1(view),
                _ => Cache::IQ4NL(view),
            }
        }
    }
}

/// A block's 32 values by ggml's `dequantize_row_*` for type `name`, one value at a time.
fn ggml_block(name: &str, b: &[u8]) -> [f32; 32] {
    let f16 = |at: usize| f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]));
    let nibble = |at: usize, j: usize| {
        if j < 16 {
            b[at + j] & 0x0f
        } else {
            b[at + j - 16] >> 4
        }
    };
    let fifth = |at: usize, j: usize| {
        let qh = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        ((qh >> j) & 1) as u8
    };
    std::array::from_fn(|j| match name {
        "q8_0" => f16(0) * f32::from(b[2 + j].cast_signed()),
        "q4_0" => f16(0) * (f32::from(nibble(2, j)) - 8.0),
        "q4_1" => f16(0) * f32::from(nibble(4, j)) + f16(2),
        "q5_0" => f16(0) * (f32::from(nibble(6, j) | fifth(2, j) << 4) - 16.0),
        "q5_1" => f16(0) * f32::from(nibble(8, j) | fifth(4, j) << 4) + f16(2),
        _ => f16(0) * f32::from(crate::matmul::IQ4[usize::from(nibble(2, j))]),
    })
}

#[test]
fn every_cache_type_reads_the_values_ggml_stores() {
    let mut rng = Rng(17);
    for (name, size) in CACHE_TYPES {
        let (d, cells) = (64, 5);
        let owned = random_rows(name, size, d, cells, &mut rng);
        let units = match &owned {
            Owned::Bytes(_) => d / 32 * size,
            _ => d,
        };
        let cache = cache_of(name, &owned, units, cells);
        for cell in 0..cells {
            let mut got = vec![f32::NAN; d];
            cache.row_into(cell, 0, 0, &mut got);
            let want: Vec<f32> = match &owned {
                Owned::Bits(bits) => bits[cell * d..][..d]
                    .iter()
                    .map(|&b| f32::from_bits(u32::from(b) << 16))
                    .collect(),
                Owned::Floats(values) => values[cell * d..][..d].to_vec(),
                Owned::Bytes(bytes) => bytes[cell * units..][..units]
                    .chunks_exact(size)
                    .flat_map(|block| ggml_block(name, block))
                    .collect(),
            };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{name}, cell {cell}");
        }
        assert_eq!(cache.holds(48), size == 0, "{name}");
    }
}

#[test]
fn every_cache_type_gives_the_bits_of_its_values_in_f32() {
    // Keys of one type and values of another, random; the same values read once more from
    // F32 caches: the kernel's output is the same bits, with grouped heads and a causal mask,
    // on two threads. (F32 against F16: the test above this one's F16 half.)
    let s = shape(64, 64, 3, 2, 1, 37);
    let c = case(s, params(), 11, |row, cell| cell <= row + 33);
    let mut rng = Rng(23);
    for (k, (name, size)) in CACHE_TYPES.iter().enumerate() {
        let (v_name, v_size) = CACHE_TYPES[(k + 3) % CACHE_TYPES.len()];
        let keys = random_rows(name, *size, s.dk, s.cells, &mut rng);
        let values = random_rows(v_name, v_size, s.dv, s.cells, &mut rng);
        let units = |owned: &Owned, d: usize, size: usize| match owned {
            Owned::Bytes(_) => d / 32 * size,
            _ => d,
        };
        let kc = cache_of(name, &keys, units(&keys, s.dk, *size), s.cells);
        let vc = cache_of(v_name, &values, units(&values, s.dv, v_size), s.cells);
        let floats = |cache: &Cache<'_>, d: usize| {
            let mut all = vec![0.0f32; d * s.cells];
            for (cell, row) in all.chunks_exact_mut(d).enumerate() {
                cache.row_into(cell, 0, 0, row);
            }
            all
        };
        let (kf, vf) = (floats(&kc, s.dk), floats(&vc, s.dv));
        let run = |k: Cache<'_>, v: Cache<'_>| {
            let mut a = c.attention();
            (a.k, a.v) = (k, v);
            let mut out = vec![f32::NAN; s.rows * s.heads * s.dv];
            for ith in 0..2 {
                a.run(ith, 2, &mut |row, got| {
                    out[row * s.dv..(row + 1) * s.dv].copy_from_slice(got);
                });
            }
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let want = run(
            cache_of("f32", &Owned::Floats(kf.clone()), s.dk, s.cells),
            cache_of("f32", &Owned::Floats(vf.clone()), s.dv, s.cells),
        );
        assert!(want.iter().all(|b| f32::from_bits(*b).is_finite()));
        assert_eq!(run(kc, vc), want, "keys {name}, values {v_name}");
    }
}
