//! Seeds derived from a run seed and a counter (splitmix64's finaliser): a resumed run redraws
//! exactly what the uninterrupted one draws, given the counters saved in its checkpoint.

/// A 63-bit seed for `counter` under `seed` (non-negative as an `i64`, for `tch::manual_seed`).
pub fn derive_seed(seed: u64, counter: u64) -> u64 {
    let mut x = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)) >> 1
}
