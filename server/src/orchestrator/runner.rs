//! BenchmarkRunner: turns a benchmark into a submission's stored episodes, and a stored
//! submission back into the queue of episodes still to run.

use crate::catalog::LoadedBenchmark;
use crate::storage::{EpisodeRow, EpisodeState, NewEpisode};
use arena_bench::spec::Episode;
use std::collections::VecDeque;

/// The rows a new submission of `benchmark` starts with (all PENDING).
pub fn new_episodes(benchmark: &LoadedBenchmark) -> Vec<NewEpisode> {
    benchmark
        .episodes
        .iter()
        .map(|e| NewEpisode {
            idx: e.index as i64,
            motion: benchmark.motion_name(e).to_string(),
            category: benchmark.category(e).to_string(),
            start_s: e.start_s,
            duration_s: e.duration_s,
            seed: e.seed,
            dr_level: benchmark.spec.episodes.dr_level as i64,
        })
        .collect()
}

/// The episodes of a stored submission that are PENDING, in benchmark order.
pub fn pending_queue(benchmark: &LoadedBenchmark, rows: &[EpisodeRow]) -> VecDeque<Episode> {
    rows.iter()
        .filter(|r| r.status == EpisodeState::Pending)
        .filter_map(|r| benchmark.episodes.iter().find(|e| e.index as i64 == r.idx).cloned())
        .collect()
}
