//! Adaptive sampling of start times (docs/ppo-tracker.md §6.2), for several motions: one bin per
//! second of every motion, all in one histogram. A bin's weight is the EMA of the failures that
//! ended in it plus a uniform share; start frames are drawn in proportion.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Frames per bin: one second at the control rate (50 Hz).
pub const FRAMES_PER_BIN: usize = 50;

/// The failure histogram and how starts are drawn from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartSampler {
    /// Per motion: (first bin, number of bins, frames).
    motions: Vec<(usize, usize, usize)>,
    /// EMA of failures per control step, per bin.
    pub failed_ema: Vec<f64>,
    /// Failures of the current step, per bin (folded into the EMA by [`StartSampler::step`]).
    current: Vec<f64>,
    alpha: f64,
    /// The uniform share, already scaled for the number of envs.
    uniform: f64,
    adaptive: bool,
}

impl StartSampler {
    /// `frames[m]`: the frame count of motion m at 50 Hz.
    pub fn new(frames: &[usize], alpha: f64, uniform: f64, adaptive: bool) -> Self {
        let mut motions = Vec::with_capacity(frames.len());
        let mut first = 0;
        for &t in frames {
            let bins = t / FRAMES_PER_BIN + 1;
            motions.push((first, bins, t));
            first += bins;
        }
        StartSampler {
            motions,
            failed_ema: vec![0.0; first],
            current: vec![0.0; first],
            alpha,
            uniform,
            adaptive,
        }
    }

    pub fn num_bins(&self) -> usize {
        self.failed_ema.len()
    }

    /// The bin of frame `frame` of motion `m`: clamp(floor(frame·B/T), 0, B−1).
    pub fn bin_of(&self, m: usize, frame: usize) -> usize {
        let (first, bins, t) = self.motions[m];
        first + (frame * bins / t.max(1)).min(bins - 1)
    }

    /// An episode of motion `m` failed at frame `frame`.
    pub fn record_failure(&mut self, m: usize, frame: usize) {
        let b = self.bin_of(m, frame);
        self.current[b] += 1.0;
    }

    /// Folds this step's failures into the EMA (once per control step).
    pub fn step(&mut self) {
        let a = self.alpha;
        for (ema, cur) in self.failed_ema.iter_mut().zip(&mut self.current) {
            *ema = a * *cur + (1.0 - a) * *ema;
            *cur = 0.0;
        }
    }

    /// Sampling probabilities of the bins.
    pub fn probabilities(&self) -> Vec<f64> {
        let n = self.num_bins() as f64;
        let w: Vec<f64> = if self.adaptive {
            self.failed_ema.iter().map(|f| f + self.uniform / n).collect()
        } else {
            vec![1.0; self.num_bins()]
        };
        let total: f64 = w.iter().sum();
        w.iter().map(|x| x / total).collect()
    }

    /// Draws (motion, start frame): a bin by the probabilities, then a frame uniformly in it,
    /// floor((bin + u)/B·(T−1)).
    pub fn draw(&self, probabilities: &[f64], rng: &mut impl Rng) -> (usize, usize) {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut bin = probabilities.len() - 1;
        for (b, p) in probabilities.iter().enumerate() {
            acc += p;
            if u < acc {
                bin = b;
                break;
            }
        }
        let m = self
            .motions
            .iter()
            .position(|&(first, bins, _)| bin < first + bins)
            .expect("bin within the histogram");
        let (first, bins, t) = self.motions[m];
        let within: f64 = rng.random();
        let frame = (((bin - first) as f64 + within) / bins as f64 * (t.saturating_sub(1)) as f64).floor() as usize;
        (m, frame.min(t.saturating_sub(2)))
    }

    /// Each motion's frame count, as the sampler was made for (a resume checks them against
    /// the library it now runs on).
    pub fn motion_frames(&self) -> Vec<usize> {
        self.motions.iter().map(|&(_, _, frames)| frames).collect()
    }

    /// Normalised entropy of the probabilities (1 = uniform), for the log.
    pub fn entropy(&self) -> f64 {
        let p = self.probabilities();
        let h: f64 = p.iter().filter(|x| **x > 0.0).map(|x| -x * x.ln()).sum();
        if p.len() > 1 { h / (p.len() as f64).ln() } else { 1.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn failures_raise_their_bin() {
        // Motions of 120 and 40 frames: 3 + 1 bins.
        let mut s = StartSampler::new(&[120, 40], 0.5, 0.1, true);
        assert_eq!(s.num_bins(), 4);
        assert_eq!((s.bin_of(0, 0), s.bin_of(0, 119), s.bin_of(1, 39)), (0, 2, 3));
        let uniform = s.probabilities();
        assert!(uniform.iter().all(|p| (p - 0.25).abs() < 1e-12));
        s.record_failure(0, 70);
        s.step();
        let p = s.probabilities();
        assert!(p[1] > 0.8, "{p:?}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let hits = (0..1000).filter(|_| s.draw(&p, &mut rng) == (0, 0)).count();
        assert!(hits < 20);
        for _ in 0..1000 {
            let (m, f) = s.draw(&p, &mut rng);
            assert!(f + 1 < [120, 40][m]);
        }
    }
}
