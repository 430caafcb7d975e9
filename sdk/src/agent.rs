//! The [`Agent`] trait: what a participant implements, whatever the transport.

use crate::layout::ObservationLayout;
use crate::protocol::{EpisodeEnd, EpisodeInfo, EpisodeSpec};

/// One control step's observations for every running episode of a batch, contiguous
/// (episodes × `layout.size()` values, in `episodes` order) so a network runs once per step.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// Request number (echoed in the answer; the client does that for you).
    pub step: u64,
    pub episodes: &'a [u32],
    /// Control steps since each episode started.
    pub episode_steps: &'a [u32],
    pub observations: &'a [f32],
    pub layout: &'a ObservationLayout,
}

impl Batch<'_> {
    pub fn len(&self) -> usize {
        self.episodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.episodes.is_empty()
    }

    /// Row `i` of the batch.
    pub fn observation(&self, i: usize) -> &[f32] {
        let d = self.layout.size();
        &self.observations[i * d..(i + 1) * d]
    }
}

/// A tracking agent. The client calls `configure` once per session, `reset` when episodes start,
/// `act` once per control step for the whole batch and `end` when an episode is over.
pub trait Agent: Send {
    /// The session's episode layout (observation groups, action size, limits).
    fn configure(&mut self, _spec: &EpisodeSpec) {}
    /// Whether the agent can serve this layout, checked right after `configure`. An error ends
    /// the session before any episode runs (the client disconnects and returns
    /// [`ClientError::Agent`](crate::ClientError::Agent)) instead of playing episodes it cannot act in.
    fn check(&self, _spec: &EpisodeSpec) -> Result<(), String> {
        Ok(())
    }
    /// Episodes that start now; their first observations follow.
    fn reset(&mut self, episodes: &[EpisodeInfo]);
    /// Values per action, asked once per session after `check`: the spec's `action_size`, or
    /// in the joint-position mode (`spec.action_mode == "joint_position"`) twice that, to send
    /// feed-forward torques (N·m) after the targets (docs/protocol.md §5). Any other width ends
    /// the session as a failed `check` does.
    fn action_width(&self, spec: &EpisodeSpec) -> usize {
        spec.action_size as usize
    }
    /// Writes `batch.len() × action_width` actions (row i answers `batch.episodes[i]`).
    fn act(&mut self, batch: &Batch<'_>, actions: &mut [f32]);
    /// An episode is over (status, metrics).
    fn end(&mut self, _end: &EpisodeEnd) {}
    /// Why the agent cannot act any more (its model failed to run), checked after every
    /// `act`: the client then sends nothing of that step, ends the session telling the server
    /// why, and returns [`ClientError::AgentFailed`](crate::ClientError::AgentFailed). The
    /// default: never.
    fn failure(&self) -> Option<String> {
        None
    }
}
