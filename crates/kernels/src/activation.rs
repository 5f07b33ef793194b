//! Activations whose bits do not depend on the instruction set: wick's `SwiGLU`, run in place of
//! ggml's in the deterministic mode.
//!
//! ggml computes `silu(x) · g` with an exponential written once per instruction set (AVX-512,
//! AVX2, SSE2, NEON, …): the AVX-512 and AVX2 versions end their polynomial differently, and
//! the scalar tail of a row uses the C library's `expf`, so the same model gives different
//! floats on an AVX-512 machine and an AVX2 one. This one is written once, in scalar code
//! made of IEEE operations and fused multiply-adds only (which every path rounds the same way,
//! vectorised or not), so it gives the same bits on every CPU; the compiler vectorises it.

/// `e^x` in single precision, within 2 ULP for `x` in the normal range: the argument reduced
/// by `ln 2` (Cody–Waite, in two parts), a degree-7 polynomial, then scaled by `2^n` in two
/// exact steps. Above 88.72 it is `+∞`, below −103.97 zero, and NaN stays NaN.
#[inline]
#[must_use]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 · 2^23: adding it rounds to an integer (ties to even) in the low mantissa bits.
    const SHIFT: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    if x.is_nan() {
        return x;
    }
    if x > 88.722_84 {
        return f32::INFINITY;
    }
    if x < -103.972_08 {
        return 0.0;
    }
    let n = x.mul_add(LOG2E, SHIFT) - SHIFT;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    // e^r on |r| ≤ ln 2 / 2, Taylor's coefficients to r^7 (truncation below 2^-27 there).
    let mut p = 1.0 / 5040.0f32;
    p = p.mul_add(r, 1.0 / 720.0);
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    // 2^n for n from −150 to 128, in two factors that are both normal numbers.
    #[allow(clippy::cast_possible_truncation)] // |n| ≤ 150
    let n = n as i32;
    let half = n / 2;
    p * pow2(half) * pow2(n - half)
}

/// `2^k` for `k` from −126 to 127, exactly.
#[inline]
fn pow2(k: i32) -> f32 {
    #[allow(clippy::cast_sign_loss)] // 127 + k ≥ 1
    f32::from_bits(((127 + k) as u32) << 23)
}

/// `x / (1 + e^−x)`.
#[inline]
#[must_use]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// `out[i] = silu(x[i]) · g[i]` (ggml's `SWIGLU`): the same bits on every CPU.
///
/// # Panics
///
/// When the three slices differ in length.
pub fn swiglu(x: &[f32], g: &[f32], out: &mut [f32]) {
    assert!(x.len() == g.len() && g.len() == out.len(), "equal lengths");
    for ((o, &x), &g) in out.iter_mut().zip(x).zip(g) {
        *o = silu(x) * g;
    }
}

/// Thread `ith`'s share (of `nth`) of `rows` rows: even, contiguous.
#[must_use]
pub fn rows_of(rows: usize, ith: usize, nth: usize) -> std::ops::Range<usize> {
    let nth = nth.max(1);
    let at = |i: usize| rows * i / nth;
    at(ith)..at(ith + 1)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::float_cmp
    )]

    use super::*;

    /// Units in the last place between `a` and the exact `b`.
    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        let ulp = f64::from(f32::from_bits(b32.abs().to_bits() + 1) - b32.abs());
        (f64::from(a) - b).abs() / ulp
    }

    #[test]
    fn exp_is_within_two_ulps_across_the_normal_range() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            worst = worst.max(ulps(exp(x), f64::from(x).exp()));
            x += 0.001_37;
        }
        assert!(worst <= 2.0, "worst error {worst} ulps");
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(-104.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        // Subnormal results: within two of their (coarse) steps.
        let tiny = exp(-100.0);
        let step = f64::from(f32::from_bits(1));
        assert!(tiny > 0.0 && (f64::from(tiny) - (-100.0f64).exp()).abs() <= 2.0 * step);
    }

    #[test]
    fn silu_matches_its_definition_and_its_limits() {
        for x in [-20.0f32, -3.5, -1.0, -0.25, 0.0, 0.25, 1.0, 3.5, 20.0] {
            let want = f64::from(x) / (1.0 + (-f64::from(x)).exp());
            assert!(
                (f64::from(silu(x)) - want).abs() <= 1e-6 * want.abs().max(1e-3),
                "{x}"
            );
        }
        assert_eq!(silu(200.0), 200.0);
        assert_eq!(silu(-200.0), -0.0);
    }

    /// The same bits on every machine, recorded: `swiglu` over inputs across its range.
    #[test]
    fn swiglu_gives_the_recorded_bits() {
        let x: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) / 64.0).collect();
        let g: Vec<f32> = (0..4096).map(|i| 1.0 - i as f32 / 1024.0).collect();
        let mut out = vec![0.0; x.len()];
        swiglu(&x, &g, &mut out);
        insta::assert_snapshot!(crate::test_rng::fingerprint(&out));
    }

    #[test]
    fn swiglu_multiplies_and_rows_split_evenly() {
        let x = [1.0f32, -2.0, 0.5];
        let g = [2.0f32, 3.0, -1.0];
        let mut out = [0.0f32; 3];
        swiglu(&x, &g, &mut out);
        for i in 0..3 {
            assert_eq!(out[i], silu(x[i]) * g[i]);
        }
        for (rows, nth) in [(1, 4), (7, 2), (100, 3)] {
            let parts: Vec<_> = (0..nth).map(|i| rows_of(rows, i, nth)).collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[nth - 1].end, rows);
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start));
        }
    }
}
