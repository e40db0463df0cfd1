//! The run's one source of chance: SplitMix64 from the printed seed, so a seed replays
//! the same job mix and the same fault schedule (the machine's own timing still
//! varies). Ten lines of arithmetic are not worth a dependency.

/// A seeded generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number from `low` to `high`, both included.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high.saturating_sub(low) + 1)
    }

    /// True with probability `percent` in 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// An independent generator for another part of the run (so adding draws to one
    /// part leaves the others' sequences alone).
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_replays_its_sequence_and_bounds_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1_000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let n = a.between(3, 5);
            assert!((3..=5).contains(&n));
            b.between(3, 5);
        }
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }
}
