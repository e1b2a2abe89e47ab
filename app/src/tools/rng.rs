//! SplitMix64 (Steele, Lea, Flood 2014; the reference is Vigna's
//! `splitmix64.c`): one 64-bit state, passes BigCrush, and trivially
//! reproducible across platforms and crate versions, which is all a traffic
//! generator needs. Not for anything secret.

#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for an independent sub-stream (e.g. one destination's
    /// flows), so adding a destination does not reshuffle the others.
    pub fn fork(seed: u64, stream: u64) -> Self {
        let mut r = SplitMix64::new(seed ^ stream.wrapping_mul(0xd6e8_feb8_6659_fd93));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits, the usual double construction.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) by Lemire's multiply-shift (bias below 2^-32 for
    /// the small n used here); n = 0 gives 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Index picked by weight from cumulative weights (last = total).
    pub fn pick(&mut self, cumulative: &[f64]) -> usize {
        let total = cumulative.last().copied().unwrap_or(0.0);
        let x = self.unit() * total;
        cumulative
            .iter()
            .position(|&c| x < c)
            .unwrap_or(cumulative.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// First outputs for seed 1234567 from Vigna's reference splitmix64.c.
    #[test]
    fn matches_reference_vector() {
        let mut r = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            vec![
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821
            ]
        );
    }

    #[test]
    fn pick_follows_weights() {
        let mut r = SplitMix64::new(7);
        let cum = [1.0, 4.0]; // weights 1 and 3
        let n = 40_000;
        let ones = (0..n).filter(|_| r.pick(&cum) == 1).count();
        let share = ones as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.01, "share {share}");
    }
}
