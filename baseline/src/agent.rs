//! The tracking agent (BFM_ZERO_FACTS §6.1) behind the SDK's [`Agent`] trait: for every step,
//! z = project(mean of B over the next `window` reference rows), then the deterministic actor.
//! It reads the `reference_goal` observation group (the reference's state | privileged_state
//! rows t+1 … t+H, built by the server with the simulator's own code), so it needs no
//! simulator of its own and no state between steps.

use crate::model::{FbCprAuxModel, Obs};
use arena_sdk::ObservationLayout;
use arena_sdk::agent::{Agent, Batch};
use arena_sdk::protocol::{EpisodeInfo, EpisodeSpec};
use std::ops::Range;
use tch::{Kind, Tensor};

/// Groups the agent reads, in the actor's order, then the reference rows for B.
pub const REQUIRED_GROUPS: [&str; 4] = ["state", "last_action", "history_actor", "reference_goal"];

/// Actions beyond this magnitude count as saturated: the actor's tanh is flat there, so such
/// a component is a bang-bang command (±5 after the env's scaling), not a tracked pose.
pub const SATURATED_ABOVE: f32 = 0.95;

/// What the agent has commanded so far: how hard it pushes its actions, the first thing to look
/// at when a checkpoint drives the joints far from the reference.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ActionStats {
    /// Action components seen (rows × 29).
    pub components: u64,
    sum_abs: f64,
    saturated: u64,
}

impl ActionStats {
    /// Counts a batch of actions.
    pub fn add(&mut self, actions: &[f32]) {
        self.components += actions.len() as u64;
        for a in actions {
            self.sum_abs += a.abs() as f64;
            self.saturated += u64::from(a.abs() > SATURATED_ABOVE);
        }
    }

    /// Mean |a| over every component (0 before any action).
    pub fn mean_abs(&self) -> f64 {
        if self.components == 0 {
            0.0
        } else {
            self.sum_abs / self.components as f64
        }
    }

    /// Share of components with |a| > [`SATURATED_ABOVE`] (0 before any action).
    pub fn saturated_share(&self) -> f64 {
        if self.components == 0 {
            0.0
        } else {
            self.saturated as f64 / self.components as f64
        }
    }
}

#[derive(Debug)]
struct Ranges {
    state: Range<usize>,
    last_action: Range<usize>,
    history_actor: Range<usize>,
    reference_goal: Range<usize>,
    row: usize,
}

/// Why a layout cannot be served, naming the missing group.
pub fn check_layout(layout: &ObservationLayout) -> Result<(), String> {
    for g in REQUIRED_GROUPS {
        if layout.group(g).is_none() {
            let how = if g == "reference_goal" {
                "`reference_goal` is enabled by `reference_goal_horizon` in the benchmark's [observations]"
            } else {
                "the benchmark's [observations] groups (or the phase's observation_groups) must include it"
            };
            return Err(format!(
                "the benchmark does not send the `{g}` observation group, which the BFM-Zero agent needs \
                 (groups sent: {}); {how}",
                layout.groups().map(|(n, _)| n).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(())
}

#[derive(Debug)]
pub struct TrackingAgent {
    model: FbCprAuxModel,
    /// Future reference rows averaged into z (1 = the next row only; 8 as BFM-Zero's model method).
    window: usize,
    ranges: Option<Ranges>,
    /// Why the session's layout cannot be served (the agent then answers zeros).
    pub error: Option<String>,
    /// The actions the actor has produced (the zeros answered on an error are not counted).
    pub stats: ActionStats,
}

impl TrackingAgent {
    pub fn new(model: FbCprAuxModel, window: usize) -> Self {
        TrackingAgent {
            model,
            window: window.max(1),
            ranges: None,
            error: None,
            stats: ActionStats::default(),
        }
    }

    fn configure_layout(&mut self, layout: &ObservationLayout) {
        if let Err(e) = check_layout(layout) {
            tracing::debug!("{e}");
            self.error = Some(e);
            self.ranges = None;
            return;
        }
        let o = self.model.config.obs;
        let get = |g: &str| layout.group(g).expect("checked");
        let ranges = Ranges {
            state: get("state"),
            last_action: get("last_action"),
            history_actor: get("history_actor"),
            reference_goal: get("reference_goal"),
            row: layout.size(),
        };
        let goal = (o.state + o.privileged_state) as usize;
        let sizes = [
            ("state", ranges.state.len(), o.state as usize),
            ("last_action", ranges.last_action.len(), o.last_action as usize),
            ("history_actor", ranges.history_actor.len(), o.history_actor as usize),
        ];
        for (g, got, want) in sizes {
            if got != want {
                let e = format!("observation group `{g}` has {got} values, the model reads {want}");
                tracing::debug!("{e}");
                self.error = Some(e);
                return;
            }
        }
        if ranges.reference_goal.is_empty() || !ranges.reference_goal.len().is_multiple_of(goal) {
            let e = format!(
                "`reference_goal` has {} values, not a multiple of {goal}",
                ranges.reference_goal.len()
            );
            tracing::debug!("{e}");
            self.error = Some(e);
            return;
        }
        self.error = None;
        self.ranges = Some(ranges);
    }

    /// Actions for `n` observation rows (row-major, `row` values each) into `actions`.
    fn act_rows(&mut self, rows: &[f32], n: usize, actions: &mut [f32]) {
        let r = self.ranges.as_ref().expect("configured");
        let o = self.model.config.obs;
        let all = Tensor::from_slice(rows).view([n as i64, r.row as i64]);
        let cols = |range: &Range<usize>| all.narrow(1, range.start as i64, range.len() as i64);
        let goal = (o.state + o.privileged_state) as usize;
        let horizon = r.reference_goal.len() / goal;
        let w = self.window.min(horizon) as i64;
        let reference = cols(&r.reference_goal)
            .view([n as i64, horizon as i64, goal as i64])
            .narrow(1, 0, w);
        let flat = reference.reshape([n as i64 * w, goal as i64]);
        let device = self.model.device;
        let b = self
            .model
            .backward_z(
                &flat.narrow(1, 0, o.state).to_device(device),
                &flat.narrow(1, o.state, o.privileged_state).to_device(device),
            )
            .view([n as i64, w, -1]);
        let z = self.model.project_z(&b.mean_dim(Some(&[1i64][..]), false, Kind::Float));
        let obs = Obs {
            state: cols(&r.state).to_device(device),
            privileged_state: Tensor::zeros([n as i64, o.privileged_state], (Kind::Float, device)),
            last_action: cols(&r.last_action).to_device(device),
            history_actor: cols(&r.history_actor).to_device(device),
        };
        let a = self.model.act_mean(&obs, &z).to_device(tch::Device::Cpu).contiguous();
        a.copy_data(actions, actions.len());
        self.stats.add(actions);
    }
}

impl Agent for TrackingAgent {
    fn configure(&mut self, spec: &EpisodeSpec) {
        self.configure_layout(&ObservationLayout::from_spec(spec));
    }

    fn check(&self, _spec: &EpisodeSpec) -> Result<(), String> {
        self.error.clone().map_or(Ok(()), Err)
    }

    fn reset(&mut self, _episodes: &[EpisodeInfo]) {}

    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]) {
        if self.ranges.is_none() && self.error.is_none() {
            self.configure_layout(batch.layout);
        }
        if self.ranges.is_none() {
            actions.fill(0.0);
            return;
        }
        self.act_rows(batch.observations, batch.len(), actions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_stats_count_magnitude_and_saturation() {
        let mut stats = ActionStats::default();
        assert_eq!((stats.mean_abs(), stats.saturated_share()), (0.0, 0.0));
        stats.add(&[0.5, -1.0, 0.96, -0.95]);
        stats.add(&[0.0, 0.0, 0.0, 0.0]);
        assert_eq!(stats.components, 8);
        assert!((stats.mean_abs() - 3.41 / 8.0).abs() < 1e-6, "{}", stats.mean_abs());
        // -1.0 and 0.96 are beyond 0.95; -0.95 itself is not.
        assert_eq!(stats.saturated_share(), 0.25);
    }
}
