//! [`SplitMix64`]: the seedable random numbers of the folds and the excess-ECE draws.

/// splitmix64 (Steele, Lea & Flood 2014): a tiny, seedable, well-mixed PRNG, enough for
/// sampling labels and synthetic data reproducibly. Not for cryptography.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// An index drawn from (unnormalised) probabilities.
    pub fn categorical(&mut self, p: &[f64]) -> usize {
        let sum: f64 = p.iter().sum();
        let mut u = self.next_f64() * sum;
        for (i, x) in p.iter().enumerate() {
            if u < *x {
                return i;
            }
            u -= x;
        }
        p.len() - 1
    }
}
