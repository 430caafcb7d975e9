//! Rebuilding the `reference_goal` group of a session that sends each row once
//! (docs/protocol.md §5, `connect.reference_goal_once`). Row j of an episode (the reference at
//! start + j·dt) depends on the episode alone, and step t's rows j = t + 1 … t + H share H − 1
//! with step t − 1's; so the server sends rows 1 … H − 1 with the episode's start and, in each
//! request, only the newest row t + H. The client keeps each running episode's last H rows and
//! gives its agent the whole group, so agents see the same values either way.

use crate::layout::{ObservationLayout, REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW};
use crate::protocol::{EpisodeInfo, EpisodeObservation};
use std::collections::HashMap;
use std::ops::Range;

/// Each running episode's `reference_goal` rows, as the session has sent them.
#[derive(Debug)]
pub struct GoalRowsOnce {
    /// Where the group sits in a whole row (the layout's).
    group: Range<usize>,
    horizon: usize,
    episodes: HashMap<u32, Episode>,
}

#[derive(Debug)]
struct Episode {
    /// Rows 1 … H − 1 until the first request, then the last request's H rows, oldest first.
    rows: Vec<f32>,
    /// The episode step of the last request that held the episode; None before the first.
    last_step: Option<u32>,
    /// Its start carried no rows: it must fail before a request holds it.
    without_rows: bool,
}

impl GoalRowsOnce {
    /// For a session whose spec says `reference_goal_once` and announces `layout`: None when the
    /// layout has no `reference_goal` group (the server then sends whole rows).
    pub fn new(layout: &ObservationLayout) -> Option<Self> {
        let group = layout.group(REFERENCE_GOAL_GROUP)?;
        let horizon = layout.reference_goal_horizon();
        (horizon > 0).then(|| Self {
            group,
            horizon,
            episodes: HashMap::new(),
        })
    }

    /// Values of a row as the server sends it: the layout's less H − 1 goal rows.
    pub fn sent_row_size(&self, layout: &ObservationLayout) -> usize {
        layout.size() - (self.horizon - 1) * REFERENCE_GOAL_ROW
    }

    /// An episode starts (again, after a lost connection): its rows 1 … H − 1. An episode that
    /// fails before its first step (it could not be set up) comes without them.
    pub fn start(&mut self, info: &EpisodeInfo) -> Result<(), String> {
        let expected = (self.horizon - 1) * REFERENCE_GOAL_ROW;
        if !info.reference_goal.is_empty() && info.reference_goal.len() != expected {
            return Err(format!(
                "episode {}'s start carries {} reference_goal values; a horizon of {} needs {expected} (rows 1 … {})",
                info.episode_id,
                info.reference_goal.len(),
                self.horizon,
                self.horizon - 1
            ));
        }
        let mut rows = Vec::with_capacity(self.horizon * REFERENCE_GOAL_ROW);
        rows.extend_from_slice(&info.reference_goal);
        let episode = Episode {
            rows,
            last_step: None,
            without_rows: info.reference_goal.is_empty() && expected > 0,
        };
        self.episodes.insert(info.episode_id, episode);
        Ok(())
    }

    /// An episode ended: its rows are dropped.
    pub fn end(&mut self, episode_id: u32) {
        self.episodes.remove(&episode_id);
    }

    /// Appends to `out` the whole row of `o` (as sent, [`Self::sent_row_size`] values): its
    /// values with the `reference_goal` group rebuilt from the rows kept and its newest row.
    pub fn expand(&mut self, o: &EpisodeObservation, out: &mut Vec<f32>) -> Result<(), String> {
        const W: usize = REFERENCE_GOAL_ROW;
        let id = o.episode_id;
        let Some(episode) = self.episodes.get_mut(&id) else {
            return Err(format!(
                "episode {id} is in a request but its episode_start was not received"
            ));
        };
        if episode.without_rows {
            return Err(format!(
                "episode {id} is in a request but its episode_start carried no reference_goal rows"
            ));
        }
        let step = o.episode_step;
        match episode.last_step {
            None if step == 0 => {}
            Some(last) if last.checked_add(1) == Some(step) => {
                // The oldest row leaves the horizon.
                episode.rows.drain(..W);
            }
            last => {
                return Err(format!(
                    "episode {id}: a request at episode step {step} after {}: each reference_goal row is sent \
                     once, so every step must be received in turn",
                    last.map_or("its start".to_string(), |s| format!("step {s}"))
                ));
            }
        }
        let newest = self.group.start..self.group.start + W;
        if o.values.len() < newest.end {
            return Err(format!(
                "episode {id}'s row has {} values, short of its newest reference_goal row (values {}..{})",
                o.values.len(),
                newest.start,
                newest.end
            ));
        }
        episode.rows.extend_from_slice(&o.values[newest.clone()]);
        episode.last_step = Some(step);
        out.extend_from_slice(&o.values[..newest.start]);
        out.extend_from_slice(&episode.rows);
        out.extend_from_slice(&o.values[newest.end..]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// state (2 values), then reference_goal with H = 3.
    fn layout() -> ObservationLayout {
        ObservationLayout::from_groups([("state", 2), (REFERENCE_GOAL_GROUP, 3 * REFERENCE_GOAL_ROW)])
    }

    /// Episode row j: every value j + 0.5.
    fn row(j: usize) -> Vec<f32> {
        vec![j as f32 + 0.5; REFERENCE_GOAL_ROW]
    }

    fn sent(id: u32, step: u32) -> EpisodeObservation {
        let mut values = vec![step as f32, -1.0];
        values.extend(row(step as usize + 3));
        EpisodeObservation {
            episode_id: id,
            episode_step: step,
            values,
        }
    }

    fn start(id: u32) -> EpisodeInfo {
        EpisodeInfo {
            episode_id: id,
            reference_goal: [row(1), row(2)].concat(),
            ..Default::default()
        }
    }

    #[test]
    fn rows_are_rebuilt_step_by_step() {
        let mut goal = GoalRowsOnce::new(&layout()).unwrap();
        assert_eq!(goal.sent_row_size(&layout()), 2 + REFERENCE_GOAL_ROW);
        goal.start(&start(7)).unwrap();
        for step in 0..5u32 {
            let mut out = Vec::new();
            goal.expand(&sent(7, step), &mut out).unwrap();
            let t = step as usize;
            let whole = [vec![step as f32, -1.0], row(t + 1), row(t + 2), row(t + 3)].concat();
            assert_eq!(out, whole, "step {step}");
        }
        // A restart (a new attempt) begins again from its start.
        goal.start(&start(7)).unwrap();
        let mut out = Vec::new();
        goal.expand(&sent(7, 0), &mut out).unwrap();
        assert_eq!(out[2..], [row(1), row(2), row(3)].concat()[..]);
    }

    #[test]
    fn a_missed_step_an_unknown_episode_and_a_wrong_start_are_errors() {
        let mut goal = GoalRowsOnce::new(&layout()).unwrap();
        let mut out = Vec::new();
        let e = goal.expand(&sent(1, 0), &mut out).unwrap_err();
        assert!(e.contains("episode_start was not received"), "{e}");
        goal.start(&start(1)).unwrap();
        let e = goal.expand(&sent(1, 1), &mut out).unwrap_err();
        assert!(e.contains("step 1 after its start"), "{e}");
        goal.expand(&sent(1, 0), &mut out).unwrap();
        let e = goal.expand(&sent(1, 2), &mut out).unwrap_err();
        assert!(e.contains("step 2 after step 0"), "{e}");
        goal.end(1);
        assert!(goal.expand(&sent(1, 1), &mut out).is_err());
        let short = EpisodeInfo {
            reference_goal: row(1),
            ..start(2)
        };
        let e = goal.start(&short).unwrap_err();
        assert!(e.contains("needs 1054"), "{e}");
        // An episode that fails at its start comes without rows, and must not be asked about.
        let failed = EpisodeInfo {
            reference_goal: Vec::new(),
            ..start(3)
        };
        goal.start(&failed).unwrap();
        let e = goal.expand(&sent(3, 0), &mut out).unwrap_err();
        assert!(e.contains("carried no reference_goal rows"), "{e}");
    }

    #[test]
    fn a_layout_without_the_group_needs_nothing() {
        assert!(GoalRowsOnce::new(&ObservationLayout::from_groups([("state", 64)])).is_none());
    }
}
