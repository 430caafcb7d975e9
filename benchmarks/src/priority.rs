//! EMD-based prioritised motion sampling, as BFM-Zero's trainer uses it after each evaluation
//! (BFM_ZERO_FACTS §7.4): motions the agent tracks badly are sampled more often.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorityMode {
    /// p ← 2^p.
    Exp,
    /// p unchanged.
    Lin,
    /// Motions binned by ⌊p⌋; every non-empty bin gets the same total mass.
    Bin,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PriorityConfig {
    pub min_val: f64,
    pub max_val: f64,
    pub scale: f64,
    pub mode: PriorityMode,
}

impl PriorityConfig {
    /// The values train.py runs with: clamp [0.5, 2], ×2, exp.
    pub const TRAINING: PriorityConfig = PriorityConfig {
        min_val: 0.5,
        max_val: 2.0,
        scale: 2.0,
        mode: PriorityMode::Exp,
    };
    /// The trainer class's own defaults: clamp [0.5, 5], ×2, bin.
    pub const CLASS_DEFAULTS: PriorityConfig = PriorityConfig {
        min_val: 0.5,
        max_val: 5.0,
        scale: 2.0,
        mode: PriorityMode::Bin,
    };
}

/// Sampling probabilities (summing to 1) from per-motion EMDs. Non-finite EMDs (a motion that
/// could not be scored) count as the worst tracking, i.e. the clamp's maximum.
pub fn priorities(emd: &[f64], config: &PriorityConfig) -> Vec<f64> {
    if emd.is_empty() {
        return Vec::new();
    }
    let clamped: Vec<f64> = emd
        .iter()
        .map(|&e| {
            let e = if e.is_finite() { e } else { config.max_val };
            e.clamp(config.min_val, config.max_val) * config.scale
        })
        .collect();
    let weights: Vec<f64> = match config.mode {
        PriorityMode::Exp => clamped.iter().map(|p| p.exp2()).collect(),
        PriorityMode::Lin => clamped,
        PriorityMode::Bin => {
            let bins: Vec<i64> = clamped.iter().map(|p| p.floor() as i64).collect();
            bins.iter()
                .map(|b| 1.0 / bins.iter().filter(|x| *x == b).count() as f64)
                .collect()
        }
    };
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_mode_clamps_scales_and_exponentiates() {
        // EMD 0.1 → clamp 0.5 → ×2 = 1 → 2; EMD 1.0 → 2 → 4; EMD 9 → clamp 2 → 4 → 16.
        let p = priorities(&[0.1, 1.0, 9.0], &PriorityConfig::TRAINING);
        let want = [2.0 / 22.0, 4.0 / 22.0, 16.0 / 22.0];
        for (a, b) in p.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{p:?}");
        }
    }

    #[test]
    fn lin_mode_keeps_the_clamped_values() {
        let config = PriorityConfig {
            mode: PriorityMode::Lin,
            ..PriorityConfig::TRAINING
        };
        let p = priorities(&[0.5, 1.5], &config);
        assert!((p[0] - 0.25).abs() < 1e-12 && (p[1] - 0.75).abs() < 1e-12, "{p:?}");
    }

    #[test]
    fn bin_mode_gives_every_bin_equal_mass() {
        // Class defaults: clamp [0.5, 5], ×2 → bins ⌊p⌋: 0.6→1, 0.7→1, 0.9→1, 2.6→5.
        let p = priorities(&[0.6, 0.7, 0.9, 2.6], &PriorityConfig::CLASS_DEFAULTS);
        assert!((p[0] - 1.0 / 6.0).abs() < 1e-12, "{p:?}");
        assert!((p[3] - 0.5).abs() < 1e-12, "{p:?}");
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // A motion that could not be scored is treated as the worst.
        let p = priorities(&[f64::NAN, 0.5], &PriorityConfig::TRAINING);
        assert!(p[0] > p[1]);
    }
}
