//! Metrics that are the mean over frames of a per-frame value: distances, proximity, BFM-Zero's
//! joint-axis differences and body position errors (MPJPE).

use super::{
    Feature, Frame, Metric, MetricConfig, MetricError, MetricInfo, body_error, check_frame, feature_into,
    norm_of_difference, proximity_of,
};

/// What a per-frame metric averages.
#[derive(Debug, Clone, Copy)]
pub(super) enum FrameKind {
    /// scale · ‖x − y‖ on a feature.
    Distance(Feature, f64),
    Proximity(Feature),
    /// scale · ‖D^order x − D^order y‖, differences along the joint axis (BFM-Zero quirk §10.4).
    JointAxisDiff(usize, f64),
    /// 1000 · mean over the bodies of the per-body position error, optionally root-relative.
    BodyError(&'static [usize], bool),
}

/// A metric that is the mean over frames of a per-frame value.
pub(super) struct PerFrame {
    info: &'static MetricInfo,
    config: MetricConfig,
    kind: FrameKind,
    sum: f64,
    count: usize,
    scratch: (Vec<f64>, Vec<f64>),
}

impl PerFrame {
    pub(super) fn new(info: &'static MetricInfo, config: MetricConfig, kind: FrameKind) -> Self {
        PerFrame {
            info,
            config,
            kind,
            sum: 0.0,
            count: 0,
            scratch: (Vec::new(), Vec::new()),
        }
    }
}

/// Differences of `order` along the joint axis, written into `out`.
fn joint_axis_diff(q: &[f64], order: usize, out: &mut Vec<f64>) {
    out.clear();
    out.extend_from_slice(q);
    for _ in 0..order {
        for k in 0..out.len() - 1 {
            out[k] = out[k + 1] - out[k];
        }
        out.pop();
    }
}

impl Metric for PerFrame {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.sum = 0.0;
        self.count = 0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        check_frame(self.info.name, f)?;
        let (x, y) = &mut self.scratch;
        let value = match self.kind {
            FrameKind::Distance(feature, _) | FrameKind::Proximity(feature) => {
                x.clear();
                y.clear();
                feature_into(feature, &self.config, f, true, x);
                feature_into(feature, &self.config, f, false, y);
                let d = norm_of_difference(x, y);
                match self.kind {
                    FrameKind::Distance(_, scale) => scale * d,
                    _ => proximity_of(d),
                }
            }
            FrameKind::JointAxisDiff(order, scale) => {
                joint_axis_diff(f.sim_joints, order, x);
                joint_axis_diff(f.ref_joints, order, y);
                scale * norm_of_difference(x, y)
            }
            FrameKind::BodyError(bodies, root_relative) => {
                let total: f64 = bodies.iter().map(|&b| body_error(f, b, root_relative)).sum();
                1000.0 * total / bodies.len() as f64
            }
        };
        self.sum += value;
        self.count += 1;
        Ok(())
    }

    fn compute(&self) -> Result<Option<f64>, MetricError> {
        if self.count == 0 {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        Ok(Some(self.sum / self.count as f64))
    }
}
