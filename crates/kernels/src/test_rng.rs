//! A small deterministic generator (xorshift) for the kernels' unit tests, so cases need no
//! extra crate.

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A random F16 (its bits), either sign, with a biased exponent from `lowest` to
    /// `lowest + 7`: a magnitude between 2^(lowest − 15) and 2^(lowest − 7).
    #[allow(clippy::cast_possible_truncation)] // masked to the field's width
    pub(crate) fn half(&mut self, lowest: u16) -> u16 {
        let r = self.next();
        let sign = ((r & 1) as u16) << 15;
        let exponent = lowest + (r >> 1) as u16 % 8;
        let mantissa = (r >> 8) as u16 & 0x3FF;
        sign | exponent << 10 | mantissa
    }
}

/// FNV-1a (64 bits) of the floats' bits: a fingerprint of a kernel's exact output, the same
/// on every machine that computes the same bits.
pub(crate) fn fingerprint(values: &[f32]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in values.iter().flat_map(|v| v.to_bits().to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
