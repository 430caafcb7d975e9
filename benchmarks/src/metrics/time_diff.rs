//! Velocity and acceleration errors along time, from the last one or two frames' errors.

use super::{Frame, Metric, MetricError, MetricInfo, NON_WRIST_BODIES, check_frame};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TimeDiffKind {
    /// One 29-D norm per frame.
    Joints,
    /// Mean of per-body norms over the 24 non-wrist bodies.
    Bodies,
}

/// Velocity (order 1) or acceleration (order 2) error along time, ×1000, keeping the last
/// `order` frames.
pub(super) struct TimeDiff {
    info: &'static MetricInfo,
    kind: TimeDiffKind,
    order: usize,
    /// Last frames' (sim − ref) features, newest last.
    history: VecDeque<Vec<f64>>,
    sum: f64,
    count: usize,
}

impl TimeDiff {
    pub(super) fn new(info: &'static MetricInfo, kind: TimeDiffKind, order: usize) -> Self {
        TimeDiff {
            info,
            kind,
            order,
            history: VecDeque::new(),
            sum: 0.0,
            count: 0,
        }
    }
}

impl Metric for TimeDiff {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.history.clear();
        self.sum = 0.0;
        self.count = 0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        check_frame(self.info.name, f)?;
        // Δx − Δy = Δ(x − y): difference the per-frame error, which needs only one vector.
        // The oldest buffer is reused for the newest frame (no allocation per frame).
        let mut err = if self.history.len() > self.order {
            self.history.pop_front().expect("non-empty")
        } else {
            Vec::new()
        };
        err.clear();
        match self.kind {
            TimeDiffKind::Joints => err.extend(f.sim_joints.iter().zip(f.ref_joints).map(|(a, b)| a - b)),
            TimeDiffKind::Bodies => err.extend(
                NON_WRIST_BODIES
                    .iter()
                    .flat_map(|&b| (0..3).map(move |c| f.sim_bodies[3 * b + c] - f.ref_bodies[3 * b + c])),
            ),
        }
        self.history.push_back(err);
        if self.history.len() == self.order + 1 {
            let h = &self.history;
            let diff = |k: usize| match self.order {
                1 => h[1][k] - h[0][k],
                _ => h[2][k] - 2.0 * h[1][k] + h[0][k],
            };
            let len = h[0].len();
            let value = match self.kind {
                TimeDiffKind::Joints => (0..len).map(|k| diff(k).powi(2)).sum::<f64>().sqrt(),
                TimeDiffKind::Bodies => {
                    (0..len / 3)
                        .map(|b| (diff(3 * b).powi(2) + diff(3 * b + 1).powi(2) + diff(3 * b + 2).powi(2)).sqrt())
                        .sum::<f64>()
                        / NON_WRIST_BODIES.len() as f64
                }
            };
            self.sum += 1000.0 * value;
            self.count += 1;
        }
        Ok(())
    }

    fn compute(&self) -> Result<Option<f64>, MetricError> {
        if self.history.is_empty() {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        // Fewer frames than a difference needs (an episode scored to its first step): the
        // error is undefined, not zero; a zero here would flatter the worst agents' means.
        Ok((self.count > 0).then(|| self.sum / self.count as f64))
    }
}
