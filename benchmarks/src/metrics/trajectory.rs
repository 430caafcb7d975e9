//! Metrics of the whole trajectory, computed once from both frame sets: EMD over a feature,
//! and nDTW over the body positions.

use super::{
    Feature, Frame, Metric, MetricConfig, MetricError, MetricInfo, NON_WRIST_BODIES, NUM_JOINTS, check_frame,
    feature_into,
};
use crate::emd;

/// Both sides' frames of one feature, collected for a whole-trajectory metric.
#[derive(Default)]
struct FrameSets {
    sim: Vec<f64>,
    reference: Vec<f64>,
}

impl FrameSets {
    fn clear(&mut self) {
        self.sim.clear();
        self.reference.clear();
    }

    fn push(
        &mut self,
        metric: &'static str,
        feature: Feature,
        config: &MetricConfig,
        f: &Frame<'_>,
    ) -> Result<(), MetricError> {
        check_frame(metric, f)?;
        feature_into(feature, config, f, true, &mut self.sim);
        feature_into(feature, config, f, false, &mut self.reference);
        Ok(())
    }
}

/// EMD over a feature: collects both frame sets, solves once in `compute`.
pub(super) struct Emd {
    info: &'static MetricInfo,
    feature: Feature,
    config: MetricConfig,
    frames: FrameSets,
    dim: usize,
}

impl Emd {
    pub(super) fn new(info: &'static MetricInfo, feature: Feature, config: MetricConfig) -> Self {
        let dim = match feature {
            Feature::Joints => NUM_JOINTS,
            Feature::StateSlice => config.state_slice[1] - config.state_slice[0],
            Feature::Xpos24 => 3 * NON_WRIST_BODIES.len(),
        };
        Emd {
            info,
            feature,
            config,
            frames: FrameSets::default(),
            dim,
        }
    }
}

impl Metric for Emd {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.frames.clear();
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        self.frames.push(self.info.name, self.feature, &self.config, f)
    }

    fn compute(&self) -> Result<Option<f64>, MetricError> {
        if self.frames.sim.is_empty() {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        emd::emd(&self.frames.sim, &self.frames.reference, self.dim)
            .map(Some)
            .map_err(|source| MetricError::Emd {
                metric: self.info.name,
                source,
            })
    }
}

/// nDTW (Ilharco et al. 2019, as used for trajectories in VLN): exp(−DTW / (T_ref · θ)).
pub(super) struct Ndtw {
    info: &'static MetricInfo,
    config: MetricConfig,
    frames: FrameSets,
}

impl Ndtw {
    pub(super) fn new(info: &'static MetricInfo, config: MetricConfig) -> Self {
        Ndtw {
            info,
            config,
            frames: FrameSets::default(),
        }
    }
}

/// Mean per-body distance between two 24-body frames (72 values each).
fn mean_body_distance(x: &[f64], y: &[f64]) -> f64 {
    x.chunks_exact(3)
        .zip(y.chunks_exact(3))
        .map(|(p, q)| ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt())
        .sum::<f64>()
        / (x.len() / 3) as f64
}

/// DTW cost between two frame sequences (rows of `dim`), with a Sakoe-Chiba band of `band`
/// frames around the (rescaled) diagonal; `None` means unconstrained.
pub fn dtw(x: &[f64], y: &[f64], dim: usize, band: Option<usize>, cost: impl Fn(&[f64], &[f64]) -> f64) -> f64 {
    let (n, m) = (x.len() / dim, y.len() / dim);
    if n == 0 || m == 0 {
        return f64::INFINITY;
    }
    // The band must at least cover the length difference, or no path exists.
    let band = band.map(|w| w.max(n.abs_diff(m)));
    let mut prev = vec![f64::INFINITY; m + 1];
    let mut cur = vec![f64::INFINITY; m + 1];
    prev[0] = 0.0;
    for i in 1..=n {
        cur.fill(f64::INFINITY);
        let centre = (i * m) / n;
        let (lo, hi) = match band {
            Some(w) => (centre.saturating_sub(w).max(1), centre.saturating_add(w).min(m)),
            None => (1, m),
        };
        for j in lo..=hi {
            let c = cost(&x[(i - 1) * dim..i * dim], &y[(j - 1) * dim..j * dim]);
            cur[j] = c + prev[j].min(cur[j - 1]).min(prev[j - 1]);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[m]
}

impl Metric for Ndtw {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.frames.clear();
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        self.frames.push(self.info.name, Feature::Xpos24, &self.config, f)
    }

    fn compute(&self) -> Result<Option<f64>, MetricError> {
        if self.frames.sim.is_empty() {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        let dim = 3 * NON_WRIST_BODIES.len();
        let band = (self.config.ndtw_window_s > 0.0)
            .then(|| (self.config.ndtw_window_s / self.config.frame_dt).round() as usize);
        let d = dtw(&self.frames.sim, &self.frames.reference, dim, band, mean_body_distance);
        let frames = (self.frames.reference.len() / dim) as f64;
        Ok(Some((-d / (frames * self.config.success_threshold_m)).exp()))
    }
}
