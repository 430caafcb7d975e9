//! BenchmarkRunner: turns a benchmark into a submission's stored episodes, and counts what a
//! stored submission still has to run.

use crate::catalog::LoadedBenchmark;
use crate::storage::{EpisodeRow, NewEpisode};

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

/// How many episodes of a stored submission are not final yet (PENDING, or RUNNING: on another
/// replica, or on a server that died and whose claims will expire).
pub fn unfinished(rows: &[EpisodeRow]) -> usize {
    rows.iter().filter(|r| !r.status.is_final()).count()
}
