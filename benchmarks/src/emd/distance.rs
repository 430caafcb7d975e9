//! Distances between rows: the plain Euclidean one, and one row against a whole set laid out
//! for SIMD ([`ColumnBlocks`]); both sum squares in the same order, so a pair gets the same
//! cost whichever way it is computed.

use super::Points;

/// Euclidean distance between two rows, summing squares in feature order (the same order as
/// [`ColumnBlocks`], so a pair gets the same cost whichever way it is computed).
#[inline]
pub fn euclidean(x: &[f64], y: &[f64]) -> f64 {
    let mut s = 0.0;
    for (p, q) in x.iter().zip(y) {
        let d = p - q;
        s += d * d;
    }
    s.sqrt()
}

/// Rows per block in [`ColumnBlocks`]: one SIMD-friendly group of lanes.
const LANES: usize = 8;

/// A point set stored feature-major in blocks of [`LANES`] rows, so that the distances from one
/// row to all of them vectorise across rows (no horizontal sums). The last block is padded.
pub(super) struct ColumnBlocks {
    rows: usize,
    dim: usize,
    data: Vec<f64>,
}

impl ColumnBlocks {
    pub(super) fn new(p: Points<'_>) -> Self {
        let rows = p.rows();
        let blocks = rows.div_ceil(LANES);
        let mut data = vec![0.0; blocks * p.dim * LANES];
        for r in 0..rows {
            let (blk, lane) = (r / LANES, r % LANES);
            for (d, v) in p.row(r).iter().enumerate() {
                data[(blk * p.dim + d) * LANES + lane] = *v;
            }
        }
        ColumnBlocks { rows, dim: p.dim, data }
    }

    /// Distances from `x` to every row, written to `out` (length ≥ rows).
    pub(super) fn distances(&self, x: &[f64], out: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                unsafe { self.distances_avx2(x, out) };
                return;
            }
        }
        self.distances_generic(x, out);
    }

    /// Same arithmetic as the generic path, compiled for 4-wide vectors. No FMA, so results
    /// are bit-identical on every x86-64 machine.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn distances_avx2(&self, x: &[f64], out: &mut [f64]) {
        self.distances_generic(x, out);
    }

    #[inline(always)]
    fn distances_generic(&self, x: &[f64], out: &mut [f64]) {
        let dim = self.dim;
        for (blk, chunk) in self.data.chunks_exact(dim * LANES).enumerate() {
            let mut acc = [0.0f64; LANES];
            for (d, lanes) in chunk.chunks_exact(LANES).enumerate() {
                let xd = x[d];
                for l in 0..LANES {
                    let t = xd - lanes[l];
                    acc[l] += t * t;
                }
            }
            let start = blk * LANES;
            let take = LANES.min(self.rows - start);
            for l in 0..take {
                out[start + l] = acc[l].sqrt();
            }
        }
    }
}
