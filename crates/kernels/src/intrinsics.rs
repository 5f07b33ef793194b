//! The kernels' only `unsafe`: CPU instructions that `std::arch` offers only as `unsafe fn`
//! and `safe_arch` does not wrap (F16C's conversion, the VNNI dot products, the prefetch
//! hint). Each is compiled only where the build's target features include its instruction.
#![allow(unsafe_code)]

/// Eight F16 values (their bits) as F32, exactly, with one F16C instruction (the matrix
/// kernel's weight scales).
#[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
#[allow(clippy::inline_always)] // one instruction, in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn f16x8(bits: [u16; 8]) -> [f32; 8] {
    use std::arch::x86_64::{__m128i, __m256, _mm256_cvtph_ps};
    // SAFETY: compiled only for targets with F16C (the `cfg` above: wick builds with
    // `target-cpu=native`), so the instruction exists. Both transmutes are between plain
    // integer or float data of the same size (16 and 32 bytes), every bit pattern valid.
    unsafe {
        let packed = std::mem::transmute::<[u16; 8], __m128i>(bits);
        std::mem::transmute::<__m256, [f32; 8]>(_mm256_cvtph_ps(packed))
    }
}

/// Sixteen F16 values (their bits) as F32, exactly: `low`'s in the register's low half,
/// `high`'s in its high half (the AVX-512 float tile's two weight rows; one AVX-512 F
/// conversion).
#[cfg(wide)]
#[allow(clippy::inline_always)] // in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn f16x16(low: [u16; 8], high: [u16; 8]) -> safe_arch::m512 {
    use std::arch::x86_64::{__m128i, _mm256_set_m128i, _mm512_cvtph_ps};
    // SAFETY: compiled only for targets with AVX-512 F (`cfg(wide)`: wick builds with
    // `target-cpu=native`), so the instructions exist. The transmutes are between plain
    // integer data of the same size (16 bytes), every bit pattern valid.
    unsafe {
        let low = std::mem::transmute::<[u16; 8], __m128i>(low);
        let high = std::mem::transmute::<[u16; 8], __m128i>(high);
        safe_arch::m512(_mm512_cvtph_ps(_mm256_set_m128i(high, low)))
    }
}

/// Eight F32 values in both halves of a 512-bit register (AVX-512 DQ's `vbroadcastf32x8`:
/// from memory, a load alone).
#[cfg(wide)]
#[allow(clippy::inline_always)] // in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn twice(v: safe_arch::m256) -> safe_arch::m512 {
    // SAFETY: compiled only for targets with AVX-512 DQ (`cfg(wide)`: wick builds with
    // `target-cpu=native`); it reads and writes registers only.
    safe_arch::m512(unsafe { std::arch::x86_64::_mm512_broadcast_f32x8(v.0) })
}

/// `bytes` in each 128-bit quarter of a 512-bit register (`vbroadcasti32x4`, from memory a
/// load alone), then byte `i` of the result is byte `table[i] mod 16` of its quarter, or zero
/// where `table[i]` is negative (AVX-512 BW's `vpshufb`): BF16 weights widened to F32.
#[cfg(wide)]
#[allow(clippy::inline_always)] // in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn broadcast_shuffle(bytes: &[u8; 16], table: &[i8; 64]) -> safe_arch::m512i {
    use std::arch::x86_64::{__m128i, __m512i, _mm512_broadcast_i32x4, _mm512_shuffle_epi8};
    // SAFETY: compiled only for targets with AVX-512 F and BW (`cfg(wide)`: wick builds with
    // `target-cpu=native`), so the instructions exist. The transmutes are between plain
    // integer data of the same size (16 and 64 bytes), every bit pattern valid.
    safe_arch::m512i(unsafe {
        let quarter = std::mem::transmute::<[u8; 16], __m128i>(*bytes);
        let table = std::mem::transmute::<[i8; 64], __m512i>(*table);
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(quarter), table)
    })
}

/// `acc` plus, per 32-bit lane, the sum of the lane's four products of `a`'s unsigned bytes
/// with `b`'s signed bytes (`vpdpbusd`, no saturation), AVX-VNNI's encoding.
#[cfg(all(target_arch = "x86_64", target_feature = "avxvnni"))]
#[allow(clippy::inline_always)] // one instruction, in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn dpbusd_avx_vnni(
    acc: safe_arch::m256i,
    a: safe_arch::m256i,
    b: safe_arch::m256i,
) -> safe_arch::m256i {
    // SAFETY: compiled only for targets with AVX-VNNI (the `cfg`: wick builds with
    // `target-cpu=native`); it reads and writes registers only.
    safe_arch::m256i(unsafe { std::arch::x86_64::_mm256_dpbusd_avx_epi32(acc.0, a.0, b.0) })
}

/// [`dpbusd_avx_vnni`]'s sums with AVX-512 VNNI's encoding (EVEX, 256-bit registers).
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "avx512vnni",
    target_feature = "avx512vl"
))]
#[allow(clippy::inline_always)] // one instruction, in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn dpbusd_avx512_vnni(
    acc: safe_arch::m256i,
    a: safe_arch::m256i,
    b: safe_arch::m256i,
) -> safe_arch::m256i {
    // SAFETY: compiled only for targets with AVX-512 VNNI and VL (the `cfg`: wick builds with
    // `target-cpu=native`); it reads and writes registers only.
    safe_arch::m256i(unsafe { std::arch::x86_64::_mm256_dpbusd_epi32(acc.0, a.0, b.0) })
}

/// Asks the CPU to bring the cache line at `at` into its caches (a hint: it never faults,
/// whatever the address, and changes nothing a program can observe but timing).
#[cfg(all(vector, target_arch = "x86_64", target_feature = "sse"))]
#[inline]
pub(crate) fn prefetch(at: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: `prefetch` instructions never fault, on any address, and write nothing.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>()) }
}

/// `dpbusd_avx512_vnni`'s sums on 512-bit registers (sixteen 32-bit lanes).
#[cfg(wide)]
#[allow(clippy::inline_always)] // one instruction, in the matrix kernel's inner loop
#[inline(always)]
pub(crate) fn dpbusd_zmm(
    acc: safe_arch::m512i,
    a: safe_arch::m512i,
    b: safe_arch::m512i,
) -> safe_arch::m512i {
    // SAFETY: compiled only for targets with AVX-512 F and VNNI (`cfg(wide)`: wick builds
    // with `target-cpu=native`); it reads and writes registers only.
    safe_arch::m512i(unsafe { std::arch::x86_64::_mm512_dpbusd_epi32(acc.0, a.0, b.0) })
}
