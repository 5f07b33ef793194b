//! Normalisations whose bits do not depend on the instruction set: wick's `NORM` (layer norm)
//! and `SOFT_MAX`, run in place of ggml's in the deterministic mode.
//!
//! ggml's `NORM` (the layer norm of GPT-2, Phi, `StableLM`, Falcon, BLOOM, Command-R and other
//! architectures) sums a row's squared deviations in vectors of the build's width (16 lanes
//! with AVX-512, 8 with AVX2, 4 with SSE) and each vector's lanes in a shape of its own, so the
//! same model rounds differently on an AVX-512 machine and an AVX2 one. This one fixes the
//! order: both sums run in F64 over eight lanes (value `i` to lane `i mod 8`) added in a fixed
//! tree. A square of an F32 is exact in F64 (48 significant bits), so only the sums round, each
//! the same way on every CPU; the compiler vectorises the lanes. (RMS norm needs none of this:
//! ggml sums its squares in F64 in one scalar loop, the same on every CPU.)
//!
//! ggml's `SOFT_MAX` (a mixture-of-experts model's router) has the same two faults as its
//! `SwiGLU`: an exponential written once per instruction set, with the C library's `expf` for
//! the lanes past the last whole vector, and a sum shaped by the vector width. [`softmax`]
//! uses [`crate::activation::exp`] and the same fixed F64 sum.

/// Lanes of the two sums.
const LANES: usize = 8;

/// `out[i] = (x[i] − mean) / sqrt(variance + eps)` over the row `x` (ggml's `NORM`, without
/// the weight and bias the model multiplies and adds after it): the mean and the variance
/// (of the deviations, divided by the length) summed in F64 in a fixed order, the rest in F32.
/// `out` may not alias `x`; see [`layer_norm_in_place`] for that.
///
/// # Panics
///
/// When the slices differ in length.
pub fn layer_norm(x: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(x.len(), out.len(), "equal lengths");
    out.copy_from_slice(x);
    layer_norm_in_place(out, eps);
}

/// [`layer_norm`] of the row `row`, written over it.
pub fn layer_norm_in_place(row: &mut [f32], eps: f32) {
    if row.is_empty() {
        return;
    }
    #[allow(clippy::cast_precision_loss)] // a row's length is far below 2^53
    let n = row.len() as f64;
    #[allow(clippy::cast_possible_truncation)] // the F32 mean of F32 values
    let mean = (lane_sum(row, f64::from) / n) as f32;
    for x in row.iter_mut() {
        *x -= mean;
    }
    #[allow(clippy::cast_possible_truncation)] // an F32 row's variance fits F32
    let variance = (lane_sum(row, |v| f64::from(v) * f64::from(v)) / n) as f32;
    let scale = 1.0 / (variance + eps).sqrt();
    for x in row.iter_mut() {
        *x *= scale;
    }
}

/// `row[i] = e^(scale·row[i] − m) / Σ_j e^(scale·row[j] − m)`, `m` the largest `scale·row[j]`
/// (ggml's `SOFT_MAX` without a mask or sinks): the exponentials by
/// [`crate::activation::exp`], their sum in F64 in a fixed order, each value times the sum's
/// F32 reciprocal. A row of −∞ (nothing to weigh) becomes zeros.
pub fn softmax(row: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for x in row.iter_mut() {
        *x *= scale;
        max = if *x > max { *x } else { max };
    }
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    for x in row.iter_mut() {
        *x = crate::activation::exp(*x - max);
    }
    #[allow(clippy::cast_possible_truncation)]
    // at least 1 (the maximum's term), at most the length
    let inverse = (1.0 / lane_sum(row, f64::from)) as f32;
    for x in row.iter_mut() {
        *x *= inverse;
    }
}

/// `Σ term(x[i])` in F64: value `i` to lane `i mod 8`, then the lanes in a fixed tree.
#[inline]
fn lane_sum(x: &[f32], term: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for chunk in &mut chunks {
        for l in 0..LANES {
            lanes[l] += term(chunk[l]);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane += term(v);
    }
    crate::tree_sum(lanes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cast_precision_loss, clippy::float_cmp)]

    use super::*;

    /// The layer norm of `x` in F64 throughout.
    fn exact(x: &[f32], eps: f32) -> Vec<f64> {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = x
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let scale = 1.0 / (var + f64::from(eps)).sqrt();
        x.iter().map(|&v| (f64::from(v) - mean) * scale).collect()
    }

    fn row(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::test_rng::Rng(seed | 1);
        // Uniform in [0, 1), from the top 24 bits.
        let mut uniform = || (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
        (0..n)
            .map(|_| uniform() * 6.0 - 2.0 + if uniform() < 0.01 { 40.0 } else { 0.0 })
            .collect()
    }

    #[test]
    fn matches_the_definition_at_every_length() {
        for n in [1usize, 2, 7, 8, 9, 63, 64, 65, 768, 2560, 2561] {
            let x = row(n, n as u64);
            let mut out = vec![f32::NAN; n];
            layer_norm(&x, 1e-5, &mut out);
            for (i, (&got, want)) in out.iter().zip(exact(&x, 1e-5)).enumerate() {
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "n {n}, value {i}: {got} against {want}"
                );
            }
        }
    }

    #[test]
    fn a_constant_row_is_zero_and_in_place_is_the_same() {
        let mut out = [f32::NAN; 5];
        layer_norm(&[3.5; 5], 1e-5, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
        let x = row(300, 9);
        let mut copy = x.clone();
        let mut out = vec![0.0; x.len()];
        layer_norm(&x, 1e-6, &mut out);
        layer_norm_in_place(&mut copy, 1e-6);
        assert_eq!(
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            copy.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        layer_norm_in_place(&mut [], 1e-5);
    }

    /// The sums' order is the definition: lane `i mod 8`, then the tree. Summing a row whose
    /// lanes hold one large value and small ones shows the order: the small ones survive only
    /// where they meet each other before the large one.
    #[test]
    fn the_sum_runs_over_eight_lanes_then_a_tree() {
        let mut x = vec![0f32; 16];
        x[0] = 1.0e16;
        x[1] = -1.0e16;
        x[8] = 1.0;
        x[9] = 1.0;
        // Lanes: 0 → 1e16 + 1 = 1e16 (rounded), 1 → −1e16 + 1 = −1e16; tree: 1e16 − 1e16 = 0.
        assert_eq!(lane_sum(&x, f64::from), 0.0);
        // In index order the ones would survive: (1e16 − 1e16) + 1 + 1 = 2.
        assert_eq!(x.iter().map(|&v| f64::from(v)).sum::<f64>(), 2.0);
    }

    #[test]
    fn softmax_matches_the_definition_and_sums_to_one() {
        for (n, scale) in [
            (1usize, 1.0f32),
            (8, 1.0),
            (60, 0.5),
            (128, 1.0),
            (257, 2.0),
        ] {
            let x = row(n, 5 + n as u64);
            let mut got = x.clone();
            softmax(&mut got, scale);
            let max = x
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v * scale)));
            let e: Vec<f64> = x
                .iter()
                .map(|&v| (f64::from(v * scale) - max).exp())
                .collect();
            let sum: f64 = e.iter().sum();
            for (i, (&g, w)) in got.iter().zip(e.iter().map(|v| v / sum)).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= 1e-6 * w.max(1e-3),
                    "n {n}, {i}: {g} against {w}"
                );
            }
            let total: f64 = got.iter().map(|&v| f64::from(v)).sum();
            assert!((total - 1.0).abs() < 1e-5, "n {n}: {total}");
        }
        let mut closed = [f32::NEG_INFINITY; 3];
        softmax(&mut closed, 1.0);
        assert_eq!(closed, [0.0; 3]);
        let mut one = [f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY];
        softmax(&mut one, 1.0);
        assert_eq!(one, [0.0, 1.0, 0.0]);
    }

    /// The same bits on every machine, recorded.
    #[test]
    fn softmax_gives_the_recorded_bits() {
        let mut all = Vec::new();
        for n in [5usize, 64, 129] {
            let mut x = row(n, 31 + n as u64);
            softmax(&mut x, 0.7);
            all.extend(x);
        }
        insta::assert_snapshot!(crate::test_rng::fingerprint(&all));
    }

    /// The same bits on every machine, recorded.
    #[test]
    fn layer_norm_gives_the_recorded_bits() {
        let mut all = Vec::new();
        for n in [5usize, 64, 2560, 2563] {
            let x = row(n, 77 + n as u64);
            let mut out = vec![0.0; n];
            layer_norm(&x, 1e-5, &mut out);
            all.extend(out);
        }
        insta::assert_snapshot!(crate::test_rng::fingerprint(&all));
    }
}
