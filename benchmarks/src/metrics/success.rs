//! PHC success (all bodies within the threshold at every frame, in L∞ and in mean), the time
//! of the first failing frame, and what a fall does to them.

use super::{Frame, Metric, MetricConfig, MetricError, MetricInfo, NON_WRIST_BODIES, body_error, check_frame};
use std::collections::BTreeMap;

/// The 0/1 success metrics: the ones a benchmark may rank by (`ranking.success`) and the ones a
/// fall sets to 0.
pub const SUCCESS_METRICS: [&str; 4] = ["success", "success_phc_linf", "success_phc_mean", "mjlab_success"];
/// The success metrics a benchmark may name as its success rule (`ranking.success`): the ones
/// with a failure time of their own ([`survival_metric_for`]), which says where scoring stopped
/// and ranks as survival. PHC's single criteria (`success_phc_linf`, `success_phc_mean`) have
/// none (`failure_time_s` is the first frame that breaks either), so they are metrics, not rules.
pub const SUCCESS_RULES: [&str; 2] = ["success", "mjlab_success"];
/// The failure-time metrics: PHC's and mjlab's (a benchmark's `ranking.survival` is the one of
/// its success rule, [`survival_metric_for`]).
pub const SURVIVAL_METRICS: [&str; 2] = ["failure_time_s", "mjlab_failure_time_s"];
/// The metrics of both success rules, which a benchmark that ranks by one of them always
/// computes, so the other is shown beside it.
pub const SUCCESS_RULE_METRICS: [&str; 4] = ["success", "failure_time_s", "mjlab_success", "mjlab_failure_time_s"];

/// Where scoring stopped (seconds from the episode's start), from an episode's metrics: the
/// failure time of the benchmark's success rule `rule` when the episode broke it (or fell),
/// `None` when the rule held throughout or the benchmark has none (whole episode scored).
pub fn scored_until(rule: Option<&str>, metrics: &BTreeMap<String, f64>) -> Option<f64> {
    let rule = rule?;
    (metrics.get(rule) == Some(&0.0))
        .then(|| metrics.get(survival_metric_for(rule)).copied())
        .flatten()
}

/// The failure time that belongs to success rule `success`: mjlab's for `mjlab_success`,
/// PHC's (the first frame that breaks either criterion) for `success`.
pub fn survival_metric_for(success: &str) -> &'static str {
    if success == "mjlab_success" {
        "mjlab_failure_time_s"
    } else {
        "failure_time_s"
    }
}

/// The defined penalty of a fall: an episode that the benchmark's fall rule ended is never a
/// success, whatever its frames up to the fall show, and it failed no later than `fell_at_s`
/// (seconds from the episode's start). Metrics not computed for the episode stay absent.
pub fn apply_fall_penalty(metrics: &mut BTreeMap<String, f64>, fell_at_s: f64) {
    for name in SUCCESS_METRICS {
        if let Some(v) = metrics.get_mut(name) {
            *v = 0.0;
        }
    }
    for name in SURVIVAL_METRICS {
        if let Some(t) = metrics.get_mut(name) {
            *t = t.min(fell_at_s);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum SuccessKind {
    Both,
    Linf,
    Mean,
    FailureTime,
}

/// PHC success criteria on the non-wrist bodies, and the time of the first failing frame.
pub(super) struct Success {
    info: &'static MetricInfo,
    threshold: f64,
    kind: SuccessKind,
    frames: usize,
    linf_ok: bool,
    mean_ok: bool,
    first_failure: Option<f64>,
    last_time: f64,
}

impl Success {
    pub(super) fn new(info: &'static MetricInfo, config: MetricConfig, kind: SuccessKind) -> Self {
        Success {
            info,
            threshold: config.success_threshold_m,
            kind,
            frames: 0,
            linf_ok: true,
            mean_ok: true,
            first_failure: None,
            last_time: 0.0,
        }
    }
}

impl Success {
    /// Whether this metric's criterion has held in every frame so far.
    pub(super) fn holds(&self) -> bool {
        match self.kind {
            SuccessKind::Both | SuccessKind::FailureTime => self.linf_ok && self.mean_ok,
            SuccessKind::Linf => self.linf_ok,
            SuccessKind::Mean => self.mean_ok,
        }
    }
}

impl Metric for Success {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.frames = 0;
        self.linf_ok = true;
        self.mean_ok = true;
        self.first_failure = None;
        self.last_time = 0.0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        check_frame(self.info.name, f)?;
        let (mut max, mut sum) = (0.0f64, 0.0);
        for &b in &NON_WRIST_BODIES {
            let e = body_error(f, b, false);
            max = max.max(e);
            sum += e;
        }
        let mean = sum / NON_WRIST_BODIES.len() as f64;
        let linf = max <= self.threshold;
        let mean_ok = mean <= self.threshold;
        self.linf_ok &= linf;
        self.mean_ok &= mean_ok;
        if !(linf && mean_ok) && self.first_failure.is_none() {
            self.first_failure = Some(f.time);
        }
        self.frames += 1;
        self.last_time = f.time;
        Ok(())
    }

    fn compute(&self) -> Result<Option<f64>, MetricError> {
        if self.frames == 0 {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        Ok(Some(match self.kind {
            SuccessKind::Both => flag(self.linf_ok && self.mean_ok),
            SuccessKind::Linf => flag(self.linf_ok),
            SuccessKind::Mean => flag(self.mean_ok),
            SuccessKind::FailureTime => self.first_failure.unwrap_or(self.last_time),
        }))
    }
}
