//! Where each observation group sits in an episode's concatenated observation values, as a
//! session's `Connected` message announces it.

use crate::protocol::{EpisodeSpec, ObservationGroup};
use std::ops::Range;

/// The reference groups: future reference poses (`reference`, MuJoCo qpos of frames t + dt …
/// t + H·dt; [`REFERENCE_FRAME_SIZE`] values each) and future reference observation rows
/// (`reference_goal`, BFM-Zero's goal input: state | privileged_state; [`REFERENCE_GOAL_ROW`]
/// values each).
pub use arena_g1::{REFERENCE_FRAME_SIZE, REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW, REFERENCE_GROUP};

/// Which observation groups an agent receives and where each sits in its concatenated values.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservationLayout {
    groups: Vec<(String, Range<usize>)>,
    reference_horizon: usize,
    reference_goal_horizon: usize,
}

impl ObservationLayout {
    /// Groups (name, values per episode) concatenated in this order.
    pub fn from_groups<S: Into<String>>(groups: impl IntoIterator<Item = (S, usize)>) -> Self {
        let mut out = Vec::new();
        let mut offset = 0;
        let (mut horizon, mut goal_horizon) = (0, 0);
        for (name, size) in groups {
            let name = name.into();
            match name.as_str() {
                REFERENCE_GROUP => horizon = size / REFERENCE_FRAME_SIZE,
                REFERENCE_GOAL_GROUP => goal_horizon = size / REFERENCE_GOAL_ROW,
                _ => {}
            }
            out.push((name, offset..offset + size));
            offset += size;
        }
        Self {
            groups: out,
            reference_horizon: horizon,
            reference_goal_horizon: goal_horizon,
        }
    }

    /// The layout announced in a Connected message.
    pub fn from_spec(spec: &EpisodeSpec) -> Self {
        Self::from_groups(spec.observations.iter().map(|g| (g.name.clone(), g.size as usize)))
    }

    /// Future reference frames in the `reference` group (0 without it).
    pub fn reference_horizon(&self) -> usize {
        self.reference_horizon
    }

    /// Future reference rows in the `reference_goal` group (0 without it).
    pub fn reference_goal_horizon(&self) -> usize {
        self.reference_goal_horizon
    }

    /// Values per episode.
    pub fn size(&self) -> usize {
        self.groups.last().map_or(0, |(_, r)| r.end)
    }

    /// Where group `name` sits in an episode's values.
    pub fn group(&self, name: &str) -> Option<Range<usize>> {
        self.groups.iter().find(|(n, _)| n == name).map(|(_, r)| r.clone())
    }

    pub fn groups(&self) -> impl Iterator<Item = (&str, Range<usize>)> {
        self.groups.iter().map(|(n, r)| (n.as_str(), r.clone()))
    }

    /// The protocol's description of the groups.
    pub fn to_protocol(&self) -> Vec<ObservationGroup> {
        self.groups
            .iter()
            .map(|(n, r)| ObservationGroup {
                name: n.clone(),
                size: r.len() as u32,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_concatenated_and_horizons_read_back() {
        let layout = ObservationLayout::from_groups([
            ("state", 64),
            (REFERENCE_GROUP, 2 * REFERENCE_FRAME_SIZE),
            (REFERENCE_GOAL_GROUP, 3 * REFERENCE_GOAL_ROW),
        ]);
        assert_eq!(layout.group("state"), Some(0..64));
        assert_eq!(layout.group(REFERENCE_GROUP), Some(64..136));
        assert_eq!(layout.size(), 136 + 3 * 527);
        assert_eq!((layout.reference_horizon(), layout.reference_goal_horizon()), (2, 3));
        let spec = EpisodeSpec {
            observations: layout.to_protocol(),
            ..Default::default()
        };
        assert_eq!(ObservationLayout::from_spec(&spec), layout);
        assert_eq!(ObservationLayout::from_groups::<&str>([]).size(), 0);
    }
}
