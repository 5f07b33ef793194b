//! Seeded pseudo-random values for synthetic tensors and kernel inputs.

/// Uniform draws in [-1, 1) from a seeded xorshift, 16 bits each: the same sequence for the
/// same seed on every machine.
#[derive(Debug, Clone)]
pub struct Draw(u64);

impl Draw {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Draw(0x9e37_79b9_7f4a_7c15_u64 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }

    /// The next draw.
    #[allow(clippy::should_implement_trait)] // an endless stream, not an `Iterator` of options
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        #[allow(clippy::cast_possible_truncation)] // the top 16 bits: nothing is cut
        let bits = (self.0 >> 48) as u16;
        f32::from(bits) / 32768.0 - 1.0
    }
}
